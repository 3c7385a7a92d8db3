"""The mutant bank: realistic wrong submissions, and correct-but-different ones (variants).

Layout (instructor only; never released):

    grader/mutants/<name>/            one mutant: cka.py, pooling.py, siamese.py, retrieval.py (the
                                      solutions, fences stripped, with ONE realistic mistake in one
                                      file) and MUTANT.txt
    grader/mutants/variants/<name>/   one correct variant (a different but right implementation of one
                                      file) and VARIANT.txt
    grader/mutants/build.py           the recipe of every entry (regenerates the directories)

MUTANT.txt / VARIANT.txt hold ``key: value`` lines: ``task``, ``file``, ``description`` (one line),
and for mutants an optional ``hint`` (what grader/hints.py tells a student whose code behaves like it).

The audit (grader/audit.py, ``bertlab audit``) grades every entry with the hidden suites: a mutant must
lose points in its own task and none elsewhere, a variant must keep full marks outside performance.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

BANK_DIR = Path(__file__).resolve().parent
VARIANTS_DIR = BANK_DIR / "variants"
EXERCISE_FILES = ("cka.py", "pooling.py", "siamese.py", "retrieval.py")


@dataclass(frozen=True)
class Entry:
    """One mutant or variant of the bank."""

    name: str
    kind: str          # "mutant" or "variant"
    task: str
    file: str
    description: str
    hint: str
    path: Path


def read_meta(path: Path) -> dict[str, str]:
    """The ``key: value`` lines of a MUTANT.txt / VARIANT.txt."""
    meta = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if ":" in line and not line.startswith("#"):
            key, value = line.split(":", 1)
            meta[key.strip()] = value.strip()
    return meta


def _entries(directory: Path, kind: str, meta_name: str) -> list[Entry]:
    found = []
    if not directory.is_dir():
        return found
    for sub in sorted(p for p in directory.iterdir() if (p / meta_name).is_file()):
        meta = read_meta(sub / meta_name)
        found.append(Entry(sub.name, kind, meta.get("task", "?"), meta.get("file", "?"),
                           meta.get("description", ""), meta.get("hint", ""), sub))
    return found


def load_bank(only: Optional[str] = None, kinds=("mutant", "variant")) -> list[Entry]:
    """Every entry of the bank (mutants first), optionally only those whose name contains ``only``."""
    entries = []
    if "mutant" in kinds:
        entries += _entries(BANK_DIR, "mutant", "MUTANT.txt")
    if "variant" in kinds:
        entries += _entries(VARIANTS_DIR, "variant", "VARIANT.txt")
    return [e for e in entries if only is None or only in e.name]
