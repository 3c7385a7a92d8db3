"""An instructor's manual score and extra credit: kept when the same files are graded again, set aside
(and remembered, and named) when the student handed in changed files (grader/bertlab_grader/course/adjustments.py)."""

from __future__ import annotations

import json

import pytest

from bertlab_grader.course.adjustments import KEPT, SET_ASIDE, set_aside_path
from bertlab_grader.course.config import course_db_url, init_course
from bertlab_grader.course.gradebook import record_result
from bertlab_grader.course.summary import RunSummary
from bertlab_grader.course.settings import CourseSettings

ASSIGNMENT = "week7"
POINTS = {"cka": 4.0, "pooling": 6.0}
DIGEST_A, DIGEST_B = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def _result(student: str, digest: str | None, cka: float = 4.0, pooling: float = 3.0) -> dict:
    tests = [{"name": "t_cka", "task": "cka", "outcome": "passed" if cka == 4.0 else "failed", "points": cka,
              "max_points": 4.0, "message": ""},
             {"name": "t_pool", "task": "pooling", "outcome": "failed", "points": pooling, "max_points": 6.0,
              "message": "values off"}]
    result = {"student": student, "assignment": ASSIGNMENT, "score": cka + pooling, "max_score": 10.0,
              "tests": tests}
    return {**result, "submission_digest": digest} if digest else result


def _adjust(course, student: str, manual: float | None = None, extra: float | None = None) -> None:
    """What formgrader's buttons do: a manual score for pooling, extra credit for cka."""
    from nbgrader.api import Gradebook

    with Gradebook(course_db_url(course)) as gb:
        if manual is not None:
            gb.find_grade("pooling", ASSIGNMENT, ASSIGNMENT, student).manual_score = manual
        if extra is not None:
            gb.find_grade("cka", ASSIGNMENT, ASSIGNMENT, student).extra_credit = extra
        gb.db.commit()


def _grades(course, student: str) -> dict:
    from nbgrader.api import Gradebook

    with Gradebook(course_db_url(course)) as gb:
        out = {task: gb.find_grade(task, ASSIGNMENT, ASSIGNMENT, student) for task in POINTS}
        return {task: (g.auto_score, g.manual_score, g.extra_credit, g.needs_manual_grade, g.score)
                for task, g in out.items()}


@pytest.fixture
def course(tmp_path):
    course = tmp_path / "course"
    init_course(CourseSettings(course, ASSIGNMENT), POINTS)
    return course


def test_the_same_files_graded_again_keep_the_adjustment(course):
    heard = []
    record_result(CourseSettings(course, ASSIGNMENT), _result("ann", DIGEST_A), on_adjustment=heard.append)
    assert heard == []  # nothing adjusted yet
    _adjust(course, "ann", manual=5.5, extra=1.0)
    record_result(CourseSettings(course, ASSIGNMENT), _result("ann", DIGEST_A, pooling=2.0), on_adjustment=heard.append)  # --regrade
    grades = _grades(course, "ann")
    assert grades["pooling"][:4] == (2.0, 5.5, None, True) and grades["pooling"][4] == 5.5
    assert grades["cka"][2] == 1.0 and grades["cka"][4] == 5.0
    assert [(a.student, a.action) for a in heard] == [("ann", KEPT)]
    assert heard[0].tasks == {"pooling": {"manual_score": 5.5, "extra_credit": None},
                              "cka": {"manual_score": None, "extra_credit": 1.0}}
    assert not set_aside_path(CourseSettings(course, ASSIGNMENT)).exists()


