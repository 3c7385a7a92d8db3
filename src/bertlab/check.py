"""`bertlab check`: run the public tests against the student's exercises/ and say what to do next.

The tests (``bertlab/public_tests/``, installed with the package) run in a child process
(``python -m pytest <public_tests> -m <tasks> --impl <exercises folder>``, from the workspace), so a
student module that crashes, hangs or calls ``exit()`` cannot take the checker down with it. This
module is also the pytest plugin of that child (``-p bertlab.check``): when BERTLAB_CHECK_REPORT names
a file, the plugin appends one JSON line per event to it (tests collected, test started, test result,
collection error, session finished); the parent reads the file as it grows to show progress, then
prints one row per task (passed/total and a status), the first failure of each unfinished task in
full with a hint, the learner's recorded progress, and the next task to work on.

Statuses: ``passed`` (every test passed), ``not started`` (nothing passed and every failure is a stub
still raising NotImplementedError: the plugin records the task and function a stub's NotImplementedYet
carries, so the hint names them), ``failed`` (anything else), ``not run`` (an earlier test ended the
run before this task's tests), ``no tests`` (none collected). Progress records the first three.

Output is rich when stdout is a terminal, plain text otherwise (or when NO_COLOR is set), so a CI log
or a pasted report stays readable. Exit status: 0 only when every selected task passed.
"""

from __future__ import annotations

import json
import importlib.util
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

from .errors import unfinished
from .mistakes import hint as mistake_hint
from .teaching import cka as teaching_cka
from .teaching import pooling as teaching_pooling
from .teaching import retrieval as teaching_retrieval
from .teaching import siamese as teaching_siamese
from .progress import format_progress, load_progress, record_run
from .tasks import EXERCISE_TASKS, exercise
from .workspace import find_workspace

REPORT_ENV = "BERTLAB_CHECK_REPORT"  # child: where to append events
CODE_ENV = "BERTLAB_CHECK_CODE"  # child: the student's code folder (to point at their line)
TIMEOUT_ENV = "BERTLAB_CHECK_TIMEOUT"  # user: seconds one test may run before the check gives up
DEFAULT_TEST_TIMEOUT = 300.0
# Installed with this package (bertlab/public_tests/ in a wheel or the bundle; tests/public/ of the
# checkout in an editable install): the import system knows where, in every mode.
PUBLIC_TESTS = Path(list(importlib.util.find_spec("bertlab.public_tests").submodule_search_locations)[0]).resolve()
PUBLIC_TESTS_CONFIG = PUBLIC_TESTS / "pytest.ini"

PASSED, FAILED, NOT_STARTED, NOT_RUN, NO_TESTS = "passed", "failed", "not started", "not run", "no tests"


# ---------------------------------------------------------------------------------------------
# The child side: a pytest plugin that writes events
# ---------------------------------------------------------------------------------------------

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
    """Plugin entry point (``-p bertlab.check``): inert unless the parent asked for events."""
    path = os.environ.get(REPORT_ENV)
    if path and not config.pluginmanager.has_plugin("bertlab-check-events"):
        config.pluginmanager.register(_EventWriter(path, os.environ.get(CODE_ENV)), "bertlab-check-events")


# ---------------------------------------------------------------------------------------------
# The parent side: run the child, follow its events
# ---------------------------------------------------------------------------------------------

@dataclass
class TestResult:
    nodeid: str
    name: str
    task: Optional[str]
    outcome: str = "not run"  # passed, failed, skipped, or "not run" until a result arrives
    stub: bool = False
    stub_task: Optional[str] = None      # the task of the stub it reached (None: the task under test)
    stub_function: Optional[str] = None  # the function of that stub, when the stub named it
    message: str = ""
    where: str = ""
    doc: str = ""

    @property
    def file(self) -> str:
        return self.nodeid.split("::", 1)[0]


@dataclass
class TaskReport:
    task: str
    tests: list[TestResult] = field(default_factory=list)

    @property
    def passed(self) -> int:
        return sum(t.outcome == "passed" for t in self.tests)

    @property
    def total(self) -> int:
        return len(self.tests)

    @property
    def failures(self) -> list[TestResult]:
        return [t for t in self.tests if t.outcome not in ("passed", "skipped")]

    @property
    def status(self) -> str:
        failures = self.failures
        if not self.tests:
            return NO_TESTS
        if not failures:
            return PASSED if self.passed else NO_TESTS
        if all(t.outcome == "not run" for t in self.tests):
            return NOT_RUN
        if self.passed == 0 and all(t.stub for t in failures):
            return NOT_STARTED
        return FAILED

    @property
    def first_failure(self) -> Optional[TestResult]:
        """The failure to show: a real one (wrong value, exception) before a remaining stub."""
        failures = self.failures
        real = [t for t in failures if not t.stub]
        return (real or failures or [None])[0]

    def as_record(self) -> dict:
        return {"status": self.status, "passed": self.passed, "total": self.total}


