"""Which code is under test: the reference solutions, the student's exercises, or a directory.

An Implementation has one attribute per exercise module (``cka``, ``pooling``, ``siamese``,
``retrieval``), each exposing the names its exercise defines (bertlab/tasks.py). Tests only ever see this object, so the same test
runs against any of them (and, when grading, against a sandboxed proxy with the same attributes).

In-process loading runs the code in this process: fine for the kit's own solutions and for a
student checking their own work, never for grading someone else's (the grader uses grader.sandbox).
"""

from __future__ import annotations

import importlib
import sys
import types
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from .stubgen import EXERCISE_MODULES


@dataclass
class Implementation:
    """The four exercise modules of one implementation, and where they came from."""

    name: str
    cka: ModuleType
    pooling: ModuleType
    siamese: ModuleType
    retrieval: ModuleType


def _import_package(package: str) -> Implementation:
    modules = {task: importlib.import_module(f"{package}.{task}") for task in EXERCISE_MODULES}
    return Implementation(name=package, **modules)


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


def load_implementation(target: str = "solutions") -> Implementation:
    """``"solutions"``, ``"exercises"``, or a directory holding the four files."""
    if target in ("solutions", "exercises"):
        return _import_package(target)
    return load_directory(Path(target))
