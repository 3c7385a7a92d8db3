"""Which code is under test: the reference solutions, the student's exercises, or a directory.

Targets: ``"reference"`` (the instructor kit's ``bertlab_grader.solutions``; not in the student
bundle), ``"exercises"`` (the student's exercises folder, found from the working directory: see
bertlab/workspace.py) or the path of a directory holding the exercise files.

An Implementation has one attribute per exercise module of the registry (bertlab/tasks.py:
``impl.<module>``), each exposing the names its exercise defines. Tests only ever see this object, so the same test
runs against any of them (and, when grading, against a sandboxed proxy with the same attributes).

In-process loading runs the code in this process: fine for the kit's own solutions and for a
student checking their own work, never for grading someone else's (the grader uses bertlab_grader.sandbox).
"""

from __future__ import annotations

import importlib
import sys
import types
import uuid
from pathlib import Path
from types import ModuleType

from .errors import UsageError
from .tasks import EXERCISE_MODULES


class Implementation:
    """The exercise modules of one implementation (``impl.<module>`` for every module of the
    registry), and where they came from (``name``)."""

    def __init__(self, name: str, **modules: ModuleType):
        missing = sorted(set(EXERCISE_MODULES) - set(modules))
        if missing:
            raise TypeError(f"an Implementation needs every exercise module; missing {missing}")
        self.name = name
        for module, value in modules.items():
            setattr(self, module, value)

    def __repr__(self) -> str:
        return f"Implementation({self.name!r})"


REFERENCE_PACKAGE = "bertlab_grader.solutions"


def load_reference() -> Implementation:
    """The reference solutions (instructor kit only)."""
    try:
        modules = {task: importlib.import_module(f"{REFERENCE_PACKAGE}.{task}") for task in EXERCISE_MODULES}
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] == "bertlab_grader":
            raise UsageError("the reference solutions come with the instructor kit, which is not installed "
                             "here; run your own code instead (the default, or --dir path/to/exercises).") from None
        raise
    return Implementation(name="reference", **modules)


def load_directory(directory: Path) -> Implementation:
    """Import every exercise file (bertlab/tasks.py's EXERCISE_FILES) from ``directory`` as a fresh package.

    The package gets a unique name so two directories never share cached modules, and
    a module that imports another relatively (``from .<module> import ...``) finds the same directory's.
    """
    directory = Path(directory).resolve()
    missing = [f"{t}.py" for t in EXERCISE_MODULES if not (directory / f"{t}.py").is_file()]
    if missing:
        raise FileNotFoundError(f"{directory} is missing {', '.join(missing)}.")
    package_name = f"_bertlab_impl_{uuid.uuid4().hex[:8]}"
    # A namespace-like package rooted at the directory: its modules import each other relatively.
    package = types.ModuleType(package_name)
    package.__path__ = [str(directory)]
    package.__package__ = package_name
    sys.modules[package_name] = package
    return Implementation(name=str(directory), **{
        task: importlib.import_module(f"{package_name}.{task}") for task in EXERCISE_MODULES
    })


def load_implementation(target: str = "exercises") -> Implementation:
    """``"reference"``, ``"exercises"`` (found from the working directory), or a directory holding the exercise files."""
    if target == "reference":
        return load_reference()
    if target == "exercises":
        from .workspace import find_workspace

        return load_directory(find_workspace().exercises)
    return load_directory(Path(target))