def test_changed_files_set_the_adjustment_aside_and_remember_it(course):
    heard = []
    record_result(CourseSettings(course, ASSIGNMENT), _result("bo", DIGEST_A))
    _adjust(course, "bo", manual=6.0, extra=0.5)
    record_result(CourseSettings(course, ASSIGNMENT), _result("bo", DIGEST_B, pooling=1.0), on_adjustment=heard.append)  # handed in again
    grades = _grades(course, "bo")
    assert grades["pooling"] == (1.0, None, None, False, 1.0), "the new code's own score stands"
    assert grades["cka"] == (4.0, None, None, False, 4.0)
    assert [(a.student, a.action) for a in heard] == [("bo", SET_ASIDE)]
    kept = json.loads(set_aside_path(CourseSettings(course, ASSIGNMENT)).read_text())
    assert len(kept) == 1 and kept[0]["student"] == "bo"
    assert kept[0]["tasks"]["pooling"] == {"manual_score": 6.0, "extra_credit": None}
    assert kept[0]["tasks"]["cka"] == {"manual_score": None, "extra_credit": 0.5}
    assert (kept[0]["files_then"], kept[0]["files_now"]) == (DIGEST_A, DIGEST_B)

    summary = RunSummary(graded=["bo"], adjustments=heard)
    text = summary.format()
    assert "set aside" in text and "bo" in text and "set-aside-adjustments" in text


def test_without_a_digest_to_compare_nothing_is_set_aside_on_a_guess(course):
    heard = []
    record_result(CourseSettings(course, ASSIGNMENT), _result("cy", None))
    _adjust(course, "cy", manual=4.0)
    record_result(CourseSettings(course, ASSIGNMENT), _result("cy", DIGEST_B), on_adjustment=heard.append)
    assert _grades(course, "cy")["pooling"][1] == 4.0
    assert [a.action for a in heard] == [KEPT]


def test_a_batch_sets_aside_and_keeps_each_students_adjustment_and_a_replay_loses_none(course, monkeypatch):
    """The run's writer records in batches (grader/bertlab_grader/course/journal.py): in one batch, the rule holds for
    each student, and the set-aside adjustments are written before the gradebook commits, so a run
    killed after the commit (before results.json) loses none of them; the replay adds no second entry."""
    from bertlab_grader.course import gradebook, journal

    for student in ("ann", "bo"):
        record_result(CourseSettings(course, ASSIGNMENT), _result(student, DIGEST_A))
        _adjust(course, student, manual=5.0)
    heard = []
    real_write = gradebook.atomic_write_text

    def killed_before_results_json(path, text, **options):  # the commit done, then the run dies
        if path.name == "results.json":
            raise KeyboardInterrupt
        real_write(path, text, **options)

    monkeypatch.setattr(gradebook, "atomic_write_text", killed_before_results_json)
    writer = journal.ResultWriter(CourseSettings(course, ASSIGNMENT), on_adjustment=heard.append)
    writer.record(_result("ann", DIGEST_A, pooling=2.0))   # --regrade, the same files
    writer.record(_result("bo", DIGEST_B, pooling=1.0))    # handed in again
    with pytest.raises(KeyboardInterrupt):
        writer.close()
    assert _grades(course, "ann")["pooling"] == (2.0, 5.0, None, True, 5.0), "kept, flagged for review"
    assert _grades(course, "bo")["pooling"] == (1.0, None, None, False, 1.0), "set aside"
    kept = json.loads(set_aside_path(CourseSettings(course, ASSIGNMENT)).read_text())
    assert [(k["student"], k["files_then"], k["files_now"]) for k in kept] == [("bo", DIGEST_A, DIGEST_B)]
    assert len(journal.journal_paths(CourseSettings(course, ASSIGNMENT))) == 1, "the interrupted batch stays journaled"

    monkeypatch.undo()
    assert sorted(journal.replay(CourseSettings(course, ASSIGNMENT), on_adjustment=heard.append)) == ["ann", "bo"]
    assert _grades(course, "ann")["pooling"] == (2.0, 5.0, None, True, 5.0)
    assert _grades(course, "bo")["pooling"] == (1.0, None, None, False, 1.0)
    assert len(json.loads(set_aside_path(CourseSettings(course, ASSIGNMENT)).read_text())) == 1, "set aside once"
    assert json.loads((course / "autograded" / "bo" / ASSIGNMENT / "results.json").read_text())[
        "submission_digest"] == DIGEST_B
