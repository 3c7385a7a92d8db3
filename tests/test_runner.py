"""`bertlab grade` and `bertlab grade-one`, run for real as commands (sandbox, nbgrader gradebook).

Stub submissions keep these fast: every hidden test fails at once with "not implemented". That the
runner gives real points to real code is shown by tests/test_demo.py on the demo cohort. The usage
errors of both commands (exit 2, one line: a missing folder, a course without submitted/) are run in
tests/test_grading_trust.py.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertlab.tasks import EXERCISE_FILES, GRADED_TASKS
from conftest import THREAD_VARIABLES


KIT_ROOT = Path(__file__).resolve().parents[1]
STUBS = {name: (KIT_ROOT / "exercises" / name).read_text() for name in EXERCISE_FILES}


def _bertlab(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "bertlab.cli", *args], capture_output=True, text=True,
                          cwd=KIT_ROOT, timeout=600, **kwargs)


def _submit(course: Path, student: str, files: dict[str, str]) -> None:
    folder = course / "submitted" / student / "week7"
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)


@pytest.mark.slow  # (real sandboxed grading: the fast loop leaves it to the whole suite)
def test_grade_one_json(tmp_path):
    submission = tmp_path / "zoe"
    submission.mkdir()
    for name, text in STUBS.items():
        (submission / name).write_text(text)
    proc = _bertlab("grade-one", str(submission), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    from bertlab_grader.course.results import check_results_schema

    check_results_schema(result)
    assert result["student"] == "zoe" and result["assignment"] == "week7"
    assert result["score"] == 0 and result["max_score"] > 0
    assert {t["task"] for t in result["tests"]} == set(GRADED_TASKS)
    assert all(t["outcome"] != "passed" for t in result["tests"])
    assert all(t["max_points"] > 0 for t in result["tests"])
    # A stub's typed exception crosses the sandbox as NotImplementedError: the student reads the
    # stub's own words, not the exception's class name.
    cka = [t["message"] for t in result["tests"] if t["task"] == "cka"]
    assert cka and all(m.startswith("Not implemented yet: cka: implement ") for m in cka), cka[:2]
    assert not any(t["message"].startswith("Not implemented yet: NotImplementedYet") for t in result["tests"])


@pytest.mark.slow  # (real sandboxed grading: the fast loop leaves it to the whole suite)
def test_grade_course(tmp_path):
    """Killed with SIGKILL mid-run, then rerun: every student graded exactly once, none lost. A result
    counts as recorded once its line is in the run's journal (grader/bertlab_grader/course/journal.py): the rerun
    records what the killed run journaled, and skips those students as unchanged."""
    course = tmp_path / "course"
    students = ["s1", "s2", "s3"]
    for student in students:  # files that differ: copies of one submission are graded once, all at once
        _submit(course, student, {name: f"{text}\n# handed in by {student}\n" for name, text in STUBS.items()})
    cmd = [sys.executable, "-m", "bertlab.cli", "grade", str(course), "--workers", "1"]
    first = subprocess.Popen(cmd, cwd=KIT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
    deadline = time.monotonic() + 400
    results = lambda: sorted(course.glob("autograded/*/week7/results.json"))  # noqa: E731

    def journaled() -> dict:
        from bertlab_grader.course import journal
        from bertlab_grader.course.settings import CourseSettings

        return {e["result"]["student"]: e["result"] for path in journal.journal_paths(CourseSettings(course, "week7"))
                for e in journal.read_entries(path)}

    while not journaled() and not results() and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)  # the grader and its workers and sandboxes, at once
    first.wait()
    before = journaled()
    before.update({p.parent.parent.name: json.loads(p.read_text()) for p in results()})
    graded_before = sorted(before)
    assert 1 <= len(graded_before) < len(students), f"kill landed at a bad time: {graded_before}"
    second = subprocess.run(cmd, cwd=KIT_ROOT, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    # Finished students are not graded again (only re-synced into the gradebook, unchanged).
    remaining = len(students) - len(graded_before)
    assert f"Grading {remaining} submission(s)" in second.stderr
    assert f"{len(graded_before)} unchanged since last grading" in second.stderr
    assert sorted(p.parent.parent.name for p in results()) == students
    for student, result in before.items():
        path = course / "autograded" / student / "week7" / "results.json"
        assert json.loads(path.read_text()) == result, f"{path} is not what the killed run recorded"
    with open(course / "grades.csv", newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row["assignment"] == "week7"]
    assert sorted(row["student_id"] for row in rows) == students, "each student once in the gradebook"
    assert all(float(row["score"]) == 0.0 for row in rows)
    for student in students:
        assert (course / "feedback" / student / "week7" / "week7.html").is_file()


def test_workers_fork_from_a_warm_fork_server_unless_told_to_spawn(monkeypatch):
    """The fork server imports bertlab_grader.course.worker_preload (torch, MiniLM, reference data) once; with
    BERTLAB_WORKER_START=spawn each worker starts a fresh interpreter instead."""
    from bertlab_grader.course import pool

    ctx = pool.worker_context()
    assert ctx.get_start_method() == "forkserver"
    monkeypatch.setenv("BERTLAB_WORKER_START", "spawn")
    assert pool.worker_context().get_start_method() == "spawn"


@pytest.mark.slow  # (over 10 s: the fast loop leaves it to the whole suite)
def test_worker_preload_leaves_torch_on_one_thread():
    """Forking is only safe when no OpenMP pool exists yet: the preload limits torch to one thread
    before any tensor work, and switches the tokenizers' pool off."""
    code = ("import torch, os, bertlab_grader.course.worker_preload as p\n"
            "print(torch.get_num_threads(), os.environ['TOKENIZERS_PARALLELISM'])")
    # (with no thread count inherited: under -n the suite's workers set one, conftest.THREAD_VARIABLES)
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES + ("TOKENIZERS_PARALLELISM",)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).resolve().parents[1], env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["1", "false"]
