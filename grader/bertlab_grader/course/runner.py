"""Cohort grading: `bertlab grade COURSE` (the worker pool is pool.py; one directory, `bertlab grade-one`, is grade_one.py).

Processes (docs/architecture.md):

    main process        the course, the gradebook, the progress bar; never runs or imports student code
      fork server       trusted: imports torch, transformers and the hidden suites once (grader/bertlab_grader/course/worker_preload.py)
      N grader workers  trusted, forked from the fork server: load MiniLM and the reference data while
                        their sandbox starts, then run the hidden pytest suites, score,
                        build results dicts
        1 sandbox each  untrusted: a warm template (torch + MiniLM loaded once) that forks a fresh,
                        rlimited, bubblewrapped child per submission; values cross as data, never pickles

With ``--scheduler ADDRESS`` or ``--cluster local:N`` the grader workers are Dask workers instead
(grader/bertlab_grader/cluster/, docs/cluster.md): each sets up the same warm sandbox and preflight through a
WorkerPlugin, and this process sends them submissions as plain data and records their JSON results.

Trust first:
- A grader failure is never a grade. What the submission did (a wrong value, an exception of its
  code, a call over its time limit, its process killed by its own limits) is scored. What the grader
  failed to do (bertlab_grader.core.failures.GraderFailure: the sandbox or a worker could not start or died while
  no student code ran, the reference or a suite raised, the gradebook could not be written) leaves
  that submission with no results.json, no gradebook score and no feedback; the run names it with
  the cause at the end, exits 1, and the next run grades it.
- Preflight: before its first student, each grader worker grades the reference solution in its own
  sandbox, on its share of the tasks; together the workers cover every task
  (grader/bertlab_grader/grading/preflight.py); anything short of full marks outside performance stops the run before any
  student is graded.
- The sandbox fails closed: without a working bubblewrap grading refuses, unless the instructor
  named --unsafe-no-sandbox (and then every results.json says ``"sandboxed": false``).
- Resubmissions are noticed: results.json records a digest of the submitted files; a later run
  regrades a submission whose files changed and skips the unchanged ones.
- Identical files, identical points: each distinct submission's speed is measured once, and a copy
  (or a regrade) reuses that measurement (grader/bertlab_grader/performance/record.py; `--retime` measures again).
- Every folder under submitted/ is accounted for in the closing summary.

Nothing is lost: each finished submission is journaled (one line, synced to disk before its batch is
written) before the next result is taken, and recorded behind the journal in batches (gradebook,
autograded notebook, results.json written last, atomically; grader/bertlab_grader/course/journal.py). So `bertlab
grade` can be killed at any moment, kill -9 included, and rerun: the rerun first records what the
killed run journaled, then skips it as unchanged.

Exit codes: 0 every submission graded (a student's own failures are grades); 1 some submissions not
graded because of the grader; 2 a usage or course-layout error (nothing was changed).
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from dataclasses import dataclass

from bertlab.errors import UsageError
from bertlab_grader.cluster.connect import dask_client
from bertlab_grader.core.failures import GraderFailure, RunStopped
from bertlab_grader.course import config as course_config, gradebook as course_gradebook, journal
from bertlab_grader.course import results as course_results, submissions as course_submissions
from bertlab_grader.course.pool import (check_sandbox, pool_results, default_workers, start_fork_server,
                                        start_workers, stop_workers)
from bertlab_grader.course.preconditions import check_course_folder, check_course_for_grading
from bertlab_grader.course.results import format_gradebook
from bertlab_grader.course.schedule import keep_part_seconds, part_seconds_path, read_part_seconds
from bertlab_grader.course.settings import CourseSettings
from bertlab_grader.course.submissions import handin_notes
from bertlab_grader.course.summary import RunSummary, write_last_run
from bertlab_grader.grading.kept_points import kept_max_points
from bertlab_grader.grading.segments import FINAL
from bertlab_grader.performance import gate as timing_gate, record as timing_record
from bertlab_grader.performance.host_gate import HostGate


# ---------------------------------------------------------------------------------------------------
# The course


@dataclass(frozen=True)
class RunOptions:
    """What one run of ``bertlab grade`` is asked to do, beside the course it grades
    (grader/bertlab_grader/course/settings.py): the command line's other options.

    ``workers``: grader workers on this machine (None: one per core). ``regrade``: students graded again
    even if unchanged; ``regrade_all``: everyone. ``retime``: set the kept timings aside first, so every
    submission graded now is timed again; ``keep_timings=False``: keep no timing record at all, every
    grading measures (benchmarks/repeat_grading.py measures the protocol's own spread with it).
    ``scheduler`` (a Dask scheduler's address) or ``cluster`` ("local:N"): grade on Dask workers
    (grader/bertlab_grader/cluster/, docs/cluster.md) instead of this machine's worker pool.
    ``grade_copies_once=False``: grade every copy of the same files (the repeat-grading benchmark).
    ``empty_ok``: an empty ``submitted/`` is no error (`bertlab grade --watch` waits for hand-ins)."""

    workers: int | None = None
    quiet: bool = False
    regrade: tuple[str, ...] = ()
    regrade_all: bool = False
    retime: bool = False
    keep_timings: bool = True
    scheduler: str | None = None
    cluster: str | None = None
    grade_copies_once: bool = True
    empty_ok: bool = False

    @property
    def on_cluster(self) -> bool:
        return self.scheduler is not None or self.cluster is not None


def grade_course(settings: CourseSettings, options: RunOptions = RunOptions()) -> int:
    """Grade every submission of the assignment that is new or changed (or named by
    ``options.regrade``); record, export, feedback; print the gradebook and a summary. Returns the exit
    code (0, 1, 2; see the module docstring). Raises UsageError for a usage or layout error, before any
    change."""
    return run_course(settings, options).exit_code


def run_course(settings: CourseSettings, options: RunOptions = RunOptions(), warm_pool: list | None = None) -> RunSummary:
    """``grade_course``, returning the RunSummary.

    ``warm_pool``: workers already started (``pool.start_workers``) to grade with and leave running
    (`bertlab grade --watch` grades its first batch with the workers it then keeps); by default the
    run starts its own and stops them at the end.

    Speed: each distinct submission is timed once and identical files reuse that measurement, kept in
    the course (grader/bertlab_grader/performance/record.py; ``options.retime``, ``options.keep_timings``).

    Copies: submissions with identical files (the same digest) are graded once, and each copy is
    recorded with that result under its own name (unless ``options.grade_copies_once`` is False)."""
    if warm_pool is None and not options.on_cluster:
        # Once the folder is known to be a course: the workers' fork server imports torch, transformers
        # and the hidden suites (4 s of one core) while this process reads the course on the other. A
        # run with nothing to grade leaves it unused; it ends with this process.
        check_course_folder(settings, empty_ok=options.empty_ok)
        start_fork_server()
    course, assignment = settings.root, settings.assignment
    check_course_for_grading(settings, empty_ok=options.empty_ok)
    # What every sandbox hides, worked out here, once, from the config as it stands before the gradebook
    # set-up below rewrites it; the workers receive it with the settings.
    settings.hidden_paths  # noqa: B018 - (a cached property: read for its keeping)
    start = time.monotonic()
    submissions, layout = course_submissions.scan_submitted(settings)
    summary = RunSummary(layout=layout)
    by_student = {s.student: s for s in submissions}
    unknown = sorted(set(options.regrade) - by_student.keys())
    if unknown:
        raise UsageError(f"--regrade names {', '.join(unknown)}, who have no submission of {assignment} "
                         "(nothing was changed)")
    # A run killed before it wrote everything it graded left its journal: record that first, so that
    # what it graded counts below as graded (and unchanged submissions are skipped) as if it had finished.
    replayed = journal.replay(settings, on_adjustment=summary.adjustments.append)
    if replayed and not options.quiet:
        print(f"Recorded {len(replayed)} result(s) that an interrupted run had graded and journaled.", file=sys.stderr)
    finished = course_results.load_results(settings)  # (earlier runs' files: checked as they are read)
    digests = {s.student: course_submissions.submission_digest(s) for s in submissions}
    todo, refused = [], []
    for s in submissions:
        before = finished.get(s.student)
        if before is not None and not options.regrade_all and s.student not in options.regrade \
                and before.get("submission_digest") == digests[s.student]:
            summary.unchanged.append(s.student)
            s.forget_sources()  # (read for its digest only)
            continue
        (refused if s.error else todo).append(s)
    distinct, copies = group_copies(todo, digests) if options.grade_copies_once else (todo, {})
    # No more workers than jobs that can run at once: a submission is graded in up to FINAL parts at
    # once when fewer wait than there are workers (course/schedule.py), so one late hand-in on two
    # cores gets both: its parts (and the two preflights) run side by side.
    workers = (max(1, min(options.workers or default_workers(), len(distinct) * FINAL))
               if todo and not options.on_cluster else 0)
    stack = contextlib.ExitStack()
    grading = None
    if todo and options.on_cluster:  # connect first: an unreachable scheduler changes nothing (exit 2)
        grading = _start_cluster(stack, settings, options)
    elif todo and warm_pool is None:
        check_sandbox(settings)
    # The gradebook set-up (several seconds of nbgrader) runs in a thread while the workers start: the
    # first start waits for the fork server's imports (torch, transformers, the hidden suites), and
    # each worker then starts its sandbox, loads MiniLM and the reference data while the sandbox warms
    # up, and grades the reference on its share of the tasks (the preflight).
    prepared: dict = {}
    part_seconds = read_part_seconds(part_seconds_path(settings))  # (course/schedule.py)

    def prepare() -> None:
        try:
            prepared["max_points"] = kept_max_points()  # (read back: this process does not import the suites)
            course_config.init_course(settings, max_points=prepared["max_points"])
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread below
            prepared["error"] = exc

    preparing = threading.Thread(target=prepare, name="gradebook set-up", daemon=True)
    preparing.start()
    pool = []
    try:
        if options.retime:
            timing_record.set_aside(course, assignment)
        timings = timing_record.record_path(course, assignment) if options.keep_timings else None
        if warm_pool is not None:
            pool = warm_pool
        else:
            pool = start_workers(workers, settings, timings) if todo and not grading else []
        preparing.join()
        if "error" in prepared:
            error = prepared["error"]
            raise GraderFailure(f"the gradebook could not be set up: {type(error).__name__}: {error}") from error
        max_points = prepared["max_points"]
        # The writer writes its batches into the gradebook between timings (timing_gate.working: a batch
        # is a second of CPU, which would slow a worker's timing down); journaling a result does not wait.
        with course_gradebook.keep_gradebook_open(settings), \
                journal.ResultWriter(settings, on_adjustment=summary.adjustments.append,
                                     between_timings=timing_gate.working) as writer:
            for student in summary.unchanged:  # the gradebook re-synced with results.json (it may have been reset)
                writer.record(finished[student], on_failed=_resync_failed)
            for s in refused:  # e.g. a zip bomb: the student's own error, never the cohort's
                result = course_results.error_result(s.student, assignment, s.error, max_points)
                record_result(writer, result, digests[s.student], summary)

            if not options.quiet:
                where = (f"on the Dask cluster at {options.scheduler or options.cluster}" if grading
                         else f"with {workers} worker(s)")
                same = (f" ({len(todo) - len(distinct)} of them copies of another's files: each set of files is "
                        "graded once)") if len(distinct) < len(todo) else ""
                print(f"Grading {len(todo)} submission(s) of {assignment} in {course} {where}{same}; "
                      f"{len(summary.unchanged)} unchanged since last grading.", file=sys.stderr)
            progress = _progress(len(todo), options.quiet)
            if grading:
                record = timing_record.TimingRecord(timings, timing_record.protocol_digest()) if timings else None
                finishing = grading.results(distinct, record)
            else:
                finishing = pool_results(distinct, pool, keep_workers=warm_pool is not None, part_seconds=part_seconds)
            try:
                for graded, result, failure in finishing:
                    for submission in [graded] + copies.get(graded.student, []):
                        if result is None:
                            summary.not_graded[submission.student] = failure
                        else:
                            record_result(writer, result if submission is graded else as_copy(result, submission.student),
                                    digests[submission.student], summary, submission)
                        progress.update(1)
            except RunStopped as exc:
                summary.stopped = str(exc)
                writer.flush()  # what was graded is recorded (and so counted) before the rest is named
                done = set(summary.graded) | set(summary.not_graded)
                for s in todo:
                    if s.student not in done:
                        summary.not_graded[s.student] = "the run stopped before grading it (see above)"
            progress.close()
        # (leaving the writer wrote the last batch: recorded before the summary counts it)
    finally:
        if warm_pool is None:
            # A complete run only asks its workers to stop here: they close their sandboxes (0.6 s on 2
            # cores) while the export and the feedback run, and are waited for after those. A failed
            # one (or its set-up) waits for them now.
            stop_workers(pool, wait=sys.exc_info()[0] is not None)
        if grading:
            summary.unfit_workers = dict(grading.unfit)
        stack.close()  # the cluster: the plugin off the workers, the client (and a local cluster) closed
        if grading:
            summary.retried = grading.retried
    if timings is not None and todo:
        timing_record.compact(timings)
    elapsed = time.monotonic() - start
    # Graded before: the regraded ones, and (not graded now) those whose older result still stands.
    summary.regraded = [s for s in summary.graded if s in finished]
    summary.stale = {s for s in summary.not_graded if s in finished}

    # What results.json holds now: the earlier runs' results, and over them what this run wrote (each
    # checked once, when the writer took it; not read back and checked again).
    results = {**finished, **writer.written}
    write_last_run(settings, summary)
    keep_part_seconds(part_seconds_path(settings), part_seconds)
    if summary.stopped and not options.quiet:
        print(f"\n{summary.stopped}", file=sys.stderr)
    if results:
        try:
            # (Split over processes by the pages this run changed: a late hand-in's run renders one.)
            grades, feedback = course_gradebook.export_and_feedback(settings, students=sorted(results),
                                                                    processes=default_workers(),
                                                                    changed=len(writer.written) - len(summary.unchanged))
        except course_config.CourseError as exc:
            summary.stopped = summary.stopped or f"the export or the feedback failed: {exc}"
            grades = feedback = None
    if warm_pool is None:
        stop_workers(pool)  # (asked to stop above: gone by now, most likely)
    if not options.quiet:
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


def group_copies(todo: list, digests: dict[str, str]) -> tuple[list, dict[str, list]]:
    """The first submission of each digest, in ``todo``'s order, and for each of them (by student) the
    later submissions with the same files: those are not graded again, they get its result."""
    first: dict[str, object] = {}
    copies: dict[str, list] = {}
    for s in todo:
        digest = digests[s.student]
        if digest in first:
            copies.setdefault(first[digest].student, []).append(s)
        else:
            first[digest] = s
    return list(first.values()), copies


def as_copy(result: dict, student: str) -> dict:
    """``result`` (a results dict) for ``student``, who handed in the same files."""
    copy = json.loads(json.dumps(result))
    copy["student"] = student
    return copy


def _start_cluster(stack: contextlib.ExitStack, settings: CourseSettings, options: RunOptions):
    """Connect to the Dask cluster (SchedulerUnreachable, exit 2, before anything changed), put the
    grader plugin on its workers (they warm up while the gradebook is set up), and make this host's
    quiet room this process's timing gate (it records between timings, as the local runner does).
    Without Dask's distributed (the cluster extra), a UsageError that says how to install it."""
    from bertlab_grader.cluster.dispatch import ClusterGrading

    try:
        client = stack.enter_context(dask_client(options.scheduler, options.cluster))
        grading = ClusterGrading(client, settings.assignment, list(settings.hidden_paths), settings.unsafe_no_sandbox,
                                 options.quiet)
        stack.callback(grading.close)
        grading.start()
        gate = HostGate()
        timing_gate.install(gate, timing_gate.NO_ONE)
        stack.callback(lambda: (timing_gate.install(None, timing_gate.NO_ONE), gate.close()))
    except BaseException:
        stack.close()
        raise
    return grading


def record_result(writer, result: dict, digest: str, summary: RunSummary, submission=None) -> None:
    """Record one result with the digest of the files it graded (and the hand-in's notes: its
    manifest) through the run's writer (grader/bertlab_grader/course/journal.py: journaled now, written into the
    gradebook with its batch, when it is counted as graded); a result that cannot be recorded is the
    grader's failure, not the student's."""
    result = {**result, "submission_digest": digest}
    notes = handin_notes(submission.path) if submission is not None and submission.error is None else []
    if notes:
        result["notes"] = notes

    def failed(student: str, cause: str) -> None:
        summary.not_graded[student] = cause

    # The graded notebook shows the files as this run read and graded them (Submission.sources), not
    # what the folder holds by the time the batch is written.
    shown = submission.sources() if submission is not None and submission.error is None else None
    try:
        writer.record(result, on_recorded=summary.graded.append, on_failed=failed, sources=shown)
        if submission is not None:
            submission.forget_sources()  # (the writer's entry holds them now)
    except Exception as exc:  # noqa: BLE001 - an invalid result, or the disk: never the student's
        summary.not_graded[result["student"]] = f"the result could not be recorded: {type(exc).__name__}: {exc}"


def _resync_failed(student: str, cause: str) -> None:
    print(f"{student}: their unchanged result could not be synced into the gradebook ({cause}); "
          "it stands in results.json, and the next run tries again.", file=sys.stderr)


def _progress(total: int, quiet: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc="grading", unit="submission", disable=quiet or total == 0,
                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed} elapsed, {remaining} left]", file=sys.stderr)
