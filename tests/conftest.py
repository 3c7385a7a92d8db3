"""The kit's own test session: every results.json any test produced must match results.schema.json.

Grading validates each document before writing it (bertlab_grader.course.results.validate_result), so a
mismatch here means something wrote results.json around that check. The check runs once, at the end
of the session, over every results.json under pytest's temporary folders (demo courses, cohorts,
the wheel installed in a virtualenv), and fails the session naming the file and the first error.
"""

from __future__ import annotations

import json

import pytest

from bertlab.tasks import EXERCISE_TASKS


def pytest_collection_modifyitems(config, items):
    """A kit test marked ``@pytest.mark.tasks("retrieval")`` is about that task: its fixtures, figures or
    messages. In a course that removed the task (``bertlab remove-task``), it is skipped with a reason
    that says so; every other test runs as before (docs/authoring.md, "Remove a task")."""
    for item in items:
        for mark in item.iter_markers("tasks"):
            removed = [task for task in mark.args if task not in EXERCISE_TASKS]
            if removed:
                item.add_marker(pytest.mark.skip(
                    reason=f"written about task {', '.join(removed)}, which this course removed"))
                break


def skip_module_unless_tasks(*names: str) -> None:
    """At the top of a test module written about these tasks: skip the whole module, with the reason,
    in a course that removed one (for modules that read a task's files as they are imported)."""
    removed = [task for task in names if task not in EXERCISE_TASKS]
    if removed:
        pytest.skip(f"written about task {', '.join(removed)}, which this course removed",
                    allow_module_level=True)


def pytest_sessionfinish(session, exitstatus):
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None or getattr(session.config, "workerinput", None) is not None:
        return
    try:
        base = factory.getbasetemp()
    except Exception:  # noqa: BLE001 - no test asked for a temporary folder
        return
    from bertlab_grader.course.results import schema_errors

    found, bad = 0, []
    for path in sorted(base.rglob("results.json")):  # with jsonschema itself, not the grader's fast check
        found += 1
        try:
            errors = schema_errors(json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, OSError) as exc:
            errors = [exc]
        if errors:
            bad.append(f"{path}: {getattr(errors[0], 'message', errors[0])}")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and found:
        reporter.write_sep("-", f"results.json files produced by this session: {found}, "
                                f"matching results.schema.json: {found - len(bad)}")
    if bad:
        if reporter is not None:
            reporter.write_line("results.json files that do not match results.schema.json:\n  " + "\n  ".join(bad),
                                red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# ---------------------------------------------------------------------------------------------
# The kit as pip installs it (tests/venvs.py): shared by test_packaging.py and test_demo.py
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def machine_deps(tmp_path_factory):
    """This machine's third-party packages, bertlab left out, for fresh virtualenvs to see."""
    from venvs import machine_deps

    return machine_deps(tmp_path_factory.mktemp("deps"))


@pytest.fixture(scope="session")
def installed_kit(tmp_path_factory):
    """(venv bin/, wheel): the kit's wheel, built from this checkout, installed non-editable."""
    from venvs import install_kit, this_site_packages

    return install_kit(tmp_path_factory.mktemp("kit"), this_site_packages())


@pytest.fixture(scope="session")
def demo(tmp_path_factory, installed_kit):
    """`bertlab demo --keep COURSE` of the installed wheel, run from an empty folder: the main job."""
    from venvs import run

    venv_bin, _ = installed_kit
    base = tmp_path_factory.mktemp("demo")
    empty, course = base / "empty", base / "course"
    empty.mkdir()
    proc = run([venv_bin / "bertlab", "demo", "--keep", course], cwd=empty, timeout=1500)
    results = {p.parent.parent.name: json.loads(p.read_text())
               for p in course.glob("autograded/*/week7/results.json")}
    return {"proc": proc, "course": course, "results": results, "cwd": empty, "venv_bin": venv_bin}


# ---------------------------------------------------------------------------------------------
# The student bundle as `bertlab release` writes it: shared by test_check.py and test_handin.py
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """A student bundle released from this checkout, once per test module."""
    from bertlab_grader.authoring.release import release

    return release(tmp_path_factory.mktemp("release") / "bundle", log=lambda *_: None)


@pytest.fixture
def bundle(released, tmp_path):
    """A private copy of the released bundle (each test edits exercises/ and writes what it writes)."""
    import shutil

    return shutil.copytree(released, tmp_path / "bundle")


def system_chromium():
    """(Playwright's sync_playwright, the system Chromium's path), or a failure saying how to install them."""
    import shutil

    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("Playwright's Python package is missing: pip install -e '.[dev]' (the kit's test extra). "
                    "Never run `playwright install`: the tests drive the system Chromium.")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("Chromium is not installed, and the browser tests need it: "
                    "sudo apt-get install chromium (Debian/Ubuntu; .ci/run installs it in CI).")
    return sync_playwright, chromium
