"""Which code is under test: the reference solutions, the student's exercises, or a directory.

Targets: ``"reference"`` (the instructor kit's ``bertlab_grader.solutions``; not in the student
bundle), ``"exercises"`` (the student's exercises folder, found from the working directory: see
bertlab/workspace.py) or the path of a directory holding the four exercise files.

An Implementation has one attribute per exercise module (``cka``, ``pooling``, ``siamese``,
``retrieval``), each exposing the names its exercise defines (bertlab/tasks.py). Tests only ever see this object, so the same test
runs against any of them (and, when grading, against a sandboxed proxy with the same attributes).

In-process loading runs the code in this process: fine for the kit's own solutions and for a
student checking their own work, never for grading someone else's (the grader uses bertlab_grader.sandbox).
"""

from __future__ import annotations

import importlib
import sys
import types
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from .errors import UsageError
from .tasks import EXERCISE_MODULES


@dataclass
class Implementation:
    """The four exercise modules of one implementation, and where they came from."""

    name: str
    cka: ModuleType
    pooling: ModuleType
    siamese: ModuleType
    retrieval: ModuleType


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
    """Import cka.py, pooling.py, siamese.py, retrieval.py from ``directory`` as a fresh package.

    The package gets a unique name so two directories never share cached modules, and
    ``from .pooling import masked_mean_pool`` inside siamese.py finds the same directory's pooling.
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
    """``"reference"``, ``"exercises"`` (found from the working directory), or a directory holding the four files."""
    if target == "reference":
        return load_reference()
    if target == "exercises":
        from .workspace import find_workspace

        return load_directory(find_workspace().exercises)
    return load_directory(Path(target))
