"""Grading that never lies: grader failures are never grades, preflight, resubmissions, every folder
accounted for, instructor mistakes change nothing, documented exit codes.

Run for real: `bertlab grade` as a command, real bubblewrap sandboxes, a real nbgrader gradebook.
Stub submissions keep most runs short (every hidden test fails at once with "not implemented").
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from bertlab_grader.core.failures import GraderFailure
from bertlab_grader.core.locations import reference_sources
from bertlab_grader.grading.preflight import shortfall
from bertlab.tasks import EXERCISE_FILES
from bertlab_grader.course.settings import CourseSettings

KIT_ROOT = Path(__file__).resolve().parents[1]
STUBS = {name: (KIT_ROOT / "exercises" / name).read_text() for name in EXERCISE_FILES}
BWRAP = shutil.which("bwrap")
needs_bwrap = pytest.mark.skipif(BWRAP is None, reason="bubblewrap is not installed (apt-get install bubblewrap)")


def _bertlab(*args, env=None, cwd=KIT_ROOT):
    return subprocess.run([sys.executable, "-m", "bertlab.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=900, env=env)


def _submit(course: Path, student: str, files: dict[str, str]) -> Path:
    folder = course / "submitted" / student / "week7"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def _graded(course: Path) -> list[str]:
    return sorted(p.parent.parent.name for p in course.glob("autograded/*/week7/results.json"))


def _gradebook_students(course: Path) -> list[str]:
    db = course / "gradebook.db"
    if not db.exists():
        return []
    with sqlite3.connect(db) as conn:
        return sorted(row[0] for row in conn.execute(
            "SELECT student_id FROM submitted_assignment JOIN assignment ON assignment.id = assignment_id "
            "WHERE assignment.name = 'week7'"))


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` with a hash of its bytes: "nothing changed" is checked on content."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _broken_bwrap(folder: Path, fail_for: str) -> dict[str, str]:
    """An environment whose PATH starts with a ``bwrap`` stand-in that runs the real bubblewrap except
    when its command line contains ``fail_for`` (then it exits 1 like a bwrap denied its namespaces)."""
    folder.mkdir(parents=True, exist_ok=True)
    stand_in = folder / "bwrap"
    stand_in.write_text(f"""#!/bin/sh
case "$*" in
  *{fail_for}*) echo "bwrap: setting up uid map: Permission denied" >&2; exit 1 ;;
