"""The command `bertlab check [--task T] [-v]`: find the exercises, run, show, record progress.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from bertlab.progress import load_progress, record_run
from bertlab.tasks import EXERCISE_TASKS
from bertlab.workspace import find_workspace
from bertlab.check.run import NOT_RUN, NO_TESTS, run_public_tests
from bertlab.check.display import PlainDisplay, RichDisplay, _use_rich



def run_check(task: Optional[str] = None, impl: str = "exercises", verbose: bool = False,
              root: Optional[Path] = None, stream=None, directory: Optional[Path] = None) -> int:
    """`bertlab check [--task T] [-v]`. Returns the exit status: 0 only when every selected task passed.

    Progress is recorded (``.bertlab/progress.json``) only when checking the learner's own exercises/.
    """
    own_work = impl == "exercises"  # the learner's own exercises: their progress is recorded
    if root is not None:
        root = Path(root).resolve()
    else:  # a UsageError (exit 2) when no exercises are found: the CLI prints it as one line
        workspace = find_workspace(directory)
        root = workspace.root
        if own_work and workspace.exercises != root / "exercises":
            impl = str(workspace.exercises)  # a folder of exercise files with another name
    tasks = [task] if task else list(EXERCISE_TASKS)
    out = stream or sys.stdout
    display = RichDisplay(stream) if _use_rich(out) else PlainDisplay(out)
    display.start(root, tasks, impl + ("/" if impl == "exercises" else ""))
    try:
        run = run_public_tests(root, tasks, impl, on_event=display.event)
    finally:
        if isinstance(display, RichDisplay):
            display.progress.stop()
    progress = None
    if own_work:  # the learner's own work: remember it (unless the run itself went wrong)
        ran = {t: run.reports[t].as_record() for t in tasks if run.reports[t].status not in (NO_TESTS, NOT_RUN)}
        try:
            progress = load_progress(root) if run.problems else record_run(root, ran)
        except OSError as exc:
            print(f"(could not record progress: {exc})", file=sys.stderr)
            progress = load_progress(root)
    display.finish(run, progress, verbose)
    return 0 if run.ok else 1
