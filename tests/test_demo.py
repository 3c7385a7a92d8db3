"""`bertlab demo`, the main job: the embedded cohort graded end to end, offline.

The ``demo`` fixture (tests/conftest.py) runs it as pip installs the kit: the wheel, installed
non-editable into a fresh virtualenv, started from an empty folder (tests/test_packaging.py checks
that installation itself).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from bertlab.tasks import EXERCISE_TASKS, EXERCISES

KIT_ROOT = Path(__file__).resolve().parents[1]
TASKS = EXERCISE_TASKS


def _task_points(result, task):
    tests = [t for t in result["tests"] if t["task"] == task]
    return sum(t["points"] for t in tests), sum(t["max_points"] for t in tests)


def test_demo(demo):
    proc = demo["proc"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    for student in ("alice", "bob", "carol", "dave", "erin", "frank"):
        assert student in proc.stdout, f"{student} missing from the printed gradebook"
    assert "grades.csv" in proc.stdout and "feedback" in proc.stdout.lower()
    assert sorted(demo["results"]) == ["alice", "bob", "carol", "dave", "erin", "frank"]


def test_demo_grades_as_before_the_speed_work(demo):
    """Test by test (outcome, points, message, hint), the demo cohort graded today as the kit graded
    it before grading was made faster (tests/grade_snapshots.py says what may differ: erin's later
    timeouts now fail at once with the first one's message)."""
    from grade_snapshots import differences, load

    before = load("demo")
    found = differences(before, demo["results"])
    assert not found, f"the demo's grades differ from kit {before['kit']}'s:\n  " + "\n  ".join(found)


def test_demo_scores_follow_the_cohort(demo):
    r = demo["results"]
    for task in TASKS:
        got, full = _task_points(r["alice"], task)
        assert got == full, f"the reference solution lost points in {task}"
        assert _task_points(r["frank"], task) == (got, full), "the zip submission should equal the solution"
        assert _task_points(r["bob"], task)[0] == 0, f"untouched stubs earned points in {task}"
        assert _task_points(r["erin"], task)[0] == 0, f"the hostile submission earned points in {task}"
    for task in TASKS:  # carol finished the first two tasks and left the others as stubs
        got, full = _task_points(r["carol"], task)
        assert got == (full if task in TASKS[:2] else 0), f"carol's {task}: {got}/{full}"
    from bertlab_grader.commands.demo import BUGGY_FROM_BANK
    from bertlab_grader.mutants.bank import MUTANTS

    buggy = {recipe.task for recipe in MUTANTS if recipe.name in BUGGY_FROM_BANK}
    assert buggy, "dave has no bug from the mutant bank"
    for task in TASKS:  # dave's bugs, from the mutant bank; his other files are correct
        got, full = _task_points(r["dave"], task)
        if task in buggy:
            assert got < full, f"dave's {task} bug was not caught"
        else:
            assert got == full, f"dave's {task} file is correct: a bug elsewhere must not cost {task} points"


def test_demo_gradebook_and_feedback(demo):
    course = demo["course"]
    with open(course / "grades.csv", newline="") as handle:
        rows = {row["student_id"]: row for row in csv.DictReader(handle)}
    for student, result in demo["results"].items():
        assert float(rows[student]["score"]) == pytest.approx(result["score"])
        page = (course / "feedback" / student / "week7" / "week7.html").read_text()
        assert result["tests"][0]["name"] in page
    from bertlab_grader.core.locations import SUITES_DIR

    hidden_lines = [line.strip() for path in SUITES_DIR.glob("test_*.py")
                    for line in path.read_text().splitlines() if len(line.strip()) > 40]
    assert hidden_lines, "found no hidden test source to look for"
    feedback = "\n".join(p.read_text() for p in course.glob("feedback/*/week7/*"))
    leaked = [line for line in hidden_lines if line in feedback]
    assert not leaked, f"hidden test source reached the feedback: {leaked[:2]}"


def test_demo_hostile_submission_left_no_trace(demo):
    assert not Path("/tmp/erin-was-here").exists(), "the hostile submission wrote outside its sandbox"
    messages = " ".join(t["message"] for t in demo["results"]["erin"]["tests"])
    assert "BEGIN SOLUTION" not in messages and "def linear_cka" not in messages


def test_demo_results_match_the_published_schema(demo):
    from bertlab_grader.course.results import check_results_schema

    for student, result in demo["results"].items():
        check_results_schema(result)
        assert result["sandboxed"] is True and result["submission_digest"].startswith("sha256:"), student


def test_demo_identical_files_get_identical_speed_points(demo):
    """frank handed in alice's files (as a zip): one speed measurement, kept in the course, serves both
    (grader/bertlab_grader/performance/record.py), so their performance points cannot differ by chance."""
    alice, frank = (demo["results"][s] for s in ("alice", "frank"))
    speed = lambda result: [(t["name"], t["points"], t["ratio"]) for t in result["tests"]  # noqa: E731
                            if t["task"] == "performance"]
    timed = [e for e in EXERCISES if e.timed]  # one speed test per timed task, of its first function
    assert len(speed(alice)) == len(timed) and speed(alice) == speed(frank)
    # The record's key is the digest results.json records, without its "sha256:".
    digests = {s: demo["results"][s]["submission_digest"].removeprefix("sha256:") for s in ("alice", "frank")}
    assert digests["alice"] == digests["frank"], "the zip should hold alice's files byte for byte"
    record = json.loads((demo["course"] / ".bertlab" / "timings-week7.json").read_text())
    assert set(record["submissions"][digests["alice"]]) == {e.functions[0] for e in timed}


def test_erin_hands_in_a_file_for_every_task():
    """The demo's stored student (grader/bertlab_grader/commands/demo_cohort/erin/) is a whole submission:
    a file for every registered task (`bertlab new-task` gives her the untouched stub of a new task,
    `bertlab remove-task` takes a removed task's file away), so that each task's zero is her doing."""
    from bertlab.tasks import EXERCISE_FILES
    from bertlab_grader.commands.demo import COHORT_DIR as DEMO_COHORT_DIR

    held = sorted(p.name for p in (DEMO_COHORT_DIR / "erin").glob("*.py"))
    assert held == sorted(EXERCISE_FILES), (
        f"demo_cohort/erin/ holds {held}, the registry's tasks need {sorted(EXERCISE_FILES)}: give her the missing "
        "task's file (new-task writes the stub there) or remove the file of a task the registry no longer has.")


def test_snapshot_messages_agree_within_round_off_and_no_further():
    """The snapshot comparison lets a quoted float differ in its last digits (a float32 result depends
    on the CPU's vector instructions), and nothing else: another word or a number off by more is a
    difference."""
    from grade_snapshots import same_message

    before = "linear_cka(X [40, 8], Y [40, 5]) is 0.9677897304; expected 0.633597756 (tolerance 1e-06)."
    assert same_message(before, "linear_cka(X [40, 8], Y [40, 5]) is 0.9677897303; expected 0.6335977604 (tolerance 1e-06).")
    assert not same_message(before, "linear_cka(X [40, 8], Y [40, 5]) is 0.9677997303; expected 0.633597756 (tolerance 1e-06).")
    assert not same_message(before, "linear_cka(X [40, 8], Y [40, 6]) is 0.9677897304; expected 0.633597756 (tolerance 1e-06).")
    assert not same_message(before, "linear_cka(X [40, 8], Y [40, 5]) was 0.9677897304; expected 0.633597756 (tolerance 1e-06).")
    assert not same_message(before, None)
    printed = "expected -0.174497, got 0.834181 (tolerance 9.74249e-07 + 0*|expected|)"  # %g: six digits
    assert same_message(printed, "expected -0.174497, got 0.83418 (tolerance 9.74249e-07 + 0*|expected|)")
    assert not same_message(printed, "expected -0.174497, got 0.83416 (tolerance 9.74249e-07 + 0*|expected|)")
