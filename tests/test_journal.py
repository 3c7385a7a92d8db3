"""The single writer's journal (grader/bertlab_grader/course/journal.py): a result is durable once its journal line is
synced, the gradebook is written behind it in batches, and the next run replays what a killed writer
journaled but did not write. The writer is killed for real (SIGKILL of a child process that records),
at three places: between the journal's sync and the gradebook's commit, between the commit and the
last results.json of the batch, and from outside at whatever moment it has reached. On SQLite always,
and on PostgreSQL (a throwaway server, tests/postgres_server.py, as tests/test_course.py starts one).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bertlab.tasks import EXERCISE_FILES
from bertlab_grader.course import gradebook, journal, submissions
from bertlab_grader.course.config import init_course
from bertlab_grader.course.results import error_result
from bertlab_grader.course.settings import CourseSettings

KIT_ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENT = "week7"
STUBS = {name: (KIT_ROOT / "exercises" / name).read_text() for name in EXERCISE_FILES}


# ---------------------------------------------------------------------------------------------------
# the course and its gradebook


@pytest.fixture(scope="module")
def postgres_server():
    """A PostgreSQL server for the module (BERTLAB_TEST_DB_URL if set); each test makes its own database."""
    if os.environ.get("BERTLAB_TEST_DB_URL"):
        yield os.environ["BERTLAB_TEST_DB_URL"]
        return
    from postgres_server import PostgresMissing, throwaway_postgres

    try:
        with throwaway_postgres(port=5496) as url:
            yield url
    except PostgresMissing as exc:
        pytest.fail(str(exc))


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request):
    """None (the course's SQLite gradebook), or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield None
        return
    import sqlalchemy

    server = request.getfixturevalue("postgres_server")
    name = f"journal_{uuid.uuid4().hex[:12]}"
    engine = sqlalchemy.create_engine(server, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
    engine.dispose()
    base, _, query = server.partition("?")
    yield f"{base.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")


def _max_points() -> dict[str, float]:
    """The kit's points (a run sets the course up with them)."""
    from bertlab_grader.grading.scoring import max_points_by_task

    return max_points_by_task()


def _course(tmp_path: Path, students: list[str], db_url: str | None) -> Path:
    """A course whose students each handed in the stubs (one line of their own added)."""
    course = tmp_path / "course"
    for student in students:
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        for name, text in STUBS.items():
            (folder / name).write_text(text + f"\n# {student}\n")
    init_course(CourseSettings(course, ASSIGNMENT, db_url), max_points=_max_points())
    return course


def _result(course: Path, student: str, i: int) -> dict:
    """A result worth ``i % 4`` points on cka, with the digest of the student's files."""
    result = error_result(student, ASSIGNMENT, "set-up", _max_points())
    result["tests"][0].update(outcome="passed", points=float(i % 4), message="")
    result["score"] = float(i % 4)
    sub = submissions.Submission(student, course / "submitted" / student / ASSIGNMENT)
    result["submission_digest"] = submissions.submission_digest(sub)
    return result


def _gradebook_cka(course: Path, db_url: str | None) -> dict[str, float]:
    """student -> cka auto score, as the gradebook holds it."""
    from nbgrader.api import Gradebook

    with Gradebook(CourseSettings(course, ASSIGNMENT, db_url).gradebook_url) as gb:
        out = {}
        for submission in gb.assignment_submissions(ASSIGNMENT):
            for nb in submission.notebooks:
                for grade in nb.grades:
                    if grade.name == "cka":
                        out[submission.student.id] = grade.auto_score
        return out


def _results_json(course: Path) -> dict[str, dict]:
    return {p.parent.parent.name: json.loads(p.read_text())
            for p in (course / "autograded").glob(f"*/{ASSIGNMENT}/results.json")}


def _journaled(course: Path) -> dict[str, dict]:
    """student -> their last journaled result, over every journal left in the course."""
    out = {}
    for path in journal.journal_paths(CourseSettings(course, ASSIGNMENT)):
        for entry in journal.read_entries(path):
            out[entry["result"]["student"]] = entry["result"]
    return out


# ---------------------------------------------------------------------------------------------------
# a writer killed for real

# The child: records every student's result through the run's writer (batches of BATCH), and is
# killed (SIGKILL) where CRASH says: "before-commit" (the third batch is in the gradebook's transaction,
# its journal lines synced, not committed), "mid-files" (the third batch committed, half of its
# results.json written), "outside" (it prints each student journaled; the test kills it).
CHILD = r"""
import json, os, signal, sys
from pathlib import Path
from bertlab_grader.course import gradebook, journal
from bertlab_grader.course.settings import CourseSettings

course, db_url, crash, batch = Path(sys.argv[1]), sys.argv[2] or None, sys.argv[3], int(sys.argv[4])
results = json.loads(Path(sys.argv[5]).read_text())
batches = []
real_record_in_gradebook, real_write = gradebook._record_in_gradebook, gradebook.atomic_write_text
written = []

def record_in_gradebook(settings, entries, changed, before_commit):
    batches.append(len(entries))
    def then_die(outcomes):
        before_commit(outcomes)
        if crash == "before-commit" and len(batches) == 3:
            os.kill(os.getpid(), signal.SIGKILL)
    return real_record_in_gradebook(settings, entries, changed, then_die)

def write(path, text, **options):
    real_write(path, text, **options)
    if path.name == "results.json" and len(batches) == 3:
        written.append(path)
        if crash == "mid-files" and len(written) == batch // 2:
            os.kill(os.getpid(), signal.SIGKILL)

gradebook._record_in_gradebook, gradebook.atomic_write_text = record_in_gradebook, write
settings = CourseSettings(course, "week7", db_url)
with gradebook.keep_gradebook_open(settings):
    with journal.ResultWriter(settings, batch_size=batch, max_wait_s=1e9) as writer:
        for result in results:
            writer.record(result)
            print(result["student"], flush=True)
print("finished", flush=True)
"""


def _kill_writer(course: Path, db_url: str | None, crash: str, results: list[dict], batch: int,
                 tmp_path: Path) -> int:
    """Run the child; return how many students it had journaled when it died."""
    todo = tmp_path / "to-record.json"
    todo.write_text(json.dumps(results))
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(course), db_url or "", crash, str(batch), str(todo)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    journaled = 0
    try:
        for line in proc.stdout:
            journaled += 1
            if crash == "outside" and journaled == len(results) * 3 // 4:
                os.kill(proc.pid, signal.SIGKILL)
                break
        proc.wait(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()
        err = proc.stderr.read()
    assert proc.returncode == -signal.SIGKILL, f"the writer was not killed (exit {proc.returncode}):\n{err[-3000:]}"
    return journaled


def _next_run(course: Path, db_url: str | None, monkeypatch):
    """A `bertlab grade` run with nothing to grade: its grading, export and feedback are stubbed out; the
    course, the journal's replay, the skip decision and the writer are real."""
    from bertlab_grader.course import runner

    graded = []

    def no_grading(todo, *args, **kwargs):
        graded.extend(s.student for s in todo)
        return iter(())

    monkeypatch.setattr(runner, "pool_results", no_grading)
    monkeypatch.setattr(runner, "start_workers", lambda *a, **k: [])
    monkeypatch.setattr(runner, "start_fork_server", lambda: None)
    monkeypatch.setattr(runner, "check_sandbox", lambda unsafe: None)
    monkeypatch.setattr(gradebook, "export_and_feedback", lambda *a, **k: (None, None))
    summary = runner.run_course(CourseSettings(course, ASSIGNMENT, db_url), runner.RunOptions(quiet=True))
    return summary, graded


@pytest.mark.slow  # (over 5 s each, or many cases: the fast loop leaves it to the whole suite)
@pytest.mark.parametrize("crash", ["before-commit", "mid-files", "outside"])
def test_a_writer_killed_mid_batch_loses_nothing_it_journaled(tmp_path, db_url, crash, monkeypatch):
    """SIGKILL mid-batch; the next run finds every journaled result in the gradebook and in results.json,
    skips those submissions as unchanged (it does not grade them again) and leaves no journal behind."""
    students = [f"s{i:03d}" for i in range(60)]
    course = _course(tmp_path, students, db_url)
    results = [_result(course, s, i) for i, s in enumerate(students)]
    batch = 16 if crash != "outside" else 8
    journaled_count = _kill_writer(course, db_url, crash, results, batch, tmp_path)

    journaled = _journaled(course)
    assert len(journaled) >= journaled_count > 0, "the journal lost lines the writer had journaled"
    in_gradebook = _gradebook_cka(course, db_url)
    missing = set(journaled) - set(in_gradebook)
    if crash == "before-commit":
        assert len(in_gradebook) == 2 * batch and len(missing) == len(journaled) - 2 * batch, \
            "the crash did not fall between the journal and the gradebook's commit"
    if crash == "mid-files":
        assert len(in_gradebook) == 3 * batch and len(_results_json(course)) == 2 * batch + batch // 2, \
            "the crash did not fall between the commit and the batch's last results.json"
    assert missing or crash != "before-commit"

    summary, graded = _next_run(course, db_url, monkeypatch)
    assert summary.exit_code == 0, summary.format()
    in_gradebook = _gradebook_cka(course, db_url)
    on_disk = _results_json(course)
    expected = {r["student"]: r for r in results}
    for student, result in journaled.items():
        assert in_gradebook.get(student) == result["tests"][0]["points"], f"{student}: not in the gradebook"
        assert on_disk.get(student) == expected[student], f"{student}: results.json missing or not the journaled one"
        assert (course / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").is_file()
    assert set(journaled) <= set(summary.unchanged), "a replayed result was not counted as graded before"
    assert not set(journaled) & set(graded), "a journaled result was graded again"
    assert sorted(graded) == sorted(set(students) - set(journaled)), "what was never journaled is graded"
    assert journal.journal_paths(CourseSettings(course, ASSIGNMENT)) == [], "the replayed journal was left behind"


# ---------------------------------------------------------------------------------------------------
# the writer in one process


def test_the_writer_records_in_batches_and_removes_its_journal(tmp_path, monkeypatch):
    students = [f"s{i}" for i in range(5)]
    course = _course(tmp_path, students, None)
    batches, recorded = [], []
    real = gradebook.record_results

    def counting(settings, entries, **kwargs):
        batches.append([e["result"]["student"] for e in entries])
        return real(settings, entries, **kwargs)

    monkeypatch.setattr(gradebook, "record_results", counting)
    with journal.ResultWriter(CourseSettings(course, ASSIGNMENT), batch_size=2, max_wait_s=1e9) as writer:
        for i, student in enumerate(students):
            writer.record(_result(course, student, i), on_recorded=recorded.append)
        assert len(journal.read_entries(writer._journal.path)) == 5, "every result is journaled when recorded"
        assert recorded == students[:4], "a result is counted once its batch is written"
    assert batches == [["s0", "s1"], ["s2", "s3"], ["s4"]]
    assert recorded == students
    assert _gradebook_cka(course, None) == {s: float(i % 4) for i, s in enumerate(students)}
    assert sorted(_results_json(course)) == students
    assert journal.journal_paths(CourseSettings(course, ASSIGNMENT)) == []


def test_each_result_is_validated_once_where_it_is_written_and_an_invalid_one_is_not_journaled(tmp_path, monkeypatch):
    from bertlab_grader.course import results as results_module

    course = _course(tmp_path, ["ann", "bo"], None)
    calls = []
    real = results_module.validate_result
    monkeypatch.setattr(results_module, "validate_result", lambda r: calls.append(r.get("student")) or real(r))
    failed = []
    with journal.ResultWriter(CourseSettings(course, ASSIGNMENT)) as writer:
        writer.record(_result(course, "ann", 1))
        bad = _result(course, "bo", 2)
        bad["tests"][0]["points"] = 99.0  # more than its max_points
        with pytest.raises(ValueError, match="points"):
            writer.record(bad, on_failed=lambda s, cause: failed.append(s))
        assert len(journal.read_entries(writer._journal.path)) == 1, "an invalid result was journaled"
    assert calls == ["ann", "bo"], "each result is validated once on its way in"
    assert sorted(_results_json(course)) == ["ann"] and not failed


def test_a_live_writers_journal_is_not_replayed(tmp_path):
    course = _course(tmp_path, ["ann"], None)
    with journal.ResultWriter(CourseSettings(course, ASSIGNMENT), max_wait_s=1e9) as writer:
        writer.record(_result(course, "ann", 1))
        assert journal.replay(CourseSettings(course, ASSIGNMENT)) == [], "another run's journal, still being written, was replayed"
        assert journal.journal_paths(CourseSettings(course, ASSIGNMENT)) == [writer._journal.path]
    assert journal.journal_paths(CourseSettings(course, ASSIGNMENT)) == []


def test_replay_leaves_out_a_cut_short_last_line_and_what_results_json_already_holds(tmp_path, monkeypatch):
    course = _course(tmp_path, ["ann", "bo", "cy"], None)
    ann, bo = _result(course, "ann", 1), _result(course, "bo", 2)
    gradebook.record_result(CourseSettings(course, ASSIGNMENT), ann)  # recorded completely before the kill
    path = course / ".bertlab" / f"recording-{ASSIGNMENT}-{time.time_ns():020d}-1.jsonl"
    lines = [json.dumps({"format": journal.FORMAT, "result": r, "timestamp": None}) for r in (ann, bo)]
    cut = json.dumps({"format": journal.FORMAT, "result": _result(course, "cy", 3), "timestamp": None})
    path.write_text("\n".join(lines) + "\n" + cut[: len(cut) // 2])
    replayed = []
    real = gradebook.record_results
    monkeypatch.setattr(gradebook, "record_results", lambda c, entries, *a, **k: replayed.extend(
        e["result"]["student"] for e in entries) or real(c, entries, *a, **k))
    assert journal.replay(CourseSettings(course, ASSIGNMENT)) == ["bo"]
    assert replayed == ["bo"], "ann's results.json already held her journaled result"
    assert sorted(_results_json(course)) == ["ann", "bo"], "cy's line was cut short: never recorded, graded again"
    assert not path.exists()


def test_a_gradebook_that_cannot_be_written_keeps_the_journal_for_the_next_run(tmp_path, monkeypatch):
    course = _course(tmp_path, ["ann"], None)
    failed = []

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(gradebook, "record_results", broken)
    with journal.ResultWriter(CourseSettings(course, ASSIGNMENT)) as writer:
        writer.record(_result(course, "ann", 1), on_failed=lambda s, cause: failed.append((s, cause)))
    assert failed == [("ann", "the result could not be recorded: OSError: disk full")]
    assert len(journal.journal_paths(CourseSettings(course, ASSIGNMENT))) == 1, "the journal must stay: it holds ann's result"
    from bertlab_grader.core.failures import GraderFailure

    with pytest.raises(GraderFailure, match="disk full"):
        journal.replay(CourseSettings(course, ASSIGNMENT))
    assert len(journal.journal_paths(CourseSettings(course, ASSIGNMENT))) == 1
    monkeypatch.undo()
    assert journal.replay(CourseSettings(course, ASSIGNMENT)) == ["ann"]
    assert _gradebook_cka(course, None) == {"ann": 1.0}
    assert journal.journal_paths(CourseSettings(course, ASSIGNMENT)) == []