@dataclass
class CheckRun:
    """Everything one `bertlab check` learned: per-task reports plus anything that went wrong around them."""

    root: Path
    tasks: list[str]
    impl: str
    reports: dict[str, TaskReport] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    returncode: Optional[int] = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems and all(self.reports[t].status == PASSED for t in self.tasks)


class _Follower:
    """Turns the child's event lines into TestResults, calling ``on_event`` as they arrive."""

    def __init__(self, on_event: Callable[[str, dict], None]):
        self.tests: dict[str, TestResult] = {}
        self.collect_errors: list[str] = []
        self.running: Optional[str] = None
        self.finished = False
        self._on_event = on_event

    def feed(self, event: dict) -> None:
        kind = event.get("event")
        if kind == "collected":
            for t in event["tests"]:
                self.tests[t["nodeid"]] = TestResult(t["nodeid"], t["name"], t["task"], doc=t.get("doc", ""))
        elif kind == "start":
            self.running = event["nodeid"]
        elif kind == "result":
            test = self.tests.get(event["nodeid"])
            if test is None:  # a result for something not announced: keep it anyway
                test = self.tests[event["nodeid"]] = TestResult(event["nodeid"], event["nodeid"], None)
            test.outcome = event.get("outcome", "failed")
            test.stub = bool(event.get("stub"))
            test.stub_task, test.stub_function = event.get("stub_task"), event.get("stub_function")
            test.message = event.get("message", "")
            test.where = event.get("where", "")
            self.running = None
        elif kind == "collect_error":
            self.collect_errors.append(f"{event.get('nodeid') or 'collection'}: {event.get('message', '')}")
        elif kind == "finished":
            self.finished = True
        self._on_event(kind, event)


def _read_new_lines(handle, pending: str) -> tuple[list[dict], str]:
    chunk = handle.read()
    if not chunk:
        return [], pending
    lines = (pending + chunk).split("\n")
    events = []
    for line in lines[:-1]:
        if line.strip():
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
    return events, lines[-1]


def child_command(tasks: Sequence[str], impl: str) -> list[str]:
    """The child's command line (run with cwd = the workspace). The public tests' own pytest.ini and
    rootdir: a pytest configuration in the student's folder never changes how they run."""
    return [sys.executable, "-m", "pytest", str(PUBLIC_TESTS), "-c", str(PUBLIC_TESTS_CONFIG),
            "--rootdir", str(PUBLIC_TESTS), "-m", " or ".join(tasks), "--impl", impl, "-p", "bertlab.check", "-q", "--color=no", "-p", "no:cacheprovider"]


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the child runs in its own session: its whole group
    except (ProcessLookupError, PermissionError, AttributeError):
        proc.kill()
    proc.wait()


