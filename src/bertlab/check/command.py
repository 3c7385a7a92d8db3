"""The command `bertlab check [--task T] [-v] [--watch]`: find the exercises, run, show, record progress.

One check is ``check_once``; watch.py (``--watch``) runs the same check again on every save.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

from bertlab.progress import load_progress, record_run
from bertlab.tasks import EXERCISE_TASKS
from bertlab.workspace import find_workspace
from bertlab.check.run import NOT_RUN, NO_TESTS, CheckRun, Launcher, run_public_tests
from bertlab.check.display import PlainDisplay, RichDisplay, use_rich


def resolve_target(task: Optional[str], impl: str, root: Optional[Path],
                   directory: Optional[Path]) -> tuple[Path, list[str], str, bool]:
    """(workspace root, tasks, impl, own work) of a `bertlab check`: the workspace found from the
    working directory or ``directory`` (a UsageError, exit 2, when there is none), the selected tasks,
    and whether it is the learner's own exercises (then its progress is recorded)."""
    own_work = impl == "exercises"
    if root is not None:
        root = Path(root).resolve()
    else:  # a UsageError (exit 2) when no exercises are found: the CLI prints it as one line
        workspace = find_workspace(directory)
        root = workspace.root
        if own_work and workspace.exercises != root / "exercises":
            impl = str(workspace.exercises)  # a folder of exercise files with another name
    return root, ([task] if task else list(EXERCISE_TASKS)), impl, own_work


def run_check(task: Optional[str] = None, impl: str = "exercises", verbose: bool = False,
              root: Optional[Path] = None, stream=None, directory: Optional[Path] = None) -> int:
    """`bertlab check [--task T] [-v]`. Returns the exit status: 0 only when every selected task passed.

    Progress is recorded (``.bertlab/progress.json``) only when checking the learner's own exercises/.
    """
    root, tasks, impl, own_work = resolve_target(task, impl, root, directory)
    return check_once(root, tasks, impl, own_work=own_work, verbose=verbose, stream=stream)


def check_once(root: Path, tasks: Sequence[str], impl: str, own_work: bool, verbose: bool = False, stream=None,
               launch: Optional[Launcher] = None, interrupted: Optional[Callable[[], bool]] = None) -> int:
    """One check of ``tasks``, shown as it runs and then summed up, progress recorded for the learner's
    own work. Returns the exit status (0: every task passed). ``launch`` and ``interrupted`` are
    run_public_tests's (the watcher's warm launcher; CheckCancelled when a newer save stops it)."""
    tasks = list(tasks)
    out = stream or sys.stdout
    display = RichDisplay(stream) if use_rich(out) else PlainDisplay(out)
    display.start(root, tasks, impl_shown(impl))
    try:
        run, progress = run_and_record(root, tasks, impl, own_work, on_event=display.event, launch=launch,
                                       interrupted=interrupted)
    finally:
        if isinstance(display, RichDisplay):
            display.progress.stop()
    display.finish(run, progress, verbose)
    return 0 if run.ok else 1


def impl_shown(impl: str) -> str:
    """The code under test as the check's first line names it: 'exercises/', 'reference', or a folder."""
    return impl + ("/" if impl == "exercises" else "")


def run_and_record(root: Path, tasks: Sequence[str], impl: str, own_work: bool,
                   on_event: Callable[[str, dict], None] = lambda kind, event: None,
                   launch: Optional[Launcher] = None,
                   interrupted: Optional[Callable[[], bool]] = None) -> tuple[CheckRun, Optional[dict]]:
    """Run the public tests of ``tasks`` (run_public_tests) and, for the learner's own work, record the
    run in the progress file: (the run, the progress to show; None when it is not the learner's own)."""
    run = run_public_tests(root, tasks, impl, on_event=on_event, launch=launch, interrupted=interrupted)
    if not own_work:
        return run, None
    # The learner's own work: remember it (unless the run itself went wrong).
    ran = {t: run.reports[t].as_record() for t in tasks if run.reports[t].status not in (NO_TESTS, NOT_RUN)}
    try:
        return run, load_progress(root) if run.problems else record_run(root, ran)
    except OSError as exc:
        print(f"(could not record progress: {exc})", file=sys.stderr)
        return run, load_progress(root)
