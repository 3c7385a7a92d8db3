"""The test lanes of tests/conftest.py name what exists, and the pages that document them agree.

A file renamed out of UNIT_LANE would silently leave the unit lane; a fixture renamed out of
SLOW_FIXTURES would put a venv build back in the fast loop; a module that takes the installed kit
outside SHARED_KIT_MODULES would build it a second time on another worker of the whole suite.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import (LONGEST_FIRST, SESSION_KIT_FIXTURES, SHARED_KIT_MODULES, SLOW_FIXTURES, THREAD_VARIABLES,
                      UNIT_LANE, threads_per_worker, worker_group)

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


def _modules_taking(fixtures: set[str]) -> set[str]:
    """The test modules with a function (a test or a fixture) that takes one of ``fixtures``."""
    found = set()
    for path in TESTS.glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and fixtures & {a.arg for a in node.args.args}:
                found.add(path.name)
    return found


def test_the_modules_sharing_the_installed_kit_run_on_one_worker():
    takers = _modules_taking(SESSION_KIT_FIXTURES)
    assert takers, "no test module takes the installed kit: SESSION_KIT_FIXTURES names no fixture in use"
    assert takers <= SHARED_KIT_MODULES, \
        f"{sorted(takers - SHARED_KIT_MODULES)} take the installed kit: add them to SHARED_KIT_MODULES (tests/conftest.py)"
    assert {worker_group(f"tests/{name}::t") for name in SHARED_KIT_MODULES} == {"installed-kit"}
    assert worker_group("tests/hidden/test_hidden_cka.py::t[1]") == "tests/hidden/test_hidden_cka.py"


def test_every_longest_first_group_exists():
    groups = {worker_group(f"{path.relative_to(KIT).as_posix()}::t") for path in TESTS.rglob("test_*.py")}
    assert set(LONGEST_FIRST) <= groups, f"LONGEST_FIRST names no group of the suite: {sorted(set(LONGEST_FIRST) - groups)}"


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


def test_each_worker_gets_its_share_of_the_cores():
    """Under -n the workers share the cores out for torch and BLAS (conftest.pytest_configure): never
    more threads in all than cores where there are enough cores, never fewer than one a worker."""
    assert [threads_per_worker(workers, 2) for workers in (1, 2, 3)] == [2, 1, 1]
    assert threads_per_worker(4, 16) == 4 and threads_per_worker(16, 16) == 1 and threads_per_worker(0, 8) == 8
    import os

    import torch

    if os.environ.get("PYTEST_XDIST_WORKER"):  # (this very run, when it is one)
        assert all(os.environ.get(name) for name in THREAD_VARIABLES), "a worker left a thread count unset"
        assert torch.get_num_threads() == int(os.environ["OMP_NUM_THREADS"])


def test_under_n_the_run_ends_with_the_longest_groups_and_each_workers_time(monkeypatch):
    """Under -n the run's last lines give the longest worker groups, longest first (what LONGEST_FIRST is
    kept from), and each worker's total; a run on one process gives neither."""
    import types

    import conftest

    for name in ("_DURATIONS", "_UNMARKED_SLOW", "_GROUP_SECONDS", "_WORKER_SECONDS"):
        monkeypatch.setattr(conftest, name, {})  # (this session's own figures stay as they are)
    lines = []
    reporter = types.SimpleNamespace(write_sep=lambda sep, title, **kw: lines.append(title),
                                     write_line=lambda line, **kw: lines.append(line))
    conftest.pytest_runtest_logreport(types.SimpleNamespace(nodeid="tests/test_x.py::t", when="call", duration=2.0,
                                                            keywords={"slow": 1}))
    conftest.pytest_terminal_summary(reporter)
    assert lines == [], "a run on one process names no worker groups"
    for nodeid, seconds, worker in (("tests/test_a.py::one", 5.0, "gw0"), ("tests/test_a.py::two", 4.0, "gw0"),
                                    ("tests/test_demo.py::d", 3.0, "gw1"), ("tests/test_cluster.py::c", 7.0, "gw1")):
        conftest.pytest_runtest_logreport(types.SimpleNamespace(
            nodeid=nodeid, when="call", duration=seconds, keywords={"slow": 1},
            node=types.SimpleNamespace(gateway=types.SimpleNamespace(id=worker))))
    conftest.pytest_terminal_summary(reporter)
    named = [line.split() for line in lines if line.strip().endswith(("installed-kit", ".py"))]
    assert named == [["10.0", "s", "installed-kit"], ["9.0", "s", "tests/test_a.py"]], lines
    assert lines[-1] == "workers: gw0 9 s, gw1 10 s", lines
