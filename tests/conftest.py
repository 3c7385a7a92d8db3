"""The kit's own test session: every results.json any test produced must match results.schema.json.

Grading validates each document before writing it (bertlab_grader.course.results.validate_result), so a
mismatch here means something wrote results.json around that check. The check runs once, at the end
of the session, over every results.json under pytest's temporary folders (demo courses, cohorts,
the wheel installed in a virtualenv), and fails the session naming the file and the first error.
"""

from __future__ import annotations

import json
import os

import pytest

from bertlab.tasks import EXERCISE_TASKS


# ---------------------------------------------------------------------------------------------
# The lanes (docs/architecture.md, "Working on the kit"): unit, the fast loop (not slow), the whole suite
# ---------------------------------------------------------------------------------------------

#: The unit lane (``-m unit``): the kit's pure-Python rooms, tested without a sandbox, a venv, a course
#: or a kernel: the registry, the architecture, results and settings, the wire format, the stubs, the
#: pages, the teaching tables, the lesson's tables and progress, export and feedback on made-up results.
UNIT_LANE = frozenset({
    "test_registry.py", "test_architecture.py", "test_course_settings.py", "test_rpc.py", "test_stubs.py",
    "test_docs.py", "test_task_pages.py", "test_lesson_progress.py", "test_lesson_cache.py", "test_data.py",
    "test_encoder.py", "test_seeded_inputs.py", "test_similarity.py", "test_export.py", "test_messages.py",
    "test_report.py", "test_scoring.py", "test_lanes.py", "test_benchmark_tools.py",
})

#: Fixtures that install the kit, build a wheel or a virtualenv, run `bertlab demo`, execute the lesson
#: notebook or compute all its figures: a test that uses one is slow, whatever marks it has (a fast loop
#: that builds a venv is not one).
SLOW_FIXTURES = frozenset({
    "machine_deps", "installed_kit", "demo", "bundle_install", "autograder_zip", "autograder", "kit_copy",
    "solutions_run", "stubs_run", "solutions_rerun", "partial_run", "all_lesson_figures",
})

#: An unmarked test (or its fixtures' setup) that takes longer than this is named at the end of the run.
UNMARKED_LIMIT_S = 10.0


#: The whole suite runs on every core (README: ``python -m pytest -q -n auto``, pytest-xdist): each test
#: module goes whole to one worker (worker_group), so a module's fixtures (a graded cohort, a Dask
#: cluster, a released bundle) are built once, and the modules that share the session's installed wheel
#: and demo (SESSION_KIT_FIXTURES, below) go together to one worker, which builds them once
#: (tests/test_lanes.py finds every module that takes one of them).
SESSION_KIT_FIXTURES = frozenset({"machine_deps", "installed_kit", "demo"})
SHARED_KIT_MODULES = frozenset({"test_cluster.py", "test_demo.py", "test_gradescope.py", "test_packaging.py"})

#: The longest groups of the whole suite, longest first (seconds in pytest, summed per module from the
#: JUnit file of a whole-suite run one test at a time on two cores, kit 403cf66: the outside bank 345,
#: test_cluster 341 with the wheel and the demo, the new-task walk 248, the repeatability run 201, the
#: notebook 142, the audit 126, ...). The workers take the groups
#: in this order, then the others in file order, so that the long ones start first and the workers end
#: together; a missing or renamed entry only costs balance.
LONGEST_FIRST = ("installed-kit", "tests/test_outside_bank.py", "tests/test_task_authoring.py",
                 "tests/test_grade_repeatability.py", "tests/test_notebook.py", "tests/test_audit.py",
                 "tests/test_grading_trust.py", "tests/test_segments.py", "tests/test_check_watch.py",
                 "tests/test_handin_grading.py", "tests/test_authoring_guide.py", "tests/test_journal.py",
                 "tests/test_runner.py")


#: What sets each worker's thread count (threads_per_worker), for its own torch and NumPy and for every
#: process it starts that does not set its own (`bertlab` commands, notebook kernels; a grading sandbox
#: always runs on one thread).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def threads_per_worker(workers: int, cores: int) -> int:
    """The torch/BLAS threads each of ``workers`` pytest-xdist workers gets on ``cores`` cores: the cores
    shared out, at least one. (Left to torch, each worker takes every core: on two cores two workers ran
    four OpenMP threads that spin while they wait for each other; seven torch-heavy modules under -n 2
    took 109.6 s and 191 CPU-s that way, 74.7 s and 128 CPU-s on one thread a worker.)"""
    return max(1, cores // max(1, workers))


def pytest_configure(config):
    """In a pytest-xdist worker: threads_per_worker for torch here and, unless the caller chose a count,
    for the processes the tests start. (A test about thread counts sets or clears these itself.)"""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return
    threads = threads_per_worker(int(workerinput.get("workercount", 1)), len(os.sched_getaffinity(0)))
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, str(threads))
    chosen = os.environ["OMP_NUM_THREADS"]
    import torch

    torch.set_num_threads(int(chosen) if chosen.isdigit() and int(chosen) > 0 else threads)


