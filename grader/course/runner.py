"""Cohort grading: `bertlab grade COURSE` and `bertlab grade-one DIR`.

Processes (docs/architecture.md):

    main process        the course, the gradebook, the progress bar; never runs or imports student code
      fork server       trusted: loads torch, MiniLM and the reference data once (grader/course/worker_preload.py)
      N grader workers  trusted, forked from the fork server: run the hidden pytest suites, score,
                        build results dicts
        1 sandbox each  untrusted: a warm template (torch + MiniLM loaded once) that forks a fresh,
                        rlimited, bubblewrapped child per submission; values cross as data, never pickles

Trust first:
- A grader failure is never a grade. What the submission did (a wrong value, an exception of its
  code, a call over its time limit, its process killed by its own limits) is scored. What the grader
  failed to do (bertlab_grader.core.failures.GraderFailure: the sandbox or a worker could not start or died while
  no student code ran, the reference or a suite raised, the gradebook could not be written) leaves
  that submission with no results.json, no gradebook score and no feedback; the run names it with
  the cause at the end, exits 1, and the next run grades it.
- Preflight: each grader worker first grades the reference solution in its own sandbox
  (grader/grading/preflight.py); anything short of full marks outside performance stops the run before any
  student is graded.
- The sandbox fails closed: without a working bubblewrap grading refuses, unless the instructor
  named --unsafe-no-sandbox (and then every results.json says ``"sandboxed": false``).
- Resubmissions are noticed: results.json records a digest of the submitted files; a later run
  regrades a submission whose files changed and skips the unchanged ones.
- Identical files, identical points: each distinct submission's speed is measured once, and a copy
  (or a regrade) reuses that measurement (grader/performance/record.py; `--retime` measures again).
- Every folder under submitted/ is accounted for in the closing summary.

Nothing is lost: each finished submission is recorded (gradebook, autograded notebook, results.json
written last, atomically) before the next result is taken, so `bertlab grade` can be killed at any
moment (kill -9 included) and rerun.

Exit codes: 0 every submission graded (a student's own failures are grades); 1 some submissions not
graded because of the grader; 2 a usage or course-layout error (nothing was changed).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path

from bertlab_grader.core.failures import GraderFailure, UsageError

from bertlab_grader.core.locations import KIT_ROOT  # noqa: E402
from bertlab.tasks import GRADED_TASKS  # noqa: E402
SUBMISSION_DEADLINE_S = float(os.environ.get("BERTLAB_SUBMISSION_DEADLINE_S", 600))  # whole suite, one student
SANDBOX_UID_BASE = 61000  # worker k's sandbox runs as uid 61000 + k (when the grader runs as root)
MAX_ATTEMPTS = 2  # a submission whose grader worker dies is tried once more, then reported (not graded)


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


# ---------------------------------------------------------------------------------------------------
# Grading one submission (runs inside a trusted grader worker)


def open_sandbox(hide: list[str], uid: int | None, unsafe_no_sandbox: bool):
    """A Sandbox that isolates with bubblewrap, or refuses (SandboxUnavailable) unless the instructor
    asked for --unsafe-no-sandbox by name."""
    from bertlab_grader.sandbox import Sandbox

    kwargs = {"kit_root": KIT_ROOT, "hide": hide, "unsafe_no_sandbox": unsafe_no_sandbox}
    if uid is not None:
        kwargs["uid"] = uid
    return Sandbox(**kwargs)


def _worker_main(conn, hide: list[str], assignment: str, slot: int, unsafe_no_sandbox: bool, gate=None,
                 timings: str | None = None) -> None:
    """A trusted grader worker: one warm sandbox, a preflight, then submissions in, results out.

    Messages to the main process: ("ready", preflight problem or None), ("fatal", cause),
    ("result", results dict), ("grader_failure", cause).
    Each worker's sandbox runs under its own unprivileged uid, because RLIMIT_NPROC counts processes
    per uid: with a shared uid, one student's fork bomb would starve the other workers' students.
    ``gate`` (bertlab_grader.performance.gate.TimingGate): everything but the performance task's timings is
    work; a timing has the machine to itself.
    ``timings``: the course's timing record (grader/performance/record.py), or None to keep none: each
    distinct submission is timed once, and identical files reuse that measurement.
    """
    from bertlab_grader.performance import gate as timing_gate
    from bertlab_grader.performance import record as timing_record
    from bertlab_grader.course.nbgrader_course import read_submission_sources
    from bertlab_grader.grading.preflight import run_preflight
    from bertlab_grader.grading.scoring import warm_up

    import torch

    torch.set_num_threads(1)  # one core per worker: N workers share the machine without oversubscribing
    timing_gate.install(gate, slot)
    sandbox = None
    record = None
    try:
        if timings is not None:
            record = timing_record.TimingRecord(Path(timings), timing_record.protocol_digest())
        sandbox = open_sandbox(hide, SANDBOX_UID_BASE + slot, unsafe_no_sandbox)
        warm_up()  # already done in the fork server (grader/course/worker_preload.py); with spawn, done here
        with timing_gate.working():
            problem = run_preflight(sandbox, assignment)
    except Exception as exc:  # noqa: BLE001 - whatever stops a worker from starting is the grader's
        conn.send(("fatal", f"{type(exc).__name__}: {exc}"))
        if sandbox is not None:
            sandbox.close()
        return
    conn.send(("ready", problem))
    try:
        while True:
            job = conn.recv()
            if job is None:
                break
            student, path = job
            try:
                sources = read_submission_sources(path)
                with timing_gate.working(), timing_record.use(record, sources):
                    from bertlab_grader.grading.scoring import grade_sources  # (pytest: only in grader workers)

                    result = grade_sources(sandbox, sources, student, assignment)
                conn.send(("result", result))
            except Exception as exc:  # noqa: BLE001 - a grader failure or a grader bug: never the student's
                conn.send(("grader_failure", f"{type(exc).__name__}: {exc}"))
    finally:
        sandbox.close()


class _Worker:
    """Main-process handle of one grader worker process."""

    def __init__(self, ctx, hide, assignment, slot, unsafe_no_sandbox, gate=None, timings=None):
        self.slot, self.gate, self.timings = slot, gate, timings
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main,
                                   args=(child, hide, assignment, slot, unsafe_no_sandbox, gate, timings),
                                   daemon=True)
        self.process.start()
        child.close()
        self.ready = False
        self.job = None  # (submission, attempt)
        self.started = 0.0

    def give(self, submission, attempt):
        self.job, self.started = (submission, attempt), time.monotonic()
        self.conn.send((submission.student, str(submission.path)))

    def stop(self):
        try:
            self.conn.send(None)
        except (OSError, ValueError):
            pass

    def kill(self):
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        if self.gate is not None:  # it may have died working or timing: the others must not wait for it
            self.gate.forget(self.slot)


def _context():
    """Grader workers are forked from a fork server that imported ``bertlab_grader.course.worker_preload`` (torch,
    MiniLM, the reference data: about 6 s of CPU) once, instead of each worker paying for it on a
    shared core. The fork server is a fresh interpreter, not a copy of this process, and nothing in it
    has started a thread pool (see grader/course/worker_preload.py). Set BERTLAB_WORKER_START=spawn to give
    each worker a fresh interpreter of its own instead."""
    if os.environ.get("BERTLAB_WORKER_START", "forkserver") == "spawn" or "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["bertlab_grader.course.worker_preload"])
    return ctx


def start_workers(n: int, hide: list[str], assignment: str, unsafe_no_sandbox: bool = False,
                  timings: Path | None = None) -> list[_Worker]:
    """Start ``n`` grader workers now; they warm up (seconds) while the caller prepares the course.
    They share one TimingGate (grader/performance/gate.py), which this process joins as well, and
    the timing record at ``timings`` (grader/performance/record.py; None: keep none)."""
    from bertlab_grader.performance import gate as timing_gate

    ctx = _context()
    gate = timing_gate.TimingGate(ctx, n)
    timing_gate.install(gate, timing_gate.NO_ONE)
    where = str(timings) if timings is not None else None
    return [_Worker(ctx, hide, assignment, slot, unsafe_no_sandbox, gate, where) for slot in range(n)]


class RunStopped(GraderFailure):
    """The whole run stopped before grading (a failed preflight, a sandbox that cannot start)."""


def _pool_results(submissions, pool: list[_Worker], hide: list[str], assignment: str, unsafe_no_sandbox: bool):
    """Yield (submission, result, None) or (submission, None, grader failure cause) as the grader
    workers of ``pool`` finish; a worker that dies is replaced and its submission tried once more.
    Raises RunStopped when a worker cannot start or fails its preflight. The workers are stopped at
    the end."""
    ctx = _context()
    queue = [(s, 1) for s in submissions]
    try:
        while queue or any(w.job for w in pool):
            for w in pool:
                if w.ready and w.job is None and queue:
                    w.give(*queue.pop(0))
            ready = wait([w.conn for w in pool] + [w.process.sentinel for w in pool], timeout=1.0)
            for i, w in enumerate(list(pool)):
                died = w.process.sentinel in ready and not w.conn.poll()
                overdue = w.job is not None and time.monotonic() - w.started > SUBMISSION_DEADLINE_S
                if w.conn in ready and w.conn.poll():
                    try:
                        kind, payload = w.conn.recv()
                    except (EOFError, OSError):
                        died = True
                    else:
                        if kind == "fatal":
                            raise RunStopped(f"a grader worker could not start: {payload}")
                        if kind == "ready":
                            if payload is not None:
                                from bertlab_grader.grading.preflight import explain

                                raise RunStopped(explain(payload))
                            w.ready = True
                        else:
                            submission, _ = w.job
                            w.job = None
                            if queue:  # the next job first: the worker grades while we record this one
                                w.give(*queue.pop(0))
                            yield (submission, payload, None) if kind == "result" else (submission, None, payload)
                if died or overdue:
                    if w.job is not None:
                        submission, attempt = w.job
                        why = (f"grading took longer than {SUBMISSION_DEADLINE_S:g} s "
                               "(BERTLAB_SUBMISSION_DEADLINE_S)" if overdue
                               else "the grader worker stopped unexpectedly")
                        if attempt < MAX_ATTEMPTS and not overdue:
                            queue.insert(0, (submission, attempt + 1))
                        else:
                            yield submission, None, why
                    elif not w.ready:
                        raise RunStopped(f"a grader worker died while starting (exit code {w.process.exitcode})")
                    w.kill()
                    pool[i] = _Worker(ctx, hide, assignment, w.slot, unsafe_no_sandbox, w.gate, w.timings)
    finally:
        stop_workers(pool)


def stop_workers(pool: list[_Worker]) -> None:
    """Ask every worker to finish (its sandbox closes), then make sure each is gone."""
    for w in pool:
        w.stop()
    from bertlab_grader.performance import gate as timing_gate

    for w in pool:
        w.process.join(10)
        w.kill()
    if pool:
        timing_gate.install(None, timing_gate.NO_ONE)


# ---------------------------------------------------------------------------------------------------
# The course


def _hidden_paths(course: Path, db_url: str | None) -> list[str]:
    """What the sandbox must not see besides the kit: the course (all students) and the gradebook."""
    hide = [str(course)]
    from bertlab_grader.course.nbgrader_course import course_db_url

    url = course_db_url(course, db_url)
    if url.startswith("sqlite:///"):
        hide.append(str(Path(url.removeprefix("sqlite:///")).resolve().parent))
    return sorted(set(hide))


@dataclass
class RunSummary:
    """What a cohort run did with every folder under submitted/."""

    graded: list[str] = field(default_factory=list)
    regraded: list[str] = field(default_factory=list)      # graded again: files changed, or asked for
    unchanged: list[str] = field(default_factory=list)     # graded before, files the same: skipped
    not_graded: dict[str, str] = field(default_factory=dict)  # student -> grader failure cause
    stale: set[str] = field(default_factory=set)            # not graded now, an earlier result still stands
    layout: list = field(default_factory=list)              # bertlab_grader.course.submissions.LayoutProblem
    stopped: str | None = None                              # the whole run stopped: why

    @property
    def exit_code(self) -> int:
        return 1 if (self.not_graded or self.stopped) else 0

    def format(self) -> str:
        def names(students: list[str], limit: int = 12) -> str:
            students = sorted(students)
            shown = ", ".join(students[:limit])
            return shown + (f" and {len(students) - limit} more" if len(students) > limit else "")

        lines = ["", "Summary:"]
        if self.stopped:
            lines.append(f"  STOPPED before grading: {self.stopped}")
        lines.append(f"  graded: {len(self.graded)}" + (f" ({names(self.graded)})" if self.graded else ""))
        if self.regraded:
            lines.append(f"    of them graded again because their files changed or --regrade named them: "
                         f"{names(self.regraded)}")
        lines.append(f"  unchanged since last grading (skipped): {len(self.unchanged)}")
        lines.append(f"  not graded because of the grader: {len(self.not_graded)}"
                     + (" (no grade, results.json or feedback written for this run; the next run grades them)"
                        if self.not_graded else ""))
        for student, cause in sorted(self.not_graded.items()):
            first = cause.strip().splitlines()[0] if cause.strip() else cause
            if student in self.stale:
                first += " [their earlier result, for files that have since changed, stands until then]"
            lines.append(f"    {student}: {first}")
        if self.layout:
            lines.append(f"  folders under submitted/ holding no submission (not graded): {len(self.layout)}")
            for problem in self.layout:
                lines.append(f"    {problem}")
        return "\n".join(lines)


def last_run_path(course: Path, assignment: str) -> Path:
    """Where the last run's summary is kept: ``COURSE/.bertlab/last-run-<assignment>.json``."""
    return Path(course) / ".bertlab" / f"last-run-{assignment}.json"


