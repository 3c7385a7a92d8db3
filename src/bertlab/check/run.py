"""The parent side of `bertlab check`: run the public tests in a child process, follow its events,
and sum them up per task (TestResult, TaskReport, CheckRun).

How the child starts is a *launcher*'s job: by default a fresh Python (``python -m pytest ...``),
guarded on Linux so that nothing it starts outlives the check (guard.py); `bertlab check --watch`
passes the warm checker's launcher instead (warm.py: a fork of a process that has already imported
torch, transformers and the public tests). Either way the child is followed here, the same way: its
events, the per-test time limit, a cancelled check, and what it said (and did not say) at the end.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Callable, Iterable, Optional, Protocol, Sequence

from bertlab.cache import cache_root
from bertlab.check import guard
from bertlab.check.events import CODE_ENV, DEFAULT_TEST_TIMEOUT, PUBLIC_TESTS, PUBLIC_TESTS_CONFIG, REPORT_ENV, TIMEOUT_ENV
from bertlab.mistakes import find as find_mistake, named_in

# A task's status in a run (see the package's docstring).
PASSED, FAILED, NOT_STARTED, NOT_RUN, NO_TESTS = "passed", "failed", "not started", "not run", "no tests"


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
        """The failure to show: a real one (wrong value, exception) before a remaining stub, and among
        the real ones the first whose message names a known mistake of a task (a cause a check
        confirmed, bertlab.mistakes.named_in) before one that only describes a symptom."""
        failures = self.failures
        real = [t for t in failures if not t.stub]
        naming = [t for t in real if any(find_mistake(m).task for m in named_in(t.message))]
        return (naming or real or failures or [None])[0]

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


def pytest_args(tasks: Sequence[str], impl: str) -> list[str]:
    """pytest's arguments for the child (run with cwd = the workspace). The public tests' own
    pytest.ini and rootdir: a pytest configuration in the student's folder never changes how they run.
    No pytest-benchmark (where it is installed): no public test times anything, and it would make a
    .benchmarks folder in the working directory."""
    return [str(PUBLIC_TESTS), "-c", str(PUBLIC_TESTS_CONFIG), "--rootdir", str(PUBLIC_TESTS),
            "-m", " or ".join(tasks), "--impl", impl, "-p", "bertlab.check.events", "-q", "--color=no",
            "-p", "no:cacheprovider", "-p", "no:benchmark"]


def hypothesis_storage() -> Path:
    """Where the check's Hypothesis keeps what it reads from the code under test (each source file's
    constants, read once): a folder of the kit's cache, one per Hypothesis version, named the way the
    cache names what it keeps (so `bertlab lesson --clear-cache` removes it too). Left to itself,
    Hypothesis writes .hypothesis/ into the working directory, the learner's workspace."""
    try:
        key = version("hypothesis")
    except PackageNotFoundError:
        key = "unknown"
    return cache_root() / f"hypothesis-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def child_command(tasks: Sequence[str], impl: str) -> list[str]:
    """The fresh child's command line: ``python -m pytest`` with ``pytest_args``."""
    return [sys.executable, "-m", "pytest", *pytest_args(tasks, impl)]


class CheckChild(Protocol):
    """What run_public_tests needs of a running child, however it was started."""

    returncode: Optional[int]

    def poll(self) -> Optional[int]:
        """The exit code (negative: killed by that signal) once it has ended, else None."""

    def stop(self) -> None:
        """Kill it and everything it started, and wait for it."""


#: (tasks, impl argument, working directory, environment, output file) -> the running child.
Launcher = Callable[[Sequence[str], str, Path, dict, Path], CheckChild]


class CheckCancelled(Exception):
    """The check was stopped before its end because ``interrupted()`` said so (a newer save, in --watch)."""


class _PopenChild:
    """A fresh child where checks cannot be guarded (not Linux): its own session, killed as a group."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc

    @property
    def returncode(self) -> Optional[int]:
        return self.proc.returncode

    def poll(self) -> Optional[int]:
        return self.proc.poll()

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the child runs in its own session: its whole group
        except (ProcessLookupError, PermissionError, AttributeError):
            self.proc.kill()
        self.proc.wait()


def launch_fresh_python(tasks: Sequence[str], impl: str, cwd: Path, env: dict, output: Path) -> CheckChild:
    """The default launcher: a fresh ``python -m pytest``, guarded where guard.py can (Linux)."""
    command = child_command(tasks, impl)
    if guard.supported():
        def exec_pytest() -> int:
            os.chdir(cwd)
            os.execve(command[0], command, env)
            return 127  # not reached: execve replaces the process or raises

        return guard.start(exec_pytest, output)
    with open(output, "ab") as out:
        return _PopenChild(subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True))


def _wait_a_little(child: CheckChild, seconds: float = 0.05) -> None:
    """Sleep until the child may have something to say: at most ``seconds``, less when it has ended."""
    fileno = getattr(child, "fileno", None)
    if fileno is None:
        time.sleep(seconds)
        return
    try:
        select.select([fileno()], [], [], seconds)
    except (OSError, ValueError):
        time.sleep(seconds)


def run_public_tests(root: Path, tasks: Sequence[str], impl: str = "exercises",
                     on_event: Callable[[str, dict], None] = lambda kind, event: None,
                     test_timeout: Optional[float] = None, launch: Optional[Launcher] = None,
                     interrupted: Optional[Callable[[], bool]] = None) -> CheckRun:
    """Run the public tests of ``tasks`` in a child pytest and collect a CheckRun (no printing).

    root: the workspace (the folder holding exercises/). impl: ``"exercises"`` (root/exercises),
    ``"reference"`` (instructor kit only) or a directory with the four exercise files. launch: how the
    child starts (default: ``launch_fresh_python``). interrupted: asked between events; when it says
    True the child is stopped and CheckCancelled raised.
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
    env.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(hypothesis_storage()))
    env[CODE_ENV] = str(code_dir)
    run = CheckRun(root=root, tasks=list(tasks), impl=impl)
    follower = _Follower(on_event)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bertlab-check-") as tmp:
        report, output = Path(tmp) / "events.jsonl", Path(tmp) / "pytest-output.txt"
        report.touch()
        env[REPORT_ENV] = str(report)
        output.touch()
        timed_out = False
        with open(report, encoding="utf-8") as events:
            child = (launch or launch_fresh_python)(tasks, impl_arg, root, env, output)
            pending, last_event = "", time.monotonic()
            try:
                while True:
                    new, pending = _read_new_lines(events, pending)
                    for event in new:
                        follower.feed(event)
                    if new:
                        last_event = time.monotonic()
                    if child.poll() is not None:
                        for event in _read_new_lines(events, pending + "\n")[0]:
                            follower.feed(event)
                        break
                    if follower.running and time.monotonic() - last_event > test_timeout:
                        timed_out = True
                        child.stop()
                        break
                    if interrupted is not None and interrupted():
                        child.stop()
                        raise CheckCancelled()
                    _wait_a_little(child)
            except BaseException:
                child.stop()
                raise
        run.returncode = child.returncode
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
