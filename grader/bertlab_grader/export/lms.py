"""`bertlab export`: the course's grades as a file an LMS imports (Canvas, Moodle) or a plain CSV.

The scores are read from the course's nbgrader gradebook, what ``bertlab grade`` recorded plus any
manual score or extra credit an instructor gave in nbgrader since (nbgrader's own ``Grade.score``).
A student gets a score only when their grade is current: a student whose files changed after they
were graded (their results.json's ``submission_digest`` no longer matches ``submitted/``) gets no
score, and neither does one who handed in but was never graded; both are named. docs/lms-export.md
is the instructor's page.

Formats (``FORMATS``)::

    canvas  the roster (a Canvas gradebook export) with every row and column kept; the assignment
            column (default: the assignment name) added or filled, and its points possible written
    moodle  <id column>, <column>, <column> feedback: one row per roster student with a grade, for
            Moodle's "Import grades from CSV"
    plain   student, total, max, then one column per task; one row per course student, or per
            roster student when a roster is given

Public API: :func:`export_grades_file` (returns an :class:`ExportReport`), :func:`read_course_grades`,
:func:`run_export` (the command: writes, then prints the report).
"""

from __future__ import annotations

import csv
import io
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from bertlab.errors import UsageError
from bertlab.fileio import atomic_write_text
from bertlab.tasks import GRADED_TASKS
from bertlab_grader.course.preconditions import require_course_folder, require_graded_assignment
from bertlab_grader.course.results import load_results
from bertlab_grader.course.settings import CourseSettings
from bertlab_grader.course.submissions import scan_submitted, submission_digest

FORMATS = ("canvas", "moodle", "plain")
#: The roster column matched against the course's student ids, per format (``--id-column``).
DEFAULT_ID_COLUMN = {"canvas": "SIS Login ID", "moodle": "Email address", "plain": "student"}

# Canvas's gradebook importer (app/models/gradebook_importer.rb in canvas-lms) reads these headers as
# student information, and drops any column whose header contains one of the totals: a grade written
# under such a name would silently never arrive.
CANVAS_RESERVED = ("Student", "LastName", "FirstName", "ID", "SIS User ID", "SIS Login ID", "Section",
                   "Integration ID", "Root Account")
CANVAS_TOTALS = ("Current Score", "Current Points", "Current Grade", "Final Score", "Final Points",
                 "Final Grade", "Override Score", "Override Grade", "Override Status")
#: An existing Canvas assignment column is "<title> (<Canvas assignment id>)".
_CANVAS_TITLE_AND_ID = re.compile(r"\A(.*)\s\((\d+)\)\Z", re.S)
_CANVAS_POSTING_ROW = re.compile(r"^\s*(Muted|Manual Posting.*)?\s*$", re.I)


# ---------------------------------------------------------------------------------------------------
# the course's grades


@dataclass
class CourseGrades:
    """What the course holds for one assignment.

    ``max_points``: task -> points of the assignment's grade cells, in task order. ``scores``: student ->
    {task: score} for every student whose grade is current. ``stale``: students the gradebook holds a
    grade for whose files changed since. ``not_graded``: students with a submission and no grade.
    """

    assignment: str
    max_points: dict[str, float]
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    stale: list[str] = field(default_factory=list)
    not_graded: list[str] = field(default_factory=list)

    @property
    def max_total(self) -> float:
        return sum(self.max_points.values())

    def total(self, student: str) -> float:
        return sum(self.scores[student].values())

    @property
    def students(self) -> list[str]:
        """Every student of the course for this assignment: graded (current or stale) or handed in."""
        return sorted({*self.scores, *self.stale, *self.not_graded})


def _check_course(settings: CourseSettings) -> None:
    require_course_folder(settings,
                          what="the nbgrader course folder that `bertlab grade` graded")
    require_graded_assignment(settings)


