"""The bank, assembled: every entry of the tasks' bank files, built as a submission directory on demand."""

from __future__ import annotations

import atexit
import importlib
import shutil
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

from bertlab.tasks import EXERCISE_TASKS
from bertlab_grader.mutants.recipe import entry_files



def _bank_files() -> dict:
    """Each task's bank file (Exercise.pieces: grader/bertlab_grader/mutants/<task>.py), in the registry's task order.
    A task without one is left out here and named by `bertlab audit` (authoring/task_coverage.py)."""
    found = {}
    for task in EXERCISE_TASKS:
        try:
            found[task] = importlib.import_module(f"bertlab_grader.mutants.{task}")
        except ModuleNotFoundError as exc:
            if exc.name != f"bertlab_grader.mutants.{task}":
                raise
    return found


_BY_TASK = _bank_files()
#: Every mutant and every variant, task by task in the kit's task order.
MUTANTS = tuple(m for module in _BY_TASK.values() for m in getattr(module, "MUTANTS", ()))
VARIANTS = tuple(v for module in _BY_TASK.values() for v in getattr(module, "VARIANTS", ()))
#: task -> its behaviour fingerprint (grader/bertlab_grader/mutants/fingerprint.py), which the hints compare.
FINGERPRINTS = {task: module.fingerprint for task, module in _BY_TASK.items() if callable(getattr(module, "fingerprint", None))}


@dataclass(frozen=True)
class Entry:
    """One mutant or variant of the bank."""

    name: str
    kind: str          # "mutant" or "variant"
    task: str
    file: str          # the one file that differs from the solutions
    description: str
    hint: str          # mutants: what grader/bertlab_grader/grading/hints.py tells a student whose code behaves like it
    path: Path         # a full submission directory (four files), built from the recipe


@lru_cache(maxsize=1)
def _materialised_root() -> Path:
    """A private (0700) directory for this process's copies of the bank entries."""
    root = Path(tempfile.mkdtemp(prefix="bertlab-bank-"))
    atexit.register(shutil.rmtree, root, True)
    return root


def _materialise(recipe, kind: str) -> Path:
    """The recipe's four files (its change applied to the stripped solutions), as a directory."""
    target = _materialised_root() / kind / recipe.name
    if not target.is_dir():
        target.mkdir(parents=True)
        for name, text in entry_files(recipe).items():
            (target / name).write_text(text, encoding="utf-8")
    return target


def load_bank(only: Optional[str] = None, kinds=("mutant", "variant")) -> list[Entry]:
    """Every entry of the bank (mutants first), optionally only those whose name contains ``only``."""
    entries = []
    for kind, recipes in (("mutant", MUTANTS), ("variant", VARIANTS)):
        if kind not in kinds:
            continue
        for r in sorted(recipes, key=lambda r: r.name):
            if only is None or only in r.name:
                entries.append(Entry(r.name, kind, r.task, r.file, r.description, getattr(r, "hint", ""),
                                     _materialise(r, kind)))
    return entries


def bank_entry(name: str) -> Entry:
    """The bank's entry named exactly ``name`` (a mutant or a variant)."""
    for entry in load_bank(only=name):
        if entry.name == name:
            return entry
    raise KeyError(f"the mutant bank has no entry named {name!r}")
