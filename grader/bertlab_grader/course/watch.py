"""`bertlab grade COURSE --watch`: grade each hand-in seconds after it arrives, with warm workers.

A batch run (runner.py) pays for its workers' start-up and preflight (torch, MiniLM, the reference
graded in each sandbox: tens of seconds) every time. The watcher pays for it once: it starts one pool
of warm workers, grades what is pending with it as a batch run does, then keeps it and looks at `submitted/`
every ``POLL_S``. A submission folder whose files are new or changed (its digest differs from the
one its results.json records) is graded as soon as it has stopped changing for ``SETTLE_S`` (a
folder still being copied, by `nbgrader collect` or by hand, is never graded half-copied), and
recorded as a batch run records it: journaled, then the gradebook, the graded notebook and
results.json, then the grades export and that student's feedback.

Ctrl-C stops it cleanly: what was recorded stays recorded; a submission being graded at that moment
has no results.json yet, so the next run (or watch) grades it again. Nothing is half-recorded (the
journal, journal.py, makes each result all or nothing).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from bertlab_grader.core.failures import RunStopped
from bertlab_grader.course import gradebook as course_gradebook, journal
from bertlab_grader.course import results as course_results, submissions as course_submissions
from bertlab_grader.course.schedule import keep_part_seconds, part_seconds_path, read_part_seconds
from bertlab_grader.course.config import CourseError
from bertlab_grader.course.preconditions import check_course_for_grading
from bertlab_grader.course.pool import (check_sandbox, pool_results, default_workers, start_fork_server,
                                         start_workers, stop_workers, wait_until_ready)
from bertlab_grader.course.runner import RunOptions, record_result, run_course
from bertlab_grader.course.settings import CourseSettings
from bertlab_grader.course.summary import RunSummary
from bertlab_grader.performance import gate as timing_gate, record as timing_record

#: How often `submitted/` is looked at (seconds): a listing and a stat per file, cheap next to grading.
POLL_S = 0.5
#: How long a submission folder must stay unchanged (names, sizes, modification times) before it is
#: graded: a copy in progress keeps changing it.
SETTLE_S = 1.0


def folder_state(path: Path) -> tuple:
    """What a submission folder (or zip) looks like from outside: (relative name, size, mtime_ns) of
    every file under it, sorted. A copy still running changes it; reading it opens no file."""
    path = Path(path)
    if path.is_file():
        stat = path.stat()
        return ((path.name, stat.st_size, stat.st_mtime_ns),)
    entries = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            full = Path(root) / name
            try:
                stat = full.stat()
            except OSError:  # removed while we looked: the folder is changing
                continue
            entries.append((str(full.relative_to(path)), stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(entries))


def hand_ins(course: Path) -> dict[str, Path]:
    """student -> their folder under `submitted/`. The whole folder is watched, whatever layout it holds
    (an assignment folder, a zip): scan_submitted decides what in it is a submission, once it settles."""
    submitted = Path(course) / "submitted"
    if not submitted.is_dir():
        return {}
    return {p.name: p for p in sorted(submitted.iterdir()) if p.is_dir() and not p.name.startswith(".")}


@dataclass
class Arrivals:
    """What the watcher knows about each hand-in: how it looked at the last look, since when it has
    looked that way, and when it was first seen changed (its arrival, for the seconds it waited)."""

    state: dict[str, tuple] = field(default_factory=dict)
    steady_since: dict[str, float] = field(default_factory=dict)
    arrived: dict[str, float] = field(default_factory=dict)

    def look(self, found: dict[str, Path], now: float) -> None:
        for student, path in found.items():
            state = folder_state(path)
            if self.state.get(student) != state:
                self.state[student] = state
                self.steady_since[student] = now
                self.arrived.setdefault(student, now)

    def settled(self, student: str, now: float, settle_s: float) -> bool:
        return now - self.steady_since.get(student, now) >= settle_s


def watch_course(settings: CourseSettings, options: RunOptions = RunOptions(), *, poll_s: float = POLL_S,
                 settle_s: float = SETTLE_S, should_stop: Callable[[], bool] = lambda: False,
                 on_graded: Optional[Callable[[str, dict, float], None]] = None, out=None) -> int:
    """Grade what is pending (a batch run), then every hand-in that arrives or changes, until Ctrl-C
    (or ``should_stop()``). ``on_graded(student, result, seconds since arrival)`` is called after each
    result and its feedback are written. Returns the exit code of the batch run, or 1 when a later
    hand-in could not be graded because of the grader."""
    out = out or sys.stderr
    course, assignment = settings.root, settings.assignment
    check_course_for_grading(settings, empty_ok=True)  # before any worker starts (the batch run checks again)
    check_sandbox(settings)
    start_fork_server()
    # One pool, started once: it grades what is pending (the batch run below) and then every hand-in.
    workers = max(1, options.workers or default_workers())
    timings = timing_record.record_path(course, assignment) if options.keep_timings else None
    if options.retime:
        timing_record.set_aside(course, assignment)
    pool = start_workers(workers, settings, timings)
    try:
        first = run_course(settings, dataclasses.replace(options, empty_ok=True, retime=False), warm_pool=pool)
    except BaseException:
        stop_workers(pool)
        raise
    exit_code = first.exit_code
    arrivals = Arrivals()
    graded_digest = {student: result.get("submission_digest")
                     for student, result in course_results.load_results(settings).items()}
    # Every folder counts as arrived at the first look: one that came in after the batch run scanned
    # (while the workers started) is graded; the others are skipped below, their digest unchanged.
    arrivals.look(hand_ins(course), time.monotonic())
    try:
        if first.stopped:  # (it said why): a preflight that failed, a worker that could not start
            raise RunStopped("the batch run before the watch stopped (see above)")
        # With nothing pending, the batch run never waited for the workers: wait for them here, so that
        # "Watching" means what it says: a hand-in that arrives from now on meets warm workers.
        wait_until_ready(pool)
        print(f"\nWatching {course}/submitted/ for new or changed hand-ins of {assignment} (Ctrl-C stops; a "
              f"hand-in is graded once its folder has not changed for {settle_s:g} s).", file=out, flush=True)
        with course_gradebook.keep_gradebook_open(settings), \
                journal.ResultWriter(settings, between_timings=timing_gate.working) as writer:
            while not should_stop():
                time.sleep(poll_s)
                now = time.monotonic()
                arrivals.look(hand_ins(course), now)
                ready = [s for s in arrivals.arrived if arrivals.settled(s, now, settle_s)]
                if not ready:
                    continue
                exit_code = max(exit_code, _grade_arrivals(settings, ready, arrivals, graded_digest, writer,
                                                           pool, on_graded, out))
    except KeyboardInterrupt:
        print("\nStopped watching. Everything graded so far is recorded; a hand-in that was being graded is "
              "graded again by the next `bertlab grade`.", file=out, flush=True)
    except RunStopped as exc:
        print(f"\nStopped watching: {exc}", file=out, flush=True)
        exit_code = 1
    finally:
        stop_workers(pool)
    return exit_code


def _grade_arrivals(settings: CourseSettings, students: list[str], arrivals: Arrivals, graded_digest: dict,
                    writer, pool, on_graded, out) -> int:
    """Grade the settled hand-ins of ``students`` whose files differ from what was last graded; record
    each, then export the grades and write its feedback. Returns 1 if the grader failed one, else 0."""
    assignment = settings.assignment
    submissions, _ = course_submissions.scan_submitted(settings)
    by_student = {s.student: s for s in submissions}
    todo, digests = [], {}
    for student in students:
        arrived = arrivals.arrived.pop(student)
        submission = by_student.get(student)
        if submission is None:  # gone again, or not in the expected layout: the batch summary says which
            continue
        digests[student] = course_submissions.submission_digest(submission)
        if digests[student] != graded_digest.get(student):
            todo.append((submission, arrived))
    failed = 0
    summary = RunSummary(layout=[])
    max_points = None
    seconds_path = part_seconds_path(settings)
    part_seconds = read_part_seconds(seconds_path)  # (course/schedule.py: a hand-in's parts, longest first)
    for submission, arrived in todo:
        if submission.error:  # refused as a whole (e.g. a zip bomb): the student's own zero, as in a batch run
            from bertlab_grader.grading.kept_points import kept_max_points

            max_points = max_points or kept_max_points()
            result = course_results.error_result(submission.student, assignment, submission.error, max_points)
            outcomes = [(submission, result, None)]
        else:
            outcomes = pool_results([submission], pool, keep_workers=True, part_seconds=part_seconds)
        for graded, result, failure in outcomes:
            if result is None:
                failed = 1
                print(f"{graded.student}: not graded because of the grader ({failure}); the next run tries again.",
                      file=out, flush=True)
                continue
            record_result(writer, result, digests[graded.student], summary, graded)
            writer.flush()  # results.json now, not with a later batch
            if graded.student in summary.not_graded:
                failed = 1
                print(f"{graded.student}: {summary.not_graded[graded.student]}", file=out, flush=True)
                continue
            graded_digest[graded.student] = digests[graded.student]
            try:
                course_gradebook.export_and_feedback(settings, feedback_of=graded.student)
            except CourseError as exc:
                print(f"{graded.student}: graded and recorded, but the export or the feedback failed: {exc}",
                      file=out, flush=True)
            waited = time.monotonic() - arrived
            print(f"{graded.student}: {result['score']:g} / {result['max_score']:g} points, recorded "
                  f"{waited:.1f} s after the hand-in arrived", file=out, flush=True)
            if on_graded is not None:
                on_graded(graded.student, result, waited)
    keep_part_seconds(seconds_path, part_seconds)
    return failed
