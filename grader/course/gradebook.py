"""nbgrader's gradebook and commands: recording a result (gradebook, autograded notebook), and
``nbgrader export`` / ``generate_feedback`` for the course.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path

from bertlab.fileio import atomic_write_text
from bertlab_grader.course.adjustments import (SET_ASIDE, Adjustment, apply_rule, files_changed, previous_digest,
                                               remember_set_aside)
from bertlab_grader.course.feedback import build_graded_notebook

from bertlab_grader.course.config import (
    CourseError, NbgraderCommandError, _check_name, _course_lock, _normalise_db_url, _ordered_tasks,
    course_db_url, ensure_python_on_path, nbgrader_environment)
from bertlab_grader.course.results import autograded_dir, validate_result, write_results_json
from bertlab_grader.course.submissions import submitted_sources
from bertlab_grader.core.points import POINTS_EPSILON

log = logging.getLogger(__name__)


def _submission_timestamp(course_dir: Path, student: str, assignment: str):
    """The submission time nbgrader's collect step wrote, if any."""
    from nbgrader.utils import parse_utc

    path = course_dir / "submitted" / student / assignment / "timestamp.txt"
    try:
        text = path.read_text(encoding="utf-8").strip()
        return (parse_utc(text), text) if text else (None, None)
    except (OSError, ValueError):
        return None, None


_OPEN_GRADEBOOKS: dict[str, object] = {}  # db_url -> nbgrader Gradebook kept open by keep_gradebook_open


@contextlib.contextmanager
def keep_gradebook_open(course_dir: str | os.PathLike, db_url: str | None = None):
    """Within this block, ``record_result`` on this course reuses one gradebook connection.

    Opening nbgrader's Gradebook builds a new SQLAlchemy engine, so every statement is compiled again:
    about 60 of the 75 ms a record took (measured). A cohort run records hundreds of results in a row.
    Each record still commits on its own, so a killed run loses nothing recorded.
    """
    from nbgrader.api import Gradebook

    ensure_python_on_path()
    url = course_db_url(Path(course_dir).resolve(), db_url)
    if url in _OPEN_GRADEBOOKS:
        yield
        return
    gb = Gradebook(url)
    _OPEN_GRADEBOOKS[url] = gb
    try:
        yield
    finally:
        _OPEN_GRADEBOOKS.pop(url, None)
        gb.close()


@contextlib.contextmanager
def _gradebook(db_url: str):
    """The gradebook kept open for ``db_url``, or a new one closed on exit."""
    if db_url in _OPEN_GRADEBOOKS:
        yield _OPEN_GRADEBOOKS[db_url]
        return
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gb:
        yield gb


def _record_in_gradebook(db_url: str, result: dict, timestamp, changed: bool = False):
    """Upsert student, submission, submitted notebook and one grade per task; return (task -> max points,
    what happened to the instructor's adjustments: grader/course/adjustments.py, ``changed``: the files
    differ from those of the result this one replaces)."""
    from nbgrader.api import Grade, MissingEntry, SubmittedNotebook
    from sqlalchemy.exc import SAWarning

    student, assignment = result["student"], result["assignment"]
    with _gradebook(db_url) as gb, warnings.catch_warnings():
        # nbgrader's add_submission builds rows before adding them to the session; SQLAlchemy warns
        warnings.simplefilter("ignore", SAWarning)
        try:
            notebook = gb.find_notebook(assignment, assignment)
        except MissingEntry:
            raise CourseError(f"the gradebook has no assignment {assignment!r} with notebook "
                              f"{assignment!r}: run init_course first") from None
        cells = {c.name: c for c in notebook.grade_cells}
        unknown = {t["task"] for t in result["tests"]} - cells.keys()
        if unknown:
            raise CourseError(f"result for {student} has tasks {sorted(unknown)} that {assignment!r} does not "
                              f"grade (its grade cells: {sorted(cells)})")
        scores = {name: 0.0 for name in cells}
        maxima = {name: 0.0 for name in cells}
        for t in result["tests"]:
            scores[t["task"]] += t["points"]
            maxima[t["task"]] += t["max_points"]
        for name, cell in cells.items():
            if maxima[name] and abs(maxima[name] - cell.max_score) > POINTS_EPSILON:
                log.warning("%s/%s: task %s tests are worth %g points but its grade cell is worth %g",
                            student, assignment, name, maxima[name], cell.max_score)

        gb.update_or_create_student(student)
        kwargs = {"timestamp": timestamp} if timestamp is not None else {}
        submission = gb.update_or_create_submission(assignment, student, **kwargs)
        try:
            sub_nb = gb.find_submission_notebook(assignment, assignment, student)
        except MissingEntry:  # the notebook was (re)created after this submission was first recorded
            sub_nb = SubmittedNotebook(notebook=notebook, assignment=submission)
            gb.db.add(sub_nb)
        try:
            grades = {g.cell_id: g for g in sub_nb.grades}
            by_task = {}
            for name, cell in cells.items():
                grade = grades.get(cell.id)
                if grade is None:
                    grade = Grade(cell_id=cell.id, notebook=sub_nb)
                    gb.db.add(grade)
                grade.auto_score = scores[name]
                grade.needs_manual_grade = False
                by_task[name] = grade
            # a human score already given: kept for the same files (as nbgrader's autograder), else set aside
            adjustment = apply_rule(by_task, student, changed)
            gb.db.commit()
        except Exception:
            gb.db.rollback()
            raise
        return {name: cells[name].max_score for name in _ordered_tasks(cells)}, adjustment


