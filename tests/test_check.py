"""`bertlab check`: real runs in a released student bundle, then the pieces (statuses, hints, next task,
progress, display) on recorded events.

The real runs are what a student sees: `python -m bertlab.cli check` in the bundle folder, output
captured (so plain text, as in a log). They are kept cheap: the untouched stubs fail at their first
call, and runs on the reference code check one task at a time.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bertlab.tasks import EXERCISE_TASKS
from bertlab import progress
from bertlab.check import display as check_display
from bertlab.check import events, hints
from bertlab.check import run as check_run
from bertlab.errors import UsageError
from bertlab.workspace import find_workspace
from bertlab_grader.core.locations import REFERENCE_DIR

KIT_ROOT = Path(__file__).resolve().parents[1]
TASKS = EXERCISE_TASKS


def run_check(bundle: Path, *args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    """`bertlab check ARGS` in the bundle, as a student runs it: the bundle's own bertlab package
    first on the path, and the instructor package (installed here in editable mode) shadowed by a
    stand-in that fails to import. (tests/test_packaging.py installs the bundle alone in a venv.)"""
    shadow = bundle.parent / "shadow"
    (shadow / "bertlab_grader").mkdir(parents=True, exist_ok=True)
    (shadow / "bertlab_grader" / "__init__.py").write_text("raise ModuleNotFoundError(name='bertlab_grader')\n")
    environ = {k: v for k, v in os.environ.items() if k not in (events.TIMEOUT_ENV, "NO_COLOR")}
    environ.update(PYTHONPATH=os.pathsep.join([str(bundle / "src"), str(shadow)]), HF_HUB_OFFLINE="1", **env)
    return subprocess.run([sys.executable, "-m", "bertlab.cli", "check", *args], cwd=cwd or bundle, env=environ,
                          capture_output=True, text=True, timeout=900)


def table_row(output: str, task: str) -> tuple[int, int, str]:
    """(passed, total, status) of a task's row in the summary table."""
    match = re.search(rf"^{task}\s+(\d+)/(\d+)\s+(passed|failed|not started|not run|no tests)\s*$", output, re.M)
    assert match, f"no table row for {task} in:\n{output}"
    return int(match.group(1)), int(match.group(2)), match.group(3)


def use_solution(bundle: Path, *tasks: str) -> None:
    for task in tasks:
        shutil.copy(REFERENCE_DIR / f"{task}.py", bundle / "exercises" / f"{task}.py")


def replace_in_stub(bundle: Path, task: str, function: str, code: str) -> None:
    path = bundle / "exercises" / f"{task}.py"
    stub = f'raise NotImplementedYet("{task}", "{function}")'
    text = path.read_text()
    assert stub in text
    path.write_text(text.replace(stub, code, 1))


# ---------------------------------------------------------------------------------------------
# Real runs in a bundle
# ---------------------------------------------------------------------------------------------

@pytest.mark.slow  # 10.4 s in a CI run (every task's suite on the stubs): the lanes' 10 s limit
def test_check_on_untouched_stubs_shows_every_task_not_started_and_names_cka(bundle):
    result = run_check(bundle)
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    for task in TASKS:
        passed, total, status = table_row(out, task)
        assert (passed, status) == (0, "not started") and total > 0, (task, out)
        assert f"Read the docstring of" in out and f"exercises/{task}.py" in out
    assert "Next: start task cka in exercises/cka.py" in out
    assert "\x1b[" not in out, "captured output must be plain text"
    recorded = json.loads((bundle / ".bertlab" / "progress.json").read_text())
    assert {t: recorded["tasks"][t]["status"] for t in TASKS} == dict.fromkeys(TASKS, "not started")


