"""The nbgrader course: gradebook, results files, export, feedback, and submission intake (zips).

One course is built per module (nbgrader's subprocesses cost seconds each): three students submit, as a
folder (alice), a good zip (bob) and a zip-slip zip (carol); their results are built here as dicts,
recorded, alice is recorded twice with different scores; then ``nbgrader export`` and
``nbgrader generate_feedback`` run once each.
"""

from __future__ import annotations

import csv
import html
import json
import os
import pickle
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bertlab.tasks import EXERCISE_FILES, GRADED_TASKS
from bertlab_grader.course import submissions as subs
from bertlab_grader.course.config import CourseError, course_db_url, init_course, nbgrader_environment
from bertlab_grader.course.results import course_max_points, error_result, load_results, validate_result, write_results_json
from bertlab_grader.course.gradebook import export_grades, export_and_feedback, generate_feedback, keep_gradebook_open, record_result
from bertlab_grader.course.submissions import list_submissions, read_submission_sources
from bertlab_grader.course.settings import CourseSettings

ASSIGNMENT = "week7"


def _registered(by_task_or_file: dict) -> dict:
    """The entries whose task (or task file) the registry has."""
    return {k: v for k, v in by_task_or_file.items() if k in GRADED_TASKS or k in EXERCISE_FILES}


# A made-up course over the kit's tasks; in a course that removed a task (bertlab remove-task), its
# entries here are left out (_registered), and the tests go on with the tasks that remain.
MAX_POINTS = _registered({"cka": 12.0, "pooling": 8.0, "siamese": 10.0, "retrieval": 15.0, "performance": 5.0})
MARKER = "HIDDEN-SOURCE-MARKER-5d1e9c"

HIDDEN_TEST_SOURCE = f'''
import pytest

# {MARKER}: the expected values of the hidden suite live here and must never reach a student.
@pytest.mark.cka
@pytest.mark.points(6)
def test_cka_orthogonal_invariance(impl, reference):
    assert "{MARKER}"
'''

GOOD_SOURCES = _registered({
    "cka.py": "def linear_cka(X, Y):\n    return 1.0\n",
    "pooling.py": "def masked_mean_pool(h, m):\n    return h.mean(1)\n",
    "siamese.py": "class SiameseBert:\n    pass\n",
    "retrieval.py": "# café\n",
})


def _test(name, task, outcome, points, max_points, message="", hint=None):
    t = {"name": name, "task": task, "outcome": outcome, "points": points, "max_points": max_points,
         "message": message}
    if hint:
        t["hint"] = hint
    return t


def _result(student, tests):
    tests = [t for t in tests if t["task"] in GRADED_TASKS]
    return {"student": student, "assignment": ASSIGNMENT, "score": sum(t["points"] for t in tests),
            "max_score": sum(t["max_points"] for t in tests), "tests": tests}


def alice_first():
    return _result("alice", [
        _test("test_cka_orthogonal_invariance", "cka", "passed", 6.0, 6.0),
        _test("test_cka_zero_variance", "cka", "passed", 6.0, 6.0),
        _test("test_masked_mean_padding", "pooling", "passed", 8.0, 8.0),
        _test("test_siamese_shared_weights", "siamese", "passed", 10.0, 10.0),
        _test("test_search_matches_topk", "retrieval", "passed", 15.0, 15.0),
        _test("test_search_memory_bounded", "performance", "passed", 5.0, 5.0),
    ])


def alice_second():
    return _result("alice", [
        _test("test_cka_orthogonal_invariance", "cka", "passed", 6.0, 6.0),
        _test("test_cka_zero_variance", "cka", "failed", 0.0, 6.0,
              "linear_cka returned nan for a zero-variance input <expected a documented choice>",
              hint="Decide what CKA means when one representation is constant, and return that."),
        _test("test_masked_mean_padding", "pooling", "passed", 8.0, 8.0),
        _test("test_siamese_shared_weights", "siamese", "error", 0.0, 10.0,
              "AttributeError: 'SiameseBert' object has no attribute 'encode'"),
        _test("test_search_matches_topk", "retrieval", "passed", 7.5, 15.0, "half of the ties were out of order"),
        _test("test_search_memory_bounded", "performance", "timeout", 0.0, 5.0, "no answer within 20 s"),
    ])


def bob_result():
    return _result("bob", [
        _test("test_cka_orthogonal_invariance", "cka", "passed", 6.0, 6.0),
        _test("test_cka_zero_variance", "cka", "passed", 6.0, 6.0),
        _test("test_masked_mean_padding", "pooling", "failed", 0.0, 8.0,
              "shape (2, 4) expected, got (2, 5, 4): pool over the time axis"),
        _test("test_siamese_shared_weights", "siamese", "passed", 2.5, 10.0),
        _test("test_search_matches_topk", "retrieval", "failed", 0.0, 15.0, "ties broken by descending index"),
        _test("test_search_memory_bounded", "performance", "passed", 5.0, 5.0),
    ])


