"""Cohort grading: `bertlab grade COURSE` and `bertlab grade-one DIR`.

Processes (DESIGN.md decisions 3 and 4):

    main process        the course, the gradebook, the progress bar; never runs or imports student code
      fork server       trusted: loads torch, MiniLM and the reference data once (grader/worker_preload.py)
      N grader workers  trusted, forked from the fork server: run the hidden pytest suites, score,
                        build results dicts
        1 sandbox each  untrusted: a warm template (torch + MiniLM loaded once) that forks a fresh,
                        rlimited, bubblewrapped child per submission; values cross as data, never pickles

Nothing is lost: each finished submission is recorded (gradebook, autograded notebook, results.json
written last, atomically) before the next result is taken, so `bertlab grade` can be killed at any
moment (kill -9 included) and rerun: students with a results.json are not graded again, and their
results are re-synced into the gradebook (an idempotent upsert), so none is lost or counted twice.
A submission that crashes, hangs or attacks costs its own points; a grader worker that dies or
overruns is replaced and its student gets an error result after one retry.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
import threading
import time
from multiprocessing.connection import wait
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parent.parent
TASK_ORDER = ("cka", "pooling", "siamese", "retrieval", "performance")
SUBMISSION_DEADLINE_S = float(os.environ.get("BERTLAB_SUBMISSION_DEADLINE_S", 600))  # whole suite, one student
SANDBOX_UID_BASE = 61000  # worker k's sandbox runs as uid 61000 + k (when the grader runs as root)
MAX_ATTEMPTS = 2  # a submission whose grader worker dies is retried once, then scored as an error


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


# ---------------------------------------------------------------------------------------------------
# Grading one submission (runs inside a trusted grader worker)


def grade_sources(sandbox, sources: dict, student: str, assignment: str) -> dict:
    """Run the hidden suites on one submission's sources through ``sandbox``; the results dict."""
    from grader.scoring import run_hidden_suite

    with sandbox.session(dict(sources)) as impl:
        return run_hidden_suite(impl, student=student, assignment=assignment)


def _worker_main(conn, hide: list[str], assignment: str, slot: int) -> None:
    """A trusted grader worker: one warm sandbox, submissions in, results dicts out.

    Each worker's sandbox runs under its own unprivileged uid, because RLIMIT_NPROC counts processes
    per uid: with a shared uid, one student's fork bomb would starve the other workers' students.
    """
    from grader.course import read_submission_sources
    from grader.sandbox import Sandbox
    from grader.scoring import warm_up

    import torch

    torch.set_num_threads(1)  # one core per worker: N workers share the machine without oversubscribing
    sandbox = Sandbox(kit_root=KIT_ROOT, hide=hide, uid=SANDBOX_UID_BASE + slot)
    warm_up()  # already done in the fork server (grader/worker_preload.py); with spawn, done here
    conn.send(("ready", None))
    try:
        while True:
            job = conn.recv()
            if job is None:
                break
            student, path = job
            try:
                result = grade_sources(sandbox, read_submission_sources(path), student, assignment)
                conn.send(("result", result))
            except Exception as exc:  # a grader bug must not take the run down: report it as this student's error
                conn.send(("failed", f"{type(exc).__name__}: {exc}"))
    finally:
        sandbox.close()


class _Worker:
    """Main-process handle of one grader worker process."""

    def __init__(self, ctx, hide, assignment, slot):
        self.slot = slot
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, hide, assignment, slot), daemon=True)
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


def _context():
    """Grader workers are forked from a fork server that imported ``grader.worker_preload`` (torch,
    MiniLM, the reference data: about 6 s of CPU) once, instead of each worker paying for it on a
    shared core. The fork server is a fresh interpreter, not a copy of this process, and nothing in it
    has started a thread pool (see grader/worker_preload.py). Set BERTLAB_WORKER_START=spawn to give
    each worker a fresh interpreter of its own instead."""
    if os.environ.get("BERTLAB_WORKER_START", "forkserver") == "spawn" or "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["grader.worker_preload"])
    return ctx


def start_workers(n: int, hide: list[str], assignment: str) -> list[_Worker]:
    """Start ``n`` grader workers now; they warm up (seconds) while the caller prepares the course."""
    ctx = _context()
    return [_Worker(ctx, hide, assignment, slot) for slot in range(n)]


def _pool_results(submissions, pool: list[_Worker], hide: list[str], assignment: str):
    """Yield (submission, result_or_None, error_message) as the grader workers of ``pool`` finish
    them; a worker that dies is replaced. The workers are stopped at the end."""
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
                        if kind == "ready":
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
                        why = (f"grading took longer than {SUBMISSION_DEADLINE_S:g} s" if overdue
                               else "the grader worker stopped unexpectedly")
                        if attempt < MAX_ATTEMPTS and not overdue:
                            queue.insert(0, (submission, attempt + 1))
                        else:
                            yield submission, None, why
                    w.kill()
                    pool[i] = _Worker(ctx, hide, assignment, w.slot)
    finally:
        stop_workers(pool)


def stop_workers(pool: list[_Worker]) -> None:
    """Ask every worker to finish (its sandbox closes), then make sure each is gone."""
    for w in pool:
        w.stop()
    for w in pool:
        w.process.join(10)
        w.kill()


# ---------------------------------------------------------------------------------------------------
# The course


