"""nbgrader's gradebook and commands: recording a result (gradebook, autograded notebook), and
``nbgrader export`` / ``generate_feedback`` for the course.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
import gc

from bertlab.fileio import atomic_write_text
from bertlab.tasks import EXERCISE_FILES
from bertlab_grader.course.adjustments import (SET_ASIDE, Adjustment, apply_rule, files_changed, previous_digest,
                                               remember_set_aside)
from bertlab_grader.course.feedback import build_graded_notebook, notebook_stamp, stamp_of
from bertlab_grader.course.nbgrader_main import ARGS_FILE, FEEDBACK_RECORD

from bertlab_grader.core.points import POINTS_EPSILON
from bertlab_grader.course.config import (
    CourseError, NbgraderCommandError, check_name, course_lock, normalise_db_url, ordered_tasks,
    ensure_python_on_path, nbgrader_environment)
from bertlab_grader.course.results import autograded_dir, checked_result, results_json_text
from bertlab_grader.course.settings import CourseSettings
from bertlab_grader.course.submissions import submitted_sources

log = logging.getLogger(__name__)


def _submission_timestamp(submitted: Path):
    """The submission time nbgrader's collect step wrote into ``submitted`` (a student's
    ``COURSE/submitted/<student>/<assignment>/``), if any."""
    from nbgrader.utils import parse_utc

    path = submitted / "timestamp.txt"
    try:
        text = path.read_text(encoding="utf-8").strip()
        return (parse_utc(text), text) if text else (None, None)
    except (OSError, ValueError):
        return None, None


_OPEN_GRADEBOOKS: dict[str, object] = {}  # gradebook URL -> nbgrader Gradebook kept open by keep_gradebook_open


@contextlib.contextmanager
def keep_gradebook_open(settings: CourseSettings):
    """Within this block, ``record_result`` on this course reuses one gradebook connection.

    Opening nbgrader's Gradebook builds a new SQLAlchemy engine, so every statement is compiled again:
    about 60 of the 75 ms a record took (measured). A cohort run records hundreds of results in a row.
    Each record still commits on its own, so a killed run loses nothing recorded.
    """
    from nbgrader.api import Gradebook

    ensure_python_on_path()
    url = settings.gradebook_url
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
def _gradebook(url: str):
    """The gradebook kept open for ``url``, or a new one closed on exit."""
    if url in _OPEN_GRADEBOOKS:
        yield _OPEN_GRADEBOOKS[url]
        return
    from nbgrader.api import Gradebook

    with Gradebook(url) as gb:
        yield gb


def _record_in_gradebook(settings: CourseSettings, entries: list[dict], changed: list[bool],
                         before_commit: Callable[[list], None]) -> tuple[dict[str, float], list]:
    """Upsert, in one transaction, each entry's student, submission, submitted notebook and one grade
    per task (the sum of that task's test points). Returns (task -> max points, per entry: what
    happened to the instructor's adjustments (grader/bertlab_grader/course/adjustments.py), or the CourseError that
    kept that entry out: a task the assignment does not grade). ``changed[i]``: entry i's files differ
    from those of the result it replaces. ``before_commit(adjustments)`` runs once the rows are in the
    transaction and before it commits (the set-aside adjustments are written there: a crash after the
    commit must not lose them).

    Rows are built as nbgrader's ``add_submission`` builds them (a SubmittedNotebook per notebook, a
    Grade per grade cell, a Comment per solution cell, both per task cell), but with one commit per
    batch instead of three per result: the commits, each synced, were most of a record's time."""
    from nbgrader.api import Comment, Grade, MissingEntry, Student, SubmittedAssignment, SubmittedNotebook
    from nbgrader.utils import parse_utc
    from sqlalchemy.exc import SAWarning
    from sqlalchemy.orm import selectinload

    assignment = settings.assignment
    outcomes: list = [None] * len(entries)
    with _gradebook(settings.gradebook_url) as gb, warnings.catch_warnings():
        # SQLAlchemy warns about rows built before they are added to the session, as nbgrader's do
        warnings.simplefilter("ignore", SAWarning)
        db = gb.db
        try:
            try:
                notebook = gb.find_notebook(assignment, assignment)
            except MissingEntry:
                raise CourseError(f"the gradebook has no assignment {assignment!r} with notebook "
                                  f"{assignment!r}: run init_course first") from None
            cells = {c.name: c for c in notebook.grade_cells}
            ok = []
            for i, entry in enumerate(entries):
                unknown = {t["task"] for t in entry["result"]["tests"]} - cells.keys()
                if unknown:
                    outcomes[i] = CourseError(
                        f"result for {entry['result']['student']} has tasks {sorted(unknown)} that {assignment!r} "
                        f"does not grade (its grade cells: {sorted(cells)})")
                else:
                    ok.append(i)
            ids = sorted({entries[i]["result"]["student"] for i in ok})
            the_assignment = notebook.assignment
            # add_submission's mirror of the assignment, read once per batch
            layout = [(nb, [c.id for c in nb.grade_cells], [c.id for c in nb.solution_cells],
                       [c.id for c in nb.task_cells]) for nb in the_assignment.notebooks]
            students = {s.id: s for s in db.query(Student).filter(Student.id.in_(ids))} if ids else {}
            submissions = {s.student_id: s for s in db.query(SubmittedAssignment).filter(
                SubmittedAssignment.assignment_id == the_assignment.id,
                SubmittedAssignment.student_id.in_(ids))} if ids else {}
            by_submission = {n.assignment_id: n for n in db.query(SubmittedNotebook)
                             .options(selectinload(SubmittedNotebook.grades))
                             .filter(SubmittedNotebook.notebook_id == notebook.id,
                                     SubmittedNotebook.assignment_id.in_([s.id for s in submissions.values()]))
                             } if submissions else {}
            sub_notebooks = {student: by_submission.get(sub.id) for student, sub in submissions.items()}
            for i in ok:
                result = entries[i]["result"]
                student = result["student"]
                text = entries[i].get("timestamp")
                timestamp = parse_utc(text) if text else None
                # New rows name the assignment, the student and the notebook by id: set as objects,
                # each would be appended to that parent's unloaded collection of every submission, a
                # list SQLAlchemy walks again on each append (quadratic in the batch, measured).
                if student not in students:
                    students[student] = Student(id=student)
                    db.add(students[student])
                submission = submissions.get(student)
                if submission is None:
                    kwargs = {"timestamp": timestamp} if timestamp is not None else {}
                    submission = SubmittedAssignment(assignment_id=the_assignment.id, student_id=student, **kwargs)
                    for nb, grade_ids, solution_ids, task_ids in layout:
                        sub_nb = SubmittedNotebook(notebook_id=nb.id, assignment=submission)
                        for cell_id in grade_ids:
                            Grade(cell_id=cell_id, notebook=sub_nb)
                        for cell_id in solution_ids:
                            Comment(cell_id=cell_id, notebook=sub_nb)
                        for cell_id in task_ids:
                            Comment(cell_id=cell_id, notebook=sub_nb)
                            Grade(cell_id=cell_id, notebook=sub_nb)
                        if nb is notebook:
                            sub_notebooks[student] = sub_nb
                    db.add(submission)
                    submissions[student] = submission
                elif timestamp is not None:
                    submission.timestamp = timestamp
                sub_nb = sub_notebooks.get(student)
                if sub_nb is None:  # the notebook was (re)created after this submission was first recorded
                    sub_nb = sub_notebooks[student] = SubmittedNotebook(notebook_id=notebook.id, assignment=submission)
                    db.add(sub_nb)
                scores = {name: 0.0 for name in cells}
                maxima = {name: 0.0 for name in cells}
                for t in result["tests"]:
                    scores[t["task"]] += t["points"]
                    maxima[t["task"]] += t["max_points"]
                for name, cell in cells.items():
                    if maxima[name] and abs(maxima[name] - cell.max_score) > POINTS_EPSILON:
                        log.warning("%s/%s: task %s tests are worth %g points but its grade cell is worth %g",
                                    student, assignment, name, maxima[name], cell.max_score)
                grades = {g.cell_id: g for g in sub_nb.grades}
                by_task = {}
                for name, cell in cells.items():
                    grade = grades.get(cell.id)
                    if grade is None:
                        grade = Grade(cell_id=cell.id, notebook=sub_nb)
                        db.add(grade)
                    grade.auto_score = scores[name]
                    grade.needs_manual_grade = False
                    by_task[name] = grade
                # a human score already given: kept for the same files (as nbgrader's autograder), else set aside
                outcomes[i] = apply_rule(by_task, student, changed[i])
            db.flush()
            before_commit(outcomes)
            db.commit()
        except Exception:
            db.rollback()
            raise
        return {name: cells[name].max_score for name in ordered_tasks(cells)}, outcomes


