"""One digest of a submission's files: results.json records it and the timing record keys on it."""

from __future__ import annotations

import hashlib


def sources_digest(sources) -> str:
    """The hex sha256 of a submission's files ({filename: text}): names and text, in name order."""
    h = hashlib.sha256()
    for name, text in sorted(sources.items()):
        h.update(name.encode() + b"\0" + text.encode() + b"\0")
    return h.hexdigest()
