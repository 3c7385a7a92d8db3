"""The test lanes of tests/conftest.py name what exists, and the pages that document them agree.

A file renamed out of UNIT_LANE would silently leave the unit lane; a fixture renamed out of
SLOW_FIXTURES would put a venv build back in the fast loop.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import SLOW_FIXTURES, UNIT_LANE

TESTS = Path(__file__).resolve().parent
KIT = TESTS.parent


def _fixtures_defined() -> set[str]:
    names = set()
    for path in TESTS.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and any("fixture" in ast.unparse(d) for d in node.decorator_list):
                names.add(node.name)
    return names


def test_every_unit_lane_file_exists():
    missing = sorted(name for name in UNIT_LANE if not (TESTS / name).is_file())
    assert missing == [], f"UNIT_LANE names files that are not in tests/: {missing}"


def test_every_slow_fixture_is_a_fixture_of_the_suite():
    unknown = sorted(SLOW_FIXTURES - _fixtures_defined())
    assert unknown == [], f"SLOW_FIXTURES names no fixture of tests/: {unknown}"


def test_the_pages_give_the_three_lanes():
    for page in (KIT / "README.md", KIT / "docs" / "architecture.md"):
        text = page.read_text(encoding="utf-8")
        for command in ('python -m pytest -q -m unit', 'python -m pytest -q -m "not slow"', "python -m pytest -q"):
            assert command in text, f"{page.name} does not give the lane `{command}`"
    assert re.search(r"UNIT_LANE", (KIT / "docs" / "architecture.md").read_text(encoding="utf-8"))
