"""A submission is read once per run (grader/bertlab_grader/course/submissions.py, ``Submission.sources``):
the bytes whose digest results.json records are the bytes the worker grades and the code the graded
notebook shows. Each test changes a student's file on disk after the run has read it, as a late
`nbgrader collect` or a resubmission copied in mid-run would, and finds the first version everywhere,
never a mix; the next run sees the change and grades the new version.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

from bertlab.tasks import EXERCISE_FILES
from bertlab_grader.core.digest import sources_digest
from bertlab_grader.course import gradebook, journal, pool, runner
from bertlab_grader.course.config import init_course
from bertlab_grader.course.results import error_result
from bertlab_grader.course.schedule import Job
from bertlab_grader.course.settings import CourseSettings
from bertlab_grader.course.submissions import Submission, submission_digest
from bertlab_grader.grading.scoring import max_points_by_task

KIT_ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENT = "week7"
STUBS = {name: (KIT_ROOT / "exercises" / name).read_text() for name in EXERCISE_FILES}
FIRST = {**STUBS, "cka.py": STUBS["cka.py"] + "\n# the version handed in first\n"}
LATER = {**STUBS, "cka.py": STUBS["cka.py"] + "\n# the version copied in during the run\n"}


def _hand_in(course: Path, student: str, files: dict[str, str]) -> Path:
    folder = course / "submitted" / student / ASSIGNMENT
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def _graded_notebook_text(course: Path, student: str) -> str:
    return (course / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text()


def _digest(files: dict[str, str]) -> str:
    return "sha256:" + sources_digest(files)


def test_a_file_changed_mid_run_is_recorded_as_it_was_graded(tmp_path, monkeypatch):
    """The pool is replaced by one that copies a new version over the student's folder before it
    grades (as a late collect would); it grades what ``Submission.sources`` hands it. results.json's
    digest, the graded files and the graded notebook are all the first version; the next run grades
    the second."""
    course = tmp_path / "course"
    folder = _hand_in(course, "s1", FIRST)  # (the run sets the course's gradebook up itself)
    graded = []

    def copying_pool(todo, *args, **kwargs):
        for submission in todo:
            for name, text in LATER.items():  # the folder changes after the run read it
                (folder / name).write_text(text)
            files = dict(submission.sources())
            graded.append(files)
            result = error_result(submission.student, ASSIGNMENT, f"graded {_digest(files)}", max_points_by_task())
            yield submission, result, None

    monkeypatch.setattr(runner, "pool_results", copying_pool)
    monkeypatch.setattr(runner, "start_workers", lambda *a, **k: [])
    monkeypatch.setattr(runner, "start_fork_server", lambda: None)
    monkeypatch.setattr(runner, "check_sandbox", lambda settings: None)
    monkeypatch.setattr(gradebook, "export_and_feedback", lambda *a, **k: (None, None))
    settings = CourseSettings(course, ASSIGNMENT)

    summary = runner.run_course(settings, runner.RunOptions(quiet=True))
    assert summary.graded == ["s1"], summary.format()
    assert graded == [FIRST], "the worker was given files other than those the run read and hashed"
    result = json.loads((course / "autograded/s1/week7/results.json").read_text())
    assert result["submission_digest"] == _digest(FIRST), \
        "results.json records a digest of files other than those graded"
    assert _digest(FIRST) in result["tests"][0]["message"]
    shown = _graded_notebook_text(course, "s1")
    assert "the version handed in first" in shown and "copied in during the run" not in shown, \
        "the graded notebook shows files other than those graded"

    graded.clear()
    summary = runner.run_course(settings, runner.RunOptions(quiet=True))
    assert summary.graded == ["s1"] and summary.unchanged == [], "the changed folder was not graded again"
    assert graded[0] == LATER
    assert json.loads((course / "autograded/s1/week7/results.json").read_text())["submission_digest"] == _digest(LATER)


def test_a_worker_is_sent_the_files_read_not_the_folder(tmp_path):
    """What a grader worker receives is the text the run read (and hashed), so a change on disk
    between the scan and the worker's turn cannot reach it."""
    folder = _hand_in(tmp_path / "course", "s1", FIRST)
    submission = Submission("s1", folder)
    digest = submission_digest(submission)
    for name, text in LATER.items():
        (folder / name).write_text(text)
    sent = []
    worker = types.SimpleNamespace(conn=types.SimpleNamespace(send=sent.append))
    pool._Worker.give(worker, Job(submission, None))
    [(student, files, part)] = sent
    assert (student, part) == ("s1", None)
    assert files == FIRST and _digest(files) == digest


def test_a_replayed_journal_shows_the_files_it_graded(tmp_path):
    """A result journaled by a run that was killed before writing it carries the files it graded; the
    next run's replay writes the graded notebook from them, not from what the folder holds by then."""
    course = tmp_path / "course"
    _hand_in(course, "s1", LATER)  # (the folder changed after the killed run graded FIRST)
    settings = CourseSettings(course, ASSIGNMENT)
    init_course(settings, max_points=max_points_by_task())
    result = error_result("s1", ASSIGNMENT, "graded", max_points_by_task())
    result["submission_digest"] = _digest(FIRST)
    left = journal.Journal(settings)
    left.append({"format": journal.FORMAT, **gradebook.prepare_record(settings, result, sources=FIRST)})
    left.close(remove=False)  # (its lock released: an orphan, as a killed run leaves it)

    assert journal.replay(settings) == ["s1"]
    shown = _graded_notebook_text(course, "s1")
    assert "the version handed in first" in shown and "copied in during the run" not in shown