def record_result(course_dir: str | os.PathLike, result: Mapping, db_url: str | None = None,
                  *, timestamp: datetime.datetime | str | None = None,
                  on_adjustment: Callable[[Adjustment], None] | None = None,
                  sources: Mapping[str, str] | None = None) -> Path:
    """Record one graded submission (idempotent: recording a student again replaces the earlier result).

    Upserts the student, the SubmittedAssignment / SubmittedNotebook and one auto-scored grade per task
    (the sum of that task's test points) in the gradebook; writes the graded notebook
    ``autograded/<student>/<assignment>/<assignment>.ipynb`` that ``nbgrader generate_feedback`` renders,
    copies nbgrader's ``timestamp.txt`` / ``submission_secret.txt`` from the submitted folder when the
    collect step wrote them, and writes ``results.json`` last. ``timestamp`` overrides the submission time
    (else the submitted ``timestamp.txt`` is used). Returns the autograded folder.

    The graded notebook shows the student's files beside their results: ``sources`` (a
    ``SubmissionSources``) when given, else what the course holds for this student (read as text only).

    An instructor's manual score or extra credit is kept when the files are the same as those of the result
    replaced, and set aside when they changed (grader/course/adjustments.py); ``on_adjustment`` hears which.
    """
    import nbformat

    course_dir = Path(course_dir).resolve()
    result = validate_result(result)
    student, assignment = result["student"], result["assignment"]
    url = course_db_url(course_dir, db_url)
    ts_value, ts_text = _submission_timestamp(course_dir, student, assignment)
    if timestamp is not None:
        from nbgrader.utils import parse_utc
        ts_value = parse_utc(timestamp)
        ts_text = ts_value.isoformat(sep=" ")
    with _course_lock(course_dir):
        dest = autograded_dir(course_dir, student, assignment)
        before = previous_digest(dest / "results.json")
        changed = files_changed(before, result.get("submission_digest"))
        max_points, adjustment = _record_in_gradebook(url, result, ts_value, changed)
        if adjustment is not None and adjustment.action == SET_ASIDE:
            remember_set_aside(course_dir, assignment, adjustment, before, result.get("submission_digest"))
        if adjustment is not None and on_adjustment is not None:
            on_adjustment(adjustment)
        if sources is None:
            sources = submitted_sources(course_dir, student, assignment)
        nb = build_graded_notebook(assignment, max_points, result, sources)
        # nbformat.v4.writes, not nbformat.writes: the latter validates the notebook against its schema
        # (a fifth of a record's time) only to log what it finds; the kit's tests validate this notebook.
        atomic_write_text(dest / f"{assignment}.ipynb", nbformat.v4.writes(nb) + "\n")
        if ts_text:
            atomic_write_text(dest / "timestamp.txt", ts_text + "\n")
        secret = course_dir / "submitted" / student / assignment / "submission_secret.txt"
        if secret.is_file() and not secret.is_symlink():
            atomic_write_text(dest / "submission_secret.txt", secret.read_text(encoding="utf-8"))
        write_results_json(course_dir, result)
    return dest


# ---------------------------------------------------------------------------------------------------
# nbgrader commands

# `nbgrader ...` as this Python runs it, a second sooner (grader/course/nbgrader_main.py says why).
NBGRADER = [sys.executable, "-m", "bertlab_grader.course.nbgrader_main"]