def run_public_tests(root: Path, tasks: Sequence[str], impl: str = "exercises",
                     on_event: Callable[[str, dict], None] = lambda kind, event: None,
                     test_timeout: Optional[float] = None) -> CheckRun:
    """Run the public tests of ``tasks`` in a child pytest and collect a CheckRun (no printing).

    root: the workspace (the folder holding exercises/). impl: ``"exercises"`` (root/exercises),
    ``"reference"`` (instructor kit only) or a directory with the four exercise files.
    """
    root = Path(root).resolve()
    if test_timeout is None:
        test_timeout = float(os.environ.get(TIMEOUT_ENV) or DEFAULT_TEST_TIMEOUT)
    impl_arg, code_dir = impl, root / "exercises"
    if impl == "exercises":
        impl_arg = str(code_dir)
    elif impl != "reference":
        impl_arg = str(Path(impl).resolve())
        code_dir = Path(impl_arg)
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env[CODE_ENV] = str(code_dir)
    run = CheckRun(root=root, tasks=list(tasks), impl=impl)
    follower = _Follower(on_event)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bertlab-check-") as tmp:
        report, output = Path(tmp) / "events.jsonl", Path(tmp) / "pytest-output.txt"
        report.touch()
        env[REPORT_ENV] = str(report)
        timed_out = False
        with open(output, "wb") as out, open(report, encoding="utf-8") as events:
            proc = subprocess.Popen(child_command(tasks, impl_arg), cwd=root, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            pending, last_event = "", time.monotonic()
            try:
                while True:
                    new, pending = _read_new_lines(events, pending)
                    for event in new:
                        follower.feed(event)
                    if new:
                        last_event = time.monotonic()
                    if proc.poll() is not None:
                        for event in _read_new_lines(events, pending + "\n")[0]:
                            follower.feed(event)
                        break
                    if follower.running and time.monotonic() - last_event > test_timeout:
                        timed_out = True
                        _kill(proc)
                        break
                    time.sleep(0.05)
            except BaseException:
                _kill(proc)
                raise
        run.returncode = proc.returncode
        tail = output.read_text(encoding="utf-8", errors="replace")[-4000:]
    run.seconds = time.monotonic() - started
    _settle(run, follower, timed_out, test_timeout, tail)
    return run


def summarise_events(root: Path, tasks: Sequence[str], events: Iterable[dict], returncode: int = 1,
                     impl: str = "exercises") -> CheckRun:
    """A CheckRun from recorded child events (what run_public_tests does after the child exits)."""
    run = CheckRun(root=Path(root), tasks=list(tasks), impl=impl, returncode=returncode)
    follower = _Follower(lambda kind, event: None)
    for event in events:
        follower.feed(event)
    _settle(run, follower, timed_out=False, test_timeout=0.0, tail="")
    return run


def _settle(run: CheckRun, follower: _Follower, timed_out: bool, test_timeout: float, tail: str) -> None:
    """Fill run.reports and run.problems from what the child said (and did not say)."""
    stopped_in = follower.running
    for test in follower.tests.values():
        if test.outcome != "not run":
            continue
        if test.nodeid == stopped_in:
            test.outcome = "failed"
        if test.nodeid == stopped_in and timed_out:
            test.message = f"Timed out: this test ran for more than {test_timeout:g} s, so the check stopped it."
        elif test.nodeid == stopped_in:
            test.message = (f"The test process died while running this test ({_exit_status(run.returncode)}): "
                            "the code it calls ended the Python process.")
        else:
            test.message = "Not run: the test process stopped before reaching this test."
    for task in run.tasks:
        run.reports[task] = TaskReport(task, [t for t in follower.tests.values() if t.task == task])
    run.problems += [f"A public test file could not be loaded: {e}" for e in follower.collect_errors]
    if timed_out or stopped_in:
        return  # the test that was running carries the explanation
    if not follower.finished or run.returncode not in (0, 1):
        what = {2: "was interrupted", 3: "hit an internal error", 4: "was called wrongly",
                5: "collected no tests"}.get(run.returncode, f"stopped ({_exit_status(run.returncode)})")
        run.problems.append(f"pytest {what}. Its last output:\n{tail.strip() or '(none)'}")


def _exit_status(returncode: Optional[int]) -> str:
    if returncode is not None and returncode < 0:
        try:
            return f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


# ---------------------------------------------------------------------------------------------
# Hints and the next task
# ---------------------------------------------------------------------------------------------

_IMPORT_ERROR = re.compile(r"\b(SyntaxError|IndentationError|TabError|ImportError|ModuleNotFoundError)\b")

# What a wrong value most often means, task by task: the idea to reread.
_TASK_IDEA = {task: module.IDEA for task, module in (("cka", teaching_cka), ("pooling", teaching_pooling),
                                                     ("siamese", teaching_siamese), ("retrieval", teaching_retrieval))}

# How a kind of failure any task can show reads in a failure message (the checks' wording, pytest's,
# or the exception a test reports), and the known mistake (bertlab/mistakes.py) it points at; the
# first match wins.
_MESSAGE_MISTAKES = [
    (re.compile(r"instead of raising ValueError|expected ValueError|DID NOT RAISE"), "no_value_error"),
    (re.compile(r"should be a torch\.Tensor|should be a (Python )?float"), "wrong_type"),
    (re.compile(r"has shape"), "wrong_shape"),
    (re.compile(r"has dtype"), "wrong_dtype"),
    (re.compile(r"\bNaN\b|\bnan\b"), "nan_result"),
    (re.compile(r"\bTypeError\b"), "input_type_not_handled"),
]


def concept_page(root: Path, task: str) -> str:
    """The docs page explaining a task's idea (the task registry's ``concept``, relative to the kit
    root), else the student guide, if there is one."""
    try:
        page = Path(root) / "docs" / "concepts" / exercise(task).concept
    except KeyError:
        page = None
    if page is not None and page.is_file():
        return str(page.relative_to(root))
    guide = Path(root) / "docs" / "student-guide.md"
    return str(guide.relative_to(root)) if guide.exists() else ""


def hint_for(task: str, test: TestResult, root: Path) -> str:
    """One or two sentences pointing at what to reread or the likely mistake for a failure."""
    page = concept_page(root, task)
    see = f" The idea is explained in {page}." if page else ""
    if test.stub:
        other = test.stub_task
        if other and other != task:
            return (f"Task {task} builds on your {other} code: finish task {other} first "
                    f"(`bertlab check --task {other}`).")
        where = (f"{test.stub_function} in exercises/{other or task}.py" if test.stub_function
                 else f"exercises/{task}.py")
        return (f"Read the docstring of {where} (Inputs, Returns, Raises), then replace its "
                f"`raise NotImplementedYet(...)` with your code.{see}")
    if _IMPORT_ERROR.search(test.message) and ("exercises" in test.message or test.where):
        return ("One of your files does not even import: fix the error at the file and line shown. The tests of "
                "every task load all four files, so this comes first.")
    if test.message.startswith("Timed out"):
        return (f"Look for a loop whose condition never changes, or far more work than the task needs. If your "
                f"code is only slow, {TIMEOUT_ENV}=600 gives each test more time.")
    if test.message.startswith("The test process died"):
        return ("Look for exit(), sys.exit() or os._exit() in your code, a huge allocation (memory), or an "
                f"infinite recursion. To see the process's own output: python -m pytest --pyargs bertlab.public_tests "
                f"-m {task} -x")
    if test.message.startswith("Not run"):
        return "An earlier test stopped the run: fix that one first."
    for pattern, mistake_id in _MESSAGE_MISTAKES:
        if pattern.search(test.message):
            return mistake_hint(mistake_id) + see
    return _TASK_IDEA.get(task, "Reread the docstring of the function this test calls.") + see


def next_task(run: CheckRun, progress: Optional[dict] = None) -> Optional[str]:
    """The first task, in lesson order, not known to pass: this run's result where the task ran,
    otherwise the recorded progress. None when every task is known to pass."""
    recorded = (progress or {}).get("tasks", {})
    for task in EXERCISE_TASKS:
        if task in run.reports:
            if run.reports[task].status != PASSED:
                return task
        elif recorded.get(task, {}).get("status") != PASSED:
            return task
    return None


def next_step(run: CheckRun, progress: Optional[dict] = None) -> str:
    """The closing line: which task to work on and how to check it."""
    task = next_task(run, progress)
    if task is None:
        return ("Next: all four tasks pass. Compare your lesson figures with the reference ones: "
                "`bertlab lesson` (docs/self-paced.md lists them).")
    report = run.reports.get(task)
    if report is None:
        return f"Next: task {task} (exercises/{task}.py). Check it with `bertlab check --task {task}`."
    if report.status == NOT_STARTED:
        return f"Next: start task {task} in exercises/{task}.py, then run `bertlab check --task {task}`."
    return f"Next: fix task {task} (its first failure is above), then run `bertlab check --task {task}`."


# ---------------------------------------------------------------------------------------------
# Display
# ---------------------------------------------------------------------------------------------

_MARK = {"passed": ".", "failed": "F", "skipped": "s", "not run": "-"}


def _use_rich(stream) -> bool:
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def _mark(test: TestResult) -> str:
    return "N" if test.stub else _MARK.get(test.outcome, "F")


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines() or [""])


