"""`bertlab export`: Canvas, Moodle and plain grade files from the course's gradebook.

One small course per module, built without grading: results shaped like results.json are recorded
with ``record_result``. alice is graded; bob is graded and then given a manual score and extra
credit in nbgrader; carol is graded and then changes her files (stale); dave handed in a zip, is graded and is on no
roster; erin handed in and was never graded; frank (on both rosters) handed nothing in. Every
expected number is read back from the gradebook with nbgrader's own API.
"""

from __future__ import annotations

import csv
import zipfile
from pathlib import Path

import pytest

from bertlab.cli import main
from bertlab.tasks import EXERCISE_FILES, GRADED_TASKS
from bertlab_grader.course.config import course_db_url, init_course
from bertlab_grader.course.results import course_max_points
from bertlab_grader.course.gradebook import record_result
from bertlab_grader.export.lms import number
from bertlab_grader.course.submissions import scan_submitted, submission_digest
from bertlab_grader.course.settings import CourseSettings

ASSIGNMENT = "week7"
# A made-up course over the kit's tasks; a task a course removed (bertlab remove-task) is left out.
MAX_POINTS = {task: points for task, points in
              {"cka": 12.0, "pooling": 8.0, "siamese": 10.0, "retrieval": 15.0, "performance": 5.0}.items()
              if task in GRADED_TASKS}
ROSTERS = Path(__file__).parent / "fixtures" / "rosters"
CANVAS = ROSTERS / "canvas_gradebook.csv"
MOODLE = ROSTERS / "moodle_grades.csv"
CANVAS_IDENTITY = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]

# task -> points each graded student's tests earned (one test per task)
POINTS = {
    "alice": {"cka": 12.0, "pooling": 8.0, "siamese": 10.0, "retrieval": 15.0, "performance": 2.5},
    "bob": {"cka": 6.0, "pooling": 0.0, "siamese": 7.5, "retrieval": 15.0, "performance": 5.0},
    "carol": {"cka": 12.0, "pooling": 4.0, "siamese": 0.0, "retrieval": 9.0, "performance": 0.0},
    "dave": {"cka": 3.0, "pooling": 8.0, "siamese": 10.0, "retrieval": 0.0, "performance": 5.0},
}


def _result(student: str, digest: str) -> dict:
    tests = [{"name": f"test_{task}", "task": task, "outcome": "passed" if pts == MAX_POINTS[task] else "failed",
              "points": pts, "max_points": MAX_POINTS[task], "message": ""}
             for task, pts in POINTS[student].items() if task in MAX_POINTS]
    return {"student": student, "assignment": ASSIGNMENT, "score": sum(t["points"] for t in tests),
            "max_score": sum(MAX_POINTS.values()), "submission_digest": digest, "sandboxed": True, "tests": tests}


def _hand_in(course: Path, student: str) -> None:
    """A folder of the task files; dave hands in a zip of them instead."""
    files = {name: f"# {student}'s {name}\n" for name in EXERCISE_FILES}
    if student == "dave":
        (course / "submitted" / student).mkdir(parents=True)
        with zipfile.ZipFile(course / "submitted" / student / f"{ASSIGNMENT}.zip", "w") as zf:
            for name, text in files.items():
                zf.writestr(f"dave/{name}", text)
        return
    folder = course / "submitted" / student / ASSIGNMENT
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    from nbgrader.api import Gradebook

    course = tmp_path_factory.mktemp("export") / "course"
    init_course(CourseSettings(course, ASSIGNMENT), MAX_POINTS)
    for student in POINTS:
        _hand_in(course, student)
    for submission in scan_submitted(CourseSettings(course, ASSIGNMENT))[0]:  # as `bertlab grade` sees them
        record_result(CourseSettings(course, ASSIGNMENT), _result(submission.student, submission_digest(submission)))
    _hand_in(course, "erin")  # never graded
    (course / "submitted" / "carol" / ASSIGNMENT / "cka.py").write_text("# carol's new cka.py\n")  # stale now
    with Gradebook(course_db_url(course)) as gb:  # what an instructor does in nbgrader's formgrader
        gb.find_grade("pooling", ASSIGNMENT, ASSIGNMENT, "bob").manual_score = 6.5
        gb.find_grade("siamese", ASSIGNMENT, ASSIGNMENT, "bob").extra_credit = 1.0
        gb.db.commit()
    return course


