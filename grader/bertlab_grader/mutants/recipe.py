"""How a bank entry is written and built: ``Mutant`` (one or two exact text swaps in one file of
solutions/: one realistic mistake) and ``Variant`` (whole functions replaced by a different, correct
implementation), and ``entry_files`` (the four files of a submission made from a recipe).

Each entry starts from solutions/*.py with the nbgrader fence lines removed and changes ONE file.
Every swap must match exactly once, so a change in solutions/ that breaks a recipe fails loudly when
the bank is loaded (tests/test_audit.py loads every entry). The recipes themselves live one file per
task beside this one (cka.py, pooling.py, siamese.py, retrieval.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bertlab.mistakes import mistake

from bertlab_grader.core.locations import reference_sources


@dataclass(frozen=True)
class Mutant:
    name: str
    task: str
    file: str
    description: str
    swaps: tuple[tuple[str, str], ...]

    @property
    def hint(self) -> str:
        """What grader/bertlab_grader/grading/hints.py tells a student whose code behaves like this mutant: the
        record of the table of known mistakes (bertlab/mistakes.py) with the mutant's name; nothing
        for a mistake that no returned value shows (its hidden test names it instead)."""
        known = mistake(self.name)
        return known.hint if known.fingerprinted else ""


@dataclass(frozen=True)
class Variant:
    name: str
    task: str
    file: str
    description: str
    functions: dict = field(default_factory=dict)  # qualified name ("f" or "Class.method") -> new source
    swaps: tuple[tuple[str, str], ...] = ()


# =============================================================================================
# Building
# =============================================================================================

def swap(source: str, old: str, new: str, where: str) -> str:
    count = source.count(old)
    if count != 1:
        raise ValueError(f"{where}: the text to replace occurs {count} times (expected once):\n{old}")
    return source.replace(old, new)


_DEF_LINE = re.compile(r"^(\s*)def\s+(\w+)\s*\(")


def replace_function(source: str, qualname: str, new_source: str, where: str) -> str:
    """Replace the def of ``qualname`` ("f" or "Class.method") with ``new_source``."""
    lines = source.splitlines(keepends=True)
    parts = qualname.split(".")
    start = indent = None
    for i, line in enumerate(lines):
        match = _DEF_LINE.match(line)
        if match and match.group(2) == parts[-1] and len(match.group(1)) == 4 * (len(parts) - 1):
            start, indent = i, len(match.group(1))
            break
    if start is None:
        raise ValueError(f"{where}: no def {qualname}")
    end = start + 1
    while end < len(lines):
        line = lines[end]
        if line.strip() and len(line) - len(line.lstrip()) <= indent and not line.lstrip().startswith(")"):
            break
        end += 1
    while end > start + 1 and not lines[end - 1].strip():  # keep the blank lines that separate defs
        end -= 1
    return "".join(lines[:start]) + new_source.rstrip("\n") + "\n" + "".join(lines[end:])


def entry_files(entry) -> dict[str, str]:
    """file name -> text of the four files of a Mutant or Variant: its change applied to the solutions."""
    files = reference_sources()
    text = files[entry.file]
    for old, new in entry.swaps:
        text = swap(text, old, new, entry.name)
    for qualname, new_source in getattr(entry, "functions", {}).items():
        text = replace_function(text, qualname, new_source, entry.name)
    files[entry.file] = text
    return files


# =============================================================================================
# Source shared by entries
# =============================================================================================

# The red team's memo that a rescaled input still finds (pooling.py, cka.py, retrieval.py: the
# ``*_scale_memo`` variants). The performance task once gave timed call n its inputs times 1 + n/128;
# CKA and cosine rankings ignore a positive scale and a mean scales with it, so this key found an
# answer for every timed call after the first. Appended to a variant's source, after its functions.
SCALE_FREE_KEY = '''

def _scale_free_key(*inputs):
    """(key, scale) of a call's inputs: the same key for the inputs and for the inputs with every
    floating-point tensor multiplied by one c > 0 (``scale`` then c times as large). The key holds
    each tensor's dtype and shape, the first 16 values of a floating one divided by its first
    non-zero value (4 significant digits), the bytes of any other (a mask), and other values as
    they are (top_k); ``scale`` is the first floating tensor's first non-zero value."""
    import hashlib

    key, scale = [], None
    for value in inputs:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            head = value.detach().reshape(-1)[:16].double().tolist()
            first = next((v for v in head if v != 0), 1.0)
            scale = first if scale is None else scale
            key.append((str(value.dtype), tuple(value.shape), tuple(float(f"{v / first:.4g}") for v in head)))
        elif isinstance(value, torch.Tensor):
            data = value.detach().contiguous().numpy().tobytes()
            key.append((str(value.dtype), tuple(value.shape), hashlib.sha1(data).hexdigest()))
        else:
            key.append(repr(value))
    return tuple(key), (1.0 if scale is None else scale)
'''
