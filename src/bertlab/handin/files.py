"""Which files a hand-in holds: every task file of the registry, and the other modules of the exercises
folder that they import, directly or not (a student's ``helpers.py``). Nothing else of the folder goes in:
notes, data and caches stay home."""

from __future__ import annotations

from pathlib import Path

from ..check.affected import import_graph, uses
from ..tasks import EXERCISES


def handin_files(exercises: Path) -> tuple[list[str], list[str]]:
    """(task files present, helper files they import) of the folder ``exercises``, each in a stable
    order: task files in registry order, helpers by name. A task file that is missing is left out here;
    the command reports it as a task not handed in."""
    exercises = Path(exercises)
    graph = import_graph(exercises)
    tasks = [e.filename for e in EXERCISES if (exercises / e.filename).is_file()]
    needed: set[str] = set()
    for name in tasks:
        needed |= uses(graph, Path(name).stem)
    helpers = sorted(f"{module}.py" for module in needed
                     if f"{module}.py" not in tasks and (exercises / f"{module}.py").is_file())
    return tasks, helpers
