"""The kit's cache: what the lesson notebook keeps between runs, where it lives, and removing it
(`bertlab lesson --clear-cache`).

What it keeps: fine-tuning figures trained on this machine (``bertlab.finetune.finetune_cached``) and
the results of the lesson's slow steps that run student code (``cached_json``, called by
``bertlab.lesson.cached_step`` with a key that holds the digest of exactly the student files the step
uses), each a small JSON file. A step is seeded and deterministic, so a result kept for the same key
is the result a rerun would compute. `bertlab check` keeps one folder here too: what its Hypothesis
reads from the code under test (``bertlab.check.run.hypothesis_storage``), instead of the workspace.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from .fileio import atomic_write_text



# Every entry the kit writes in its cache is named <what>-<12 hex digits of its key>[.json] (a staging
# copy adds a suffix, an unfinished atomic write a leading dot); nothing else there is the kit's.
_CACHE_ENTRY = re.compile(r"^\.?[a-z][a-z0-9]*(-[a-z0-9]+)*-[0-9a-f]{12}([.].*)?$")


def cache_root() -> Path:
    """The kit's cache folder: $BERTLAB_CACHE_DIR, else $XDG_CACHE_HOME/bertlab, else ~/.cache/bertlab."""
    if os.environ.get("BERTLAB_CACHE_DIR"):
        return Path(os.environ["BERTLAB_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "bertlab"


def _size(path: Path) -> int:
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() or p.is_symlink())


def size_text(size: int) -> str:
    """'62.1 MB', '3 KB'."""
    if size >= 1e6:
        return f"{size / 1e6:.1f} MB"
    return f"{max(size, 1) / 1e3:.0f} KB" if size else "0 KB"


def cache_entries() -> list[tuple[Path, int]]:
    """(path, bytes) of each entry the kit wrote in its cache folder, by name."""
    root = cache_root()
    if not root.is_dir():
        return []
    return [(p, _size(p)) for p in sorted(root.iterdir()) if _CACHE_ENTRY.match(p.name)]


def describe_cache() -> str:
    """One line: where the kit's cache is, what it holds and how to remove it."""
    entries = cache_entries()
    if not entries:
        return f"The kit's cache ({cache_root()}) is empty."
    names = ", ".join(p.name for p, _ in entries)
    return (f"The kit's cache: {cache_root()} holds {size_text(sum(s for _, s in entries))} ({names}); "
            "`bertlab lesson --clear-cache` removes it.")


def clear_cache() -> tuple[list[tuple[Path, int]], list[Path]]:
    """Remove every entry the kit wrote in its cache. Returns (removed (path, bytes), entries left alone
    because the kit did not write them). The folder itself goes too when nothing else is in it."""
    root = cache_root()
    removed = cache_entries()
    for path, _ in removed:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    left = sorted(p for p in root.iterdir()) if root.is_dir() else []
    if root.is_dir() and not left:
        root.rmdir()
    return removed, left


# ---------------------------------------------------------------------------------------------
# One JSON entry per key
# ---------------------------------------------------------------------------------------------

def key_digest(key: Mapping[str, Any]) -> str:
    """12 hex digits of the sha256 of ``key`` as JSON (keys sorted): the entry's name."""
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]


def entry_path(what: str, key: Mapping[str, Any]) -> Path:
    """``<cache>/<what>-<12 hex of key>.json``; ``what`` is lower-case words joined by '-' (e.g. "stsb-sbert")."""
    if not re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", what):
        raise ValueError(f"a cache entry's name is lower-case words joined by '-', like 'stsb-sbert'; got {what!r}.")
    return cache_root() / f"{what}-{key_digest(key)}.json"


def cached_json(what: str, key: Mapping[str, Any], compute: Callable[[], dict], *, label: str, depends_on: str,
                retrain: bool = False, before_compute: Optional[Callable[[], None]] = None,
                verbose: bool = True) -> dict:
    """``compute()`` (a dict of plain data), kept in the kit's cache under ``key``: a later call with the
    same key returns the kept dict without computing, unless ``retrain``.

    label: what the step is, for the printed line ("TinyBERT from scratch"); depends_on: what the key
    holds, in words ("exercises/pooling.py as it was when the notebook loaded it"). before_compute:
    called just before computing (e.g. to say how long it usually takes). The result gets ``source``
    ("cache" or "computed"), ``from_cache``, ``cache_path``, ``computed_at`` (ISO time) and
    ``compute_seconds`` (wall seconds of the run that made it).
    """
    path = entry_path(what, key)
    if not retrain and path.is_file():
        try:
            kept = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            kept = None  # a damaged entry: compute again and replace it
        if isinstance(kept, dict) and kept.get("key") == json.loads(json.dumps(key, default=str)):
            result = kept["result"]
            if verbose:
                print(f"{label}: loaded from the kit's cache ({path.name}, {size_text(path.stat().st_size)}), computed "
                      f"{kept.get('computed_at', '?')} in {kept.get('compute_seconds', 0):.0f} s with {depends_on}; "
                      "a change to it computes it again.", flush=True)
            return {**result, "source": "cache", "from_cache": True, "cache_path": str(path),
                    "computed_at": kept.get("computed_at"), "compute_seconds": kept.get("compute_seconds")}
    if before_compute is not None:
        before_compute()
    started = time.perf_counter()
    result = compute()
    seconds = round(time.perf_counter() - started, 2)
    computed_at = time.strftime("%Y-%m-%d %H:%M:%S %z")
    record = {"what": label, "depends_on": depends_on, "key": key, "computed_at": computed_at,
              "compute_seconds": seconds, "result": result}
    try:
        atomic_write_text(path, json.dumps(record, indent=1, default=str) + "\n")
        if verbose:
            print(f"{label}: kept in the kit's cache ({path.name}, {size_text(path.stat().st_size)}); the next run "
                  f"with {depends_on} shows it at once.", flush=True)
    except OSError as exc:  # a read-only home: the result still counts, it just is not kept
        if verbose:
            print(f"{label}: could not keep this in {path} ({exc}); the next run computes it again.", flush=True)
    return {**result, "source": "computed", "from_cache": False, "cache_path": str(path), "computed_at": computed_at,
            "compute_seconds": seconds}
