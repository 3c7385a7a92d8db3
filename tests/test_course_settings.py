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
# The course's parts that each of these modules' functions could take one by one; they take the settings.
SETTINGS_PARTS = {"assignment", "db_url", "unsafe_no_sandbox", "hide"}
# (The grading room takes only the assignment, as the name results.json carries; the Dask plugin takes
# plain values that this host worked out, since a worker elsewhere may not see the course.)
TAKES_THE_SETTINGS = ("course/runner.py", "course/pool.py", "course/journal.py", "course/preconditions.py",
                      "export/lms.py")


def test_the_root_is_absolute_and_a_given_url_is_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = CourseSettings(Path("course"), "week7", "sqlite:///elsewhere/gb.db")
    assert settings.root == tmp_path / "course"
    assert settings.db_url == "sqlite:///elsewhere/gb.db", "the command line's URL, as given (init_course writes it)"
    assert settings.gradebook_url == f"sqlite:///{tmp_path}/elsewhere/gb.db"
    assert settings.hidden_paths == tuple(sorted({str(tmp_path / "course"), str(tmp_path / "elsewhere")}))
    assert not settings.unsafe_no_sandbox, "the sandbox is the default; only the instructor's flag turns it off"


def test_without_a_url_the_course_config_decides(tmp_path):
    """No --db-url: the URL the course's nbgrader_config.py holds (written by an earlier run)."""
    course = tmp_path / "course"
    (tmp_path / "books").mkdir()
    init_course(CourseSettings(course, "week7", f"sqlite:///{tmp_path}/books/gb.db"), max_points=max_points_by_task())
    settings = CourseSettings(course, "week7")
    assert settings.db_url is None
    assert settings.gradebook_url == f"sqlite:///{tmp_path}/books/gb.db"
    assert str(tmp_path / "books") in settings.hidden_paths, "the sandbox must not see the gradebook"
    assert CourseSettings(tmp_path / "fresh").gradebook_url == f"sqlite:///{tmp_path}/fresh/gradebook.db"


def test_the_course_room_takes_the_settings_not_their_parts():
    """A function of the modules a cohort run (and `bertlab export`) goes through takes ``settings`` (or a value built from
    it), not the assignment, the gradebook URL, the sandbox choice or the hidden folders one by one."""
    threaded = []
    for name in TAKES_THE_SETTINGS:
        tree = ast.parse((GRADER_PACKAGE / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("require_"):
                args = node.args
                names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
                if names & SETTINGS_PARTS:
                    threaded.append(f"{name}:{node.lineno} {node.name}({', '.join(sorted(names & SETTINGS_PARTS))})")
    assert not threaded, "these take the course's settings one by one; take `settings: CourseSettings`:\n" + \
        "\n".join(threaded)


# The modules that open the gradebook or run nbgrader on it, and the two functions there that work a
# URL out (``course_db_url``, for CourseSettings.gradebook_url) or tidy one (``normalise_db_url``).
GRADEBOOK_MODULES = ("course/config.py", "course/gradebook.py", "course/results.py", "course/preconditions.py")
URL_MAKERS = {"course_db_url", "normalise_db_url"}


def test_no_gradebook_function_takes_a_url_of_its_own():
    """Which URL to pass is never the caller's question: a public function that touches the gradebook
    takes the course's settings and uses ``settings.gradebook_url`` (``init_course`` alone reads
    ``settings.db_url``, the URL as given, because it writes that one into the config)."""
    taking = []
    for name in GRADEBOOK_MODULES:
        tree = ast.parse((GRADER_PACKAGE / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_") \
                    and node.name not in URL_MAKERS:
                args = node.args
                if "db_url" in {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}:
                    taking.append(f"{name}:{node.lineno} {node.name}")
    assert not taking, "these take a gradebook URL; take `settings: CourseSettings` instead:\n" + "\n".join(taking)


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