@pytest.mark.slow  # (over 10 s: the fast loop leaves it to the whole suite)
def test_check_with_the_reference_code_passes_task_by_task_from_anywhere_and_remembers(bundle, tmp_path):
    """cka passes when checked from the bundle's exercises/ folder, and from elsewhere with --dir;
    from elsewhere without --dir there is no workspace. Then pooling, from the bundle's root, and the
    progress file remembers cka. (Each run costs seconds: the same cka run is not made twice.)"""
    use_solution(bundle, "cka")
    result = run_check(bundle, "--task", "cka", cwd=bundle / "exercises")
    assert result.returncode == 0, result.stdout + result.stderr
    passed, total, status = table_row(result.stdout, "cka")
    assert status == "passed" and passed == total > 0
    assert "Next: task pooling" in result.stdout
    first = json.loads((bundle / ".bertlab" / "progress.json").read_text())["tasks"]["cka"]
    assert first["status"] == "passed" and first["first_passed"]
    elsewhere = run_check(bundle, "--task", "cka", "--dir", str(bundle / "exercises"), cwd=tmp_path)
    assert elsewhere.returncode == 0 and table_row(elsewhere.stdout, "cka")[2] == "passed", elsewhere.stderr
    lost = run_check(bundle, "--task", "cka", cwd=tmp_path)
    assert lost.returncode == 2, lost.stdout + lost.stderr
    assert "no exercises found" in lost.stderr and "--dir" in lost.stderr and "Traceback" not in lost.stderr

    use_solution(bundle, "pooling")
    result = run_check(bundle, "--task", "pooling")
    assert result.returncode == 0, result.stdout + result.stderr
    assert table_row(result.stdout, "pooling")[2] == "passed"
    assert f"Progress: 2 of {len(EXERCISE_TASKS)} tasks passed" in result.stdout
    assert "Next: task siamese" in result.stdout  # cka is known to pass from the first run


def test_check_reports_a_process_exit_inside_student_code(bundle):
    replace_in_stub(bundle, "cka", "linear_cka", "import os; os._exit(3)")
    result = run_check(bundle, "--task", "cka")
    assert result.returncode == 1
    assert table_row(result.stdout, "cka")[2] == "failed"
    assert "The test process died while running this test (exit status 3)" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.slow  # (4 s or more: the fast loop stays under 5 minutes, docs/architecture.md)
def test_check_stops_an_endless_loop(bundle):
    replace_in_stub(bundle, "cka", "linear_cka", "while True: pass")
    result = run_check(bundle, "--task", "cka", **{events.TIMEOUT_ENV: "3"})
    assert result.returncode == 1
    assert "Timed out: this test ran for more than 3 s" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_check_points_at_a_file_that_does_not_import(bundle):
    with open(bundle / "exercises" / "pooling.py", "a") as handle:
        handle.write("\ndef broken(:\n")
    result = run_check(bundle, "--task", "cka")
    assert result.returncode == 1
    assert table_row(result.stdout, "cka")[2] == "failed"
    assert "SyntaxError" in result.stdout
    assert re.search(r"your code: exercises/pooling\.py:\d+", result.stdout), result.stdout
    assert "does not even import" in result.stdout


def test_exercises_are_found_from_the_working_directory_or_dir(released, monkeypatch, tmp_path):
    for where in (released, released / "exercises", released / "docs" / "concepts"):
        monkeypatch.chdir(where)
        found = find_workspace()
        assert (found.root, found.exercises) == (released.resolve(), released.resolve() / "exercises"), where
    monkeypatch.chdir(KIT_ROOT / "docs")  # the checkout is a workspace too (a self-paced learner's clone)
    assert find_workspace().exercises == KIT_ROOT / "exercises"
    assert find_workspace(released).exercises == released.resolve() / "exercises"
    assert find_workspace(released / "exercises").exercises == released.resolve() / "exercises"
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="no exercises found.*--dir"):
        find_workspace()
    with pytest.raises(UsageError, match="--dir .*docs.*cka.py"):
        find_workspace(released / "docs")


