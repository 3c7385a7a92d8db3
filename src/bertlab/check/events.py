"""The child side of `bertlab check`: a pytest plugin (``-p bertlab.check.events``) that, when
BERTLAB_CHECK_REPORT names a file, appends one JSON line per event to it (tests collected, test
started, test result, collection error, session finished), with the task and missing function of a stub.
"""

from __future__ import annotations

import json
import importlib.util
import os
from pathlib import Path
from typing import Optional

from bertlab.errors import unfinished
from bertlab.tasks import EXERCISE_TASKS


REPORT_ENV = "BERTLAB_CHECK_REPORT"  # child: where to append events
CODE_ENV = "BERTLAB_CHECK_CODE"  # child: the student's code folder (to point at their line)
TIMEOUT_ENV = "BERTLAB_CHECK_TIMEOUT"  # user: seconds one test may run before the check gives up
DEFAULT_TEST_TIMEOUT = 300.0
# Installed with this package (bertlab/public_tests/ in a wheel or the bundle; tests/public/ of the
# checkout in an editable install): the import system knows where, in every mode.
PUBLIC_TESTS = Path(list(importlib.util.find_spec("bertlab.public_tests").submodule_search_locations)[0]).resolve()
PUBLIC_TESTS_CONFIG = PUBLIC_TESTS / "pytest.ini"




def _task_of(item) -> Optional[str]:
    for marker in item.iter_markers():
        if marker.name in EXERCISE_TASKS:
            return marker.name
    return None


def _stub_fields(excinfo) -> dict:
    """``stub``: the failure is a stub still raising NotImplementedError (directly, or wrapped by the
    public tests' teaching message, whose exception keeps it as its context); ``stub_task`` and
    ``stub_function``: what a stub's NotImplementedYet names (None for a plain NotImplementedError:
    it counts for the task under test)."""
    found = unfinished(excinfo.value)
    return {"stub": found is not None, "stub_task": getattr(found, "task", None),
            "stub_function": getattr(found, "function", None)}


def _failure_message(excinfo) -> str:
    """What the test said, in full: pytest.fail's message as given, else 'Type: message'."""
    msg = getattr(excinfo.value, "msg", None)  # pytest.fail / pytest.skip outcomes
    if isinstance(msg, str) and type(excinfo.value).__name__ == "Failed":
        return msg
    return excinfo.exconly()


def _student_location(excinfo, code_dir: Optional[str]) -> str:
    """'exercises/cka.py:42 in linear_cka' for the deepest traceback frame in the student's code."""
    if not code_dir:
        return ""
    code = Path(code_dir).resolve()
    try:
        entries = list(excinfo.traceback)
    except Exception:  # noqa: BLE001 - a location is a courtesy, never a reason to fail
        return ""
    if isinstance(excinfo.value, SyntaxError) and excinfo.value.filename:  # not in the traceback
        path = Path(excinfo.value.filename)
        if code in path.resolve().parents:
            return f"{code.name}/{path.name}:{excinfo.value.lineno}"
    for entry in reversed(entries):
        try:
            path = Path(str(entry.path)).resolve()
        except (OSError, TypeError, ValueError):
            continue
        if code in path.parents:
            return f"{code.name}/{path.relative_to(code)}:{entry.lineno + 1} in {entry.name}"
    return ""


class _EventWriter:
    """Registered in the child when REPORT_ENV is set: appends one JSON line per event."""

    def __init__(self, path: str, code_dir: Optional[str]):
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed at sessionfinish
        self._code_dir = code_dir
        self._results: dict[str, dict] = {}

    def _emit(self, event: str, **data) -> None:
        self._file.write(json.dumps({"event": event, **data}) + "\n")
        self._file.flush()

    def pytest_collectreport(self, report):
        if report.failed:
            self._emit("collect_error", nodeid=report.nodeid, message=str(report.longrepr))

    def pytest_collection_finish(self, session):
        tests = []
        for item in session.items:
            doc = (getattr(getattr(item, "obj", None), "__doc__", None) or "").strip()
            tests.append({"nodeid": item.nodeid, "name": item.name, "task": _task_of(item),
                          "doc": doc.splitlines()[0] if doc else ""})
        self._emit("collected", tests=tests)

    def pytest_runtest_logstart(self, nodeid, location):
        self._emit("start", nodeid=nodeid)

    def pytest_runtest_logreport(self, report):
        result = self._results.setdefault(report.nodeid, {"outcome": "passed", "stub": False, "stub_task": None,
                                                          "stub_function": None, "message": "", "where": "",
                                                          "when": ""})
        if report.failed and result["outcome"] != "failed":
            result.update(outcome="failed", when=report.when, message=str(report.longrepr))
        elif report.skipped and result["outcome"] == "passed":
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            result.update(outcome="skipped", message=reason, when=report.when)

    def pytest_exception_interact(self, node, call, report):
        """Called after logreport for a failed phase: the exception itself gives the details."""
        result = self._results.get(getattr(report, "nodeid", None))
        if not result or result.get("when") != report.when or result.get("detailed") or call.excinfo is None:
            return
        try:
            result.update(**_stub_fields(call.excinfo), message=_failure_message(call.excinfo),
                          where=_student_location(call.excinfo, self._code_dir), detailed=True)
        except Exception:  # noqa: BLE001 - never let the reporter break the run; keep the longrepr
            pass

    def pytest_runtest_logfinish(self, nodeid, location):
        result = self._results.pop(nodeid, {"outcome": "failed", "message": "(no report)"})
        result.pop("detailed", None)
        self._emit("result", nodeid=nodeid, **result)

    def pytest_sessionfinish(self, session, exitstatus):
        self._emit("finished", exitstatus=int(exitstatus))
        self._file.close()


def pytest_configure(config):
    """Plugin entry point (``-p bertlab.check.events``): inert unless the parent asked for events."""
    path = os.environ.get(REPORT_ENV)
    if path and not config.pluginmanager.has_plugin("bertlab-check-events"):
        config.pluginmanager.register(_EventWriter(path, os.environ.get(CODE_ENV)), "bertlab-check-events")
