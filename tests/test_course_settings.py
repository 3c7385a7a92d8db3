"""The course settings: one value for the course a command works on (grader/bertlab_grader/course/settings.py),
built once from the command line and passed whole through the course room."""

from __future__ import annotations

import ast
from pathlib import Path

from bertlab_grader.course.config import init_course
from bertlab_grader.course.settings import CourseSettings
from bertlab_grader.grading.scoring import max_points_by_task

KIT_ROOT = Path(__file__).resolve().parent.parent
GRADER_PACKAGE = KIT_ROOT / "grader" / "bertlab_grader"
# What a function of the course room or export/ must not take one by one (it takes the settings): the
# gradebook's URL, the sandbox choice, the hidden folders, and a course folder together with an
# assignment. (An assignment alone is a name a document carries: results.json, a notebook's title.)
URL_PARTS = {"db_url", "gradebook_url", "url"}
OTHER_PARTS = {"unsafe_no_sandbox", "hide", "hidden_paths"}
COURSE_FOLDER = {"course", "course_dir", "course_root", "root"}
# The functions allowed to, and why: each handles the one URL the settings worked out, or no course.
ALLOWED = {
    "course/config.py": {"normalise_db_url",  # tidies the --db-url the command line gave, for the settings
                         "_coursedir",        # applies settings.gradebook_url to nbgrader's CourseDirectory
                         "_sqlite_path"},     # the file behind settings.gradebook_url, if any
    "course/gradebook.py": {"_gradebook",     # opens settings.gradebook_url
                            "_db_args"},      # settings.gradebook_url as nbgrader's command-line option
    "course/settings.py": {"__post_init__"},  # where the given URL becomes gradebook_url
    # `bertlab grade-one FOLDER` grades one folder outside any course: the instructor's own sandbox flag
    "course/grade_one.py": {"grade_one", "grade_one_command"},
}
COURSE_ROOM_AND_EXPORT = sorted(
    path.relative_to(GRADER_PACKAGE).as_posix()
    for room in ("course", "export") for path in (GRADER_PACKAGE / room).rglob("*.py"))


def parts_taken(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The course's parts ``function`` takes one by one (empty when it takes none)."""
    args = function.args
    names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    parts = names & (URL_PARTS | OTHER_PARTS)
    if "assignment" in names and names & COURSE_FOLDER:
        parts |= {"assignment"} | (names & COURSE_FOLDER)
    return parts


def test_the_root_is_absolute_and_a_given_url_is_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = CourseSettings(Path("course"), "week7", "sqlite:///elsewhere/gb.db")
    assert settings.root == tmp_path / "course"
    assert settings.url_from_command_line, "init_course writes a URL the command line gave into the config"
    assert settings.gradebook_url == f"sqlite:///{tmp_path}/elsewhere/gb.db", "made absolute, from where it was given"
    assert not hasattr(settings, "db_url"), "the settings have one URL, gradebook_url"
    assert settings.hidden_paths == tuple(sorted({str(tmp_path / "course"), str(tmp_path / "elsewhere")}))
    assert not settings.unsafe_no_sandbox, "the sandbox is the default; only the instructor's flag turns it off"


def test_without_a_url_the_course_config_decides(tmp_path):
    """No --db-url: the URL the course's nbgrader_config.py holds (written by an earlier run)."""
    course = tmp_path / "course"
    (tmp_path / "books").mkdir()
    init_course(CourseSettings(course, "week7", f"sqlite:///{tmp_path}/books/gb.db"), max_points=max_points_by_task())
    settings = CourseSettings(course, "week7")
    assert not settings.url_from_command_line
    assert settings.gradebook_url == f"sqlite:///{tmp_path}/books/gb.db"
    assert str(tmp_path / "books") in settings.hidden_paths, "the sandbox must not see the gradebook"
    assert CourseSettings(tmp_path / "fresh").gradebook_url == f"sqlite:///{tmp_path}/fresh/gradebook.db"


def test_the_course_room_takes_the_settings_not_their_parts():
    """Every function of every module of the course room and ``export/`` (private ones too) takes
    ``settings: CourseSettings`` (or a value built from it), never the gradebook's URL, the sandbox
    choice, the hidden folders, or a course folder with an assignment, one by one: which URL to pass, or
    which folder goes with which assignment, is never the caller's question."""
    assert len(COURSE_ROOM_AND_EXPORT) > 20, COURSE_ROOM_AND_EXPORT  # (the walk found the rooms)
    threaded = []
    for name in COURSE_ROOM_AND_EXPORT:
        tree = ast.parse((GRADER_PACKAGE / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name in ALLOWED.get(name, ()):
                continue
            parts = parts_taken(node)
            if parts:
                threaded.append(f"{name}:{node.lineno} {node.name}({', '.join(sorted(parts))})")
    assert not threaded, "these take the course's settings one by one; take `settings: CourseSettings`:\n" + \
        "\n".join(threaded)


def test_the_guard_sees_a_function_that_takes_the_parts():
    """The guard's rule (``parts_taken``) flags what it is meant to, in a made-up module."""
    source = "def load(course_dir, assignment):\n    pass\ndef open_book(db_url):\n    pass\n" \
             "def fine(settings, assignment):\n    pass\ndef sandboxed(*, unsafe_no_sandbox):\n    pass\n"
    flagged = [node.name for node in ast.walk(ast.parse(source))
               if isinstance(node, ast.FunctionDef) and parts_taken(node)]
    assert flagged == ["load", "open_book", "sandboxed"]


def test_a_worker_gets_what_the_main_process_worked_out(tmp_path, monkeypatch):
    """The pool's workers receive the settings pickled: the gradebook's URL and the hidden folders
    travel with them, so a worker reads no config (which the gradebook set-up may be rewriting)."""
    import pickle

    from bertlab_grader.course import settings as settings_module

    settings = CourseSettings(tmp_path / "course", "week7")
    hidden = settings.hidden_paths
    received = pickle.loads(pickle.dumps(settings))

    def no_config(*args, **kwargs):
        raise AssertionError("the worker read the course's config again")

    monkeypatch.setattr(settings_module, "course_db_url", no_config)
    assert received.hidden_paths == hidden and received.gradebook_url == settings.gradebook_url
    assert received == settings


def test_the_run_reads_the_course_config_once(tmp_path, monkeypatch):
    """The gradebook's URL is worked out once (``settings.gradebook_url``); the run's writer, its
    batches and the journal's replay use it and never open the course's nbgrader_config.py again
    (which ``init_course`` may be rewriting), so every batch of a run writes into the same gradebook."""
    from bertlab_grader.course import config as course_config
    from bertlab_grader.course import journal
    from bertlab_grader.course.results import error_result

    course = tmp_path / "course"
    (tmp_path / "books").mkdir()
    init_course(CourseSettings(course, "week7", f"sqlite:///{tmp_path}/books/gb.db"), max_points=max_points_by_task())
    settings = CourseSettings(course, "week7")
    assert settings.gradebook_url == f"sqlite:///{tmp_path}/books/gb.db"  # (the one read)

    def no_config(*args, **kwargs):
        raise AssertionError("the course's config was read again after the settings worked the URL out")

    monkeypatch.setattr(course_config, "_coursedir", no_config)
    with journal.ResultWriter(settings, batch_size=2) as writer:
        for student in ("s1", "s2", "s3"):
            writer.record(error_result(student, "week7", "set-up", max_points_by_task()))
    assert sorted(writer.written) == ["s1", "s2", "s3"]
    assert journal.replay(settings) == []
    assert (tmp_path / "books" / "gb.db").is_file() and not (course / "gradebook.db").exists()
