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
        for command in ('python -m pytest -q -m unit', 'python -m pytest -q -m "not slow"', "python -m pytest -q -n auto"):
            assert command in text, f"{page.name} does not give the lane `{command}`"
    assert re.search(r"UNIT_LANE", (KIT / "docs" / "architecture.md").read_text(encoding="utf-8"))


def test_an_unmarked_test_over_the_limit_is_named_at_the_end(monkeypatch):
    """The run's last lines name a test not marked slow whose setup, call and teardown together took
    over UNMARKED_LIMIT_S (each phase alone under it), and neither a slow one nor a quick one."""
    import types

    import conftest

    monkeypatch.setattr(conftest, "_DURATIONS", {})  # (this session's own figures stay as they are)
    monkeypatch.setattr(conftest, "_UNMARKED_SLOW", {})
    limit = conftest.UNMARKED_LIMIT_S
    for when, share in (("setup", 0.6), ("call", 0.3), ("teardown", 0.2)):
        for nodeid, seconds, keywords in (("a.py::unmarked", limit * share, {}),
                                          ("a.py::marked", limit * share, {"slow": 1}),
                                          ("a.py::quick", 0.01, {})):
            conftest.pytest_runtest_logreport(types.SimpleNamespace(nodeid=nodeid, when=when, duration=seconds,
                                                                    keywords=keywords))
    lines = []
    reporter = types.SimpleNamespace(write_sep=lambda sep, title, **kw: lines.append(title),
                                     write_line=lambda line, **kw: lines.append(line))
    conftest.pytest_terminal_summary(reporter)
    named = [line for line in lines if "a.py::" in line]
    assert len(named) == 1 and "a.py::unmarked" in named[0], lines
    assert any("mark them slow" in line for line in lines)