def _run_nbgrader(course_dir: Path, args: list[str], timeout: float) -> subprocess.CompletedProcess:
    cmd = [*NBGRADER, *args]
    try:
        proc = subprocess.run(cmd, cwd=course_dir, capture_output=True, text=True, timeout=timeout,
                              env=nbgrader_environment())
    except subprocess.TimeoutExpired as exc:
        raise NbgraderCommandError(f"nbgrader {' '.join(args)} took longer than {timeout:g} s", -1,
                                   str(exc.stdout or ""), str(exc.stderr or "")) from None
    if proc.returncode != 0:
        raise NbgraderCommandError(
            f"nbgrader {' '.join(args)} failed (exit {proc.returncode}) in {course_dir}:\n{proc.stderr.strip()}",
            proc.returncode, proc.stdout, proc.stderr)
    return proc


def _db_args(db_url: str | None) -> list[str]:
    return [f"--CourseDirectory.db_url={_normalise_db_url(db_url)}"] if db_url else []


def export_grades(course_dir: str | os.PathLike, db_url: str | None = None, timeout: float = 600) -> Path:
    """Run ``nbgrader export`` in the course; return the path of ``grades.csv``."""
    course_dir = Path(course_dir).resolve()
    dest = course_dir / "grades.csv"
    _run_nbgrader(course_dir, ["export", f"--to={dest}", *_db_args(db_url)], timeout)
    if not dest.is_file():
        raise CourseError(f"nbgrader export finished but wrote no {dest}")
    return dest


def generate_feedback(course_dir: str | os.PathLike, assignment: str = "week7", db_url: str | None = None,
                      student: str | None = None, timeout: float = 600) -> Path:
    """Run ``nbgrader generate_feedback ASSIGNMENT --force`` in the course (optionally for one student);
    return the ``feedback`` folder (``feedback/<student>/<assignment>/<assignment>.html``)."""
    course_dir = Path(course_dir).resolve()
    _check_name("assignment", assignment)
    args = ["generate_feedback", assignment, "--force", *_db_args(db_url)]
    if student is not None:
        args.append(f"--student={_check_name('student', student)}")
    _run_nbgrader(course_dir, args, timeout)
    return course_dir / "feedback"


def export_and_feedback(course_dir: str | os.PathLike, assignment: str = "week7", db_url: str | None = None,
                        students: list[str] | None = None, processes: int = 1,
                        timeout: float = 600) -> tuple[Path, Path]:
    """``nbgrader export`` and ``nbgrader generate_feedback``, run side by side; the feedback split over
    ``processes`` nbgrader processes, each excluding the other parts' ``students``
    (``--CourseDirectory.student_id_exclude``). Returns (grades.csv, feedback folder).

    Both commands only read the gradebook, so they may run at once. Each nbgrader process pays about
    2 s of start-up, and rendering one student's feedback costs about 0.1 s: splitting pays from a few
    dozen students on (measured: 100 students, 11.2 s for one process).
    """
    course_dir = Path(course_dir).resolve()
    _check_name("assignment", assignment)
    for student in students or ():
        _check_name("student", student)
    dest = course_dir / "grades.csv"
    commands = [["export", f"--to={dest}", *_db_args(db_url)]]
    students = sorted(students or ())
    parts = max(1, min(processes, len(students) // 25))
    if any("," in s for s in students):  # the exclude list is comma-separated: do not split then
        parts = 1
    for k in range(parts):
        args = ["generate_feedback", assignment, "--force", *_db_args(db_url)]
        if parts > 1:
            others = [s for i, s in enumerate(students) if i % parts != k]
            args.append(f"--CourseDirectory.student_id_exclude={','.join(others)}")
        commands.append(args)
    env = nbgrader_environment()
    procs = [(args, subprocess.Popen([*NBGRADER, *args], cwd=course_dir, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
             for args in commands]
    failures = []
    deadline = time.monotonic() + timeout
    for args, proc in procs:
        try:
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            failures.append(NbgraderCommandError(f"nbgrader {args[0]} took longer than {timeout:g} s", -1, out, err))
            continue
        if proc.returncode != 0:
            failures.append(NbgraderCommandError(
                f"nbgrader {' '.join(args[:2])} failed (exit {proc.returncode}) in {course_dir}:\n{err.strip()}",
                proc.returncode, out, err))
    if failures:
        raise failures[0]
    if not dest.is_file():
        raise CourseError(f"nbgrader export finished but wrote no {dest}")
    return dest, course_dir / "feedback"
