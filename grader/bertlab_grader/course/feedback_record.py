"""Which students' feedback is already up to date: ``nbgrader generate_feedback`` renders only the others.

Rendering one student's feedback page costs about 0.14 s (nbconvert's HTML and its BeautifulSoup
pass), and every ``bertlab grade`` renders the feedback of the whole class, because a grade may have
changed anywhere: a student graded now, a manual grade or comment given in formgrader since the last
run. For a course with one new hand-in that was 3 of a plain run's 25 s, and a run with nothing new
took 7 s. So each page is rendered only when what it is made of changed since it was last rendered:

    what a feedback page shows                       what its fingerprint covers
    the graded notebook (autograded/<student>/<A>/)   every file of that folder, byte for byte
    the scores, late penalty and comments             the gradebook's rows for that submission, and the
                                                      assignment's own (its cells' maximum scores)
    nbgrader's and nbconvert's HTML                   their versions, and the course's nbgrader_config.py

The fingerprint of each rendered page is kept in ``.bertlab/feedback-record/<assignment>/<student>``
once its nbgrader process has finished without an error (a failed run keeps none, so everything it
touched is rendered again). A page whose fingerprint is unchanged and whose files are still there is
left as it is; everything else goes to nbgrader's own code path (``--force``: removed and rendered),
so every page is the one ``nbgrader generate_feedback`` writes (tests/test_course.py compares them
byte for byte).

This module runs inside the nbgrader process (nbgrader_main.py, ``--bertlab-feedback-record=DIR``):
it imports nbgrader, which the grader's main process does not need to.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

FINGERPRINT_VERSION = "2"  # bump when what a page is made of changes in a way the fingerprint misses


def assignment_rows(gradebook, assignment: str) -> tuple[dict[str, dict], list]:
    """Everything the gradebook holds that a feedback page of ``assignment`` can show, read in a few
    queries for the whole class: ({student id: the rows of their submission}, the assignment's own rows).

    A student's rows: theirs in ``student``, ``submitted_assignment``, ``submitted_notebook``, ``grade``
    and ``comment`` (scores, manual grades, extra credit, late penalty, extension, comments, names). The
    assignment's own: ``assignment`` (its due date), ``notebook``, ``base_cell``, ``grade_cells``,
    ``task_cells``, ``solution_cells`` and ``source_cell`` (the maximum scores, the cells). Every column of
    each row, as the database holds it: nbgrader computes what the page shows (a score, a maximum)
    from these rows, so a page whose rows are unchanged shows the same. (Reading them through
    nbgrader's objects, one student at a time, took about 20 queries and 10 ms a student.)"""
    from sqlalchemy import select

    from nbgrader.api import Base

    t = Base.metadata.tables
    connection = gradebook.db.connection()

    def rows(query) -> list[dict]:
        return [dict(row._mapping) for row in connection.execute(query)]

    found = rows(select(t["assignment"]).where(t["assignment"].c.name == assignment))
    if not found:
        return {}, []
    assignment_id = found[0]["id"]
    notebook, cell, submitted, submitted_nb = t["notebook"], t["base_cell"], t["submitted_assignment"], t["submitted_notebook"]
    in_assignment = select(notebook.c.id).where(notebook.c.assignment_id == assignment_id)
    cells = select(cell.c.id).where(cell.c.notebook_id.in_(in_assignment))
    own = [found, rows(select(notebook).where(notebook.c.assignment_id == assignment_id)),
           rows(select(cell).where(cell.c.notebook_id.in_(in_assignment)))]
    own += [rows(select(t[name]).where(t[name].c.id.in_(cells))) for name in ("grade_cells", "task_cells", "solution_cells")]
    own.append(rows(select(t["source_cell"]).where(t["source_cell"].c.notebook_id.in_(in_assignment))))

    by_student: dict[str, dict] = {}
    for row in rows(select(submitted).where(submitted.c.assignment_id == assignment_id)):
        by_student[row["student_id"]] = {"submission": row, "student": None, "notebooks": [], "grades": [],
                                         "comments": []}
    student = t["student"]
    for row in rows(select(student).join(submitted, submitted.c.student_id == student.c.id)
                    .where(submitted.c.assignment_id == assignment_id)):
        by_student[row["id"]]["student"] = row
    of_assignment = submitted.c.assignment_id == assignment_id
    for row in rows(select(submitted_nb, submitted.c.student_id.label("bertlab_student"))
                    .join(submitted, submitted_nb.c.assignment_id == submitted.c.id).where(of_assignment)):
        by_student[row.pop("bertlab_student")]["notebooks"].append(row)
    for name, key in (("grade", "grades"), ("comment", "comments")):
        table = t[name]
        for row in rows(select(table, submitted.c.student_id.label("bertlab_student"))
                        .join(submitted_nb, table.c.notebook_id == submitted_nb.c.id)
                        .join(submitted, submitted_nb.c.assignment_id == submitted.c.id).where(of_assignment)):
            by_student[row.pop("bertlab_student")][key].append(row)
    for entry in by_student.values():  # (a fixed order: the rows' ids)
        for key in ("notebooks", "grades", "comments"):
            entry[key].sort(key=lambda row: str(row["id"]))
    return by_student, [sorted(table, key=lambda row: str(row["id"])) for table in own]


def folder_files(folder: Path) -> list[tuple[str, str]]:
    """(relative path, sha256) of every file under ``folder``, sorted."""
    out = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            path = Path(root) / name
            out.append((str(path.relative_to(folder)), hashlib.sha256(path.read_bytes()).hexdigest()))
    return out


def rendering_setup(course_dir: Path) -> dict:
    """What every page of the course is rendered with (read once per process): the versions of
    nbgrader and nbconvert, and the course's nbgrader_config.py."""
    import nbconvert
    import nbgrader

    config = course_dir / "nbgrader_config.py"
    return {"version": FINGERPRINT_VERSION, "nbgrader": nbgrader.__version__, "nbconvert": nbconvert.__version__,
            "config": hashlib.sha256(config.read_bytes()).hexdigest() if config.is_file() else None}


def fingerprint(setup: dict, rows: dict | None, autograded: Path) -> str:
    """The fingerprint of one feedback page's inputs (the table in the module docstring): the
    course's ``rendering_setup`` (with the assignment's own gradebook rows), the student's gradebook
    ``rows`` (``assignment_rows``; None: no submission in the gradebook) and the graded notebook's folder."""
    inputs = {**setup, "gradebook": rows, "autograded": folder_files(autograded)}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()


def keep_unchanged_feedback(record_dir: Path) -> Callable[[], None]:
    """Make this process's ``nbgrader generate_feedback`` skip each student whose page is up to date
    (see the module docstring). Returns the function to call once nbgrader finished without an error:
    it keeps the fingerprints of the pages rendered now."""
    from nbgrader.api import Gradebook
    from nbgrader.converters.generate_feedback import GenerateFeedback

    rendered: dict[Path, str] = {}
    opened: dict = {}  # the gradebook's rows and the rendering set-up, read at the first student
    decide = GenerateFeedback.init_destination

    def init_destination(self, assignment_id: str, student_id: str) -> bool:
        if self.coursedir.student_id_exclude and student_id in self.coursedir.student_id_exclude.split(","):
            return False
        if assignment_id not in opened:
            # (generate_feedback only reads the gradebook: the rows read at the first student hold for all)
            with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gradebook:
                students, own = assignment_rows(gradebook, assignment_id)
            opened[assignment_id] = (students, {**rendering_setup(Path(self.coursedir.root)), "assignment": own})
        students, setup = opened[assignment_id]
        source = Path(self._format_source(assignment_id, student_id))
        now = fingerprint(setup, students.get(student_id), source)
        kept = record_dir / assignment_id / student_id
        dest = Path(self._format_dest(assignment_id, student_id))
        pages = [dest / (Path(nb).stem + self.exporter.file_extension) for nb in source.glob("*.ipynb")]
        if pages and all(p.is_file() for p in pages) and kept.is_file() and kept.read_text() == now:
            self.log.info("Feedback unchanged since it was rendered: %s", dest)
            return False
        if kept.is_file():
            kept.unlink()  # rendered again now: its old fingerprint no longer holds, whatever happens
        rendered[kept] = now
        return decide(self, assignment_id, student_id)

    GenerateFeedback.init_destination = init_destination

    def keep() -> None:
        for path, now in rendered.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(now)

    return keep