# ---------------------------------------------------------------------------------------------
# The pieces, on recorded events
# ---------------------------------------------------------------------------------------------

def collected(*tests: tuple[str, str]) -> dict:
    return {"event": "collected", "tests": [
        {"nodeid": f"test_{task}.py::{name}", "name": name, "task": task, "doc": ""}
        for task, name in tests]}


def result(task: str, name: str, outcome: str = "passed", stub: bool = False, message: str = "",
           stub_task: str | None = None, stub_function: str | None = None) -> dict:
    return {"event": "result", "nodeid": f"test_{task}.py::{name}", "outcome": outcome, "stub": stub,
            "stub_task": stub_task, "stub_function": stub_function, "message": message, "where": ""}


STUB = ("Task cka is not implemented yet: linear_cka raises "
        "NotImplementedError('cka: implement linear_cka (see its docstring)').")


@pytest.mark.parametrize("outcomes, status", [
    ([("passed", False), ("passed", False)], "passed"),
    ([("failed", True), ("failed", True)], "not started"),
    ([("passed", False), ("failed", True)], "failed"),  # started: one function done, one still a stub
    ([("failed", False), ("failed", True)], "failed"),
    ([("skipped", False)], "no tests"),
])
def test_task_status(outcomes, status):
    names = [f"t{i}" for i in range(len(outcomes))]
    events = [collected(*(("cka", n) for n in names))]
    events += [result("cka", n, o, stub, STUB if stub else "wrong") for n, (o, stub) in zip(names, outcomes)]
    run = check_run.summarise_events(KIT_ROOT, ["cka"], events + [{"event": "finished", "exitstatus": 1}])
    assert run.reports["cka"].status == status
    assert run.ok == (status == "passed")


def test_first_failure_prefers_a_wrong_value_to_a_remaining_stub():
    events = [collected(("cka", "a"), ("cka", "b")), result("cka", "a", "failed", True, STUB),
              result("cka", "b", "failed", False, "linear_cka(X, X) is wrong: expected 1, got 0.5.")]
    run = check_run.summarise_events(KIT_ROOT, ["cka"], events)
    assert run.reports["cka"].first_failure.name == "b"


def test_a_run_that_ends_early_marks_the_running_test_and_leaves_the_rest_not_run():
    events = [collected(("cka", "a"), ("cka", "b"), ("pooling", "c")), result("cka", "a"),
              {"event": "start", "nodeid": "test_cka.py::b"}]
    run = check_run.summarise_events(KIT_ROOT, ["cka", "pooling"], events, returncode=-9)
    assert run.reports["cka"].status == "failed"
    assert "killed by signal SIGKILL" in run.reports["cka"].first_failure.message
    assert run.reports["pooling"].status == "not run"
    assert not run.problems


def test_a_run_that_fails_outside_any_test_is_a_problem():
    run = check_run.summarise_events(KIT_ROOT, ["cka"], [], returncode=4)
    assert run.problems and "was called wrongly" in run.problems[0]
    assert run.reports["cka"].status == "no tests" and not run.ok


@pytest.mark.parametrize("message, stub, expected", [
    (STUB, ("cka", "linear_cka"), "Read the docstring of linear_cka in exercises/cka.py"),
    ("Task siamese cannot be checked yet: it needs task pooling, which is not implemented yet (...)",
     ("pooling", "masked_mean_pool"), "finish task pooling first"),
    ("Task pooling is not implemented yet: masked_mean_pool raises NotImplementedError('mine').", (None, None),
     "Read the docstring of exercises/pooling.py"),  # the student's own NotImplementedError
    ("masked_mean_pool(...) has shape [2, 1, 4]; expected [2, 4].", None, "Shapes first"),
    ("linear_cka(X 1-D) returned 0.5 instead of raising ValueError, but X must be 2-D.", None, "Raises: section"),
    ("masked_mean_pool(...) contains NaN (first at index [1, 0]).", None, "0/0"),
    ("cka_matrix(reps) is wrong at index [0, 1]: expected 0.8, got 0.6.", None, "center every column"),
])
def test_hints(message, stub, expected):
    task = "siamese" if "siamese" in message else "pooling" if "pool" in message else "cka"
    stub_task, stub_function = stub or (None, None)
    test = check_run.TestResult("n", "test_x", task, outcome="failed", stub=stub is not None, stub_task=stub_task,
                            stub_function=stub_function, message=message)
    assert expected in hints.hint_for(task, test, KIT_ROOT)