def failure_details(run: CheckRun, task: str) -> tuple[str, list[str], str, str]:
    """(title, context lines, message, hint) of a task's first failure, for display."""
    report = run.reports[task]
    test = report.first_failure
    if test is None:
        return f"{task}: no public tests were collected for this task", [], "", ""
    context = [f"first failure: {test.name} ({test.file})"]
    if test.doc:
        context.append(f"it checks: {test.doc}")
    if test.where:
        context.append(f"your code: {test.where}")
    return f"{task}: {report.status}", context, test.message, hint_for(task, test, run.root)


class PlainDisplay:
    """Plain text for logs and pipes: one line of marks per task while running, then the summary."""

    def __init__(self, stream=None):
        self.out = stream or sys.stdout
        self._closed = False
        self._line_task: Optional[str] = None
        self._tests: dict[str, TestResult] = {}

    def _print(self, text: str = "", end: str = "\n") -> None:
        if self._closed:
            return
        try:
            self.out.write(text + end)
            self.out.flush()
        except BrokenPipeError:  # the reader left (`bertlab check | head`): finish the run silently
            self._closed = True
            if self.out is sys.stdout:
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())

    def start(self, root: Path, tasks: Sequence[str], impl: str) -> None:
        self._print(f"bertlab check: public tests of {', '.join(tasks)} on {impl} in {root}")
        self._print("(. passed  F failed  N not implemented yet  s skipped)")

    def event(self, kind: str, event: dict) -> None:
        if kind == "collected":
            self._tests = {t["nodeid"]: t for t in event["tests"]}
        elif kind == "result":
            task = (self._tests.get(event["nodeid"]) or {}).get("task") or "?"
            if task != self._line_task:
                if self._line_task is not None:
                    self._print()
                self._print(f"{task:<10} ", end="")
                self._line_task = task
            mark = "N" if event.get("stub") else _MARK.get(event.get("outcome"), "F")
            self._print(mark, end="")

    def finish(self, run: CheckRun, progress: Optional[dict], verbose: bool) -> None:
        if self._line_task is not None:
            self._print()
        self._print()
        for problem in run.problems:
            self._print("Problem: " + _indent(problem, "  ").lstrip())
            self._print()
        width = max(len(t) for t in run.tasks + ["task"])
        self._print(f"{'task':<{width}}  {'passed':>7}  status")
        for task in run.tasks:
            report = run.reports[task]
            self._print(f"{task:<{width}}  {f'{report.passed}/{report.total}':>7}  {report.status}")
        for task in run.tasks:
            report = run.reports[task]
            if verbose and report.tests:
                self._print()
                self._print(f"{task}: every test")
                for test in report.tests:
                    self._print(f"  {_mark(test)} {test.name}" + (f"  - {test.doc}" if test.doc else ""))
                    if verbose and test.outcome == "failed" and test is not report.first_failure:
                        self._print(_indent(test.message, "      "))
            if report.status == PASSED:
                continue
            title, context, message, hint = failure_details(run, task)
            self._print()
            self._print(title)
            for line in context:
                self._print("  " + line)
            if message:
                self._print(_indent(message, "    "))
            if hint:
                self._print(_indent("Hint: " + hint, "  "))
        if progress is not None:
            self._print()
            for line in format_progress(progress):
                self._print(line)
        self._print()
        self._print(next_step(run, progress))
        verdict = "all selected tasks pass" if run.ok else "not everything passes yet"
        self._print(f"({verdict}; {run.seconds:.1f} s)")


