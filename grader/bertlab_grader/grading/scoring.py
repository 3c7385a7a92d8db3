"""Scoring a submission: run the hidden suites in process and build its results dict (docs/results-format.md).

``run_hidden_suite(impl, student=...)`` runs the hidden suites (``tests/hidden/``, installed as ``bertlab_grader.hidden``) in THIS
process (pytest.main with a plugin object) with ``config.bertlab_impl = impl``: the conftest's ``impl`` fixture returns it, so
the tests talk to the sandboxed proxy (or an in-process implementation for the audit). The plugin
records, per test: its task (marker), its points (``@pytest.mark.points(n)``), the outcome and a
message the student may read.

Outcomes:
    passed    the test passed (performance tests may pass with full points only)
    failed    a check of the test failed (an assertion / pytest.fail in the hidden suites or the grader)
    timeout   the submission did not answer in time (bertlab_grader.sandbox.remote.SubmissionTimeout)
    error     the test could not run (set-up failed) or the submission crashed or raised something
              unexpected (NotImplementedError from an untouched stub included)

Messages: the explicit message of the check, cut before pytest's assertion introspection (which
quotes test source); for errors, the exception type and message. Never the test source, never a
traceback of the grader's files, never a path of the kit or the grading machine (``scrub``). Capped
in lines and characters.

Before each test, the recorder (``_Recorder.pytest_runtest_setup``) takes three named steps of the
grader, in this order:
    1. ``timing_gate.pause_point()``: a worker about to time a submission waits for this test to end,
       not for the whole suite (grader/bertlab_grader/performance/gate.py);
    2. ``_Recorder.enter_segment(task)``: the first test of a new segment (segments.py) starts a fresh
       process of the sandboxed submission, so a segment is graded alike here and on a worker of its own;
    3. ``_Recorder.skip_after_timeouts(task)``: a task whose tests timed out TIMEOUTS_PER_TASK times is
       scored as timeouts from then on, without running (one endless loop costs its limit once).

Grader failures are not outcomes. When the sandbox could not start or died while no student code ran
(``bertlab_grader.core.failures.GraderFailure``, which ``SandboxError`` is), the reference solution raised, or a
suite asked the wire format for something it cannot carry, the run stops at that test and
``run_hidden_suite`` raises ``GraderFailure``: the submission gets no results at all, rather than a
grade that says the student failed.

The function is called once per submission by a cohort grader process, many times over: the
hidden suites' heavy inputs live in ``bertlab_grader.hidden.reference_data`` (imported once and kept), and the max
points are collected once (``max_points_by_task``).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import io
import os
import re
import site
import sys
import tempfile
from pathlib import Path
from typing import Iterable, Optional, Sequence

import pytest

from bertlab.tasks import GRADED_TASKS
from bertlab_grader.core.failures import GraderFailure
from bertlab_grader.core.kept_reference import kept, save as save_kept
from bertlab_grader.grading.segments import Part, PartResult
from bertlab_grader.performance import gate as timing_gate
from bertlab_grader.performance.timing import POINTS_PROPERTY, RATIO_PROPERTY, one_torch_thread
from bertlab_grader.core.locations import (KIT_ROOT, REFERENCE_DATA, REFERENCE_DIR, STUDENT_PACKAGE_DIR,
                                           SUITES_CONFIG, SUITES_DIR)

# The shared checks (bertlab/assertions.py): an AssertionError raised there is a failed check, as in the suites.
ASSERTIONS_FILE = STUDENT_PACKAGE_DIR / "assertions.py"
MAX_MESSAGE_LINES = 12
MAX_MESSAGE_CHARS = 1500

_MAX_POINTS: dict[tuple, dict] = {}


# ---------------------------------------------------------------------------------------------
# Exceptions from the sandbox (grader/bertlab_grader/sandbox/remote.py), looked up lazily
# ---------------------------------------------------------------------------------------------

def _is_timeout(exc: BaseException) -> bool:
    """SubmissionTimeout from grader/bertlab_grader/sandbox/remote.py; by name where that module cannot be imported
    (a crash, SubmissionCrashed, is an ordinary error)."""
    try:
        from bertlab_grader.sandbox.remote import SubmissionTimeout
    except ImportError:
        return type(exc).__name__ == "SubmissionTimeout"
    return isinstance(exc, SubmissionTimeout)


# ---------------------------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------------------------

_TRACEBACK_LINE = re.compile(r'^\s*File "(?P<file>[^"]*)", line \d+')
# An absolute path of two or more components (the student's own files are shown by their bare names).
_ABSOLUTE_PATH = re.compile(r"(?<![\w.~-])/(?:[\w.@+~-]+/)+[\w.@+~-]*")


@functools.lru_cache(maxsize=1)
def _machine_prefixes() -> tuple[str, ...]:
    """Folders of this machine that student-facing text must never name: the kit, the Python
    install, the temporary folder, the home folder (longest first, so the most specific one wins)."""
    prefixes = {str(KIT_ROOT), sys.prefix, sys.base_prefix, sys.exec_prefix, tempfile.gettempdir(),
                os.path.expanduser("~"), *site.getsitepackages()}
    prefixes.update(os.path.realpath(p) for p in list(prefixes))
    return tuple(sorted((p for p in prefixes if p and p != "/"), key=len, reverse=True))


def scrub(text: str) -> str:
    """``text`` without tracebacks of kit or library code and without absolute paths.

    Student tracebacks arrive from the sandbox with the student's own files named ``cka.py`` and so
    on; any frame of another file (the kit, torch, the grading machine) is dropped with its source
    line, and whatever absolute path is left (a path inside an exception message) becomes
    ``<path>``. Students read these messages; instructors see the same text in the feedback.
    """
    out: list[str] = []
    skip_source_line = False
    for line in text.splitlines():
        frame = _TRACEBACK_LINE.match(line)
        if frame:
            skip_source_line = os.path.isabs(frame.group("file")) or frame.group("file").startswith("<frozen")
            if skip_source_line:
                continue
        elif skip_source_line and line.startswith("    "):
            continue  # the source line (and ^^^ marker) of a dropped frame
        else:
            skip_source_line = False
        line = _ABSOLUTE_PATH.sub("<path>", line)
        if "/" in line:
            for prefix in _machine_prefixes():  # what the pattern cannot see: "/tmp" alone, a path with spaces
                line = line.replace(prefix, "<path>")
        out.append(line)
    return "\n".join(out)


def _cap(text: str) -> str:
    lines = scrub(text).strip().splitlines()
    if len(lines) > MAX_MESSAGE_LINES:
        lines = lines[:MAX_MESSAGE_LINES] + ["[...]"]
    text = "\n".join(lines)
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 5] + "[...]"


def check_message(exc: BaseException) -> str:
    """What a failed check says, without pytest's introspection (which quotes the test's source)."""
    if isinstance(exc, pytest.fail.Exception):
        text = str(exc.msg or "")
    else:
        text = str(exc)
    cut = text.find("\nassert ")
    if cut >= 0:
        text = text[:cut]
    if text.lstrip().startswith("assert ") or not text.strip():
        return "A hidden check failed."  # a bare assert: its text would be test source
    return _cap(text)


def error_message(exc: BaseException, when: str) -> str:
    """What an error says: the exception the submission raised (its own message and traceback of its
    own files, as bertlab_grader.sandbox.remote builds it), or that the test could not be set up."""
    if _is_timeout(exc):
        return _cap(f"Your code did not answer in time: {exc}")
    if when == "setup":
        return _cap(f"This test could not be set up ({type(exc).__name__}: {exc}).")
    name = getattr(exc, "type_name", None) or type(exc).__name__
    if isinstance(exc, NotImplementedError):
        # A stub's NotImplementedYet arrives from the sandbox as a NotImplementedError whose message
        # the remote side prefixed with the original type name: the student needs only the message.
        text = str(exc)
        return _cap(f"Not implemented yet: {text.removeprefix(f'{name}: ') if name != 'NotImplementedError' else text}")
    return _cap(f"Your code raised {name}: {exc}")


def _innermost_file(excinfo) -> Optional[Path]:
    """The file of the frame that raised (the last frame of the traceback), resolved."""
    tb, last = excinfo.tb, None
    while tb is not None:
        last = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    return Path(last).resolve() if last else None


def _raised_by_checks(excinfo) -> bool:
    """True when an AssertionError was raised by the hidden tests or the grader (a failed check),
    not by the code under test (a student's own assert is an error of their code)."""
    path = _innermost_file(excinfo)
    return path is not None and (SUITES_DIR in path.parents or path == ASSERTIONS_FILE
                                 or path.parent == Path(__file__).resolve().parent)


def grader_failure_cause(excinfo, when: str) -> Optional[str]:
    """Why an exception is the grader's failure and not the submission's, or None when it is a
    check that failed or something the submission did.

    The grader's: a ``GraderFailure`` (the sandbox could not start, or died while no student code
    ran); an exception raised inside the reference solution or the hidden suites' reference data;
    a suite handing the sandbox a value the wire format cannot carry. Everything else, including an
    exception raised in test code because of a value the submission returned (a wrong shape, a
    handle where a number was due), is the submission's.
    """
    exc = excinfo.value
    if isinstance(exc, GraderFailure):
        return f"{type(exc).__name__}: {exc}"
    if _is_timeout(exc) or isinstance(exc, (pytest.fail.Exception, pytest.skip.Exception)):
        return None
    if hasattr(exc, "type_name"):  # a StudentError: raised by (or because of) the submission
        return None
    from bertlab_grader.sandbox.inside.rpc import EncodeError

    if isinstance(exc, EncodeError):
        return f"a hidden test sent the sandbox something it cannot carry ({exc})"
    where = _innermost_file(excinfo)
    if where is not None and (REFERENCE_DIR in where.parents or where == REFERENCE_DATA):
        return f"the reference solution raised {type(exc).__name__} in the {when} of a hidden test: {exc}"
    if where is not None and where in KIT_LOOKUP_FILES:
        return f"the kit's {where.name} raised {type(exc).__name__} in the {when} of a hidden test: {exc}"
    return None


# Kit modules that only the tests call, with fixed arguments (a mistake's id, a model's name, the
# packaged data): an exception raised inside one of them is the kit's bug or a broken install, never
# something the submission did (found: a test naming a mistake the table did not have yet charged
# every student 8 points with "KeyError: no known mistake").
KIT_LOOKUP_FILES = frozenset(STUDENT_PACKAGE_DIR / name
                             for name in ("mistakes.py", "models.py", "datasets.py"))


def classify(call_excinfo, when: str) -> tuple[str, str]:
    """(outcome, message) for an exception raised in the ``when`` phase of a test."""
    exc = call_excinfo.value
    if _is_timeout(exc):
        return "timeout", error_message(exc, when)
    if when == "call":
        if isinstance(exc, pytest.fail.Exception):
            return "failed", check_message(exc)
        if isinstance(exc, AssertionError) and not hasattr(exc, "type_name") and _raised_by_checks(call_excinfo):
            return "failed", check_message(exc)
    if isinstance(exc, pytest.skip.Exception):
        return "error", _cap(f"This test was skipped: {exc.msg}")
    return "error", error_message(exc, when)


# ---------------------------------------------------------------------------------------------
# The pytest plugin
# ---------------------------------------------------------------------------------------------

def _task_and_points(item) -> tuple[Optional[str], float]:
    tasks = [m.name for m in item.iter_markers() if m.name in GRADED_TASKS]
    marker = item.get_closest_marker("points")
    points = float(marker.args[0]) if marker is not None and marker.args else 0.0
    return (tasks[0] if len(tasks) == 1 else None), points


TIMEOUTS_PER_TASK = 2  # after this many timeouts in one task, its remaining tests are not run


class _Recorder:
    """Collects one entry per hidden test as pytest runs it."""

    def __init__(self, impl=None):
        self.impl = impl
        self.entries: dict[str, dict] = {}  # nodeid -> entry, in collection order
        self.collected: list = []
        self.timeouts: dict[str, int] = {}  # task -> tests of it that timed out so far
        self.first_timeout: dict[str, str] = {}  # task -> what its first timeout said
        self.grader_failure: Optional[str] = None  # set at the first grader failure; the run stops
        self.segment: Optional[int] = None  # the grading segment of the test running now (segments.py)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        """The grader's steps before each test (the module's docstring lists them)."""
        timing_gate.pause_point()
        task, _ = _task_and_points(item)
        self.enter_segment(task)
        self.skip_after_timeouts(task)

    def enter_segment(self, task: Optional[str]) -> None:
        """A sandboxed submission's tests run in segments, each in a fresh process of the submission
        (grader/bertlab_grader/grading/segments.py): at the first test of a new segment, start it."""
        if task is None or not hasattr(self.impl, "start_segment"):
            return
        from bertlab_grader.grading.segments import modules_of, segment_of

        segment = segment_of(task)
        if segment != self.segment:
            self.segment = segment
            self.impl.start_segment(modules_of(segment))

    def skip_after_timeouts(self, task: Optional[str]) -> None:
        """A call that timed out is not made again with inputs of the same kind (the sandbox's Session
        answers it at once), and after TIMEOUTS_PER_TASK timeouts in a task its remaining tests are
        scored as timeouts without running, with the first timeout's message."""
        if self.timeouts.get(task, 0) >= TIMEOUTS_PER_TASK:
            from bertlab_grader.sandbox.remote import SubmissionTimeout

            raise SubmissionTimeout(self.first_timeout[task])

    def pytest_configure(self, config):
        if self.impl is not None:
            config.bertlab_impl = self.impl

    def pytest_collection_finish(self, session):
        for item in session.items:
            task, points = _task_and_points(item)
            self.collected.append((item.nodeid, item.name, task, points))
            self.entries[item.nodeid] = {"name": item.name, "task": task, "outcome": "error",
                                         "points": 0.0, "max_points": points,
                                         "message": "This test did not run."}

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        entry = self.entries.get(item.nodeid)
        if entry is None:
            return report
        if call.excinfo is not None and self.grader_failure is None:
            cause = grader_failure_cause(call.excinfo, call.when)
            if cause is not None:
                # Not the submission's doing: no test after this one means anything either.
                self.grader_failure = f"{item.name}: {cause}"
                item.session.shouldstop = "grader failure"
                return report
        if call.when == "setup":
            if call.excinfo is not None:
                entry["outcome"], entry["message"] = classify(call.excinfo, "setup")
        elif call.when == "call":
            fraction = dict(item.user_properties).get(POINTS_PROPERTY)
            ratio = dict(item.user_properties).get(RATIO_PROPERTY)
            if ratio is not None:
                entry["ratio"] = round(float(ratio), 3)
            if call.excinfo is None:
                entry.update(outcome="passed", message="",
                             points=entry["max_points"] * (1.0 if fraction is None else float(fraction)))
            else:
                entry["outcome"], entry["message"] = classify(call.excinfo, "call")
                if entry["outcome"] == "timeout":
                    self.timeouts[entry["task"]] = self.timeouts.get(entry["task"], 0) + 1
                    self.first_timeout.setdefault(entry["task"], str(call.excinfo.value))
                if entry["outcome"] == "failed" and fraction is not None:
                    # Part of a speed test's points (the points curve): to the hundredth, as shown.
                    entry["points"] = round(entry["max_points"] * float(fraction), 2)
        elif call.when == "teardown" and call.excinfo is not None and entry["outcome"] == "passed":
            entry["outcome"], entry["message"] = classify(call.excinfo, "teardown")
            entry["points"] = 0.0
        return report


def _pytest_args(tasks: Optional[Iterable[str]], extra: Sequence[str], collect_only: bool = False) -> list[str]:
    args = [str(SUITES_DIR), "--rootdir", str(SUITES_DIR), "-c", str(SUITES_CONFIG), "-p", "bertlab.pytest_plugin",
            "-q", "--no-header", "-p", "no:cacheprovider", "--capture=sys",
            # pytest's unraisable-exception plugin runs gc.collect() five times at the end of every
            # session: about 1 s per submission in a process holding torch and MiniLM (measured).
            # Student objects live in the sandbox, so there is nothing here for it to report.
            "-p", "no:unraisableexception",
            # pytest's logging plugin wraps every phase of every test in a log-capturing handler on the
            # root logger (0.21 s of 2.9 s in a cProfile of three gradings); no hidden test reads logs.
            "-p", "no:logging",
            # Only pytest's own plugins: the hidden suites use none of the installed ones (hypothesis,
            # pytest-benchmark, xdist, ...), and importing them cost about 1.6 s per grader process.
            # The ini's addopts name pytest-benchmark's option, so they go too.
            "--disable-plugin-autoload", "-o", "addopts=",
            "-W", "ignore::pytest.PytestAssertRewriteWarning"]
    if tasks is not None:
        tasks = list(tasks)
        unknown = sorted(set(tasks) - set(GRADED_TASKS))
        if unknown:
            raise ValueError(f"unknown task(s) {unknown}; the tasks are {GRADED_TASKS}")
        args += ["-m", " or ".join(tasks) if tasks else "not " + " and not ".join(GRADED_TASKS)]
    if collect_only:
        args.append("--collect-only")
    return args + list(extra)


def _run_pytest(args: list[str], plugin: _Recorder) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), one_torch_thread():
        code = pytest.main(args, plugins=[plugin])
    if plugin.grader_failure is not None:
        raise GraderFailure(plugin.grader_failure)
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        raise GraderFailure(f"the hidden suites could not run (pytest exit code {int(code)}):\n"
                            + sink.getvalue()[-3000:])
    return code


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------

