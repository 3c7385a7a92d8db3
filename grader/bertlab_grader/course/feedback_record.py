"""Which students' feedback is already up to date: ``nbgrader generate_feedback`` renders only the others.

Rendering one student's feedback page costs about 0.14 s (nbconvert's HTML and its BeautifulSoup
pass), and every ``bertlab grade`` renders the feedback of the whole class, because a grade may have
changed anywhere: a student graded now, a manual grade or comment given in formgrader since the last
run. For a course with one new hand-in that was 3 of a plain run's 25 s, and a run with nothing new
took 7 s. So each page is rendered only when what it is made of changed since it was last rendered:

    what a feedback page shows                       what its fingerprint covers
    the graded notebook (autograded/<student>/<A>/)   every file of that folder, byte for byte
    the scores, late penalty and comments             the gradebook's rows for that submission
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

FINGERPRINT_VERSION = "1"  # bump when what a page is made of changes in a way the fingerprint misses


def submission_rows(gradebook, assignment: str, student: str) -> dict | None:
    """What the gradebook says of ``student``'s ``assignment`` that the feedback shows (nbgrader's
    GetGrades preprocessor: each notebook's score, maximum and late penalty, each grade and each
    comment), as plain data; None when the gradebook has no such submission."""
    from nbgrader.api import MissingEntry

    try:
        submission = gradebook.find_submission(assignment, student)
    except MissingEntry:
        return None
    return {"submission": submission.to_dict(),
            "notebooks": [{"name": nb.name, "score": nb.score, "max_score": nb.max_score,
                           "late_penalty": nb.late_submission_penalty,
                           "grades": [g.to_dict() for g in nb.grades],
                           "comments": [c.to_dict() for c in nb.comments]}
                          for nb in sorted(submission.notebooks, key=lambda nb: nb.name)]}


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
    course's ``rendering_setup``, the gradebook's ``rows`` and the graded notebook's folder."""
    inputs = {**setup, "gradebook": rows, "autograded": folder_files(autograded)}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()


def keep_unchanged_feedback(record_dir: Path) -> Callable[[], None]:
    """Make this process's ``nbgrader generate_feedback`` skip each student whose page is up to date
    (see the module docstring). Returns the function to call once nbgrader finished without an error:
    it keeps the fingerprints of the pages rendered now."""
    from nbgrader.api import Gradebook
    from nbgrader.converters.generate_feedback import GenerateFeedback

    rendered: dict[Path, str] = {}
    opened: list = []  # the gradebook and the rendering set-up, at the first student (each opening: 30 ms)
    decide = GenerateFeedback.init_destination

    def init_destination(self, assignment_id: str, student_id: str) -> bool:
        if self.coursedir.student_id_exclude and student_id in self.coursedir.student_id_exclude.split(","):
            return False
        if not opened:
            opened[:] = [Gradebook(self.coursedir.db_url, self.coursedir.course_id),
                         rendering_setup(Path(self.coursedir.root))]
        gradebook, setup = opened
        source = Path(self._format_source(assignment_id, student_id))
        now = fingerprint(setup, submission_rows(gradebook, assignment_id, student_id), source)
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
        if opened:
            opened[0].close()
        for path, now in rendered.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(now)

    return keep