def _failing(call):
    """The ExceptionInfo of ``call()``'s exception, as the check's plugin sees it."""
    with pytest.raises(BaseException) as info:
        call()
    return info


def test_the_plugin_records_the_stub_a_test_reached_from_the_exception():
    from bertlab.assertions import not_implemented_message
    from bertlab.errors import NotImplementedYet

    def stub():
        raise NotImplementedYet("pooling", "masked_mean_pool")

    def wrapped(test_task, raiser):  # what the public tests' conftest does with it
        def call():
            try:
                raiser()
            except NotImplementedError as exc:
                raise pytest.fail.Exception(not_implemented_message(test_task, exc), pytrace=False) from None
        return call

    info = _failing(wrapped("siamese", stub))
    assert events._stub_fields(info) == {"stub": True, "stub_task": "pooling", "stub_function": "masked_mean_pool"}
    assert "it needs task pooling" in str(info.value.msg)

    def own():
        raise NotImplementedError("my own, not a stub")

    info = _failing(wrapped("pooling", own))
    assert events._stub_fields(info) == {"stub": True, "stub_task": None, "stub_function": None}
    assert str(info.value.msg).startswith("Task pooling is not implemented yet: own raises NotImplementedError(")
    assert events._stub_fields(_failing(lambda: 1 / 0))["stub"] is False


def test_a_students_own_not_implemented_error_counts_as_not_started_for_the_task_under_test():
    own = "Task pooling is not implemented yet: helper raises NotImplementedError('later')."
    events = [collected(("pooling", "a"), ("pooling", "b")), result("pooling", "a", "failed", True, own),
              result("pooling", "b", "failed", True, STUB, stub_task="pooling", stub_function="masked_mean_pool")]
    run = check_run.summarise_events(KIT_ROOT, ["pooling"], events + [{"event": "finished", "exitstatus": 1}])
    assert run.reports["pooling"].status == "not started"
    assert "exercises/pooling.py" in hints.hint_for("pooling", run.reports["pooling"].first_failure, KIT_ROOT)


@pytest.mark.tasks("cka", "pooling", "siamese", "retrieval")
def test_next_task_uses_this_run_then_the_recorded_progress():
    events = [collected(("pooling", "p")), result("pooling", "p")]
    run = check_run.summarise_events(KIT_ROOT, ["pooling"], events)
    assert hints.next_task(run, None) == "cka"
    recorded = {"tasks": {"cka": {"status": "passed"}, "siamese": {"status": "passed"}}}
    assert hints.next_task(run, recorded) == "retrieval"
    for task in EXERCISE_TASKS:  # (a task added with new-task too)
        recorded["tasks"].setdefault(task, {"status": "passed"})
    assert hints.next_task(run, recorded) is None
    assert "every task passes" in hints.next_step(run, recorded)


def all_passed_run():
    events = [collected(*((t, f"test_{t}") for t in TASKS))] + [result(t, f"test_{t}") for t in TASKS]
    return check_run.summarise_events(KIT_ROOT, list(TASKS), events + [{"event": "finished", "exitstatus": 0}],
                                  returncode=0)