def run_hidden_suite(impl, *, student: str, assignment: str = "week7", tasks: Optional[Iterable[str]] = None,
                     extra_pytest_args: Sequence[str] = (), hints: bool = True, seed: Optional[dict] = None,
                     earlier_tests: Sequence[dict] = ()) -> dict:
    """Grade ``impl`` with the hidden suites; the results dict (docs/results-format.md).

    tasks: only these tasks (default: all). hints: attach a hint (grader/bertlab_grader/grading/hints.py) to the failing tests
    of a task whose probe outputs match a known mistake of the mutant bank.
    A part of a submission graded in segments (grader/bertlab_grader/grading/segments.py): ``seed``, what earlier
    segments learned about its hangs (``RemoteImplementation.export_memos``); ``earlier_tests``, their
    test entries, which come first in the result (and get hints too).
    Raises GraderFailure when the grader, not the submission, failed (see the module docstring).
    """
    if seed:
        impl.seed_memos(seed)
    recorder = _Recorder(impl)
    _run_pytest(_pytest_args(tasks, extra_pytest_args), recorder)
    tests = [dict(t) for t in earlier_tests] + [dict(recorder.entries[nodeid]) for nodeid, *_ in recorder.collected]
    for t in tests:
        if t["task"] is None:
            raise GraderFailure(f"hidden test {t['name']} has no task marker")
    if hints:
        timing_gate.pause_point()
        with one_torch_thread():
            attach_hints(impl, tests)
    score = sum(t["points"] for t in tests)
    max_score = sum(t["max_points"] for t in tests)
    return {"student": student, "assignment": assignment, "score": float(score), "max_score": float(max_score),
            "tests": tests}


