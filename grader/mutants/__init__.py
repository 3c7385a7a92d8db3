"""The mutant bank: realistic wrong submissions, and correct-but-different ones (variants).

Layout (instructor only; never released):

    grader/mutants/<name>/            one mutant: the ONE file with a realistic mistake, and MUTANT.txt
    grader/mutants/variants/<name>/   one correct variant (a different but right implementation of one
                                      file) and VARIANT.txt

Only the changed file is stored; ``load_bank`` materialises each entry as a full submission (the
other three files from solutions/, fences stripped) in a private temporary directory, ``Entry.path``.
    grader/mutants/build.py           the recipe of every entry (regenerates the directories)

MUTANT.txt / VARIANT.txt hold ``key: value`` lines: ``task``, ``file``, ``description`` (one line),
and for mutants an optional ``hint`` (what grader/hints.py tells a student whose code behaves like it).

The audit (grader/audit.py, ``bertlab audit``) grades every entry with the hidden suites: a mutant must
lose points in its own task and none elsewhere, a variant must keep full marks outside performance.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from dataclasses import dataclass
from functools import lru_cache
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
    source: Path       # the stored directory: the changed file and its metadata
    path: Path         # a full submission directory (four files), built from source + solutions/


def read_meta(path: Path) -> dict[str, str]:
    """The ``key: value`` lines of a MUTANT.txt / VARIANT.txt."""
    meta = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if ":" in line and not line.startswith("#"):
            key, value = line.split(":", 1)
            meta[key.strip()] = value.strip()
    return meta


@lru_cache(maxsize=1)
def _materialised_root() -> Path:
    """A private (0700) directory for this process's full copies of the bank entries."""
    root = Path(tempfile.mkdtemp(prefix="bertlab-bank-"))
    atexit.register(shutil.rmtree, root, True)
    return root


def _materialise(source: Path, kind: str) -> Path:
    """source's changed file on top of the stripped solutions, as a full submission directory."""
    from grader.mutants.build import stripped_solutions

    target = _materialised_root() / kind / source.name
    if not target.is_dir():
        target.mkdir(parents=True)
        files = stripped_solutions()
        files.update({p.name: p.read_text(encoding="utf-8") for p in source.glob("*.py")})
        for name, text in files.items():
            (target / name).write_text(text, encoding="utf-8")
    return target


def _entries(directory: Path, kind: str, meta_name: str) -> list[Entry]:
    found = []
    if not directory.is_dir():
        return found
    for sub in sorted(p for p in directory.iterdir() if (p / meta_name).is_file()):
        meta = read_meta(sub / meta_name)
        found.append(Entry(sub.name, kind, meta.get("task", "?"), meta.get("file", "?"),
                           meta.get("description", ""), meta.get("hint", ""), sub, _materialise(sub, kind)))
    return found


def load_bank(only: Optional[str] = None, kinds=("mutant", "variant")) -> list[Entry]:
    """Every entry of the bank (mutants first), optionally only those whose name contains ``only``."""
    entries = []
    if "mutant" in kinds:
        entries += _entries(BANK_DIR, "mutant", "MUTANT.txt")
    if "variant" in kinds:
        entries += _entries(VARIANTS_DIR, "variant", "VARIANT.txt")
    return [e for e in entries if only is None or only in e.name]