@contextlib.contextmanager
def _collector_paused():
    """Python's cycle collector off while a batch is built, then back on: a batch makes tens of thousands
    of short-lived objects (ORM rows, notebook nodes), and the collector, set off by them, walked every
    object of the process again and again (a third of the gradebook transaction's time, measured). What
    the batch leaves is collected once it is back on."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def prepare_record(settings: CourseSettings, result: Mapping, *,
                   timestamp: datetime.datetime | str | None = None,
                   sources: Mapping[str, str] | None = None) -> dict:
    """What recording ``result`` needs, checked once, before anything of it is written: ``{"result":
    the results dict validated and checked against results.schema.json, "timestamp": the submission
    time as text, or None, "sources": the files graded, {filename: text}, or None}``. ``timestamp``
    overrides the ``timestamp.txt`` nbgrader's collect step wrote; ``sources`` are what the graded
    notebook shows (None: what the course holds for the student when it is written). Raises ValueError
    for a result that is not valid. This is also what a journal line holds
    (grader/bertlab_grader/course/journal.py), so a replayed result shows the files it graded too."""
    clean = checked_result(result)
    if timestamp is not None:
        from nbgrader.utils import parse_utc

        text = parse_utc(timestamp).isoformat(sep=" ")
    else:
        _, text = _submission_timestamp(settings.root / "submitted" / clean["student"] / clean["assignment"])
    return {"result": clean, "timestamp": text, "sources": checked_sources(sources)}


def checked_sources(sources) -> dict[str, str] | None:
    """``sources`` as a plain ``{filename: text}`` of exercise files (None stays None); ValueError for
    anything else (e.g. a journal line edited by hand)."""
    if sources is None:
        return None
    if not isinstance(sources, Mapping) or not all(
            name in EXERCISE_FILES and isinstance(text, str) for name, text in sources.items()):
        raise ValueError("sources must map exercise file names to their text")
    return dict(sources)


def record_results(settings: CourseSettings, entries: list[dict], *,
                   on_adjustment: Callable[[Adjustment], None] | None = None, sync: bool = True) -> list:
    """Record many results (each a :func:`prepare_record` entry, all of one assignment) in the course
    of ``settings`` and its gradebook (``settings.gradebook_url``) at once; returns, per entry, its
    autograded folder or the exception that kept it out (a task the assignment does not grade, a file
    that could not be written). Raises when the gradebook cannot be written at all (nothing was).

    Order, as for one result: one gradebook transaction for all of them (with the set-aside
    adjustments written just before it commits), then per result the graded notebook, nbgrader's
    ``timestamp.txt`` / ``submission_secret.txt``, and ``results.json`` last, each replaced atomically.
    ``sync=False`` leaves those files unsynced: the caller holds a synced journal of the results
    (grader/bertlab_grader/course/journal.py) and syncs the filesystem before dropping it. The graded
    notebook shows an entry's ``sources`` (the files graded), or, without them, what the course holds."""
    import nbformat

    course_dir = settings.root
    if not entries:
        return []
    assignments = {e["result"]["assignment"] for e in entries}
    if len(assignments) != 1:
        raise CourseError(f"one batch records one assignment, not {sorted(assignments)}")
    if assignments != {settings.assignment}:
        raise CourseError(f"these results are of assignment {assignments.pop()!r}, and this course's settings "
                          f"record {settings.assignment!r}: record them with the settings of their assignment "
                          "(init_course sets each assignment up in the gradebook)")
    assignment = settings.assignment
    with course_lock(course_dir), _collector_paused():
        # The files each result replaces, as results.json says (a student twice in a batch: the first one).
        befores, changed, latest = [], [], {}
        for entry in entries:
            result = entry["result"]
            student = result["student"]
            if student not in latest:
                latest[student] = previous_digest(autograded_dir(settings, student) / "results.json")
            befores.append(latest[student])
            changed.append(files_changed(latest[student], result.get("submission_digest")))
            latest[student] = result.get("submission_digest")

        def set_aside(outcomes: list) -> None:
            for entry, before, outcome in zip(entries, befores, outcomes):
                if isinstance(outcome, Adjustment) and outcome.action == SET_ASIDE:
                    now = entry["result"].get("submission_digest")
                    remember_set_aside(settings, outcome, before, now)

        max_points, outcomes = _record_in_gradebook(settings, entries, changed, set_aside)
        written: list = []
        for entry, outcome in zip(entries, outcomes):
            if isinstance(outcome, Exception):
                written.append(outcome)
                continue
            if outcome is not None and on_adjustment is not None:
                on_adjustment(outcome)
            result = entry["result"]
            student = result["student"]
            dest = autograded_dir(settings, student)
            try:
                files = entry.get("sources")
                if files is None:
                    files = submitted_sources(settings, student)
                notebook = dest / f"{assignment}.ipynb"
                # The same result recorded again (an unchanged student, re-synced every run): the notebook
                # on disk is already the one this would build (feedback.py, notebook_stamp).
                stamp = notebook_stamp(assignment, max_points, result, files)
                if stamp_of(notebook) != stamp:
                    nb = build_graded_notebook(assignment, max_points, result, files, stamp)
                    dest.mkdir(parents=True, exist_ok=True)
                    # nbformat.v4.writes, not nbformat.writes: the latter validates the notebook against its
                    # schema only to log what it finds; the kit's tests validate this notebook.
                    atomic_write_text(notebook, nbformat.v4.writes(nb) + "\n", sync=sync)
                if entry.get("timestamp"):
                    atomic_write_text(dest / "timestamp.txt", entry["timestamp"] + "\n", sync=sync)
                secret = course_dir / "submitted" / student / assignment / "submission_secret.txt"
                if secret.is_file() and not secret.is_symlink():
                    atomic_write_text(dest / "submission_secret.txt", secret.read_text(encoding="utf-8"), sync=sync)
                atomic_write_text(dest / "results.json", results_json_text(result), sync=sync)
            except (OSError, ValueError) as exc:  # this result's files: the others are still written
                written.append(exc)
                continue
            written.append(dest)
    return written