def _read_gradebook(settings: CourseSettings):
    """(task -> max points, student -> {task: score}) straight from nbgrader's tables, read only
    (nbgrader's Gradebook object would add a course row on opening)."""
    import sqlalchemy as sa
    from nbgrader.api import (Assignment, Grade, GradeCell, Notebook, SubmittedAssignment,
                              SubmittedNotebook)
    from sqlalchemy.orm import Session

    assignment = settings.assignment
    engine = sa.create_engine(settings.gradebook_url)
    try:
        with Session(engine) as session:
            cells = session.execute(
                sa.select(GradeCell.name, GradeCell.max_score)
                .join(Notebook, GradeCell.notebook_id == Notebook.id)
                .join(Assignment, Notebook.assignment_id == Assignment.id)
                .where(Assignment.name == assignment, Notebook.name == assignment)).all()
            grades = session.execute(
                sa.select(SubmittedAssignment.student_id, GradeCell.name, Grade.score)
                .join(SubmittedNotebook, SubmittedNotebook.assignment_id == SubmittedAssignment.id)
                .join(Grade, Grade.notebook_id == SubmittedNotebook.id)
                .join(GradeCell, GradeCell.id == Grade.cell_id)
                .join(Notebook, SubmittedNotebook.notebook_id == Notebook.id)
                .join(Assignment, SubmittedAssignment.assignment_id == Assignment.id)
                .where(Assignment.name == assignment, Notebook.name == assignment)).all()
    finally:
        engine.dispose()
    names = [name for name, _ in cells]
    order = [t for t in GRADED_TASKS if t in names] + sorted(n for n in names if n not in GRADED_TASKS)
    max_points = {name: float(points or 0.0) for name, points in sorted(cells, key=lambda c: order.index(c[0]))}
    scores: dict[str, dict[str, float]] = {}
    for student, task, score in grades:
        scores.setdefault(student, {})[task] = float(score or 0.0)
    return max_points, scores


def _current_digests(settings: CourseSettings) -> dict[str, str]:
    """student -> submission digest of what ``submitted/`` holds now.

    The scan extracts zips; it runs on a private shadow of the course (its ``submitted/`` linked in),
    so a ``bertlab grade`` running at the same time never sees its staging folder replaced.
    """
    submitted = settings.root / "submitted"
    if not submitted.is_dir():
        return {}
    with tempfile.TemporaryDirectory(prefix="bertlab-export-") as tmp:
        shadow = Path(tmp)
        (shadow / "submitted").symlink_to(submitted.resolve(), target_is_directory=True)
        submissions, _ = scan_submitted(CourseSettings(shadow, settings.assignment))
        return {s.student: submission_digest(s) for s in submissions}


def read_course_grades(settings: CourseSettings) -> CourseGrades:
    """The gradebook's scores for the assignment, each kept only while it describes the files in
    ``submitted/`` (see the module docstring). Raises UsageError for a missing course or assignment."""
    _check_course(settings)
    max_points, scores = _read_gradebook(settings)
    digests = _current_digests(settings)
    results = load_results(settings)
    grades = CourseGrades(settings.assignment, max_points)
    for student, tasks in sorted(scores.items()):
        recorded = results.get(student, {}).get("submission_digest")
        # Unknown on either side (no results.json, no digest in it, no files any more): the grade of
        # record stands. Known on both sides and different: the student handed in new files.
        if recorded and student in digests and digests[student] != recorded:
            grades.stale.append(student)
        else:
            grades.scores[student] = tasks
    grades.not_graded = sorted(set(digests) - scores.keys())
    return grades


# ---------------------------------------------------------------------------------------------------
# the roster


@dataclass
class Roster:
    """A roster CSV as read: ``header``, ``rows`` (lists of cells, as in the file), its ``delimiter``
    and the index of the id column."""

    path: Path
    header: list[str]
    rows: list[list[str]]
    delimiter: str
    id_column: str
    id_index: int

    def student_id(self, row: list[str]) -> str:
        return row[self.id_index].strip() if self.id_index < len(row) else ""


def _delimiter(first_line: str) -> str:
    """',' or ';' (Canvas writes ';' in locales with a decimal comma and reads both)."""
    counts = {d: len(next(csv.reader([first_line], delimiter=d), [])) for d in (",", ";")}
    return ";" if counts[";"] > counts[","] else ","