def test_plain_display_of_an_all_passed_run():
    out = io.StringIO()
    display = check_display.PlainDisplay(out)
    run = all_passed_run()
    display.start(KIT_ROOT, TASKS, "exercises/")
    display.finish(run, None, verbose=True)
    text = out.getvalue()
    for task in TASKS:
        assert re.search(rf"^{task}\s+1/1\s+passed$", text, re.M)
    assert "Next: every task passes" in text
    # Every command the closing line suggests is one `bertlab` accepts.
    from bertlab.cli import build_parser

    suggested = re.findall(r"`bertlab ([^`]+)`", text[text.index("Next: every task passes"):])
    assert suggested == ["lesson"], suggested
    for command in suggested:
        build_parser().parse_args(command.split())
    assert "first failure" not in text


def test_rich_display_shows_messages_verbatim():
    from rich.console import Console

    message = "cka_matrix(reps) has shape [3, 1, 3]; expected [3, 3]. [bold]not markup[/bold]"
    events = [collected(("cka", "a")), result("cka", "a", "failed", False, message)]
    run = check_run.summarise_events(KIT_ROOT, ["cka"], events)
    display = check_display.RichDisplay(io.StringIO())
    display.start(KIT_ROOT, ["cka"], "exercises/")
    for event in events:  # the live progress bars follow the events
        display.event(event["event"], event)
    display.console = Console(file=io.StringIO(), width=200, force_terminal=True, color_system=None)
    display.finish(run, None, verbose=False)
    text = display.console.file.getvalue()
    assert "[3, 1, 3]" in text and "[bold]not markup[/bold]" in text and "Shapes first" in text