def record_result(settings: CourseSettings, result: Mapping,
                  *, timestamp: datetime.datetime | str | None = None,
                  on_adjustment: Callable[[Adjustment], None] | None = None,
                  sources: Mapping[str, str] | None = None) -> Path:
    """Record one graded submission (idempotent: recording a student again replaces the earlier result).

    Upserts the student, the SubmittedAssignment / SubmittedNotebook and one auto-scored grade per task
    (the sum of that task's test points) in the gradebook; writes the graded notebook
    ``autograded/<student>/<assignment>/<assignment>.ipynb`` that ``nbgrader generate_feedback`` renders,
    copies nbgrader's ``timestamp.txt`` / ``submission_secret.txt`` from the submitted folder when the
    collect step wrote them, and writes ``results.json`` last; every file synced. ``timestamp`` overrides
    the submission time (else the submitted ``timestamp.txt`` is used). Returns the autograded folder.
    (A cohort run records through grader/bertlab_grader/course/journal.py's writer instead: many at a time.)

    The graded notebook shows the student's files beside their results: ``sources`` (a
    ``SubmissionSources``) when given, else what the course holds for this student (read as text only).

    An instructor's manual score or extra credit is kept when the files are the same as those of the result
    replaced, and set aside when they changed (grader/bertlab_grader/course/adjustments.py); ``on_adjustment`` hears which.
    """
    entry = prepare_record(settings, result, timestamp=timestamp, sources=sources)
    [outcome] = record_results(settings, [entry], on_adjustment=on_adjustment, sync=True)
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