def _write_zip(path: Path, members: dict[str, bytes], compression=zipfile.ZIP_DEFLATED) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=compression) as zf:
        for name, data in members.items():
            zf.writestr(zipfile.ZipInfo(name), data, compress_type=compression)
    return path


def _all_text(root: Path) -> str:
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in root.rglob("*") if p.is_file())


@pytest.fixture(scope="module", autouse=True)
def alembic_head_asked_once():
    """nbgrader stamps every new gradebook with its alembic head, which it asks a subprocess for
    (``alembic heads``: about 5 s of CPU, mostly imports). The answer is a constant of the installed
    nbgrader: the first new gradebook of this module asks for real, the others reuse the answer.
    Each gradebook's tables are still created, and stamped, by nbgrader itself."""
    import functools

    import nbgrader.api

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(nbgrader.api, "get_alembic_version", functools.cache(nbgrader.api.get_alembic_version))
        yield


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    base = tmp_path_factory.mktemp("nbcourse")
    hidden = base / "hidden"
    hidden.mkdir()
    (hidden / "test_hidden_cka.py").write_text(HIDDEN_TEST_SOURCE)
    course = base / "course"
    settings = CourseSettings(course, ASSIGNMENT)

    init_course(settings, MAX_POINTS)
    source_nb = course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    release_nb = course / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    before = (source_nb.stat().st_mtime_ns, release_nb.stat().st_mtime_ns,
              (course / "nbgrader_config.py").read_text())
    init_course(settings, MAX_POINTS)  # a second call changes nothing
    after = (source_nb.stat().st_mtime_ns, release_nb.stat().st_mtime_ns,
             (course / "nbgrader_config.py").read_text())

    # submissions: alice a folder (with nbgrader's collect timestamp), bob a zip, carol a zip-slip zip
    alice_dir = course / "submitted" / "alice" / ASSIGNMENT
    alice_dir.mkdir(parents=True)
    for name, text in GOOD_SOURCES.items():
        (alice_dir / name).write_text(text)
    (alice_dir / "timestamp.txt").write_text("2026-11-20 10:00:00.000000 UTC\n")
    _write_zip(course / "submitted" / "bob" / ASSIGNMENT / "bob_week7.zip",
               {f"bob/{k}": v.encode() for k, v in GOOD_SOURCES.items()})
    _write_zip(course / "submitted" / "carol" / f"{ASSIGNMENT}.zip",
               {"cka.py": b"x = 1\n", "../evil.py": b"import os\n"})

    found = list_submissions(CourseSettings(course, ASSIGNMENT))
    max_points = course_max_points(settings)
    results = {"alice": alice_first(), "bob": bob_result()}
    for sub in found:
        if sub.error:
            record_result(settings, error_result(sub.student, ASSIGNMENT, sub.error, max_points))
        else:
            record_result(settings, results[sub.student])
    record_result(settings, alice_second())  # re-grade: replaces, never adds

    csv_path = export_grades(settings)
    feedback_dir = generate_feedback(settings)
    return {"dir": course, "settings": settings, "hidden": hidden, "submissions": found, "init_before": before,
            "init_after": after, "csv": csv_path, "feedback": feedback_dir}


# ------------------------------------------------------------------------------------------------
# the course and the gradebook


def test_init_course_is_idempotent(course):
    assert course["init_before"] == course["init_after"]
    config = (course["dir"] / "nbgrader_config.py").read_text()
    assert config.count("bertlab: begin") == 1
    assert (course["dir"] / "gradebook.db").is_file()
    assert course_db_url(course["dir"]) == "sqlite:///" + str(course["dir"].resolve() / "gradebook.db")


