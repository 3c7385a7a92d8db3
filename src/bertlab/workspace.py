"""Where the student's work is: the ``exercises/`` folder with cka.py, pooling.py, siamese.py, retrieval.py.

``bertlab check``, ``bertlab lesson`` and the public tests (``--impl exercises``) look for it from the
working directory: the directory itself when it holds the exercise files (a student inside
``exercises/``, or the lesson notebook running there), else its ``exercises/`` folder, else the same
two checks in each parent. ``--dir`` names it instead (the exercises folder or the folder holding it).
The workspace is the folder that holds ``exercises/``; the learner's progress is kept there. A folder of
exercise files with another name (``--dir mywork``) is its own workspace: nothing is written above it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .errors import UsageError
from .tasks import EXERCISE_FILES


@dataclass(frozen=True)
class Workspace:
    root: Path        # the folder holding exercises/, or a differently named exercise folder itself
                      # (progress lives in root/.bertlab/)
    exercises: Path   # the folder holding the exercise files


def _holds_exercises(folder: Path) -> bool:
    return all((folder / name).is_file() for name in EXERCISE_FILES)


def _workspace_at(folder: Path) -> Optional[Workspace]:
    if _holds_exercises(folder):
        # The parent is the workspace only when this is its exercises/ folder; any other parent (a home
        # folder, Downloads) is not the learner's to write progress into.
        return Workspace(root=folder.parent if folder.name == "exercises" else folder, exercises=folder)
    if _holds_exercises(folder / "exercises"):
        return Workspace(root=folder, exercises=folder / "exercises")
    return None


def find_workspace(directory: Optional[Path] = None) -> Workspace:
    """The student's workspace: at ``directory`` (``--dir``) if given, else at or above the working directory.

    Raises UsageError naming what was looked for and how to point at it.
    """
    files = ", ".join(EXERCISE_FILES)
    if directory is not None:
        folder = Path(directory).expanduser().resolve()
        found = _workspace_at(folder)
        if found is None:
            raise UsageError(f"--dir {directory}: neither it nor its exercises/ folder holds {files}. "
                             "Point --dir at your exercises folder (or the folder that holds it).")
        return found
    start = Path.cwd().resolve()
    for folder in (start, *start.parents):
        found = _workspace_at(folder)
        if found is not None:
            return found
    raise UsageError(f"no exercises found: neither {start} nor a folder above it holds an exercises/ "
                     f"folder with {files}. Run this inside your bundle (the folder with exercises/), "
                     "or pass --dir path/to/exercises.")