def read_roster(path: str | os.PathLike, id_column: str, canvas: bool = False) -> Roster:
    """Read ``path`` (UTF-8, with or without a byte-order mark) and find ``id_column`` in its header
    (``canvas``: first check that it is a Canvas gradebook export). Raises UsageError for a missing or
    unreadable file, an empty one, or a header without the column."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"no roster file at {path}. Give the CSV your LMS exported with --roster.")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise UsageError(f"the roster {path} is not UTF-8 text: export it from your LMS again as CSV "
                         "(UTF-8), or save it as 'CSV UTF-8' from your spreadsheet.") from None
    except OSError as exc:
        raise UsageError(f"cannot read the roster {path}: {exc.strerror or exc}") from None
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise UsageError(f"the roster {path} is empty or has no header row: its first row must name "
                         "the columns.")
    delimiter = _delimiter(lines[0])
    table = list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter))
    header, rows = table[0], table[1:]
    if canvas:
        _canvas_identity_columns(header, path)
    names = [h.strip() for h in header]
    if id_column not in names:
        shown = ", ".join(repr(h) for h in names if h)
        raise UsageError(f"the roster {path} has no column {id_column!r} (its columns: {shown}). Pass "
                         "--id-column with the column that holds your course's student ids. Nothing was written.")
    return Roster(path, header, rows, delimiter, id_column, names.index(id_column))


# ---------------------------------------------------------------------------------------------------
# the report and the three formats


@dataclass
class ExportReport:
    """What an export wrote and what it could not place.

    ``rows``: student rows written; ``filled``: ids given a score; ``empty``: roster ids given none;
    ``not_on_roster``: course id -> what the course holds for it ("37.5/50", "stale", "not graded");
    ``stale`` and ``not_graded`` as in CourseGrades; ``notes``: anything else worth a line.
    """

    out: Path
    format: str
    assignment: str
    column: str
    max_total: float
    rows: int = 0
    filled: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)
    not_on_roster: dict[str, str] = field(default_factory=dict)
    stale: list[str] = field(default_factory=list)
    not_graded: list[str] = field(default_factory=list)
    roster: Path | None = None
    id_column: str | None = None
    notes: list[str] = field(default_factory=list)


def number(value: float) -> str:
    """A score as the LMSs read it: a decimal point, no exponent, at most 4 decimals (37.5, 50, 0)."""
    text = f"{value:.4f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _status(grades: CourseGrades, student: str) -> str:
    if student in grades.scores:
        return f"{number(grades.total(student))}/{number(grades.max_total)}"
    return "stale: files changed since graded" if student in grades.stale else "not graded"


def _match(grades: CourseGrades, roster: Roster, report: ExportReport) -> dict[str, str]:
    """roster id -> course id, for the roster ids that are course students (compared exactly, spaces
    trimmed: the LMSs compare ids exactly too). Course ids that match no row go into the report."""
    ids = {roster.student_id(row) for row in roster.rows} - {""}
    matched = {s: s for s in grades.students if s in ids}
    report.not_on_roster = {s: _status(grades, s) for s in grades.students if s not in ids}
    if grades.students and not matched:
        report.notes.append(f"no course student id matches any value of the roster's {roster.id_column!r} "
                            "column: is --id-column the column that holds your course's student ids?")
    return matched


def _canvas_identity_columns(header: list[str], path: Path) -> int:
    """How many leading columns Canvas reads as student information (its importer's own rule: Student,
    ID, then SIS User ID + SIS Login ID (+ Integration ID, + Root Account) or SIS Login ID alone, then
    Section last). Raises UsageError when the header is not a Canvas gradebook's."""
    h = [c.strip() for c in header]
    ok = len(h) > 3 and "Student" in h[0] and "ID" in h[1]
    count = 3
    if ok and re.search(r"SIS\s+Login\s+ID", h[2]):
        count += 1
    elif ok and re.search(r"SIS\s+User\s+ID", h[2]) and re.search(r"SIS\s+Login\s+ID", h[3]):
        extra = 1 if len(h) > 4 and re.search(r"Integration\s+ID", h[4]) else 0
        count += 2 + extra
        if len(h) > 4 + extra and re.search(r"Root\s+Account", h[4 + extra]):
            count += 1
    if not ok or len(h) < count or "Section" not in h[count - 1]:
        raise UsageError(f"the roster {path} is not a Canvas gradebook export: Canvas needs the columns Student, "
                         f"ID, SIS User ID, SIS Login ID, Section first (found: {', '.join(h[:6])}). Export it "
                         "from Canvas (Grades > Export > Export Entire Gradebook) and pass that file. "
                         "Nothing was written.")
    return count


def _canvas_column(header: list[str], column: str, path: Path) -> int | None:
    """The index of the roster's column for ``column`` (its exact header, or Canvas's
    "<title> (<id>)" with that title), or None when it has none. Refuses names Canvas would not import."""
    title = _CANVAS_TITLE_AND_ID.match(column)
    bare = title.group(1) if title else column
    if bare.strip() in CANVAS_RESERVED or any(total in column for total in CANVAS_TOTALS):
        raise UsageError(f"Canvas reads a column named {column!r} as student information or a computed total "
                         "and would not import it: pick another name with --column. Nothing was written.")
    found = [i for i, h in enumerate(header) if h.strip() == column]
    if not found:
        found = [i for i, h in enumerate(header)
                 if (m := _CANVAS_TITLE_AND_ID.match(h.strip())) and m.group(1) == column]
    if len(found) > 1:
        names = ", ".join(repr(header[i]) for i in found)
        raise UsageError(f"the roster {path} has several columns for {column!r} ({names}): pass the one to fill "
                         "with --column, as its header reads (with the Canvas id). Nothing was written.")
    return found[0] if found else None