def worker_group(nodeid: str) -> str:
    """The group of a test that one worker runs whole: its module's path, or "installed-kit" for the
    modules of SHARED_KIT_MODULES."""
    path = nodeid.split("::", 1)[0]
    return "installed-kit" if path.rsplit("/", 1)[-1] in SHARED_KIT_MODULES else path


@pytest.hookimpl(optionalhook=True)  # (a hook of pytest-xdist's, called only under -n)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's scheduling by scope, with worker_group as the scope and the groups in collection
    order (longest_groups_first), not by their number of tests. (Its own ``--dist loadgroup`` marks do
    not reach the scheduler under pytest 9, which no longer reads a test's id from ``_nodeid``.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkerGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

    config.option.loadscopereorder = False
    return ByWorkerGroup(config, log)


def longest_groups_first(config, items) -> None:
    """In a pytest-xdist worker, the longest groups first (LONGEST_FIRST), the others in file order.
    (Every worker collects and sorts alike; the scheduler hands out the groups in that order.)"""
    if getattr(config, "workerinput", None) is None:
        return
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(worker_group(item.nodeid), len(rank)))  # (stable: file order otherwise)


def pytest_collection_modifyitems(config, items):
    """Each test's lane (above). A kit test marked ``@pytest.mark.tasks("retrieval")`` is about that task:
    its fixtures, figures or messages. In a course that removed the task (``bertlab remove-task``), it
    is skipped with a reason that says so; every other test runs as before (docs/authoring.md, "Remove
    a task")."""
    for item in items:
        if item.path.name in UNIT_LANE and item.path.parent.name == "tests":
            item.add_marker(pytest.mark.unit)
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        for mark in item.iter_markers("tasks"):
            removed = [task for task in mark.args if task not in EXERCISE_TASKS]
            if removed:
                item.add_marker(pytest.mark.skip(
                    reason=f"written about task {', '.join(removed)}, which this course removed"))
                break
    longest_groups_first(config, items)


def skip_module_unless_tasks(*names: str) -> None:
    """At the top of a test module written about these tasks: skip the whole module, with the reason,
    in a course that removed one (for modules that read a task's files as they are imported)."""
    removed = [task for task in names if task not in EXERCISE_TASKS]
    if removed:
        pytest.skip(f"written about task {', '.join(removed)}, which this course removed",
                    allow_module_level=True)


_DURATIONS: dict[str, float] = {}
_UNMARKED_SLOW: dict[str, float] = {}
#: Under -n: seconds per worker group (worker_group) and per worker, for the run's last lines.
_GROUP_SECONDS: dict[str, float] = {}
_WORKER_SECONDS: dict[str, float] = {}
#: How many of the longest groups the run's last lines name.
GROUPS_SHOWN = 10


def pytest_runtest_logreport(report):
    """Each test's time (setup, call and teardown together), and whether an unmarked one took too long;
    under -n, the time of its worker group and of the worker that ran it."""
    _DURATIONS[report.nodeid] = _DURATIONS.get(report.nodeid, 0.0) + report.duration
    worker = getattr(getattr(report, "node", None), "gateway", None)  # (pytest-xdist's, on the controller)
    if worker is not None:
        group = worker_group(report.nodeid)
        _GROUP_SECONDS[group] = _GROUP_SECONDS.get(group, 0.0) + report.duration
        _WORKER_SECONDS[worker.id] = _WORKER_SECONDS.get(worker.id, 0.0) + report.duration
    if report.when == "teardown" and "slow" not in report.keywords and _DURATIONS[report.nodeid] > UNMARKED_LIMIT_S:
        _UNMARKED_SLOW[report.nodeid] = _DURATIONS[report.nodeid]


def pytest_terminal_summary(terminalreporter):
    """Every test not marked slow that took over UNMARKED_LIMIT_S: a warning, so that whoever wrote it
    marks it slow (or makes it fast) before the fast loop grows again. (The slowest tests of a run:
    pytest's own ``--durations=10``.)"""
    if _UNMARKED_SLOW:
        terminalreporter.write_sep("-", f"not marked slow, over {UNMARKED_LIMIT_S:g} s: mark them slow or make them fast",
                                   yellow=True)
        for nodeid, seconds in sorted(_UNMARKED_SLOW.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line(f"{seconds:8.1f} s  {nodeid}", yellow=True)
    if _WORKER_SECONDS:
        # (what LONGEST_FIRST is kept from, and whether the workers ended together)
        terminalreporter.write_sep("-", f"the {GROUPS_SHOWN} longest worker groups (seconds in pytest, under -n)")
        for group, seconds in sorted(_GROUP_SECONDS.items(), key=lambda kv: -kv[1])[:GROUPS_SHOWN]:
            terminalreporter.write_line(f"{seconds:8.1f} s  {group}")
        terminalreporter.write_line("workers: " + ", ".join(f"{worker} {seconds:.0f} s"
                                                           for worker, seconds in sorted(_WORKER_SECONDS.items())))


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
