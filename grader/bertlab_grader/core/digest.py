"""Digests: of a submission's files (results.json records it and the timing record keys on it), and
the stamp of a folder of the kit (what the values kept on disk are keyed on)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def sources_digest(sources) -> str:
    """The hex sha256 of a submission's files ({filename: text}): names and text, in name order."""
    h = hashlib.sha256()
    for name, text in sorted(sources.items()):
        h.update(name.encode() + b"\0" + text.encode() + b"\0")
    return h.hexdigest()


def folder_stamp(folder: Path) -> list:
    """(relative path, size, mtime_ns) of every file under ``folder``, sorted: it changes with any edit
    of the folder, without reading a file (``__pycache__`` left out)."""
    out = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            path = Path(root) / name
            stat = path.stat()
            out.append((str(path.relative_to(folder)), stat.st_size, stat.st_mtime_ns))
    return out