def _canvas(grades: CourseGrades, roster: Roster, column: str, report: ExportReport) -> list[list[str]]:
    identity = _canvas_identity_columns(roster.header, roster.path)
    index = _canvas_column(roster.header, column, roster.path)
    header = list(roster.header)
    if index is None:
        index = len(header)
        header.append(column)
    else:
        report.column = header[index].strip()
    if index < identity:
        raise UsageError(f"{column!r} is one of Canvas's student information columns in {roster.path}: pick "
                         "another name with --column. Nothing was written.")
    matched = _match(grades, roster, report)
    width = max(len(header), index + 1)
    out = [header + [""] * (width - len(header))]
    points = number(grades.max_total)
    points_row_seen = False
    for row in roster.rows:
        row = row + [""] * (width - len(row))
        first = row[0] if row else ""
        if "Points Possible" in first:
            # Canvas sets the assignment's points possible from this row (a new one gets them here)
            before = row[index].strip()
            if before and before != points:
                report.notes.append(f"points possible of {report.column!r} changed from {before} to {points}")
            row[index] = points
            points_row_seen = True
        elif all(_CANVAS_POSTING_ROW.match(cell) for cell in row):
            pass  # the row Canvas writes under muted or manually posted assignments: not a student
        else:
            student_id = roster.student_id(row)
            student = matched.get(student_id)
            if student is not None and student in grades.scores:
                row[index] = number(grades.total(student))
                report.filled.append(student_id)
            else:
                # no current grade: the cell keeps what the roster held (empty for a new column), so
                # the import changes nothing for this student. Never 0: 0 would be a grade.
                report.empty.append(student_id or row[0].strip())
            report.rows += 1
        out.append(row)
    if not points_row_seen:
        out.insert(1, ["Points Possible"] + [""] * (width - 1))
        out[1][index] = points
    return out


def _moodle(grades: CourseGrades, roster: Roster, column: str, report: ExportReport) -> list[list[str]]:
    matched = _match(grades, roster, report)
    out = [[roster.id_column, column, f"{column} feedback"]]
    for row in roster.rows:
        student_id = roster.student_id(row)
        if not student_id:
            continue  # Moodle skips a row with an empty identifier; so do we
        student = matched.get(student_id)
        if student is not None and student in grades.scores:
            tasks = grades.scores[student]
            feedback = "; ".join(f"{task} {number(tasks[task])}/{number(grades.max_points[task])}"
                                 for task in grades.max_points if task in tasks)
            out.append([student_id, number(grades.total(student)), feedback])
            report.filled.append(student_id)
            report.rows += 1
        else:
            # left out, not written empty: Moodle reads an empty grade as "no grade" and would erase
            # one it holds; a user absent from the file keeps what Moodle has
            report.empty.append(student_id)
    return out


def _plain(grades: CourseGrades, roster: Roster | None, report: ExportReport) -> list[list[str]]:
    tasks = list(grades.max_points)
    out = [["student", "total", "max", *tasks]]
    if roster is None:
        rows = [(s, s) for s in grades.students]
    else:
        matched = _match(grades, roster, report)
        rows = [(roster.student_id(r), matched.get(roster.student_id(r))) for r in roster.rows if roster.student_id(r)]
    for student_id, student in rows:
        if student is not None and student in grades.scores:
            scores = grades.scores[student]
            cells = [number(grades.total(student)), number(grades.max_total),
                     *(number(scores[t]) if t in scores else "" for t in tasks)]
            report.filled.append(student_id)
        else:
            cells = ["", number(grades.max_total), *([""] * len(tasks))]
            report.empty.append(student_id)
        out.append([student_id, *cells])
        report.rows += 1
    return out


def _to_csv(rows: list[list[str]], delimiter: str = ",") -> str:
    buffer = io.StringIO()
    csv.writer(buffer, delimiter=delimiter).writerows(rows)
    return buffer.getvalue()


