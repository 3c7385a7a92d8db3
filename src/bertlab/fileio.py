"""Writing files so that a reader never sees half of one: the kit's one atomic-write helper."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def atomic_write_text(path: str | os.PathLike, text: str, mode: int = 0o644, sync: bool = True) -> None:
    """Replace ``path`` with ``text`` (UTF-8) in one step: written to a temporary file in the same
    folder, flushed to disk, then renamed over ``path``. A crash leaves the old file or the new one,
    never a mixture (progress files, results.json, the gradebook's notebooks rely on it).
    ``sync=False`` skips the fsync: for a writer that syncs the whole filesystem once for a batch of
    files (the course's journal, grader/bertlab_grader/course/journal.py), a reader still never sees
    half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            if sync:
                os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