def write_last_run(course: Path, assignment: str, summary: RunSummary) -> Path:
    """Keep the run's summary (what ``summary.format()`` prints) for ``bertlab report``: the folders not
    graded and why live nowhere else, since a grader failure writes no results.json. Written atomically.

    Format: {"assignment", "finished" (ISO 8601, UTC), "graded", "regraded", "unchanged": [student ids],
    "not_graded": {student: cause}, "stale": [ids whose earlier result still stands],
    "layout_problems": [{"folder", "found", "expected"}], "stopped": why the run stopped, or null}."""
    from dataclasses import asdict
    from datetime import datetime, timezone

    document = {
        "assignment": assignment,
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "graded": sorted(summary.graded), "regraded": sorted(summary.regraded),
        "unchanged": sorted(summary.unchanged), "not_graded": dict(sorted(summary.not_graded.items())),
        "stale": sorted(summary.stale), "layout_problems": [asdict(p) for p in summary.layout],
        "stopped": summary.stopped,
    }
    path = last_run_path(course, assignment)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def check_course(course: Path, assignment: str, db_url: str | None):
    """Everything that can be checked before anything is written: the course folder, the assignment
    name, submitted/, the gradebook. Raises UsageError (one line) and changes nothing."""
    from bertlab_grader.course import nbgrader_course as nbcourse

    if not course.is_dir():
        raise UsageError(f"no course folder at {course}. Give the nbgrader course folder that holds "
                         "submitted/<student>/<assignment>/ (or run `bertlab demo --keep DIR` to see one).")
    submitted = course / "submitted"
    if not submitted.is_dir():
        raise UsageError(f"{course} has no submitted/ folder. Put each student's files in "
                         f"{submitted}/<student>/{assignment}/ (or run `bertlab demo --keep DIR` to see a course).")
    if not any(not p.name.startswith(".") for p in submitted.iterdir()):
        raise UsageError(f"{submitted} is empty: there is nothing to grade. Each student's files go in "
                         f"{submitted}/<student>/{assignment}/.")
    known = nbcourse.known_assignments(course, db_url)
    if assignment not in known:
        listed = ", ".join(sorted(known)) if known else "none"
        raise UsageError(f"unknown assignment {assignment!r}: this course knows {listed}. "
                         "Pass one of them with --assignment (nothing was changed).")
    try:
        nbcourse.check_gradebook(course, db_url)
    except nbcourse.CourseError as exc:
        raise UsageError(str(exc)) from None