class RichDisplay:
    """For a terminal: a live progress bar per task, then a table and one panel per unfinished task."""

    _STYLE = {PASSED: "bold green", FAILED: "bold red", NOT_STARTED: "yellow", NOT_RUN: "magenta", NO_TESTS: "magenta"}

    def __init__(self, stream=None):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = Console(file=stream) if stream else Console()
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description:<10}"), BarColumn(),
                                 MofNCompleteColumn(), TextColumn("{task.fields[failed]}"), TimeElapsedColumn(),
                                 console=self.console, transient=True)
        self._bars: dict[str, int] = {}
        self._tests: dict[str, dict] = {}
        self._failed: dict[str, dict[str, int]] = {}

    def start(self, root: Path, tasks: Sequence[str], impl: str) -> None:
        from rich.text import Text

        self.console.print(Text.assemble(("bertlab check", "bold"), f": public tests of {', '.join(tasks)} "
                                         f"on {impl} in {root}"))
        self._collecting = self.progress.add_task("starting pytest", total=None, failed="")
        self.progress.start()

    def event(self, kind: str, event: dict) -> None:
        if kind == "collected":
            self.progress.remove_task(self._collecting)
            self._tests = {t["nodeid"]: t for t in event["tests"]}
            for task in EXERCISE_TASKS:
                count = sum(t["task"] == task for t in event["tests"])
                if count:
                    self._bars[task] = self.progress.add_task(task, total=count, failed="")
                    self._failed[task] = {"failed": 0, "stub": 0}
        elif kind == "result":
            task = (self._tests.get(event["nodeid"]) or {}).get("task")
            if task in self._bars:
                counts = self._failed[task]
                if event.get("outcome") == "failed":
                    counts["stub" if event.get("stub") else "failed"] += 1
                shown = [f"[red]{counts['failed']} failing[/]"] if counts["failed"] else []
                shown += [f"[yellow]{counts['stub']} not implemented[/]"] if counts["stub"] else []
                self.progress.update(self._bars[task], advance=1, failed=" ".join(shown))

    def finish(self, run: CheckRun, progress: Optional[dict], verbose: bool) -> None:
        from rich import box
        from rich.panel import Panel
        from rich.table import Table
        from rich.text import Text

        self.progress.stop()
        for problem in run.problems:
            self.console.print(Panel(Text(problem), title="Problem", border_style="red"))
        table = Table(box=box.SIMPLE_HEAVY)
        table.add_column("task")
        table.add_column("passed", justify="right")
        table.add_column("status")
        table.add_column("first failure")
        for task in run.tasks:
            report = run.reports[task]
            first = report.first_failure
            status = Text(report.status, style=self._STYLE[report.status])
            table.add_row(task, f"{report.passed}/{report.total}", status, Text(first.name if first else ""))
        self.console.print(table)
        for task in run.tasks:
            report = run.reports[task]
            if verbose and report.tests:
                lines = Text()
                for test in report.tests:
                    style = "green" if test.outcome == "passed" else "yellow" if test.stub else "red"
                    lines.append(f"{_mark(test)} {test.name}", style=style)
                    lines.append((f"  - {test.doc}" if test.doc else "") + "\n")
                    if test.outcome == "failed" and test is not report.first_failure:
                        lines.append(_indent(test.message, "    ") + "\n", style="dim")
                self.console.print(Panel(lines, title=f"{task}: every test", border_style="dim"))
            if report.status == PASSED:
                continue
            title, context, message, hint = failure_details(run, task)
            if not message:
                self.console.print(Text(title, style=self._STYLE[report.status]))
                continue
            body = Text("\n".join(context) + "\n\n", style="dim")
            body.append(message)
            if hint:
                body.append("\n\nHint: ", style="bold cyan")
                body.append(hint)
            self.console.print(Panel(body, title=Text(title), title_align="left",
                                     border_style=self._STYLE[report.status].replace("bold ", "")))
        if progress is not None:
            self.console.print(Text("\n".join(format_progress(progress))))
        self.console.print(Text(next_step(run, progress), style="bold"))
        verdict = "all selected tasks pass" if run.ok else "not everything passes yet"
        self.console.print(Text(f"({verdict}; {run.seconds:.1f} s)", style="dim"))


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------

