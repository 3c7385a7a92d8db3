"""The kit's cache: what the lesson notebook keeps between runs (fine-tuning figures, the MLM
heads' figures), where it lives, and removing it (`bertlab lesson --clear-cache`)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path




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