# ---------------------------------------------------------------------------------------------------
# nbgrader commands

# `nbgrader ...` as this Python runs it, a second sooner (grader/bertlab_grader/course/nbgrader_main.py says why).
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


def _db_args(url: str) -> list[str]:
    """nbgrader's option for the gradebook a command must use (the course's, as ``CourseSettings``
    worked it out: the command line's, else the config's, else nbgrader's default)."""
    return [f"--CourseDirectory.db_url={normalise_db_url(url)}"]


def export_grades(settings: CourseSettings, timeout: float = 600) -> Path:
    """Run ``nbgrader export`` in the course; return the path of ``grades.csv``."""
    course_dir = settings.root
    dest = course_dir / "grades.csv"
    _run_nbgrader(course_dir, ["export", f"--to={dest}", *_db_args(settings.gradebook_url)], timeout)
    if not dest.is_file():
        raise CourseError(f"nbgrader export finished but wrote no {dest}")
    return dest


def generate_feedback(settings: CourseSettings, student: str | None = None, timeout: float = 600) -> Path:
    """Run ``nbgrader generate_feedback ASSIGNMENT --force`` in the course (optionally for one student);
    return the ``feedback`` folder (``feedback/<student>/<assignment>/<assignment>.html``)."""
    course_dir, assignment = settings.root, settings.assignment
    check_name("assignment", assignment)
    args = ["generate_feedback", assignment, "--force", *_db_args(settings.gradebook_url)]
    if student is not None:
        args.append(f"--student={check_name('student', student)}")
    _run_nbgrader(course_dir, args, timeout)
    return course_dir / "feedback"