def test_plain_text_when_not_a_terminal_or_no_color(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert check_display.use_rich(Terminal()) and not check_display.use_rich(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not check_display.use_rich(Terminal())


# ---------------------------------------------------------------------------------------------
# Progress
# ---------------------------------------------------------------------------------------------

def test_progress_keeps_first_pass_history_and_survives_a_damaged_file(tmp_path):
    assert progress.load_progress(tmp_path)["tasks"] == {}
    progress.record_run(tmp_path, {"cka": {"status": "failed", "passed": 3, "total": 7}}, when="2025-01-01T10:00:00")
    progress.record_run(tmp_path, {"cka": {"status": "passed", "passed": 7, "total": 7}}, when="2025-01-02T10:00:00")
    record = progress.record_run(tmp_path, {"cka": {"status": "failed", "passed": 6, "total": 7},
                                            "pooling": {"status": "passed", "passed": 5, "total": 5}},
                                 when="2025-01-03T10:00:00")
    cka = record["tasks"]["cka"]
    assert (cka["status"], cka["first_passed"], cka["runs"]) == ("failed", "2025-01-02T10:00:00", 3)
    assert progress.passed_tasks(record) == ["pooling"]
    assert len(record["history"]) == 3
    assert progress.load_progress(tmp_path) == record
    lines = progress.format_progress(record)
    assert lines[0] == f"Progress: 1 of {len(EXERCISE_TASKS)} tasks passed"
    assert "failed 6/7 (last run 2025-01-03 10:00, first passed 2025-01-02 10:00)" in lines[1]
    assert lines[3].split() == ["siamese", "never", "checked"]

    for _ in range(progress.HISTORY_LIMIT + 5):
        progress.record_run(tmp_path, {"cka": {"status": "passed", "passed": 7, "total": 7}})
    assert len(progress.load_progress(tmp_path)["history"]) == progress.HISTORY_LIMIT

    progress.progress_path(tmp_path).write_text("{not json")
    assert progress.load_progress(tmp_path) == progress.empty_progress()


def test_hints_point_at_the_concept_page_of_the_task(tmp_path):
    from bertlab.tasks import EXERCISES, exercise

    (tmp_path / "docs" / "concepts").mkdir(parents=True)
    (tmp_path / "docs" / "student-guide.md").write_text("guide")
    assert hints.concept_page(tmp_path, "siamese") == "docs/student-guide.md"
    page = exercise("siamese").concept  # the task registry names each task's page
    (tmp_path / "docs" / "concepts" / page).write_text("SBERT")
    assert hints.concept_page(tmp_path, "siamese") == f"docs/concepts/{page}"
    test = check_run.TestResult("n", "t", "siamese", outcome="failed", message="forward(...) is wrong at index [0]")
    assert f"explained in docs/concepts/{page}" in hints.hint_for("siamese", test, tmp_path)
    for e in EXERCISES:  # and the kit's own docs have them all
        assert hints.concept_page(KIT_ROOT, e.name) == f"docs/concepts/{e.concept}"



# ---------------------------------------------------------------------------------------------
# Where a check writes, and a course's longer task names
# ---------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_check_with_dir_writes_only_its_progress_inside_that_folder(tmp_path):
    """`bertlab check --dir mywork` (the exercise files, in a folder not called exercises) from
    elsewhere: its progress goes into mywork/.bertlab, Hypothesis's notes into the kit's cache, and
    nothing at all beside mywork or in the working directory (no .bertlab, .hypothesis, .benchmarks)."""
    from bertlab.check.run import hypothesis_storage
    from bertlab.tasks import EXERCISE_FILES

    task = TASKS[1]
    mywork, elsewhere, cache = tmp_path / "outer" / "mywork", tmp_path / "elsewhere", tmp_path / "cache"
    mywork.mkdir(parents=True)
    elsewhere.mkdir()
    for name in EXERCISE_FILES:
        shutil.copy(REFERENCE_DIR / name, mywork / name)
    environ = {**os.environ, "BERTLAB_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "bertlab.cli", "check", "--task", task, "--dir", str(mywork)],
                          cwd=elsewhere, env=environ, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [p.name for p in (tmp_path / "outer").iterdir()] == ["mywork"]
    assert list(elsewhere.iterdir()) == []
    assert sorted(p.name for p in mywork.iterdir() if p.name.startswith(".")) == [".bertlab"]
    assert json.loads((mywork / ".bertlab" / "progress.json").read_text())["tasks"][task]["status"] == "passed"
    assert [p.name for p in cache.iterdir()] == [hypothesis_storage().name]
    # A folder called exercises still belongs to the folder holding it (a bundle): its progress is kept there.
    assert find_workspace(KIT_ROOT / "exercises").root == KIT_ROOT
    assert find_workspace(mywork).root == mywork.resolve()


def test_the_plain_table_and_the_live_marks_line_up_for_a_longer_task_name():
    """A course may add a task with a longer name than the kit's own: the marks shown while the check
    runs and the summary table are sized from the longest name, so their columns still line up."""
    long_name = "sentence_contrastive_loss"
    tasks = [TASKS[0], long_name]
    events = [collected(*((t, f"test_{i}") for t in tasks for i in range(3)))]
    events += [result(t, f"test_{i}") for t in tasks for i in range(3)]
    run = check_run.summarise_events(KIT_ROOT, tasks, events + [{"event": "finished", "exitstatus": 0}], returncode=0)
    out = io.StringIO()
    display = check_display.PlainDisplay(out)
    display.start(KIT_ROOT, tasks, "exercises/")
    for event in events:
        display.event(event["event"], event)
    display.finish(run, None, verbose=False)
    lines = out.getvalue().splitlines()
    marks = [line for line in lines if line.endswith(" ...")]
    assert [line.split()[0] for line in marks] == tasks and len({line.index("...") for line in marks}) == 1, marks
    header = next(line for line in lines if line.startswith("task "))
    rows = [line for line in lines if line.endswith(" passed") and "..." not in line]
    assert [row.split()[0] for row in rows] == tasks, lines
    # "passed" (the column) ends where each count ends; "status" starts where each status starts.
    assert {row.index("3/3") + len("3/3") for row in rows} == {header.index("passed") + len("passed")}, lines
    assert {row.rindex("passed") for row in rows} == {header.index("status")}, lines