def run_check(task: Optional[str] = None, impl: str = "exercises", verbose: bool = False,
              root: Optional[Path] = None, stream=None, directory: Optional[Path] = None) -> int:
    """`bertlab check [--task T] [-v]`. Returns the exit status: 0 only when every selected task passed.

    Progress is recorded (``.bertlab/progress.json``) only when checking the learner's own exercises/.
    """
    own_work = impl == "exercises"  # the learner's own exercises: their progress is recorded
    if root is not None:
        root = Path(root).resolve()
    else:  # a UsageError (exit 2) when no exercises are found: the CLI prints it as one line
        workspace = find_workspace(directory)
        root = workspace.root
        if own_work and workspace.exercises != root / "exercises":
            impl = str(workspace.exercises)  # a folder of exercise files with another name
    tasks = [task] if task else list(EXERCISE_TASKS)
    out = stream or sys.stdout
    display = RichDisplay(stream) if _use_rich(out) else PlainDisplay(out)
    display.start(root, tasks, impl + ("/" if impl == "exercises" else ""))
    try:
        run = run_public_tests(root, tasks, impl, on_event=display.event)
    finally:
        if isinstance(display, RichDisplay):
            display.progress.stop()
    progress = None
    if own_work:  # the learner's own work: remember it (unless the run itself went wrong)
        ran = {t: run.reports[t].as_record() for t in tasks if run.reports[t].status not in (NO_TESTS, NOT_RUN)}
        try:
            progress = load_progress(root) if run.problems else record_run(root, ran)
        except OSError as exc:
            print(f"(could not record progress: {exc})", file=sys.stderr)
            progress = load_progress(root)
    display.finish(run, progress, verbose)
    return 0 if run.ok else 1