def export_and_feedback(settings: CourseSettings, students: list[str] | None = None, processes: int = 1,
                        timeout: float = 600, feedback_of: str | None = None,
                        changed: int | None = None) -> tuple[Path, Path]:
    """``nbgrader export`` and ``nbgrader generate_feedback``, run side by side; the feedback split over
    ``processes`` nbgrader processes, each excluding the other parts' ``students``
    (``--CourseDirectory.student_id_exclude``). Returns (grades.csv, feedback folder).

    Both commands only read the gradebook, so they may run at once. Each nbgrader process pays about
    1.5 s of start-up, and rendering one student's feedback costs about 0.04 s: splitting pays from a
    few dozen students on (measured: 100 students, 5.8 s for one generate_feedback process; the export
    and two feedback processes side by side 4.9 s, against 6.4 s with one, on 2 busy cores). The
    feedback is the same, file for file, as one ``nbgrader generate_feedback`` writes
    (tests/test_course.py).

    ``feedback_of``: render the feedback of that one student only (`bertlab grade --watch`, after each
    hand-in: the others' feedback has not changed); the export still lists everyone. ``changed``: how
    many of ``students`` this run recorded a new result for (default: all of them); the others' pages
    are most likely rendered already (below), so only that many pages decide whether splitting pays.

    A page whose inputs (the graded notebook, the gradebook's rows, nbgrader's version and the course's
    config) have not changed since it was rendered is left as it is (feedback_record.py; its record
    is ``.bertlab/feedback-record/``): a run with one new hand-in renders one page, not the class's.
    """
    course_dir, assignment, url = settings.root, settings.assignment, settings.gradebook_url
    check_name("assignment", assignment)
    for student in students or ():
        check_name("student", student)
    dest = course_dir / "grades.csv"
    commands = [["export", f"--to={dest}", *_db_args(url)]]
    students = sorted(students or ())
    if feedback_of is not None:
        check_name("student", feedback_of)
        students = []  # one part, for one student (below)
    parts = feedback_parts(students, processes, changed)
    # Each part's list of the students it leaves out goes through a file (nbgrader_main.py's
    # --bertlab-args-file): on the command line one argument may not exceed 128 KiB.
    lists = Path(tempfile.mkdtemp(prefix="feedback-parts-", dir=_bertlab_dir(course_dir)))
    record = f"{FEEDBACK_RECORD}{_bertlab_dir(course_dir) / 'feedback-record'}"
    launch = []
    for k in range(parts):
        args = ["generate_feedback", assignment, "--force", *_db_args(url)]
        if feedback_of is not None:
            args.append(f"--student={feedback_of}")
        prefix = [record]
        if parts > 1:
            others = [s for i, s in enumerate(students) if i % parts != k]
            listed = lists / f"part-{k}.json"
            listed.write_text(json.dumps([f"--CourseDirectory.student_id_exclude={','.join(others)}"]),
                              encoding="utf-8")
            prefix.append(f"{ARGS_FILE}{listed}")
        commands.append(args)
        launch.append(prefix)
    env = nbgrader_environment()
    try:
        procs = [(args, subprocess.Popen([*NBGRADER, *prefix, *args], cwd=course_dir, env=env,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
                 for args, prefix in zip(commands, [[], *launch])]
        return _finish(procs, course_dir, dest, timeout)
    finally:
        shutil.rmtree(lists, ignore_errors=True)


def feedback_parts(students: list[str], processes: int, changed: int | None = None) -> int:
    """Over how many nbgrader processes ``export_and_feedback`` splits the feedback: one for every 25
    pages to render, at most ``processes``. The pages to render are ``changed`` of the ``students``
    (default: all): each extra process costs its start-up (about 1.5 s of a core), which pays only
    when it renders dozens of pages. Never split when a student id holds a comma (the exclude list
    is comma-separated)."""
    if any("," in s for s in students):
        return 1
    to_render = len(students) if changed is None else max(0, min(changed, len(students)))
    return max(1, min(processes, to_render // 25))


def _bertlab_dir(course_dir: Path) -> Path:
    folder = course_dir / ".bertlab"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def _finish(procs: list, course_dir: Path, dest: Path, timeout: float) -> tuple[Path, Path]:
    """Wait for ``export_and_feedback``'s nbgrader processes; raise the first failure."""
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