def test_source_notebook_has_one_grade_cell_per_task(course):
    import nbformat

    nb = nbformat.read(course["dir"] / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    meta = [c.metadata["nbgrader"] for c in nb.cells if "nbgrader" in c.metadata]
    assert [m["grade_id"] for m in meta] == list(MAX_POINTS)
    assert all(m["grade"] and not m["solution"] for m in meta)
    assert [m["points"] for m in meta] == list(MAX_POINTS.values())
    assert nb.cells[0].cell_type == "markdown"
    assert course_max_points(course["settings"]) == MAX_POINTS


def test_submissions_listed(course):
    by_student = {s.student: s for s in course["submissions"]}
    assert sorted(by_student) == ["alice", "bob", "carol"]
    assert by_student["alice"].error is None and by_student["alice"].path.name == ASSIGNMENT
    assert by_student["bob"].error is None
    assert set(read_submission_sources(by_student["bob"].path)) == set(GOOD_SOURCES)
    assert "evil.py" in by_student["carol"].error and "outside" in by_student["carol"].error
    assert not any(course["dir"].rglob("evil.py"))


def _csv_rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_export_totals_are_exact_and_rerecording_replaces(course):
    rows = _csv_rows(course["csv"])
    by_student = {r["student_id"]: r for r in rows}
    assert len(rows) == 3 and sorted(by_student) == ["alice", "bob", "carol"]
    expected = {"alice": sum(t["points"] for t in alice_second()["tests"]),
                "bob": sum(t["points"] for t in bob_result()["tests"]), "carol": 0.0}
    assert expected["alice"] != sum(t["points"] for t in alice_first()["tests"])
    for student, score in expected.items():
        assert float(by_student[student]["raw_score"]) == pytest.approx(score)
        assert float(by_student[student]["score"]) == pytest.approx(score)
        assert float(by_student[student]["max_score"]) == pytest.approx(sum(MAX_POINTS.values()))
    assert by_student["alice"]["timestamp"].startswith("2026-11-20 10:00:00")


@pytest.mark.tasks("retrieval")
def test_gradebook_has_one_submission_per_student_and_task_scores(course):
    from nbgrader.api import Gradebook

    with Gradebook(course_db_url(course["dir"])) as gb:
        assert len(gb.assignment_submissions(ASSIGNMENT)) == 3
        grade = gb.find_grade("retrieval", ASSIGNMENT, ASSIGNMENT, "alice")
        assert grade.auto_score == pytest.approx(7.5) and not grade.needs_manual_grade
        assert gb.find_submission(ASSIGNMENT, "bob").score == pytest.approx(19.5)


def test_results_json_written_and_loaded(course):
    loaded = load_results(CourseSettings(course["dir"], ASSIGNMENT))
    assert sorted(loaded) == ["alice", "bob", "carol"]
    assert loaded["alice"] == validate_result(alice_second())
    assert loaded["carol"]["score"] == 0.0
    assert all(t["outcome"] == "error" for t in loaded["carol"]["tests"])
    leftovers = [p for p in (course["dir"] / "autograded").rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


def test_feedback_html_shows_tests_outcomes_messages(course):
    for student, result in (("alice", alice_second()), ("bob", bob_result())):
        html_path = course["feedback"] / student / ASSIGNMENT / f"{ASSIGNMENT}.html"
        page = html_path.read_text()
        total = sum(t["points"] for t in result["tests"])
        assert f"Score: {total:.1f} / {sum(MAX_POINTS.values()):.1f}" in page
        text = html.unescape(page)
        for t in result["tests"]:
            assert t["name"] in text
            assert t["message"] in text
    alice = (course["feedback"] / "alice" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    for word in ("passed", "failed", "error", "timed out"):
        assert f"<td>{word}</td>" in alice
    assert "Decide what CKA means" in alice
    assert "&lt;expected a documented choice&gt;" in alice  # escaped, never raw markup
    assert "<expected a documented choice>" not in alice
    carol = (course["feedback"] / "carol" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert "was not accepted" in carol


def test_no_hidden_test_source_reaches_any_output(course):
    assert MARKER in (course["hidden"] / "test_hidden_cka.py").read_text()
    for part in ("autograded", "feedback", "release", "source"):
        assert MARKER not in _all_text(course["dir"] / part)
    assert MARKER not in course["csv"].read_text()
    assert MARKER.encode() not in (course["dir"] / "gradebook.db").read_bytes()


def test_nbgrader_generate_assignment_still_clean(course):
    proc = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", ASSIGNMENT, "--force"],
                          cwd=course["dir"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "ERROR" not in proc.stderr
    assert float({r["student_id"]: r for r in _csv_rows(course["csv"])}["bob"]["score"]) == 19.5


@pytest.mark.slow  # (4 s or more: the fast loop stays under 5 minutes, docs/architecture.md)
def test_non_default_sqlite_url_is_honoured(tmp_path):
    course = tmp_path / "course"
    db = tmp_path / "elsewhere" / "grades-store.sqlite"
    db.parent.mkdir()
    url = f"sqlite:///{db}"
    init_course(CourseSettings(course, ASSIGNMENT, url), {"cka": 4.0, "pooling": 6.0})
    settings = CourseSettings(course, ASSIGNMENT)  # no URL given: the configured one
    init_course(settings, {"cka": 4.0, "pooling": 6.0})  # keeps it
    assert course_db_url(course) == settings.gradebook_url == url
    assert db.is_file() and not (course / "gradebook.db").exists()
    record_result(settings, _result("dana", [_test("t_cka", "cka", "passed", 4.0, 4.0),
                                             _test("t_pool", "pooling", "failed", 1.5, 6.0, "close")]))
    rows = _csv_rows(export_grades(settings))
    assert [(r["student_id"], float(r["score"]), float(r["max_score"])) for r in rows] == [("dana", 5.5, 10.0)]
    # nbgrader itself, run in the course as an instructor would, reads the same gradebook from its config
    subprocess.run([sys.executable, "-m", "nbgrader", "export", "--to=by-hand.csv"], cwd=course, check=True,
                   capture_output=True, env=nbgrader_environment())
    assert _csv_rows(course / "by-hand.csv") == rows
    assert not (course / "gradebook.db").exists()


@pytest.fixture
def postgres_url():
    """A PostgreSQL gradebook URL: BERTLAB_TEST_DB_URL if set, else a throwaway server started here
    (tests/postgres_server.py). CI installs Debian's postgresql package for this test."""
    if os.environ.get("BERTLAB_TEST_DB_URL"):
        yield os.environ["BERTLAB_TEST_DB_URL"]
        return
    from postgres_server import PostgresMissing, throwaway_postgres

    try:
        with throwaway_postgres() as url:
            yield url
    except PostgresMissing as exc:
        pytest.fail(str(exc))


@pytest.mark.slow  # (4 s or more: the fast loop stays under 5 minutes, docs/architecture.md)
def test_external_database_url(tmp_path, postgres_url):
    url = postgres_url
    course = tmp_path / "course"
    assignment = student = f"ext{os.getpid()}x{tmp_path.name[-8:].replace('_', '')}"  # fresh in a shared DB
    settings = CourseSettings(course, assignment, url)
    init_course(settings, {"cka": 4.0})
    first = {**_result(student, [_test("t_cka", "cka", "passed", 3.0, 4.0)]), "assignment": assignment}
    record_result(settings, first)
    record_result(settings, {**first, "score": 4.0, "tests": [_test("t_cka", "cka", "passed", 4.0, 4.0)]})
    rows = [r for r in _csv_rows(export_grades(settings)) if r["assignment"] == assignment and r["student_id"] == student]
    assert [float(r["score"]) for r in rows] == [4.0]
    generate_feedback(settings)
    assert (course / "feedback" / student / assignment / f"{assignment}.html").is_file()


def test_recording_the_same_result_again_builds_no_notebook_and_any_change_rebuilds_it(tmp_path, monkeypatch):
    """Every run re-records the unchanged students' results (the gradebook may have been reset): their
    graded notebooks, already what a build would give (feedback.py, notebook_stamp), are not built and
    written again. A changed result, changed files, or a notebook edited or deleted on disk is."""
    from bertlab_grader.course import gradebook
    from bertlab_grader.course.feedback import build_graded_notebook

    settings = CourseSettings(tmp_path / "course", ASSIGNMENT)
    init_course(settings, MAX_POINTS)
    folder = settings.root / "submitted" / "alice" / ASSIGNMENT
    folder.mkdir(parents=True)
    for name, text in GOOD_SOURCES.items():
        (folder / name).write_text(text)
    built = []
    monkeypatch.setattr(gradebook, "build_graded_notebook",
                        lambda *args: built.append(args[2]["score"]) or build_graded_notebook(*args))
    notebook = record_result(settings, alice_first()) / f"{ASSIGNMENT}.ipynb"
    first = notebook.read_text()

    def recorded_again(result) -> bool:
        before = len(built)
        record_result(settings, result)
        return len(built) > before

    assert not recorded_again(alice_first()) and notebook.read_text() == first
    assert recorded_again(alice_second()), "a changed result kept the old notebook"
    assert not recorded_again(alice_second())
    (folder / "cka.py").write_text(GOOD_SOURCES["cka.py"] + "\n# changed\n")
    assert recorded_again(alice_second()), "changed files kept the notebook that shows the old ones"
    assert "# changed" in notebook.read_text()
    notebook.write_text(notebook.read_text().replace('"cells"', '"cells" ', 1).replace("bertlab_built_from", "x"))
    assert recorded_again(alice_second()), "a notebook edited on disk was kept"
    notebook.unlink()
    assert recorded_again(alice_second()) and notebook.is_file()
    # What stays on disk is the notebook a fresh build gives, byte for byte.
    from bertlab_grader.course.submissions import submitted_sources
    import nbformat

    fresh = build_graded_notebook(ASSIGNMENT, course_max_points(settings), validate_result(alice_second()),
                                  submitted_sources(settings, "alice"))
    assert notebook.read_text() == nbformat.v4.writes(fresh) + "\n"


def test_record_result_rejects_malformed_results(course, tmp_path):
    bad = alice_second()
    bad["tests"][0]["outcome"] = "skipped"
    with pytest.raises(ValueError, match="outcome"):
        record_result(course["settings"], bad)
    bad = alice_second()
    bad["tests"][0]["points"] = 7.0  # more than its max_points
    with pytest.raises(ValueError, match="max_points"):
        record_result(course["settings"], bad)
    assert validate_result({**alice_second(), "score": 99})["score"] == alice_second()["score"]
    bad = alice_second()
    bad["student"] = "../mallory"
    with pytest.raises(ValueError, match="student"):
        write_results_json(course["dir"], bad)
    with pytest.raises(CourseError, match="init_course"):
        record_result(course["settings"], {**alice_second(), "assignment": "week8"})
    with pytest.raises(ValueError, match="max_points"):
        init_course(CourseSettings(tmp_path / "c", ASSIGNMENT))


def test_error_result_is_valid_zero_score():
    r = error_result("erin", ASSIGNMENT, "Your zip file was not accepted: too big.", MAX_POINTS)
    assert validate_result(r) == r
    assert r["score"] == 0.0 and r["max_score"] == sum(MAX_POINTS.values())
    assert {t["task"] for t in r["tests"]} == set(MAX_POINTS)
    assert all(t["message"] == "Your zip file was not accepted: too big." for t in r["tests"])


def test_write_results_json_is_atomic_and_replaces(tmp_path):
    path = write_results_json(tmp_path, bob_result())
    assert json.loads(path.read_text())["score"] == 19.5
    write_results_json(tmp_path, {**bob_result(), "tests": bob_result()["tests"][:1], "score": 6.0})
    assert json.loads(path.read_text())["score"] == 6.0
    assert [p.name for p in path.parent.iterdir()] == ["results.json"]


# ------------------------------------------------------------------------------------------------
# zips and source files (no nbgrader involved)


def _one_zip_course(tmp_path, members, compression=zipfile.ZIP_DEFLATED, infos=()):
    course = tmp_path / "course"
    zpath = course / "submitted" / "sam" / ASSIGNMENT / "sam.zip"
    _write_zip(zpath, members, compression)
    if infos:
        with zipfile.ZipFile(zpath, "a") as zf:
            for info, data in infos:
                zf.writestr(info, data)
    (sub,) = list_submissions(CourseSettings(course, ASSIGNMENT))
    return course, sub


def test_good_zip_is_extracted_privately(tmp_path):
    members = {f"week7/{k}": v.encode() for k, v in GOOD_SOURCES.items()}
    members["week7/notes.txt"] = b"ignored"
    course, sub = _one_zip_course(tmp_path, members)
    assert sub.error is None
    assert sub.source.name == "sam.zip"
    assert sub.path == subs.staging_dir(CourseSettings(course, ASSIGNMENT), "sam") / "week7"
    assert stat.S_IMODE(subs.staging_dir(CourseSettings(course, ASSIGNMENT), "sam").stat().st_mode) == 0o700
    sources = read_submission_sources(sub.path)
    assert dict(sources) == GOOD_SOURCES and sources.problems == {}
    student, path = sub  # still a (student, path) pair
    assert (student, path) == ("sam", sub.path)
    again = pickle.loads(pickle.dumps(sub))
    assert again == sub and again.source == sub.source and again.error is None


@pytest.mark.parametrize("name, reason", [
    ("../evil.py", "outside"),
    ("week7/../../evil.py", "outside"),
    ("/tmp/evil.py", "absolute"),
    ("C:/evil.py", "absolute"),
])
def test_zip_with_escaping_path_is_refused(tmp_path, name, reason):
    course, sub = _one_zip_course(tmp_path, {"cka.py": b"x = 1\n", name: b"import os\n"})
    assert sub.error and reason in sub.error and "not accepted" in sub.error
    assert list(sub.path.iterdir()) == []  # nothing extracted, not even the harmless member
    assert not (tmp_path / "evil.py").exists() and not Path("/tmp/evil.py").exists()


def test_zip_with_symlink_is_refused(tmp_path):
    link = zipfile.ZipInfo("cka.py")
    link.create_system = 3
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    course, sub = _one_zip_course(tmp_path, {"pooling.py": b"x = 1\n"}, infos=[(link, "/etc/passwd")])
    assert sub.error and "symbolic link" in sub.error
    assert list(sub.path.iterdir()) == []


def test_zip_bomb_is_refused(tmp_path):
    course, sub = _one_zip_course(tmp_path, {"cka.py": b"\0" * (20 * 1024 * 1024)})
    assert sub.error and "zip bomb" in sub.error
    assert list(sub.path.iterdir()) == []


def test_zip_too_many_members_or_too_large_is_refused(tmp_path, monkeypatch):
    many = {f"f{i}.txt": b"x" for i in range(subs.MAX_ZIP_MEMBERS + 1)}
    _, sub = _one_zip_course(tmp_path / "a", many)
    assert sub.error and "members" in sub.error
    monkeypatch.setattr(subs, "MAX_ZIP_TOTAL_BYTES", 10_000)
    _, sub = _one_zip_course(tmp_path / "b", {"cka.py": os.urandom(6000), "pooling.py": os.urandom(6000)},
                             compression=zipfile.ZIP_STORED)
    assert sub.error and "expands to more than" in sub.error


def test_broken_or_ambiguous_zips_give_errors_not_exceptions(tmp_path):
    course = tmp_path / "course"
    d = course / "submitted" / "ann" / ASSIGNMENT
    d.mkdir(parents=True)
    (d / "work.zip").write_bytes(b"this is not a zip")
    d2 = course / "submitted" / "ben" / ASSIGNMENT
    _write_zip(d2 / "a.zip", {"cka.py": b""})
    _write_zip(d2 / "b.zip", {"cka.py": b""})
    d3 = course / "submitted" / "cid" / ASSIGNMENT
    d3.mkdir(parents=True)
    (d3 / "cka.py").write_text("x = 1\n")
    (d3 / "old.zip").write_bytes(b"junk")  # source files present: the folder is graded, the zip ignored
    (course / "submitted" / "dee").mkdir()  # no week7 submission at all: not listed
    got = {s.student: s for s in list_submissions(CourseSettings(course, ASSIGNMENT))}
    assert sorted(got) == ["ann", "ben", "cid"]
    assert "not a readable zip" in got["ann"].error
    assert "2 zip files" in got["ben"].error
    assert got["cid"].error is None and got["cid"].path == d3


@pytest.mark.tasks("cka", "pooling", "siamese", "retrieval")
def test_read_submission_sources_refuses_large_undecodable_and_linked_files(tmp_path):
    (tmp_path / "cka.py").write_text("def linear_cka(X, Y):\n    return 0.5\n")
    (tmp_path / "pooling.py").write_bytes(b"x = '\xff\xfe'\n")
    (tmp_path / "siamese.py").write_bytes(b"#" * (subs.MAX_SOURCE_BYTES + 1))
    secret = tmp_path / "secret.txt"
    secret.write_text("not for students")
    os.symlink(secret, tmp_path / "retrieval.py")
    (tmp_path / "helpers.py").write_text("ignored = True\n")
    sources = read_submission_sources(tmp_path)
    assert sorted(sources) == ["cka.py", "pooling.py", "retrieval.py", "siamese.py"]
    assert sources["cka.py"].startswith("def linear_cka")
    assert set(sources.problems) == {"pooling.py", "retrieval.py", "siamese.py"}
    assert "UTF-8" in sources.problems["pooling.py"]
    assert "at most" in sources.problems["siamese.py"]
    assert "symbolic link" in sources.problems["retrieval.py"]
    assert "not for students" not in "".join(sources.values())
    with pytest.raises(ImportError, match="pooling.py could not be read"):
        exec(compile(sources["pooling.py"], "pooling.py", "exec"), {})
    assert read_submission_sources(tmp_path / "missing") == {}


def test_the_feedback_is_split_by_the_pages_a_run_renders_not_by_the_class_size():
    from bertlab_grader.course.gradebook import feedback_parts

    class_of_60 = [f"s{i:02d}" for i in range(60)]
    assert feedback_parts(class_of_60, processes=2) == 2  # every page (a first run, an upgrade)
    assert feedback_parts(class_of_60, processes=2, changed=60) == 2
    assert feedback_parts(class_of_60, processes=2, changed=1) == 1  # a late hand-in: one page, one process
    assert feedback_parts(class_of_60, processes=8, changed=49) == 1
    assert feedback_parts(class_of_60, processes=8, changed=50) == 2
    assert feedback_parts([*class_of_60, "a,b"], processes=2) == 1


@pytest.mark.slow  # (over 5 s each, or many cases: the fast loop leaves it to the whole suite)
def test_cohort_export_and_feedback_split_over_processes(tmp_path):
    """The cohort path: 50 results recorded through one open gradebook, then `nbgrader export` and two
    `generate_feedback` processes side by side. Each student appears once in grades.csv and gets
    exactly one feedback page with their own score."""
    course = tmp_path / "cohort"
    (course / "submitted").mkdir(parents=True)
    settings = CourseSettings(course, ASSIGNMENT)
    init_course(settings, max_points=MAX_POINTS)
    students = [f"s{i:02d}" for i in range(50)]
    with keep_gradebook_open(settings):
        for i, student in enumerate(students):
            result = error_result(student, ASSIGNMENT, "set-up", MAX_POINTS)
            result["tests"][0].update(outcome="passed", points=float(i % 7), message="")
            result["score"] = float(i % 7)
            record_result(settings, result)
    grades, feedback = export_and_feedback(settings, students=students, processes=2)
    with open(grades, newline="") as handle:
        rows = {row["student_id"]: float(row["score"]) for row in csv.DictReader(handle)}
    assert rows == {s: float(i % 7) for i, s in enumerate(students)}
    pages = sorted(p.parent.parent.name for p in feedback.glob(f"*/{ASSIGNMENT}/{ASSIGNMENT}.html"))
    assert pages == students
    for i in (0, 13, 49):
        page = (feedback / students[i] / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
        assert f"Score: {float(i % 7):.1f} / {sum(MAX_POINTS.values()):.1f}" in page

    # The same files as nbgrader's own command, one process for every student, in a copy of the course.
    import shutil

    plain = tmp_path / "plain"
    shutil.copytree(course, plain, ignore=shutil.ignore_patterns("feedback", "grades.csv"))
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_feedback", ASSIGNMENT, "--force"], cwd=plain,
                   check=True, capture_output=True, env=nbgrader_environment())
    split_files = {p.relative_to(feedback): p.read_bytes() for p in sorted(feedback.rglob("*")) if p.is_file()}
    plain_files = {p.relative_to(plain / "feedback"): p.read_bytes()
                   for p in sorted((plain / "feedback").rglob("*")) if p.is_file()}
    assert sorted(split_files) == sorted(plain_files), "the split feedback wrote other files than nbgrader's command"
    differ = [str(name) for name in split_files if split_files[name] != plain_files[name]]
    assert not differ, f"feedback differs from nbgrader's own command's: {differ[:5]}"


@pytest.mark.slow  # (five nbgrader processes: about 10 s)
def test_feedback_is_rendered_again_only_where_what_it_shows_changed(tmp_path):
    """A run renders a feedback page only when the graded notebook, the gradebook's rows (a manual
    grade given in formgrader, a late penalty) or the page itself changed since it was rendered
    (grader/bertlab_grader/course/feedback_record.py); what it renders is what nbgrader's own command writes."""
    import shutil

    from nbgrader.api import Gradebook

    course = tmp_path / "course"
    (course / "submitted").mkdir(parents=True)
    settings = CourseSettings(course, ASSIGNMENT)
    init_course(settings, max_points=MAX_POINTS)
    students = ["ann", "bob", "cat", "dan", "eve"]
    for student in students:
        record_result(settings, error_result(student, ASSIGNMENT, "set-up", MAX_POINTS))
    page = {s: course / "feedback" / s / ASSIGNMENT / f"{ASSIGNMENT}.html" for s in students}

    def written() -> dict:
        return {s: (page[s].stat().st_ino, page[s].stat().st_mtime_ns) for s in students}

    export_and_feedback(settings, students=students)
    first = written()
    export_and_feedback(settings, students=students)
    assert written() == first, "nothing changed, yet feedback pages were rendered again"

    task = next(iter(MAX_POINTS))
    with Gradebook(settings.gradebook_url) as gb:  # a manual grade, as formgrader gives it
        gb.find_grade(task, ASSIGNMENT, ASSIGNMENT, "bob").manual_score = 1.5
        gb.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, "ann").late_submission_penalty = 1.0
        gb.db.commit()
    notebook = course / "autograded" / "cat" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    notebook.write_text(notebook.read_text().replace("set-up", "set-up (regraded)"))
    page["dan"].unlink()
    export_and_feedback(settings, students=students)
    now = written()
    assert [s for s in students if now[s] != first[s]] == ["ann", "bob", "cat", "dan"]
    assert "Score: 1.5" in page["bob"].read_text()
    assert "set-up (regraded)" in page["cat"].read_text()

    plain = tmp_path / "plain"
    shutil.copytree(course, plain, ignore=shutil.ignore_patterns("feedback", "grades.csv", ".bertlab"))
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_feedback", ASSIGNMENT, "--force"], cwd=plain,
                   check=True, capture_output=True, env=nbgrader_environment())
    for s in students:
        assert page[s].read_bytes() == (plain / "feedback" / s / ASSIGNMENT / f"{ASSIGNMENT}.html").read_bytes(), \
            f"{s}'s feedback differs from nbgrader's own command's"


def test_nbgrader_main_takes_an_argument_longer_than_a_command_line_allows(tmp_path):
    """The feedback of a large class is split by the students each process leaves out: for 10,000
    students that list outgrows the 128 KiB Linux allows one argument, so it goes through a file
    (grader/bertlab_grader/course/nbgrader_main.py, --bertlab-args-file)."""
    from bertlab_grader.course.gradebook import NBGRADER
    from bertlab_grader.course.nbgrader_main import ARGS_FILE

    course = tmp_path / "course"
    (course / "submitted").mkdir(parents=True)
    settings = CourseSettings(course, ASSIGNMENT)
    init_course(settings, max_points=MAX_POINTS)
    record_result(settings, error_result("ann", ASSIGNMENT, "set-up", MAX_POINTS))
    others = ",".join(f"student-{i:06d}" for i in range(10000))
    long_argument = f"--CourseDirectory.student_id_exclude={others}"
    assert len(long_argument) > 128 * 1024
    with pytest.raises(OSError, match="too long"):
        subprocess.run(["true", long_argument])
    listed = tmp_path / "args.json"
    listed.write_text(json.dumps(["export", f"--to={course / 'grades.csv'}", long_argument]))
    proc = subprocess.run([*NBGRADER, f"{ARGS_FILE}{listed}"], cwd=course, capture_output=True, text=True,
                          env=nbgrader_environment(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ann" in (course / "grades.csv").read_text()


def test_results_schema_accepts_what_the_kit_writes_and_rejects_the_rest(tmp_path):
    """results.schema.json is the published format: every results.json goes through it when written."""
    from bertlab_grader.course.results import RESULTS_SCHEMA
    from bertlab_grader.course.results import check_results_schema

    import jsonschema

    jsonschema.Draft202012Validator.check_schema(json.loads(RESULTS_SCHEMA.read_text()))
    good = validate_result(error_result("erin", ASSIGNMENT, "not accepted", MAX_POINTS))
    good.update(submission_digest="sha256:" + "0" * 64, sandboxed=True)
    check_results_schema(good)
    path = write_results_json(tmp_path, good)
    assert json.loads(path.read_text()) == good
    for broken, where in [({**good, "sandboxed": "yes"}, "sandboxed"),
                          ({**good, "submission_digest": "md5:1"}, "submission_digest"),
                          ({**good, "tests": [{**good["tests"][0], "outcome": "crashed"}]}, "tests/0/outcome"),
                          ({**good, "surprise": 1}, "(top level)")]:
        with pytest.raises(ValueError, match=where):
            check_results_schema(broken)


def test_the_fast_schema_check_and_jsonschema_agree(tmp_path):
    """The grader confirms valid results with the schema compiled by fastjsonschema and lets jsonschema
    judge the rest (results.py check_results_schema): on every document here, valid or broken in each
    keyword the schema uses, both must give the same verdict."""
    from bertlab_grader.course import results as results_module

    good = validate_result(error_result("erin", ASSIGNMENT, "not accepted", MAX_POINTS))
    good.update(submission_digest="sha256:" + "0" * 64, sandboxed=True)
    test = good["tests"][0]
    documents = [good, {**good, "tests": [{**test, "ratio": 1.5, "hint": "h"}]},
                 {**good, "sandboxed": "yes"}, {**good, "submission_digest": "md5:1"}, {**good, "surprise": 1},
                 {**good, "tests": [{**test, "outcome": "crashed"}]}, {**good, "tests": [{**test, "points": -1.0}]},
                 {**good, "tests": [{**test, "ratio": 0.0}]}, {**good, "tests": [{**test, "task": "nope"}]},
                 {**good, "tests": [{k: v for k, v in test.items() if k != "name"}]}, {**good, "student": ""},
                 {**good, "tests": "none"}, {k: v for k, v in good.items() if k != "score"}, {**good, "score": "1"}]
    results_module.check_results_schema(good)  # (compiles the fast check)
    for document in documents:
        try:
            results_module._FAST_SCHEMA_CHECK(document)
            fast = True
        except Exception:  # noqa: BLE001
            fast = False
        assert fast == (not results_module.schema_errors(document)), f"the two checks disagree on {document}"


def test_every_graded_notebook_the_kit_writes_is_a_valid_notebook(course):
    """record_result writes the graded notebook without nbformat's validation (gradebook.py): its shape
    is build_graded_notebook's, so every one recorded here, a student's text in its messages and
    hints included, must pass nbformat's own schema."""
    import nbformat

    from bertlab_grader.course.feedback import build_graded_notebook

    written = sorted(course["dir"].glob(f"autograded/*/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"))
    assert written, "the course fixture recorded no graded notebook"
    for path in written:
        nbformat.validate(nbformat.read(path, as_version=4))
    odd = validate_result(error_result("zoë", ASSIGNMENT, "</td>\x1b[31m\u2028 {{ }} \\", MAX_POINTS))
    odd["tests"][0]["hint"] = "<script>alert(1)</script>"
    nbformat.validate(nbformat.reads(nbformat.v4.writes(build_graded_notebook(ASSIGNMENT, MAX_POINTS, odd)),
                                     as_version=4))
