"""The hand-in archive: the files at the zip's top level and MANIFEST.json, written next to the
destination and moved over it only once complete, so an earlier archive stays as it was until then."""

from __future__ import annotations

import json
import os
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Mapping

from .manifest import MANIFEST_NAME


def write_archive(destination: Path, files: Mapping[str, bytes], manifest: dict) -> Path:
    """Write ``files`` (name -> bytes) and ``manifest`` into the zip ``destination``; returns its path."""
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(prefix=f".{destination.name}.", suffix=".partial", dir=destination.parent)
    os.close(handle)
    try:
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            now = time.localtime()[:6]
            for name, data in files.items():
                member = zipfile.ZipInfo(name, date_time=now)
                member.external_attr = 0o644 << 16  # a plain file, readable, once unpacked
                archive.writestr(member, data, compress_type=zipfile.ZIP_DEFLATED)
            archive.writestr(MANIFEST_NAME, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        os.chmod(partial, 0o644)
        os.replace(partial, destination)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return destination