def _check_sandbox(unsafe_no_sandbox: bool) -> None:
    """Refuse at once, before any worker starts, when bubblewrap cannot isolate student code."""
    if unsafe_no_sandbox:
        return
    from bertlab_grader.sandbox import launcher

    ok, why = launcher.bubblewrap_status()
    if not ok:
        raise launcher._unavailable(why)  # the reason, then how to install or enable bubblewrap


def grade_course(course: Path, assignment: str = "week7", workers: int | None = None,
                 db_url: str | None = None, quiet: bool = False, *, regrade=(), regrade_all: bool = False,
                 unsafe_no_sandbox: bool = False, retime: bool = False, keep_timings: bool = True) -> int:
    """Grade every submission of ``assignment`` that is new or changed (or named by ``regrade``);
    record, export, feedback; print the gradebook and a summary. Returns the exit code (0, 1, 2;
    see the module docstring). Raises UsageError for a usage or layout error, before any change."""
    summary = run_course(course, assignment, workers, db_url, quiet, regrade=regrade, regrade_all=regrade_all,
                         unsafe_no_sandbox=unsafe_no_sandbox, retime=retime, keep_timings=keep_timings)
    return summary.exit_code


def run_course(course: Path, assignment: str = "week7", workers: int | None = None,
               db_url: str | None = None, quiet: bool = False, *, regrade=(), regrade_all: bool = False,
               unsafe_no_sandbox: bool = False, retime: bool = False, keep_timings: bool = True) -> RunSummary:
    """``grade_course``, returning the RunSummary.

    Speed: each distinct submission is timed once and identical files reuse that measurement, kept in
    the course (grader/performance/record.py). ``retime``: set the kept timings aside first, so every
    submission graded now is timed again. ``keep_timings=False``: keep no record at all, every
    grading measures (benchmarks/repeat_grading.py uses it to measure the protocol's own spread)."""
    from bertlab_grader.course import nbgrader_course as nbcourse
    from bertlab_grader.performance import record as timing_record
    from bertlab_grader.grading.scoring import max_points_by_task

    course = Path(course).resolve()
    check_course(course, assignment, db_url)
    start = time.monotonic()
    submissions, layout = nbcourse.scan_submitted(course, assignment)
    summary = RunSummary(layout=layout)
    by_student = {s.student: s for s in submissions}
    unknown = sorted(set(regrade) - by_student.keys())
    if unknown:
        raise UsageError(f"--regrade names {', '.join(unknown)}, who have no submission of {assignment} "
                         "(nothing was changed)")
    finished = nbcourse.load_results(course, assignment)
    digests = {s.student: nbcourse.submission_digest(s) for s in submissions}
    todo, refused = [], []
    for s in submissions:
        before = finished.get(s.student)
        if before is not None and not regrade_all and s.student not in regrade \
                and before.get("submission_digest") == digests[s.student]:
            summary.unchanged.append(s.student)
            continue
        (refused if s.error else todo).append(s)
    workers = max(1, min(workers or default_workers(), len(todo))) if todo else 0
    hide = _hidden_paths(course, db_url)
    if todo:
        _check_sandbox(unsafe_no_sandbox)
    # The gradebook set-up (several seconds of nbgrader) runs in a thread while the workers start: the
    # first start waits for the fork server's warm-up (torch, MiniLM, reference data), and each
    # worker's sandbox then warms up and grades the reference (the preflight) on its own.
    prepared: dict = {}

    def prepare() -> None:
        try:
            prepared["max_points"] = max_points_by_task()
            nbcourse.init_course(course, assignment, max_points=prepared["max_points"], db_url=db_url)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread below
            prepared["error"] = exc

    preparing = threading.Thread(target=prepare, name="gradebook set-up", daemon=True)
    preparing.start()
    pool = []
    try:
        if retime:
            timing_record.set_aside(course, assignment)
        timings = timing_record.record_path(course, assignment) if keep_timings else None
        pool = start_workers(workers, hide, assignment, unsafe_no_sandbox, timings) if todo else []
        preparing.join()
        if "error" in prepared:
            error = prepared["error"]
            raise GraderFailure(f"the gradebook could not be set up: {type(error).__name__}: {error}") from error
        max_points = prepared["max_points"]
        with nbcourse.keep_gradebook_open(course, db_url):
            for student in summary.unchanged:  # a run killed between the gradebook and results.json: re-sync
                nbcourse.record_result(course, finished[student], db_url)
            for s in refused:  # e.g. a zip bomb: the student's own error, never the cohort's
                result = nbcourse.error_result(s.student, assignment, s.error, max_points)
                _record(course, db_url, result, digests[s.student], summary)

            if not quiet:
                print(f"Grading {len(todo)} submission(s) of {assignment} in {course} with {workers} worker(s); "
                      f"{len(summary.unchanged)} unchanged since last grading.", file=sys.stderr)
            progress = _progress(len(todo), quiet)
            try:
                for submission, result, failure in _pool_results(todo, pool, hide, assignment, unsafe_no_sandbox):
                    if result is None:
                        summary.not_graded[submission.student] = failure
                    else:
                        _record(course, db_url, result, digests[submission.student], summary)
                    progress.update(1)
            except RunStopped as exc:
                summary.stopped = str(exc)
                done = set(summary.graded) | set(summary.not_graded)
                for s in todo:
                    if s.student not in done:
                        summary.not_graded[s.student] = "the run stopped before grading it (see above)"
            progress.close()
    finally:
        stop_workers(pool)  # (already stopped after a complete run; this covers a failed set-up)
    elapsed = time.monotonic() - start
    # Graded before: the regraded ones, and (not graded now) those whose older result still stands.
    summary.regraded = [s for s in summary.graded if s in finished]
    summary.stale = {s for s in summary.not_graded if s in finished}

    results = nbcourse.load_results(course, assignment)
    write_last_run(course, assignment, summary)
    if summary.stopped and not quiet:
        print(f"\n{summary.stopped}", file=sys.stderr)
    if results:
        try:
            grades, feedback = nbcourse.export_and_feedback(course, assignment, db_url, students=sorted(results),
                                                            processes=default_workers())
        except nbcourse.CourseError as exc:
            summary.stopped = summary.stopped or f"the export or the feedback failed: {exc}"
            grades = feedback = None
    if not quiet:
        if results:
            print(format_gradebook(results))
        graded_now = len(summary.graded)
        if graded_now:
            print(f"\nGraded {graded_now} submission(s) in {elapsed:.1f} s, worker start-up and preflight "
                  f"included ({elapsed / graded_now:.2f} s per submission, {graded_now / elapsed * 60:.0f} per "
                  "minute); then the export and feedback.")
        if results and grades is not None:
            print(f"Gradebook export: {grades}")
            print(f"Feedback: {feedback}/<student>/{assignment}/{assignment}.html")
            print(f"Results: {course}/autograded/<student>/{assignment}/results.json")
        print(summary.format())
    return summary


