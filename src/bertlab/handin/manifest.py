"""MANIFEST.json: what a hand-in held when `bertlab submit` checked it.

    {"kit": "bertlab 0.1.0", "kit_digest": "sha256:...", "created": "2026-12-03T10:00:00+00:00",
     "files": {"cka.py": "sha256:...", ...},
     "tasks": {"cka": {"status": "passed", "passed": 7, "total": 7}, ...}}

``kit_digest`` identifies the kit the student checked against beyond its version number: a digest of
the task registry and of the public tests (``kit_digest()``), the same in the student bundle and in
the instructor's kit it was released from, and different for a kit adapted since (a task added, a
public test changed), whatever its version says.

The grader compares it with the files it grades (``changed_files``). A difference is a note in the
results ("changed after it was checked"): never a penalty, never a failure, since a student may
have a good reason (an instructor's fix, a file handed in again by hand), and a manifest proves
nothing the files themselves do not show.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Mapping, Optional

MANIFEST_NAME = "MANIFEST.json"
MAX_HASHED_BYTES = 10 * 1024 * 1024  # the grader reads this much of a file at most (and sources far less)


def file_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def checked_kit_files() -> dict[str, Path]:
    """What a check depends on, by a name that is the same in the kit and in the student bundle: the
    task registry (``tasks.py``) and every file of the public tests (``public_tests/<name>``)."""
    registry = Path(importlib.util.find_spec("bertlab.tasks").origin)
    tests = Path(importlib.util.find_spec("bertlab.public_tests").origin).parent
    files = {"tasks.py": registry}
    for path in sorted(tests.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".ini"):
            files[f"public_tests/{path.relative_to(tests).as_posix()}"] = path
    return files


def kit_digest(files: Optional[Mapping[str, Path]] = None) -> str:
    """sha256 over ``files`` (default: ``checked_kit_files()``), name and bytes, in name order."""
    digest = hashlib.sha256()
    for name, path in sorted((files or checked_kit_files()).items()):
        data = Path(path).read_bytes()
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return "sha256:" + digest.hexdigest()


def build_manifest(files: Mapping[str, bytes], tasks: Mapping[str, dict], kit_version: str,
                   when: Optional[datetime.datetime] = None) -> dict:
    """The manifest of ``files`` (name -> bytes as packed) and the check's ``tasks`` (task -> status record)."""
    when = when or datetime.datetime.now(datetime.timezone.utc)
    return {"kit": f"bertlab {kit_version}", "kit_digest": kit_digest(), "created": when.isoformat(timespec="seconds"),
            "files": {name: file_digest(data) for name, data in files.items()},
            "tasks": {task: dict(record) for task, record in tasks.items()}}


def read_manifest(folder: Path) -> Optional[dict]:
    """The manifest in ``folder``, or None when there is none or it cannot be read as one (a manifest
    is a courtesy: a broken one is ignored, never held against the student)."""
    path = Path(folder) / MANIFEST_NAME
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 1_000_000:
            return None
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        return None
    return manifest


def changed_files(manifest: dict, files: Mapping[str, bytes]) -> list[str]:
    """The files of ``files`` (name -> bytes, as graded) whose digest differs from the manifest's, or that
    the manifest does not list, and the files it lists that are gone; sorted."""
    listed = {name: digest for name, digest in manifest["files"].items() if isinstance(name, str)}
    changed = [name for name, data in files.items() if listed.get(name) != file_digest(data)]
    gone = [name for name in listed if name not in files]
    return sorted(set(changed) | set(gone))


def manifest_note(folder: Path, names: list[str]) -> Optional[str]:
    """The results' note for the hand-in in ``folder`` whose graded files are ``names``: None without a
    manifest or when every file is as checked."""
    manifest = read_manifest(folder)
    if manifest is None:
        return None
    files = {}
    for name in names:
        path = Path(folder) / name
        if path.is_file() and not path.is_symlink():
            # (a file too large to be a source is "changed" without being read: the grader refuses it anyway)
            files[name] = path.read_bytes() if path.stat().st_size <= MAX_HASHED_BYTES else b""
    notes = []
    changed = changed_files(manifest, files)
    if changed:
        notes.append(f"changed after it was checked: {', '.join(changed)} differ from what `bertlab submit` "
                     f"checked on {manifest.get('created', 'an unknown date')}")
    checked_with = manifest.get("kit_digest")
    if isinstance(checked_with, str) and checked_with != kit_digest():
        notes.append(f"checked against another kit than the course's ({manifest.get('kit', 'unknown version')}, "
                     f"{checked_with[:19]}; the course's {kit_digest()[:19]}): its task list or public tests "
                     "differed, so its check may not match this grading")
    return "; ".join(notes) + " (no points depend on this)" if notes else None