def _hidden_paths(course: Path, db_url: str | None) -> list[str]:
    """What the sandbox must not see besides the kit: the course (all students) and the gradebook."""
    hide = [str(course)]
    from grader.course import course_db_url

    url = course_db_url(course, db_url)
    if url.startswith("sqlite:///"):
        hide.append(str(Path(url.removeprefix("sqlite:///")).resolve().parent))
    return sorted(set(hide))


def grade_course(course: Path, assignment: str = "week7", workers: int | None = None,
                 db_url: str | None = None, quiet: bool = False) -> int:
    """Grade every submission of ``assignment`` not graded yet; record, export, feedback. Exit code."""
    from grader import course as nbcourse
    from grader.scoring import max_points_by_task

    course = Path(course).resolve()
    if not (course / "submitted").is_dir():
        print(f"bertlab grade: {course} has no submitted/ folder. Put each student's files in "
              f"{course}/submitted/<student>/{assignment}/ (or run `bertlab demo` to see a course).", file=sys.stderr)
        return 2
    start = time.monotonic()
    finished = nbcourse.load_results(course, assignment)
    submissions = nbcourse.list_submissions(course, assignment)
    todo, refused = [], []
    for s in submissions:
        if s.student in finished:
            continue
        (refused if getattr(s, "error", None) else todo).append(s)
    workers = min(workers or default_workers(), len(todo))
    hide = _hidden_paths(course, db_url)
    # The gradebook set-up (several seconds of nbgrader) runs in a thread while the workers start: the
    # first start waits for the fork server's warm-up (torch, MiniLM, reference data), and each
    # worker's sandbox then warms up on its own.
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
        pool = start_workers(workers, hide, assignment) if todo else []
        preparing.join()
        if "error" in prepared:
            raise prepared["error"]
        max_points = prepared["max_points"]
        with nbcourse.keep_gradebook_open(course, db_url):
            for result in finished.values():  # a run killed between the gradebook and results.json: re-sync
                nbcourse.record_result(course, result, db_url)
            for s in refused:  # e.g. a zip bomb: the student's own error, never the cohort's
                nbcourse.record_result(course, nbcourse.error_result(s.student, assignment, s.error, max_points),
                                       db_url)

            if not quiet:
                print(f"Grading {len(todo)} submission(s) of {assignment} in {course} with {workers} worker(s); "
                      f"{len(finished)} already graded.", file=sys.stderr)
            progress = _progress(len(todo), quiet)
            for submission, result, error in _pool_results(todo, pool, hide, assignment):
                if result is None:
                    result = nbcourse.error_result(submission.student, assignment,
                                                   f"Your submission could not be graded: {error}", max_points)
                nbcourse.record_result(course, result, db_url)
                progress.update(1)
            progress.close()
    finally:
        stop_workers(pool)  # (already stopped after a complete run; this covers a failed set-up)
    elapsed = time.monotonic() - start

    results = nbcourse.load_results(course, assignment)
    grades, feedback = nbcourse.export_and_feedback(course, assignment, db_url, students=sorted(results),
                                                    processes=default_workers())
    if not quiet:
        print(format_gradebook(results))
        if todo:
            print(f"\nGraded {len(todo)} submission(s) in {elapsed:.1f} s, worker start-up included "
                  f"({elapsed / len(todo):.2f} s per submission, {len(todo) / elapsed * 60:.0f} per minute); "
                  f"then the export and feedback.")
        print(f"Gradebook export: {grades}")
        print(f"Feedback: {feedback}/<student>/{assignment}/{assignment}.html")
        print(f"Results: {course}/autograded/<student>/{assignment}/results.json")
    return 0


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
    header = f"{'student':<16}" + "".join(f"{t:>13}" for t in TASK_ORDER) + f"{'total':>15}"
    lines = [header, "-" * len(header)]
    for student in sorted(results):
        result = results[student]
        per_task = task_scores(result)
        cells = "".join(f"{'%g/%g' % per_task[t] if t in per_task else '-':>13}" for t in TASK_ORDER)
        lines.append(f"{student:<16}{cells}{'%g/%g' % (result['score'], result['max_score']):>15}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------
# One submission


def grade_one(submission: Path, student: str | None = None, assignment: str = "week7") -> dict:
    """Grade one submission directory in a fresh sandbox; the results dict."""
    from grader.course import read_submission_sources
    from grader.sandbox import Sandbox

    submission = Path(submission).resolve()
    if not submission.is_dir():
        raise NotADirectoryError(f"{submission} is not a directory holding cka.py, pooling.py, siamese.py, retrieval.py")
    student = student or submission.name
    sandbox = Sandbox(kit_root=KIT_ROOT, hide=[str(submission.parent)])
    try:
        return grade_sources(sandbox, read_submission_sources(submission), student, assignment)
    finally:
        sandbox.close()


def grade_one_command(submission: Path, as_json: bool = False, student: str | None = None) -> int:
    try:
        result = grade_one(submission, student)
    except NotADirectoryError as exc:
        print(f"bertlab grade-one: {exc}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(result, indent=1))
    else:
        print(format_gradebook({result["student"]: result}))
        for test in result["tests"]:
            if test["outcome"] != "passed":
                print(f"  [{test['outcome']}] {test['task']}/{test['name']}: {test['message']}")
    return 0