@pytest.fixture(scope="module")
def gradebook(course):
    """What nbgrader itself says: student -> (total, {task: score}), and the assignment's maximum."""
    from nbgrader.api import Gradebook

    with Gradebook(course_db_url(course)) as gb:
        scores = {s: (gb.find_submission(ASSIGNMENT, s).score,
                      {t: gb.find_grade(t, ASSIGNMENT, ASSIGNMENT, s).score for t in MAX_POINTS})
                  for s in POINTS}
    return {"scores": scores, "max": sum(course_max_points(CourseSettings(course, ASSIGNMENT)).values())}


def _export(capsys, *argv) -> tuple[int, str, str]:
    """`bertlab` with ``argv`` (paths as strings): exit code, stdout, stderr."""
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _read(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def test_gradebook_holds_the_manual_score(gradebook):
    # the export must read the gradebook, not results.json: bob's total there differs from his results
    total, _ = gradebook["scores"]["bob"]
    assert total != pytest.approx(sum(p for t, p in POINTS["bob"].items() if t in MAX_POINTS))


def test_canvas_export_fills_a_new_column(course, gradebook, tmp_path, capsys):
    roster_before = CANVAS.read_bytes()
    out = tmp_path / "canvas.csv"
    code, stdout, stderr = _export(capsys, "export", course, "--format", "canvas", "--roster", CANVAS, "--out", out)
    assert code == 0, stderr
    assert CANVAS.read_bytes() == roster_before  # the roster itself is never written

    roster, written = _read(CANVAS), _read(out)
    assert written[0][:5] == CANVAS_IDENTITY  # what Canvas's importer requires, in its order
    assert written[0] == roster[0] + [ASSIGNMENT]
    assert len(written) == len(roster)
    for before, after in zip(roster, written):
        assert after[:-1] == before  # every roster row and column kept as it was
    points_row = next(row for row in written if "Points Possible" in row[0])
    assert float(points_row[-1]) == pytest.approx(gradebook["max"])
    posting_row = next(row for row in written if "Manual Posting" in row)
    assert posting_row[-1] == ""

    cell = {row[3]: row[-1] for row in written[1:] if "Points Possible" not in row[0] and row[3]}
    for student in ("alice", "bob"):
        assert float(cell[student]) == pytest.approx(gradebook["scores"][student][0]), student
    # stale (carol), never graded (erin), nothing handed in (frank): empty, never 0
    assert cell["carol"] == cell["erin"] == cell["frank"] == ""
    assert next(row for row in written if row[0] == "Student, Test")[-1] == ""

    errors = stderr.splitlines()
    assert [line for line in errors if "dave" in line] == \
        [f"not on the roster: dave ({number(gradebook['scores']['dave'][0])}/{number(gradebook['max'])})"]
    assert any(line.startswith("1 course student id(s) match no 'SIS Login ID'") for line in errors)
    assert any(line.startswith("stale: carol:") for line in errors)
    assert any(line.startswith("not graded: erin:") for line in errors)
    assert "2 with a grade" in stdout


def test_canvas_export_fills_an_existing_column_in_place(course, gradebook, tmp_path, capsys):
    # a roster exported after an earlier import: the column is Canvas's "week7 (88123)", semicolon-separated
    rows = _read(CANVAS)
    old = {"alice": "1.00", "carol": "7.00", "frank": ""}
    for row in rows:
        if row[0] == "Student":
            row.insert(6, "week7 (88123)")
        else:
            row.insert(6, "40.00" if "Points Possible" in row[0] else old.get(row[3], ""))
    roster = tmp_path / "canvas-again.csv"
    with open(roster, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, delimiter=";").writerows(rows)
    out = tmp_path / "canvas-again-out.csv"

    code, _, stderr = _export(capsys, "export", course, "--format", "canvas", "--roster", roster, "--out", out)
    assert code == 0, stderr
    assert ";" in out.read_text(encoding="utf-8").splitlines()[0]  # written as the roster was
    with open(out, newline="", encoding="utf-8") as handle:
        written = list(csv.reader(handle, delimiter=";"))
    assert written[0] == rows[0]  # filled in place: no column added
    cell = {row[3]: row[6] for row in written[1:] if "Points Possible" not in row[0] and row[3]}
    assert float(cell["alice"]) == pytest.approx(gradebook["scores"]["alice"][0])
    assert cell["carol"] == "7.00"  # no current grade: Canvas keeps what it has
    assert cell["frank"] == ""
    assert float(next(r for r in written if "Points Possible" in r[0])[6]) == pytest.approx(gradebook["max"])
    assert "note: points possible of 'week7 (88123)' changed from 40.00" in stderr


def test_moodle_export(course, gradebook, tmp_path, capsys):
    out = tmp_path / "moodle.csv"
    code, _, stderr = _export(capsys, "export", course, "--format", "moodle", "--roster", MOODLE, "--out", out,
                              "--id-column", "ID number")
    assert code == 0, stderr
    written = _read(out)
    assert written[0] == ["ID number", ASSIGNMENT, f"{ASSIGNMENT} feedback"]
    # only students with a current grade: an empty grade would erase one Moodle holds
    assert [row[0] for row in written[1:]] == ["alice", "bob"]
    maxima = course_max_points(CourseSettings(course, ASSIGNMENT))
    for student, grade, feedback in written[1:]:
        total, tasks = gradebook["scores"][student]
        assert float(grade) == pytest.approx(total)
        assert feedback == "; ".join(f"{t} {number(tasks[t])}/{number(maxima[t])}" for t in maxima)
    assert "not on the roster: dave" in stderr

    # Moodle's default identifier, the email address, holds no course id here: said, not guessed around
    code, _, stderr = _export(capsys, "export", course, "--format", "moodle", "--roster", MOODLE, "--out", out)
    assert code == 0 and _read(out) == [["Email address", ASSIGNMENT, f"{ASSIGNMENT} feedback"]]
    assert "no course student id matches any value of the roster's 'Email address' column" in stderr


def test_plain_export_without_and_with_roster(course, gradebook, tmp_path, capsys):
    out = tmp_path / "plain.csv"
    code, _, stderr = _export(capsys, "export", course, "--format", "plain", "--out", out)
    assert code == 0, stderr
    written = _read(out)
    assert written[0] == ["student", "total", "max", *MAX_POINTS]
    rows = {row[0]: row for row in written[1:]}
    assert sorted(rows) == ["alice", "bob", "carol", "dave", "erin"]
    for student in ("alice", "bob", "dave"):
        total, tasks = gradebook["scores"][student]
        assert float(rows[student][1]) == pytest.approx(total)
        assert float(rows[student][2]) == pytest.approx(gradebook["max"])
        assert [float(x) for x in rows[student][3:]] == pytest.approx([tasks[t] for t in MAX_POINTS])
    for student in ("carol", "erin"):
        assert rows[student][1] == "" and rows[student][3:] == [""] * len(MAX_POINTS)

    code, _, stderr = _export(capsys, "export", course, "--format", "plain", "--out", out, "--roster", MOODLE,
                              "--id-column", "ID number")
    assert code == 0
    assert [row[0] for row in _read(out)[1:]] == ["alice", "bob", "carol", "erin", "frank"]
    assert "not on the roster: dave" in stderr


@pytest.mark.parametrize("case", ["no id column", "unknown format", "no assignment", "out is the roster",
                                  "not a canvas export", "no roster", "canvas total name", "no course"])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(course, tmp_path, capsys, case):
    roster = tmp_path / "roster.csv"
    roster.write_bytes(CANVAS.read_bytes())
    out = tmp_path / "out.csv"
    out.write_text("earlier file\n")
    argv = {
        "no id column": [course, "--format", "canvas", "--roster", roster, "--id-column", "Username"],
        "unknown format": [course, "--format", "blackboard", "--roster", roster],
        "no assignment": [course, "--format", "canvas", "--roster", roster, "--assignment", "week8"],
        "out is the roster": [course, "--format", "canvas", "--roster", roster],
        "not a canvas export": [course, "--format", "canvas", "--roster", MOODLE],
        "no roster": [course, "--format", "canvas"],
        "canvas total name": [course, "--format", "canvas", "--roster", roster, "--column", "week7 Final Score"],
        "no course": [tmp_path / "nowhere", "--format", "plain"],
    }[case]
    target = roster if case == "out is the roster" else out
    code, _, stderr = _export(capsys, "export", *argv, "--out", target)
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bertlab export: "), stderr
    named = {"no id column": "'Username'", "unknown format": "'blackboard'", "no assignment": "'week8'",
             "out is the roster": "roster itself", "not a canvas export": "Canvas gradebook export",
             "no roster": "--roster", "canvas total name": "--column", "no course": "no course folder"}[case]
    assert named in lines[0]
    assert out.read_text() == "earlier file\n"
    assert roster.read_bytes() == CANVAS.read_bytes()