def attach_hints(impl, tests: list[dict]) -> None:
    """Add a "hint" to each failing test that the known mistake matched by ``impl``'s fingerprint
    explains (grader/bertlab_grader/grading/hints.py); never raises."""
    # A sandboxed submission's hung functions are not called again for hints (no points ride on them).
    no_retry = getattr(impl, "no_retry_of_hung_calls", contextlib.nullcontext)
    with no_retry():
        _diagnose_failing_tasks(impl, tests)
    try:
        save_kept()  # what the hints computed of the bank, for the next grading process (nothing new: no write)
    except Exception:  # noqa: BLE001 - keeping it is a saving, never a cost to a grade
        pass


def _diagnose_failing_tasks(impl, tests: list[dict]) -> None:
    from bertlab_grader.grading.hints import diagnose_failures

    for task in dict.fromkeys(t["task"] for t in tests):
        failing = [t for t in tests if t["task"] == task and t["outcome"] in ("failed", "error")]
        if not failing:
            continue
        try:
            hints = diagnose_failures(impl, task, [t["name"] for t in failing], grade=mutant_failing_tests)
        except Exception:  # noqa: BLE001 - a hint is a bonus; never let it cost a grade
            hints = {}
        for t in failing:  # only the tests the matched mistake explains (its mutant fails them too)
            if hints.get(t["name"]):
                t["hint"] = scrub(hints[t["name"]])