def _record(course: Path, db_url: str | None, result: dict, digest: str, summary: RunSummary) -> None:
    """Record one result with the digest of the files it graded; a gradebook that cannot be written is
    the grader's failure, not the student's."""
    from bertlab_grader.course import nbgrader_course as nbcourse

    from bertlab_grader.performance import gate as timing_gate

    result = {**result, "submission_digest": digest}
    try:
        with timing_gate.working():  # not while a worker times
            nbcourse.record_result(course, result, db_url)
    except Exception as exc:  # noqa: BLE001 - the gradebook or the disk: never the student's
        summary.not_graded[result["student"]] = f"the result could not be recorded: {type(exc).__name__}: {exc}"
        return
    summary.graded.append(result["student"])


def _progress(total: int, quiet: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc="grading", unit="submission", disable=quiet or total == 0,
                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed} elapsed, {remaining} left]", file=sys.stderr)


def task_scores(result: dict) -> dict[str, tuple[float, float]]:
    """task -> (points, max points) of one results dict."""
    scores: dict[str, list[float]] = {}
    for test in result["tests"]:
        entry = scores.setdefault(test["task"], [0.0, 0.0])
        entry[0] += test["points"]
        entry[1] += test["max_points"]
    return {t: tuple(v) for t, v in scores.items()}


