"""What `bertlab check` tells a student about a failure: the known mistake its message points at,
the task's idea to reread (bertlab/teaching/<task>.py), the concept page, and the next task.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Optional

from bertlab.mistakes import hint as mistake_hint
from bertlab.tasks import EXERCISE_TASKS, exercise
from bertlab.check.events import TIMEOUT_ENV
from bertlab.check.run import CheckRun, NOT_STARTED, PASSED, TestResult



_IMPORT_ERROR = re.compile(r"\b(SyntaxError|IndentationError|TabError|ImportError|ModuleNotFoundError)\b")

# What a wrong value most often means, task by task: the idea to reread.
# Each task's teaching module (Exercise.pieces: src/bertlab/teaching/<task>.py), read from the registry.
_TASK_IDEA = {task: importlib.import_module(f"bertlab.teaching.{task}").IDEA for task in EXERCISE_TASKS}

# How a kind of failure any task can show reads in a failure message (the checks' wording, pytest's,
# or the exception a test reports), and the known mistake (bertlab/mistakes.py) it points at; the
# first match wins.
_MESSAGE_MISTAKES = [
    (re.compile(r"instead of raising ValueError|expected ValueError|DID NOT RAISE"), "no_value_error"),
    (re.compile(r"should be a torch\.Tensor|should be a (Python )?float"), "wrong_type"),
    (re.compile(r"has shape"), "wrong_shape"),
    (re.compile(r"has dtype"), "wrong_dtype"),
    # A result that holds a NaN; not "expected nan, got 0.3" (the opposite: a nan was owed).
    (re.compile(r"contains NaN|\bis nan\b|returned nan\b|got nan\b|\bgave nan\b"), "nan_result"),
    (re.compile(r"\bTypeError\b"), "input_type_not_handled"),
]


def concept_page(root: Path, task: str) -> str:
    """The docs page explaining a task's idea (the task registry's ``concept``, relative to the kit
    root), else the student guide, if there is one."""
    try:
        page = Path(root) / "docs" / "concepts" / exercise(task).concept
    except KeyError:
        page = None
    if page is not None and page.is_file():
        return str(page.relative_to(root))
    guide = Path(root) / "docs" / "student-guide.md"
    return str(guide.relative_to(root)) if guide.exists() else ""


def hint_for(task: str, test: TestResult, root: Path) -> str:
    """One or two sentences pointing at what to reread or the likely mistake for a failure."""
    page = concept_page(root, task)
    see = f" The idea is explained in {page}." if page else ""
    if test.stub:
        other = test.stub_task
        if other and other != task:
            return (f"Task {task} builds on your {other} code: finish task {other} first "
                    f"(`bertlab check --task {other}`).")
        where = (f"{test.stub_function} in exercises/{other or task}.py" if test.stub_function
                 else f"exercises/{task}.py")
        return (f"Read the docstring of {where} (Inputs, Returns, Raises), then replace its "
                f"`raise NotImplementedYet(...)` with your code.{see}")
    if _IMPORT_ERROR.search(test.message) and ("exercises" in test.message or test.where):
        return ("One of your files does not even import: fix the error at the file and line shown. The tests of "
                "every task load every task's file, so this comes first.")
    if test.message.startswith("Timed out"):
        return (f"Look for a loop whose condition never changes, or far more work than the task needs. If your "
                f"code is only slow, {TIMEOUT_ENV}=600 gives each test more time.")
    if test.message.startswith("The test process died"):
        return ("Look for exit(), sys.exit() or os._exit() in your code, a huge allocation (memory), or an "
                f"infinite recursion. To see the process's own output: python -m pytest --pyargs bertlab.public_tests "
                f"-m {task} -x")
    if test.message.startswith("Not run"):
        return "An earlier test stopped the run: fix that one first."
    for pattern, mistake_id in _MESSAGE_MISTAKES:
        if pattern.search(test.message):
            return mistake_hint(mistake_id) + see
    return _TASK_IDEA.get(task, "Reread the docstring of the function this test calls.") + see


def next_task(run: CheckRun, progress: Optional[dict] = None) -> Optional[str]:
    """The first task, in lesson order, not known to pass: this run's result where the task ran,
    otherwise the recorded progress. None when every task is known to pass."""
    recorded = (progress or {}).get("tasks", {})
    for task in EXERCISE_TASKS:
        if task in run.reports:
            if run.reports[task].status != PASSED:
                return task
        elif recorded.get(task, {}).get("status") != PASSED:
            return task
    return None


def next_step(run: CheckRun, progress: Optional[dict] = None, how: str = "`bertlab check --task {task}`") -> str:
    """The closing line: which task to work on and how to check it (``how``, with ``{task}``: the command
    in a terminal, ``bertlab.check("{task}")`` under a notebook cell)."""
    task = next_task(run, progress)
    if task is None:
        return ("Next: every task passes. Compare your lesson figures with the reference ones: "
                "`bertlab lesson` (docs/self-paced.md lists them).")
    report = run.reports.get(task)
    check = how.format(task=task)
    if report is None:
        return f"Next: task {task} (exercises/{task}.py). Check it with {check}."
    if report.status == NOT_STARTED:
        return f"Next: start task {task} in exercises/{task}.py, then run {check}."
    return f"Next: fix task {task} (its first failure is above), then run {check}."
