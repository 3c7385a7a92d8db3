"""`bertlab check` in a notebook cell: ``bertlab.check("pooling")``, ``bertlab.check_all()``.

The same check as the command, step for step: the workspace is found from the kernel's working
directory (the notebook's folder) as `bertlab check` finds it from the shell's, the public tests run
on the files as they are saved, in a fresh process (run.py: nothing of the student's code is imported
into the kernel, and a check cannot crash or hang it), and a check of the learner's own exercises is
recorded in the progress file. What comes back is a CheckResult: under the cell it shows as HTML
(display.html_summary: the table, each unfinished task's first failure and hint, the progress, the
next step), in a terminal as the command's plain text. A task that fails is a result to show, never an
exception: a lesson notebook that runs its check cells top to bottom runs to the end.

Named after otter-grader's ``grader.check("q1")`` and ``grader.check_all()``, with three departures:
the argument is a task of the exercises (a file to write), not a question of the notebook; nothing
is set up first (otter's ``grader = otter.Notebook()``): the workspace is found as the command finds
it; and the check runs the saved files in a fresh process, where otter runs its tests against the
kernel's own variables: the files are what is handed in and graded, not what the kernel holds.

An ordinary mistake in the call (no exercises found, a task that does not exist) is shown the same
way, as one message saying what to do; no traceback reaches the cell.

``bertlab.check`` is this package itself (bertlab/check/__init__.py makes it callable), so that
``import bertlab.check.run`` and ``bertlab.check("pooling")`` both work, in either order.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from bertlab.errors import ReportedError
from bertlab.tasks import EXERCISE_TASKS
from bertlab.check.command import impl_shown, resolve_target, run_and_record
from bertlab.check.display import PlainDisplay, heading, html_message, html_summary
from bertlab.check.run import CheckRun


@dataclass
class CheckResult:
    """One check from a notebook: the run and the progress it recorded, or the reason nothing ran."""

    run: Optional[CheckRun] = None
    progress: Optional[dict] = None  # the learner's recorded progress (None: not the learner's own work)
    verbose: bool = False            # show every test, as `bertlab check -v`
    first_line: str = ""             # what was checked, on which code, where (display.heading)
    problem: str = ""                # why nothing ran (no exercises found, no such task)

    @property
    def ok(self) -> bool:
        """True when every task checked passes."""
        return self.run is not None and self.run.ok

    def __repr__(self) -> str:
        """The plain text `bertlab check` prints after its run (a terminal, a log, a text-only front end)."""
        if self.run is None:
            return f"bertlab check: {self.problem}"
        text = io.StringIO()
        PlainDisplay(text).finish(self.run, self.progress, self.verbose)
        return f"{self.first_line}\n{text.getvalue().rstrip()}"

    def _repr_html_(self) -> str:
        """What Jupyter shows under the cell."""
        if self.run is None:
            return html_message(f"bertlab check: {self.problem}", ok=False)
        return html_summary(self.run, self.progress, self.verbose, self.first_line)


def check(task: Optional[str] = None, *, verbose: bool = False, directory: Optional[Path] = None) -> CheckResult:
    """``bertlab.check("pooling")``: `bertlab check --task pooling` from a notebook cell.

    task: one task of the exercises (None: every task, as ``check_all()``). verbose: every test, as
    ``-v``. directory: the exercises folder (or the folder holding it), as ``--dir``; by default it is
    found from the working directory, which in Jupyter is the notebook's folder.
    """
    if task is not None and task not in EXERCISE_TASKS:
        calls = ", ".join(f'bertlab.check("{t}")' for t in EXERCISE_TASKS)
        return CheckResult(problem=f"there is no task {task!r}. The tasks are {', '.join(EXERCISE_TASKS)}: "
                                   f"{calls}, or bertlab.check_all() for every one.")
    try:
        root, tasks, impl, own_work = resolve_target(task, "exercises", None, directory)
    except ReportedError as exc:  # no exercises found: the command's own message, and the notebook's way
        return CheckResult(problem=f"{exc}\nIn a notebook, name the folder with "
                                   'bertlab.check(..., directory="path/to/exercises").')
    run, progress = run_and_record(root, tasks, impl, own_work)
    return CheckResult(run, progress, verbose, heading(root, tasks, impl_shown(impl)))


def check_all(*, verbose: bool = False, directory: Optional[Path] = None) -> CheckResult:
    """``bertlab.check_all()``: every task, as `bertlab check` without --task."""
    return check(None, verbose=verbose, directory=directory)