def format_gradebook(results: dict[str, dict]) -> str:
    """A plain-text table: one row per student, one column per task, and the total."""
    header = f"{'student':<16}" + "".join(f"{t:>13}" for t in GRADED_TASKS) + f"{'total':>15}"
    lines = [header, "-" * len(header)]
    for student in sorted(results):
        result = results[student]
        per_task = task_scores(result)
        cells = "".join(f"{'%g/%g' % per_task[t] if t in per_task else '-':>13}" for t in GRADED_TASKS)
        lines.append(f"{student:<16}{cells}{'%g/%g' % (result['score'], result['max_score']):>15}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------
# One submission


def grade_one(submission: Path, student: str | None = None, assignment: str = "week7",
              unsafe_no_sandbox: bool = False) -> dict:
    """Grade one submission directory in a fresh sandbox, after a preflight in that same sandbox;
    the results dict (with ``submission_digest`` and ``sandboxed``). Raises UsageError for a folder
    that is not a submission, GraderFailure when the grader failed (nothing is graded then)."""
    from bertlab_grader.course.nbgrader_course import Submission, read_submission_sources, submission_digest, valid_id
    from bertlab_grader.grading.preflight import explain, run_preflight

    submission = Path(submission).resolve()
    if not submission.is_dir():
        raise UsageError(f"{submission} is not a directory holding cka.py, pooling.py, siamese.py, retrieval.py")
    student = student or submission.name
    if not valid_id(student):
        raise UsageError(f"{student!r} cannot be a student id; pass --student NAME")
    sources = read_submission_sources(submission)
    if not sources:
        raise UsageError(f"{submission} holds none of cka.py, pooling.py, siamese.py, retrieval.py")
    _check_sandbox(unsafe_no_sandbox)
    sandbox = open_sandbox([str(submission.parent)], None, unsafe_no_sandbox)
    try:
        problem = run_preflight(sandbox, assignment)
        if problem is not None:
            raise RunStopped(explain(problem))
        from bertlab_grader.grading.scoring import grade_sources  # (pytest: only in grader workers)

        result = grade_sources(sandbox, sources, student, assignment)
    finally:
        sandbox.close()
    result["submission_digest"] = submission_digest(Submission(student, submission))
    from bertlab_grader.course.nbgrader_course import check_results_schema, validate_result

    result = validate_result(result)
    check_results_schema(result)
    return result


def grade_one_command(submission: Path, as_json: bool = False, student: str | None = None,
                      unsafe_no_sandbox: bool = False) -> int:
    """`bertlab grade-one`: print the result (or results.json with --json). Exit 0 graded, 1 grader
    failure (nothing printed on stdout), 2 usage error."""
    result = grade_one(submission, student, unsafe_no_sandbox=unsafe_no_sandbox)
    if as_json:
        print(json.dumps(result, indent=1))
    else:
        print(format_gradebook({result["student"]: result}))
        for test in result["tests"]:
            if test["outcome"] != "passed":
                print(f"  [{test['outcome']}] {test['task']}/{test['name']}: {test['message']}")
        if not result.get("sandboxed", True):
            print("NOTE: graded WITHOUT the sandbox (--unsafe-no-sandbox); results.json records it.")
    return 0