def failing_test_names(impl, task: str) -> list[str]:
    """The names of the hidden tests of ``task`` that ``impl`` does not pass (no hints)."""
    result = run_hidden_suite(impl, student="mutant", tasks=[task], hints=False)
    return [t["name"] for t in result["tests"] if t["outcome"] != "passed"]


@kept
def mutant_failing_tests(name: str, task: str) -> tuple[str, ...]:
    """The names of the hidden tests of ``task`` that the bank's mutant ``name`` does not pass, graded
    in process (the bank is the kit's own code): once per kit and machine, then read back from the
    kit's cache folder (grader/bertlab_grader/core/kept_reference.py)."""
    from bertlab.implementations import load_directory
    from bertlab_grader.mutants.bank import bank_entry

    return tuple(failing_test_names(load_directory(bank_entry(name).path), task))


def max_points_by_task(tasks: Optional[Iterable[str]] = None) -> dict[str, float]:
    """task -> total points of its hidden tests (collect-only; cached per process)."""
    key = tuple(tasks) if tasks is not None else None
    if key not in _MAX_POINTS:
        recorder = _Recorder()
        _run_pytest(_pytest_args(tasks, (), collect_only=True), recorder)
        totals: dict[str, float] = {}
        for _, name, task, points in recorder.collected:
            if task is None:
                raise GraderFailure(f"hidden test {name} has no task marker")
            totals[task] = totals.get(task, 0.0) + points
        _MAX_POINTS[key] = {t: totals[t] for t in GRADED_TASKS if t in totals}
    return dict(_MAX_POINTS[key])


