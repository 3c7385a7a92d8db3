"""Recording a graded submission with the student's files shown beside its results.

``gradebook.record_result`` writes the gradebook, the graded notebook and results.json; the notebook is
``feedback.build_graded_notebook``'s, which shows the files set by ``feedback.showing_files`` while it
runs. :func:`record_result` here finds the submission's files in the course (or takes them from the
caller) and records within that block, so every graded notebook the course keeps carries the code that
was graded, and formgrader and the feedback show it.

Files are only read as text (``read_submission_sources``), never imported or run.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from pathlib import Path

from bertlab.tasks import EXERCISE_FILES
from bertlab_grader.course import gradebook
from bertlab_grader.course.feedback import showing_files
from bertlab_grader.course.submissions import (SubmissionSources, _sources_root, read_submission_sources,
                                               staging_dir, valid_id)


def submitted_folder(course_dir: str | os.PathLike, student: str, assignment: str) -> Path | None:
    """Where ``student``'s files of ``assignment`` are, as ``scan_submitted`` found them: the folder
    ``submitted/<student>/<assignment>/`` when it holds an exercise file, else the folder a zip was
    extracted to (never extracted here), else None."""
    course_dir = Path(course_dir)
    folder = course_dir / "submitted" / student / assignment
    if not folder.is_symlink() and folder.is_dir() and any(os.path.lexists(folder / f) for f in EXERCISE_FILES):
        return folder
    staged = staging_dir(course_dir, assignment, student)
    if not staged.is_symlink() and staged.is_dir():
        return _sources_root(staged)
    return None


def submitted_sources(course_dir: str | os.PathLike, student: str, assignment: str) -> SubmissionSources | None:
    """The text of ``student``'s handed-in files (``read_submission_sources``), or None when the course
    holds none for them (a refused zip, a result recorded without a submission)."""
    folder = submitted_folder(course_dir, student, assignment)
    if folder is None:
        return None
    return read_submission_sources(folder) or None


def record_result(course_dir: str | os.PathLike, result: Mapping, db_url: str | None = None,
                  *, timestamp: datetime.datetime | str | None = None,
                  sources: Mapping[str, str] | None = None) -> Path:
    """``gradebook.record_result``, with the student's files in the graded notebook: ``sources`` (a
    ``SubmissionSources``) when given, else what the course holds for this student. Returns the
    autograded folder."""
    student, assignment = result.get("student"), result.get("assignment")
    if sources is None and valid_id(student) and valid_id(assignment):  # (an invalid id: gradebook's error)
        sources = submitted_sources(course_dir, student, assignment)
    with showing_files(sources):
        return gradebook.record_result(course_dir, result, db_url, timestamp=timestamp)
