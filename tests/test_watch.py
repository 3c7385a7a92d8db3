"""`bertlab grade COURSE --watch`, run for real as a command (sandbox, nbgrader gradebook), stopped with
Ctrl-C (SIGINT), as an instructor would.

A hand-in copied in slowly, file by file, is graded once, whole; a resubmission is graded again;
each gets its results.json, its gradebook row and its feedback, as a batch run writes them; Ctrl-C
stops the watcher with exit status 0 and nothing half-recorded. Stub submissions keep it fast (every
hidden test fails at once). Minutes of wall time: marked slow.
"""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertlab.tasks import EXERCISE_FILES

pytestmark = pytest.mark.slow

KIT_ROOT = Path(__file__).resolve().parents[1]
STUBS = {name: (KIT_ROOT / "exercises" / name).read_text() for name in EXERCISE_FILES}


def wait_for(condition, seconds: float, what: str, proc: subprocess.Popen, log: Path):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    pytest.fail(f"{what} did not happen within {seconds:g} s; the watcher said:\n{log.read_text()[-3000:]}")


def results_of(course: Path, student: str) -> dict | None:
    path = course / "autograded" / student / "week7" / "results.json"
    return json.loads(path.read_text()) if path.is_file() else None


def test_watch_grades_each_hand_in_once_it_settles_and_stops_cleanly_on_ctrl_c(tmp_path):
    from bertlab_grader.course.submissions import scan_submitted, submission_digest

    from bertlab_grader.course import journal
    from bertlab_grader.course.settings import CourseSettings

    course, log = tmp_path / "course", tmp_path / "watch.log"
    (course / "submitted").mkdir(parents=True)
    (course / "source" / "week7").mkdir(parents=True)  # an nbgrader course that released week7, no hand-in yet
    with open(log, "w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "bertlab.cli", "grade", str(course), "--watch", "--workers", "1"],
                                cwd=KIT_ROOT, stdout=sink, stderr=subprocess.STDOUT, text=True)
    said = lambda text: text in log.read_text()  # noqa: E731
    try:
        # The watch begins after the batch run (nothing to grade here).
        wait_for(lambda: said("Watching"), 300, "the batch run before the watch", proc, log)
        folder = course / "submitted" / "zoe" / "week7"
        folder.mkdir(parents=True)
        for name, text in STUBS.items():  # a slow copy: a file every 0.4 s, under the 1 s the folder must settle
            (folder / name).write_text(f"{text}\n# zoe, first hand-in\n")
            time.sleep(0.4)
        wait_for(lambda: results_of(course, "zoe") is not None, 300, "zoe's results.json", proc, log)
        first = results_of(course, "zoe")
        zoe = [s for s in scan_submitted(CourseSettings(course, "week7"))[0] if s.student == "zoe"][0]
        assert first["submission_digest"] == submission_digest(zoe), "graded before the copy had finished"
        assert {t["task"] for t in first["tests"]} >= {"cka", "pooling"}
        wait_for(lambda: (course / "feedback" / "zoe" / "week7" / "week7.html").is_file(), 120, "zoe's feedback",
                 proc, log)

        (folder / "cka.py").write_text(f"{STUBS['cka.py']}\n# zoe, second hand-in\n")  # a resubmission
        wait_for(lambda: (results_of(course, "zoe") or {}).get("submission_digest") != first["submission_digest"],
                 300, "zoe's resubmission graded", proc, log)
        wait_for(lambda: said("zoe: 0 / ") and log.read_text().count("zoe: 0 / ") == 2, 120,
                 "the second grading's line", proc, log)
        with open(course / "grades.csv", newline="") as handle:
            rows = [row for row in csv.DictReader(handle) if row["assignment"] == "week7"]
        assert [row["student_id"] for row in rows] == ["zoe"]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # Ctrl-C
    proc.wait(timeout=120)
    out = log.read_text()
    assert proc.returncode == 0, out[-3000:]
    assert "Stopped watching" in out and "Traceback" not in out, out[-3000:]
    assert not journal.journal_paths(CourseSettings(course, "week7")), "a journal left behind: something half-recorded"


def test_the_watcher_grades_what_is_pending_with_the_workers_it_then_keeps(tmp_path, monkeypatch):
    """One pool for the batch run and the watch: the workers' start-up and preflight (tens of seconds)
    are paid once. The pool the watcher starts is the one the batch run grades with, and the batch run
    neither starts nor stops workers of its own."""
    from bertlab_grader.course import pool as course_pool, runner, watch
    from bertlab_grader.course.settings import CourseSettings

    course = tmp_path / "course"
    (course / "source" / "week7").mkdir(parents=True)
    folder = course / "submitted" / "ann" / "week7"
    folder.mkdir(parents=True)
    for name, text in STUBS.items():
        (folder / name).write_text(text)
    started, used, stopped = [], [], []
    warm = ["a warm worker"]

    def start_workers(n, settings, timings=None):
        started.append(n)
        return warm

    def pool_results(submissions, pool, keep_workers=False, part_seconds=None):
        used.append((pool, keep_workers))
        for submission in submissions:  # a grader failure: nothing is recorded, nothing else is needed
            yield submission, None, "not graded in this test"

    def refuse(*args, **kwargs):
        raise AssertionError("the batch run started or stopped workers of its own")

    monkeypatch.setattr(watch, "start_workers", start_workers)
    monkeypatch.setattr(watch, "start_fork_server", lambda: None)
    waited = []
    log = tmp_path / "watch.log"
    monkeypatch.setattr(watch, "wait_until_ready",
                        lambda pool: waited.append((pool, "Watching" in (log.read_text() if log.exists() else ""))))
    monkeypatch.setattr(watch, "stop_workers", lambda pool: stopped.append(pool))
    monkeypatch.setattr(runner, "start_workers", refuse)
    monkeypatch.setattr(runner, "stop_workers", refuse)
    monkeypatch.setattr(runner, "pool_results", pool_results)
    code = watch.watch_course(CourseSettings(course, "week7"), runner.RunOptions(quiet=True, workers=2),
                              should_stop=lambda: True, out=open(log, "w"))
    assert started == [2], f"the watcher started workers {len(started)} time(s): {started}"
    assert used == [(warm, True)], f"the batch run graded with {used}, not the watcher's warm pool (kept)"
    assert waited == [(warm, False)], "the watcher did not wait for its workers before it said it was watching"
    assert "Watching" in log.read_text()
    assert stopped == [warm], "the watcher did not stop its pool when it stopped"
    assert code == 1, "a submission the grader could not grade makes the exit status 1"