esac
exec {BWRAP} "$@"
""")
    stand_in.chmod(stand_in.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


# ----------------------------------------------------------------------------- unit: what is a grade

class _BrokenSandboxImpl:
    """An ``impl`` whose every use fails the way a sandbox that cannot start does."""

    def __getattr__(self, name):
        from bertlab_grader.sandbox.bubblewrap import SandboxError

        raise SandboxError("the sandbox worker did not start (stand-in)")


def test_a_sandbox_failure_is_not_a_grade():
    from bertlab_grader.grading.scoring import run_hidden_suite

    with pytest.raises(GraderFailure, match="did not start"):
        run_hidden_suite(_BrokenSandboxImpl(), student="s", tasks=["cka"], hints=False)


def test_preflight_shortfall_ignores_performance_only():
    tests = [{"task": "cka", "name": "t1", "outcome": "passed", "points": 2.0, "max_points": 2.0, "message": ""},
             {"task": "performance", "name": "t2", "outcome": "failed", "points": 1.0, "max_points": 5.0,
              "message": "slow"}]
    assert shortfall({"tests": tests}) is None
    tests.append({"task": "pooling", "name": "t3", "outcome": "error", "points": 0.0, "max_points": 3.0,
                  "message": "Your code raised ValueError"})
    assert shortfall({"tests": tests}) == "pooling/t3 (error): Your code raised ValueError"


def test_reference_sources_have_no_fences():
    sources = reference_sources()
    assert sorted(sources) == sorted(STUBS)
    assert not any("BEGIN SOLUTION" in text for text in sources.values())


def test_student_text_never_names_a_path_or_kit_frame():
    from bertlab_grader.grading.scoring import error_message, scrub

    text = ('the sandbox said:\nTraceback (most recent call last):\n'
            f'  File "{KIT_ROOT}/grader/bertlab_grader/sandbox/inside/server.py", line 813, in <module>\n    main()\n'
            '  File "cka.py", line 4, in linear_cka\n    raise ValueError("bad")\n'
            f'ValueError: bad shape, see {KIT_ROOT}/solutions/cka.py and /srv/x/y')
    clean = scrub(text)
    assert str(KIT_ROOT) not in clean and "server.py" not in clean and "/srv/x" not in clean
    assert 'File "cka.py", line 4' in clean and "raise ValueError" in clean, "the student's own frames stay"
    assert str(KIT_ROOT) not in error_message(ValueError(text), "call")


# ----------------------------------------------------------------------- instructor mistakes (exit 2)

@pytest.mark.slow  # (4 s or more: the fast loop stays under 5 minutes, docs/architecture.md)
def test_unknown_assignment_lists_the_known_ones_and_changes_nothing(tmp_path):
    course = tmp_path / "course"
    _submit(course, "s1", STUBS)
    before = _tree(course)
    proc = _bertlab("grade", str(course), "--assignment", "week8")
    assert proc.returncode == 2, proc.stderr
    assert "unknown assignment 'week8'" in proc.stderr and "week7" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert _tree(course) == before, "an unknown assignment must leave the course untouched"
    assert not (course / "source").exists() and not (course / "gradebook.db").exists()


@pytest.mark.parametrize("case", ["missing course", "no submitted", "empty submitted", "bad gradebook"])
def test_course_mistakes_get_one_line(tmp_path, case):
    course = tmp_path / "course"
    extra = []
    if case == "no submitted":
        course.mkdir()
    elif case == "empty submitted":
        (course / "submitted").mkdir(parents=True)
    elif case == "bad gradebook":
        _submit(course, "s1", STUBS)
        extra = ["--db-url", f"sqlite:///{tmp_path}/no-such-folder/gradebook.db"]
    proc = _bertlab("grade", str(course), *extra)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    expected = {"missing course": "no course folder", "no submitted": "no submitted/ folder",
                "empty submitted": "is empty", "bad gradebook": "does not exist"}[case]
    assert expected in proc.stderr


def test_grade_one_usage_errors_are_one_line(tmp_path):
    proc = _bertlab("grade-one", str(tmp_path / "nobody"))
    assert proc.returncode == 2 and "not a directory" in proc.stderr and "Traceback" not in proc.stderr
    (tmp_path / "empty").mkdir()
    proc = _bertlab("grade-one", str(tmp_path / "empty"))
    assert proc.returncode == 2 and "holds none of" in proc.stderr and "Traceback" not in proc.stderr


# ----------------------------------------------------------------------------- real cohort runs

@pytest.mark.slow  # (real sandboxed grading: the fast loop leaves it to the whole suite)
@needs_bwrap
def test_a_cohort_through_broken_and_working_sandboxes(tmp_path):
    """One course through the situations of a term (three grading runs, to keep the suite short):

    1. From a virtualenv that is not activated (PATH without this Python's bin: nbgrader runs
       `alembic` by name): two students graded; three folders holding no submission are named in
       the summary and never become zero grades.
    2. A grader failure is never a grade: with a bwrap that cannot start the grading worker, the new
       and the changed submissions get no results.json, no gradebook row and no feedback; the run
       exits 1 and names them. With a bwrap that cannot even start, grading refuses and names the fix.
    3. The rerun with the real bubblewrap grades exactly them (and s2, named by --regrade).
    4. Unchanged submissions are skipped; a --regrade id without a submission is a usage error.
    """
    course = tmp_path / "course"
    for student in ("s1", "s2"):
        _submit(course, student, STUBS)
    (course / "submitted/loose").mkdir(parents=True)
    (course / "submitted/loose/cka.py").write_text(STUBS["cka.py"])
    (course / "submitted/nb/week7").mkdir(parents=True)
    (course / "submitted/nb/week7/week7.ipynb").write_text("{}")
    (course / "submitted/empty").mkdir(parents=True)

    not_activated = {**os.environ, "PATH": "/usr/bin:/bin"}
    first = _bertlab("grade", str(course), "--workers", "1", env=not_activated, cwd="/")
    assert first.returncode == 0, first.stderr[-3000:]
    assert _graded(course) == ["s1", "s2"] and _gradebook_students(course) == ["s1", "s2"]
    out = first.stdout
    assert "folders under submitted/ holding no submission (not graded): 3" in out
    assert "submitted/loose: found cka.py directly in submitted/loose/ (no week7/ folder)" in out
    assert "submitted/nb/week7: found notebook(s) week7.ipynb but no .py files" in out
    assert "submitted/empty: found an empty folder" in out
    with open(course / "grades.csv", newline="") as handle:
        rows = [row["student_id"] for row in csv.DictReader(handle) if row["assignment"] == "week7"]
    assert sorted(rows) == ["s1", "s2"], "folders without a submission must not become zero grades"
    s1_before = (course / "autograded/s1/week7/results.json").read_text()

    _submit(course, "s3", {**STUBS, "pooling.py": STUBS["pooling.py"] + "\n# changed\n"})
    (course / "submitted/s1/week7/cka.py").write_text(STUBS["cka.py"] + "\n# resubmitted\n")
    broken = _broken_bwrap(tmp_path / "broken-bin", fail_for="bertlab_sandbox.server")  # bwrap works, the sandboxed server cannot start
    second = _bertlab("grade", str(course), "--workers", "1", env=broken)
    assert second.returncode == 1, second.stdout[-2000:] + second.stderr[-3000:]
    assert _graded(course) == ["s1", "s2"], "a grader failure must not write results.json"
    assert (course / "autograded/s1/week7/results.json").read_text() == s1_before
    assert _gradebook_students(course) == ["s1", "s2"], "a grader failure must not reach the gradebook"
    assert not (course / "feedback/s3").exists()
    out = second.stdout + second.stderr
    assert "not graded because of the grader: 2" in out
    assert "    s1: " in out and "    s3: " in out and "Traceback" not in out
    assert "earlier result, for files that have since changed, stands" in out, "s1's old grade is still shown"

    refused = _bertlab("grade", str(course), env=_broken_bwrap(tmp_path / "broken-all", fail_for=""))
    assert refused.returncode == 1 and "bubblewrap" in refused.stderr and "--unsafe-no-sandbox" in refused.stderr
    assert _graded(course) == ["s1", "s2"] and _gradebook_students(course) == ["s1", "s2"]

    third = _bertlab("grade", str(course), "--workers", "1", "--regrade", "s2")
    assert third.returncode == 0, third.stderr[-3000:]
    assert "Grading 3 submission(s)" in third.stderr
    assert "graded: 3 (s1, s2, s3)" in third.stdout and "graded again because" in third.stdout
    assert _graded(course) == ["s1", "s2", "s3"] and _gradebook_students(course) == ["s1", "s2", "s3"]
    for student in ("s1", "s2", "s3"):
        result = json.loads((course / f"autograded/{student}/week7/results.json").read_text())
        assert result["sandboxed"] is True and result["submission_digest"].startswith("sha256:")

    unchanged = _bertlab("grade", str(course))  # nothing new: no worker starts
    assert unchanged.returncode == 0 and "Grading 0 submission(s)" in unchanged.stderr
    assert "unchanged since last grading (skipped): 3" in unchanged.stdout
    nobody = _bertlab("grade", str(course), "--regrade", "zoe")
    assert nobody.returncode == 2 and "zoe" in nobody.stderr and "Traceback" not in nobody.stderr


def test_regrade_all_selects_everyone(tmp_path, monkeypatch):
    """--regrade-all picks every submission, unchanged or not (the selection alone, without a run)."""
    from bertlab_grader.course import runner

    course = tmp_path / "course"
    for student in ("s1", "s2"):  # (different files: copies would be graded once)
        _submit(course, student, {**STUBS, "cka.py": STUBS["cka.py"] + f"\n# {student}\n"})
    chosen = {}

    def fake_pool(todo, *args, **kwargs):
        chosen["todo"] = [s.student for s in todo]
        raise runner.RunStopped("stopped by the test")
        yield  # pragma: no cover

    monkeypatch.setattr(runner, "pool_results", fake_pool)
    monkeypatch.setattr(runner, "start_workers", lambda *a, **k: [])
    monkeypatch.setattr(runner, "check_sandbox", lambda unsafe: None)
    from bertlab_grader.course import config as course_config, gradebook as course_gradebook
    from bertlab_grader.course import results as course_results, submissions as course_submissions

    # Only the selection is under test: no gradebook, export or feedback.
    monkeypatch.setattr(course_config, "init_course", lambda *a, **k: None)
    monkeypatch.setattr(course_gradebook, "record_results", lambda course, entries, *a, **k: [course] * len(entries))
    monkeypatch.setattr(course_gradebook, "export_and_feedback", lambda *a, **k: (None, None))
    monkeypatch.setattr(course_gradebook, "keep_gradebook_open", lambda *a, **k: __import__("contextlib").nullcontext())

    for student in ("s1", "s2"):  # both graded before, with the digests of their current files
        sub = course_submissions.Submission(student, course / "submitted" / student / "week7")
        result = course_results.error_result(student, "week7", "x", {"cka": 1.0})
        result["submission_digest"] = course_submissions.submission_digest(sub)
        course_results.write_results_json(course, result)
    summary = runner.run_course(CourseSettings(course, "week7"), runner.RunOptions(quiet=True))
    assert chosen["todo"] == [] and sorted(summary.unchanged) == ["s1", "s2"]
    summary = runner.run_course(CourseSettings(course, "week7"), runner.RunOptions(quiet=True, regrade_all=True))
    assert chosen["todo"] == ["s1", "s2"] and summary.exit_code == 1 and summary.stopped


def test_copies_are_graded_once_and_each_gets_the_result_under_its_own_name(tmp_path, monkeypatch):
    """Identical files are graded once: only the first of each set of files goes to the workers,
    and every copy is recorded with that result, under its own name; a grader failure of the first
    leaves its copies ungraded too, with the same cause (the selection and recording alone)."""
    from bertlab_grader.course import results as course_results, submissions as course_submissions
    from bertlab_grader.course import runner

    course = tmp_path / "course"
    for student, files in (("s1", STUBS), ("s2", STUBS), ("s3", {**STUBS, "cka.py": STUBS["cka.py"] + "\n# mine\n"}),
                           ("s4", STUBS), ("s5", {**STUBS, "cka.py": STUBS["cka.py"] + "\n# other\n"}),
                           ("s6", {**STUBS, "cka.py": STUBS["cka.py"] + "\n# other\n"})):
        _submit(course, student, files)
    sent, recorded = [], {}

    def fake_pool(todo, *args, **kwargs):
        for s in todo:
            sent.append(s.student)
            if s.student == "s5":
                yield s, None, "the worker died"
            else:
                yield s, {**course_results.error_result(s.student, "week7", f"graded as {s.student}", {"cka": 1.0})}, None

    monkeypatch.setattr(runner, "pool_results", fake_pool)
    monkeypatch.setattr(runner, "start_workers", lambda *a, **k: [])
    monkeypatch.setattr(runner, "check_sandbox", lambda unsafe: None)
    from bertlab_grader.course import config as course_config, gradebook as course_gradebook

    monkeypatch.setattr(course_config, "init_course", lambda *a, **k: None)

    def record_results(course, entries, db_url=None, **kw):  # the run's writer records through it, in batches
        recorded.update({e["result"]["student"]: e["result"] for e in entries})
        return [course] * len(entries)

    monkeypatch.setattr(course_gradebook, "record_results", record_results)
    monkeypatch.setattr(course_gradebook, "export_and_feedback", lambda *a, **k: (None, None))
    monkeypatch.setattr(course_gradebook, "keep_gradebook_open", lambda *a, **k: __import__("contextlib").nullcontext())
    summary = runner.run_course(CourseSettings(course, "week7"), runner.RunOptions(quiet=True))
    assert sent == ["s1", "s3", "s5"], "each set of files goes to the workers once, the first student's"
    assert sorted(recorded) == ["s1", "s2", "s3", "s4"]
    for copy in ("s2", "s4"):
        assert recorded[copy]["student"] == copy
        assert {**recorded[copy], "student": "s1"} == recorded["s1"], "a copy gets the first one's result"
    assert recorded["s3"]["tests"] != recorded["s1"]["tests"]
    assert summary.not_graded == {"s5": "the worker died", "s6": "the worker died"}

    sent.clear()
    recorded.clear()
    runner.run_course(CourseSettings(course, "week7"),
                      runner.RunOptions(quiet=True, regrade_all=True, grade_copies_once=False))
    assert sent == ["s1", "s2", "s3", "s4", "s5", "s6"], "grade_copies_once=False grades every copy"


@pytest.mark.slow  # (real sandboxed grading: the fast loop leaves it to the whole suite)
@needs_bwrap
def test_preflight_stops_the_run_when_the_reference_fails(tmp_path):
    """A kit whose reference solution raises grades nobody: the preflight names the failing test."""
    from venvs import copy_kit_sources, install_source, make_venv, this_site_packages

    # A copy of the kit, installed editable into a virtualenv of its own, as a kit developer works.
    kit = copy_kit_sources(tmp_path / "kit copy")
    cka = kit / "solutions" / "cka.py"
    cka.write_text(cka.read_text().replace("def linear_cka(X, Y", "def _linear_cka(X, Y", 1)
                   + "\n\ndef linear_cka(X, Y, *args, **kwargs):\n    raise RuntimeError('broken reference')\n")
    venv_bin = make_venv(tmp_path / "venv", this_site_packages())
    install_source(venv_bin, kit, editable=True)
    course = tmp_path / "course"
    _submit(course, "s1", STUBS)
    proc = subprocess.run([venv_bin / "bertlab", "grade", str(course), "--workers", "1"], capture_output=True,
                          text=True, cwd=kit, timeout=900)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert "Preflight failed" in out and "no student was graded" in out, out
    assert "First problem: cka/" in out and "broken reference" in out, "the first failing test is named"
    assert _graded(course) == [] and _gradebook_students(course) == []


@pytest.mark.slow  # (real sandboxed grading: the fast loop leaves it to the whole suite)
@needs_bwrap
def test_doctor(tmp_path):
    """One line per check; exit 0 on a healthy machine, 1 with a FAIL line when bubblewrap cannot work."""
    course = tmp_path / "course"
    _submit(course, "s1", STUBS)
    healthy = _bertlab("doctor", str(course))
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr[-2000:]
    lines = healthy.stdout.strip().splitlines()
    assert [line.split()[1] for line in lines] == ["bubblewrap", "model", "course", "gradebook", "preflight"]
    assert all(line.startswith("ok") for line in lines), healthy.stdout
    assert not (course / "gradebook.db").exists(), "doctor must not create the gradebook"

    broken = _bertlab("doctor", "--no-preflight", env=_broken_bwrap(tmp_path / "bin", fail_for=""))
    assert broken.returncode == 1
    assert broken.stdout.startswith("FAIL  bubblewrap") and "Traceback" not in broken.stdout + broken.stderr


def test_a_result_is_checked_once_and_only_its_batch_waits_between_timings(tmp_path, monkeypatch):
    """One submission's path from the worker to results.json: its result is checked (validated and held
    to results.schema.json) once, when the run's writer takes it, and not again when the run reads the
    results back for the gradebook table; the writer waits for the timing room (a worker timing)
    around each batch it writes into the gradebook, never to take a result."""
    import contextlib

    from bertlab_grader.course import config as course_config, gradebook as course_gradebook, runner
    from bertlab_grader.course import results as course_results
    from bertlab_grader.performance import gate as timing_gate

    course = tmp_path / "course"
    students = ["s1", "s2", "s3"]
    for student in students:
        _submit(course, student, {**STUBS, "cka.py": STUBS["cka.py"] + f"\n# {student}\n"})

    def fake_pool(todo, *args, **kwargs):
        for s in todo:
            yield s, course_results.error_result(s.student, "week7", "graded", {"cka": 1.0}), None

    checked, waits, batches = [], [], []
    real_validate = course_results.validate_result

    def counting_validate(result):
        checked.append(result["student"])
        return real_validate(result)

    @contextlib.contextmanager
    def counting_gate():
        waits.append(len(batches))
        yield

    def record_results(course, entries, db_url=None, **kw):
        batches.append([e["result"]["student"] for e in entries])
        return [course] * len(entries)

    monkeypatch.setattr(runner, "pool_results", fake_pool)
    monkeypatch.setattr(runner, "start_workers", lambda *a, **k: [])
    monkeypatch.setattr(runner, "check_sandbox", lambda unsafe: None)
    monkeypatch.setattr(course_config, "init_course", lambda *a, **k: None)
    monkeypatch.setattr(course_gradebook, "record_results", record_results)
    monkeypatch.setattr(course_gradebook, "export_and_feedback", lambda *a, **k: (None, None))
    monkeypatch.setattr(course_gradebook, "keep_gradebook_open", lambda *a, **k: contextlib.nullcontext())
    monkeypatch.setattr(course_results, "validate_result", counting_validate)
    monkeypatch.setattr(timing_gate, "working", counting_gate)
    summary = runner.run_course(CourseSettings(course, "week7"), runner.RunOptions(quiet=True))
    assert sorted(summary.graded) == students
    assert sorted(checked) == students, f"each result is checked once, where it is written: {checked}"
    assert [s for batch in batches for s in batch] == students
    assert len(waits) == len(batches), (
        f"{len(waits)} waits for the timing room for {len(batches)} batch(es) of {len(students)} results: "
        "the writer waits around a batch only")
