"""The task registry (src/bertlab/tasks.py) is the one list of tasks: no room of the kit names a task
outside the registry and that task's own pieces, the published results schema agrees with it, and
every registered task has what the kit needs to grade and teach it (docs/authoring.md)."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

from bertlab.tasks import EXERCISES, EXERCISE_TASKS, dependents, task_groups

ROOT = Path(__file__).resolve().parents[1]

# Files written ABOUT particular tasks, which may name them: the lesson (its sections teach and plot
# each task's results) and the demo cohort's hostile student (a submission, not kit code).
WRITTEN_ABOUT_TASKS = {
    "grader/bertlab_grader/authoring/lesson/Week_7_encoder.py",
    "src/bertlab/headline.py",  # (it calls each task's code; which tasks a figure needs is the registry's)
    "src/bertlab/lesson.py",
}


def _kit_code() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "src", "grader"], cwd=ROOT, capture_output=True, text=True).stdout
    if not listed:
        pytest.skip("not a git checkout")
    # (a file `bertlab remove-task` deleted is still listed until the deletion is committed)
    return [p for p in listed.split() if p.endswith(".py") and "/demo_cohort/" not in p and (ROOT / p).is_file()]


def _own(path: str, task: str) -> bool:
    """A piece of ``task`` itself: its name is in the file's name (Exercise.pieces)."""
    return task in Path(path).stem


def task_names_in_code(source: str, tasks) -> list[tuple[int, str]]:
    """(line, what) for each place ``source`` names a task in code: a string that is a task's name or
    names its file (``"cka"``, ``"cka.py"``), an attribute or a variable called like a task
    (``impl.cka``), a keyword argument (``cka=``). Docstrings and comments are prose and may."""
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    file_pattern = re.compile(r"\b(%s)(\.py\b|/)" % "|".join(map(re.escape, tasks)))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if node.value in tasks or file_pattern.search(node.value):
                found.append((node.lineno, repr(node.value[:60])))
        elif isinstance(node, ast.Attribute) and node.attr in tasks:
            found.append((node.lineno, "." + node.attr))
        elif isinstance(node, ast.Name) and node.id in tasks:
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.keyword) and node.arg in tasks:
            found.append((node.lineno, node.arg + "="))
    return found


def test_the_scanner_sees_a_task_named_in_code_and_not_in_prose():
    source = '"""Docstring about cka."""\n# a comment on cka\nx = impl.cka\ny = "pooling.py"\nz = {"siamese": 1}\nw = "the cka idea"\n'
    found = sorted(what for _, what in task_names_in_code(source, ("cka", "pooling", "siamese")))
    assert found == sorted([".cka", "'pooling.py'", "'siamese'"])


def test_no_room_names_a_task_outside_the_registry_and_its_own_pieces():
    offenders = []
    for path in _kit_code():
        if path == "src/bertlab/tasks.py" or path in WRITTEN_ABOUT_TASKS:
            continue
        for line, what in task_names_in_code((ROOT / path).read_text(encoding="utf-8"), EXERCISE_TASKS):
            if not any(_own(path, task) for task in EXERCISE_TASKS if task in what):
                offenders.append(f"{path}:{line}: {what}")
    assert not offenders, ("these lines name a task outside the registry (src/bertlab/tasks.py) and that "
                           "task's own pieces; read the task list from the registry instead:\n  "
                           + "\n  ".join(offenders))


def test_results_are_validated_against_the_registry_s_tasks():
    """results.schema.json leaves the task list out; the grader validates with the registry's."""
    import json

    from bertlab.tasks import GRADED_TASKS
    from bertlab_grader.course.results import RESULTS_SCHEMA
    from bertlab_grader.course.results import results_schema

    assert "enum" not in json.loads(RESULTS_SCHEMA.read_text(encoding="utf-8"))["$defs"]["test"]["properties"]["task"]
    assert results_schema()["$defs"]["test"]["properties"]["task"]["enum"] == list(GRADED_TASKS)


def test_every_registered_task_can_be_graded_and_taught():
    from bertlab_grader.authoring.task_coverage import coverage_gaps

    assert coverage_gaps() == []


def test_segments_dependents_and_the_student_readme_come_from_the_registry():
    from bertlab_grader.authoring.bundle import STUDENT_README
    from bertlab_grader.grading.segments import SEGMENTS

    assert SEGMENTS[:-1] == task_groups()
    for e in EXERCISES:
        group = next(g for g in SEGMENTS if e.name in g)
        assert set(e.uses) <= set(group), f"{e.name} uses {e.uses} but is graded apart from them"
        for used in e.uses:
            assert e.name in dependents(used)
        assert f"| {e.name} | `exercises/{e.filename}` |" in STUDENT_README


def test_every_mistake_the_suites_name_is_in_the_table():
    """A hint id missing from the table gives no hint (bertlab.mistakes.hint returns ""): caught here.
    The ids are those of ``mistake_hint("<id>")`` / ``hint("<id>")`` calls and the keys of every
    ``name_mistake(actual, {"<id>": value, ...})`` (docs/authoring.md, "Messages")."""
    import ast

    from bertlab.mistakes import find

    named, as_keys = set(), set()
    for folder in ("tests/public", "tests/hidden", "src/bertlab"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            where = str(path.relative_to(ROOT))
            named |= {(where, m) for m in re.findall(r"""(?:mistake_hint|hint)\(\s*["']([a-z0-9_]+)["']""", text)}
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == \
                        "name_mistake" and len(node.args) > 1 and isinstance(node.args[1], ast.Dict):
                    as_keys |= {(where, key.value) for key in node.args[1].keys
                                if isinstance(key, ast.Constant) and isinstance(key.value, str)}
    assert named, "the scan found no mistake_hint(...) calls at all: the pattern is stale"
    assert as_keys, "the scan found no name_mistake(actual, {...}) keys at all: the pattern is stale"
    named |= as_keys
    unknown = sorted(f"{path}: {m}" for path, m in named if find(m) is None)
    assert not unknown, f"mistake ids named by the suites but missing from src/bertlab/teaching/: {unknown}"


def test_an_unknown_mistake_id_gives_no_hint_rather_than_an_error():
    from bertlab.mistakes import hint

    assert hint("no_such_mistake_anywhere") == ""
    assert hint("cka_no_centering")


def test_a_lesson_step_using_a_task_not_in_this_course_says_so_and_the_lesson_goes_on(capsys):
    """After `bertlab remove-task retrieval`, the lesson's retrieval sections reach for a module the
    implementation no longer has (or stop at require()): each prints one line and is skipped."""
    from bertlab.lesson import LessonSteps

    steps = LessonSteps(None, tracebacks=False)
    reached_after = []
    with steps.step("pooling", "no_such_task", title="search"):
        getattr(object(), "no_such_task").semantic_search  # what `retrieval.SemanticIndex` does once retrieval is None
        reached_after.append(True)
    with steps.step("no_such_task", title="index"):
        steps.require()
        reached_after.append(True)
    with steps.step("pooling", title="pooling"):
        reached_after.append("ran")
    out = capsys.readouterr().out
    assert out.count("which is not part of this course") == 2 and "task no_such_task" in out, out
    assert reached_after == ["ran"] and steps.failed == []