def points_by_test(tasks: Optional[Iterable[str]] = None) -> dict[str, list[tuple[str, float]]]:
    """task -> [(test name, points)] in collection order (for docs and the audit)."""
    recorder = _Recorder()
    _run_pytest(_pytest_args(tasks, (), collect_only=True), recorder)
    out: dict[str, list[tuple[str, float]]] = {}
    for _, name, task, points in recorder.collected:
        out.setdefault(task, []).append((name, points))
    return out


def import_grading_code() -> None:
    """Import what grading runs, and compute nothing: the model's code (not its weights) and the hidden
    suites (collected once for their points). The cohort's fork server does this once for all its
    workers (grader/bertlab_grader/course/worker_preload.py); each worker then runs ``warm_up`` while its
    sandbox starts."""
    from bertlab.models import import_model_code

    import_model_code()
    max_points_by_task()


def warm_up() -> None:
    """Load MiniLM, compute the hidden suites' reference inputs and import the test modules now,
    before the first submission (a cohort grader worker does this while its sandbox starts)."""
    from bertlab_grader.hidden import reference_data

    with one_torch_thread():
        reference_data.warm()
    max_points_by_task()  # imports (and assertion-rewrites) the test modules once: about 0.6 s
    # Everything loaded so far (torch, MiniLM, the reference data) lives as long as the process:
    # moving it out of the garbage collector's view makes each later collection cheap.
    gc.collect()
    gc.freeze()


def grade_sources(sandbox, sources: dict, student: str, assignment: str, **suite_options) -> dict:
    """Run the hidden suites on one submission's sources through ``sandbox``; the results dict
    (with ``sandboxed``). ``suite_options`` go to ``run_hidden_suite`` (``tasks``, ``hints``).
    Raises GraderFailure when the grader, not the submission, failed."""
    with sandbox.session(dict(sources)) as impl:
        result = run_hidden_suite(impl, student=student, assignment=assignment, **suite_options)
    result["sandboxed"] = bool(sandbox.isolated)
    return result


def grade_part(sandbox, sources: dict, student: str, assignment: str, part: Part) -> PartResult:
    """Grade one part of a submission graded in segments on several workers (grader/bertlab_grader/grading/segments.py:
    ``split_parts``, ``final_part``): its results dict and what its session learned. The final
    part's result is the whole submission's."""
    with sandbox.session(dict(sources)) as impl:
        result = run_hidden_suite(impl, student=student, assignment=assignment, tasks=part.tasks,
                                  hints=part.hints, seed=part.seed, earlier_tests=part.earlier_tests)
        memos = impl.export_memos()
    result["sandboxed"] = bool(sandbox.isolated)
    return PartResult(result, memos)