def _check_out(out: Path, roster: Path | None) -> None:
    if out.is_dir():
        raise UsageError(f"--out {out} is a folder: give the path of the CSV file to write.")
    if roster is not None and roster.exists() and (
            out.resolve() == roster.resolve() or (out.exists() and os.path.samefile(out, roster))):
        raise UsageError(f"--out {out} is the roster itself: the roster is never overwritten. Write to "
                         "another file (e.g. grades-canvas.csv). Nothing was written.")


def export_grades_file(settings: CourseSettings, format: str, out: str | os.PathLike,
                       roster: str | os.PathLike | None = None, *, id_column: str | None = None,
                       column: str | None = None) -> ExportReport:
    """Write the grades of the assignment in ``format`` (see the module docstring) to ``out``,
    atomically; return what was written and what could not be placed. Everything is checked before
    anything is written: a UsageError means ``out`` was not touched."""
    if format not in FORMATS:
        raise UsageError(f"unknown --format {format!r}: choose one of {', '.join(FORMATS)}. Nothing was written.")
    if roster is None and format != "plain":
        raise UsageError(f"--format {format} needs --roster: the CSV your LMS exported, whose "
                         f"{DEFAULT_ID_COLUMN[format]!r} column (or --id-column) holds the course's student ids.")
    out = Path(out)
    roster_path = Path(roster) if roster is not None else None
    _check_out(out, roster_path)
    assignment = settings.assignment
    column = column or assignment
    if not column.strip():
        raise UsageError("--column is empty: give the name of the LMS column to fill (default: the assignment).")
    id_column = id_column or DEFAULT_ID_COLUMN[format]
    table = read_roster(roster_path, id_column, canvas=format == "canvas") if roster_path is not None else None
    grades = read_course_grades(settings)
    report = ExportReport(out=out, format=format, assignment=assignment, column=column, max_total=grades.max_total,
                          stale=list(grades.stale), not_graded=list(grades.not_graded), roster=roster_path,
                          id_column=id_column if table is not None else None)
    if format == "canvas":
        rows = _canvas(grades, table, column, report)
    elif format == "moodle":
        rows = _moodle(grades, table, column, report)
    else:
        rows = _plain(grades, table, report)
    delimiter = table.delimiter if (format == "canvas" and table is not None) else ","
    atomic_write_text(out, _to_csv(rows, delimiter))
    return report


# ---------------------------------------------------------------------------------------------------
# the command


def format_report(report: ExportReport, course: Path) -> tuple[list[str], list[str]]:
    """(lines for stdout, lines for stderr) of an export."""
    what = {"canvas": f"column {report.column!r} ({number(report.max_total)} points possible)",
            "moodle": f"grade column {report.column!r} (out of {number(report.max_total)})",
            "plain": f"totals out of {number(report.max_total)} and one column per task"}[report.format]
    where = f"{report.rows} student row(s)" + (f" from {report.roster.name}" if report.roster else "")
    left = "left out" if report.format == "moodle" else "left empty"
    stdout = [f"Wrote {report.format} grades of {report.assignment} to {report.out}: {what}; {where}, "
              f"{len(report.filled)} with a grade, {len(report.empty)} without ({left})."]
    stderr = []
    for student in report.stale:
        stderr.append(f"stale: {student}: their files changed after they were graded, so no grade is exported; "
                      f"run `bertlab grade {course}` to grade the new files, then export again")
    for student in report.not_graded:
        stderr.append(f"not graded: {student}: handed in but has no grade yet; run `bertlab grade {course}`, "
                      "then export again")
    for student, status in sorted(report.not_on_roster.items()):
        stderr.append(f"not on the roster: {student} ({status})")
    if report.not_on_roster:
        stderr.append(f"{len(report.not_on_roster)} course student id(s) match no {report.id_column!r} in "
                      f"{report.roster}: their grades are not in {report.out}. Add them to the LMS course and "
                      "export the roster again, or pass --id-column with the column that holds these ids.")
    stderr += [f"note: {n}" for n in report.notes]
    return stdout, stderr


def run_export(settings: CourseSettings, format: str, out: str | os.PathLike,
               roster: str | os.PathLike | None = None, *, id_column: str | None = None,
               column: str | None = None) -> int:
    """`bertlab export`: write the file, print what was written (stdout) and what could not be placed
    (stderr, one line each). Returns 0: students left out are listed, never a failure of the export."""
    report = export_grades_file(settings, format, out, roster, id_column=id_column, column=column)
    stdout, stderr = format_report(report, settings.root)
    for line in stdout:
        print(line)
    for line in stderr:
        print(line, file=sys.stderr)
    return 0
