"""The mutant bank: realistic wrong submissions, and correct-but-different ones (variants).

    grader/mutants/build.py   the recipe of every entry: a mutant is one or two exact text
                                      swaps in one file of solutions/ (one realistic
                                      mistake); a variant replaces whole functions with a different,
                                      correct implementation

Nothing else is stored: ``load_bank`` builds each entry from the recipe and the current reference
solutions (solutions/, fences stripped) as a full submission directory in a private
temporary directory (``Entry.path``). A recipe whose text no longer matches the reference exactly
once fails loudly there.

The audit (grader/authoring/audit.py, ``bertlab audit``) grades every entry with the hidden suites: a
mutant must lose points in its own task and none elsewhere, a variant must keep full marks outside
performance.
Instructor only; never released.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional



@dataclass(frozen=True)
class Entry:
    """One mutant or variant of the bank."""

    name: str
    kind: str          # "mutant" or "variant"
    task: str
    file: str          # the one file that differs from the solutions
    description: str
    hint: str          # mutants: what grader/grading/hints.py tells a student whose code behaves like it
    path: Path         # a full submission directory (four files), built from the recipe


@lru_cache(maxsize=1)
def _materialised_root() -> Path:
    """A private (0700) directory for this process's copies of the bank entries."""
    root = Path(tempfile.mkdtemp(prefix="bertlab-bank-"))
    atexit.register(shutil.rmtree, root, True)
    return root


def _materialise(recipe, kind: str) -> Path:
    """The recipe's four files (its change applied to the stripped solutions), as a directory."""
    from bertlab_grader.mutants.build import entry_files

    target = _materialised_root() / kind / recipe.name
    if not target.is_dir():
        target.mkdir(parents=True)
        for name, text in entry_files(recipe).items():
            (target / name).write_text(text, encoding="utf-8")
    return target


def load_bank(only: Optional[str] = None, kinds=("mutant", "variant")) -> list[Entry]:
    """Every entry of the bank (mutants first), optionally only those whose name contains ``only``."""
    from bertlab_grader.mutants.build import MUTANTS, VARIANTS

    entries = []
    for kind, recipes in (("mutant", MUTANTS), ("variant", VARIANTS)):
        if kind not in kinds:
            continue
        for r in sorted(recipes, key=lambda r: r.name):
            if only is None or only in r.name:
                entries.append(Entry(r.name, kind, r.task, r.file, r.description, getattr(r, "hint", ""),
                                     _materialise(r, kind)))
    return entries
