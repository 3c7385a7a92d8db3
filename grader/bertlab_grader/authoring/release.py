"""`bertlab release OUT`: write the student bundle, and prove it leaks nothing.

The bundle is the student distribution, ``bertlab-student``: a student (or a self-paced learner)
installs it with ``pip install -e OUT`` and works in ``OUT/exercises/``:

    OUT/README.md                 for students (set-up, tasks, how to check)
    OUT/pyproject.toml            distribution bertlab-student: package bertlab, the student's dependencies
                                  only (bertlab/requirements.txt), script bertlab (student commands only)
    OUT/.gitignore                caches and the learner's .bertlab/ progress folder
    OUT/.bertlab-bundle.json      marks OUT as a bundle (only such a folder is replaced by --force)
    OUT/src/bertlab/              the student package, all of it (lesson code, check, the public tests)
    OUT/exercises/                the stubs and the lesson notebook, generated from the reference now
    OUT/docs/                     student-facing pages only (STUDENT_DOCS)

Everything comes from the installed packages (bertlab, bertlab_grader), so an instructor who
installed the kit from a wheel releases the same bundle as one working in a checkout.

Never in it: bertlab_grader (the reference solutions, the hidden suites, the grader, the demo
cohort, the mutant bank), the kit's tests, instructor pages. The bundle is built in a staging folder next to OUT, scanned
(``scan_bundle``: instructor-only paths, nbgrader fence lines, lines of the reference solutions'
fenced bodies, byte copies of instructor-only files) and only then moved into place, so a leaky or
half-written bundle never appears at OUT.

Replacing an earlier bundle never deletes a student's work. The marker ``.bertlab-bundle.json``
records, under "files", the sha256 of every file the release wrote (relative path -> hex digest; the
marker itself is not listed). ``--force`` replaces OUT only when it is an earlier bundle whose every
file is still what that release wrote: a changed file (an edited ``exercises/pooling.py``, the
notebook, a provided file), a file the release did not write (a new file in ``exercises/``, the
learner's progress in ``.bertlab/``, notes, a git repository, Jupyter's ``.ipynb_checkpoints/``
autosaves) or a marker without a manifest (from an older kit, so nothing can be checked) makes it
refuse, naming the files. Only caches that an install or a test run re-creates are ignored
(DISPOSABLE_NAMES, DISPOSABLE_SUFFIXES); files the release wrote and that are gone are no loss. The
check runs before the new bundle is built and again after the old one has been moved aside, just
before it is deleted; the new bundle then takes its place with one rename.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from bertlab.errors import UsageError
from bertlab.handin.ways import DEFAULT_WAY
from bertlab_grader.core.locations import (KIT_ROOT)

from bertlab_grader.authoring.bundle import BUNDLE_MARKER, build_bundle, file_sha256
from bertlab_grader.authoring.leak_scan import scan_bundle

# What --force may delete from an earlier bundle although the release did not write it: caches that an
# install or a test run re-creates and that hold no student work. Not here on purpose: .bertlab/ (the
# learner's progress) and .ipynb_checkpoints/ (Jupyter's autosaves of the student's notebook).
DISPOSABLE_NAMES = {"__pycache__", ".pytest_cache", ".hypothesis", ".benchmarks", ".DS_Store"}
DISPOSABLE_SUFFIXES = (".pyc", ".pyo", ".egg-info")
# A refusal names at most this many of the student's files.
MAX_LISTED = 20


class ReleaseError(UsageError, ValueError):
    """The bundle was not written: the message says why (target, or what would have leaked)."""


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------

def release(out: Path, force: bool = False, kit_root: Path = KIT_ROOT,
            log: Callable[[str], None] = print, hand_in: str = DEFAULT_WAY) -> Path:
    """Write the student bundle to ``out`` and return its resolved path.

    Refuses (ReleaseError) when ``out`` is inside the kit (or holds it), when it exists and is not
    empty without ``force``, when ``force`` would replace a folder that is not an earlier bundle or an
    earlier bundle that holds a student's work (see ``student_work``), and when the scan finds anything
    instructor-only in the new bundle. Nothing at ``out`` is deleted unless every check passed.
    """
    kit_root = Path(kit_root).resolve()  # the checkout, or (installed) the folder holding the packages
    out = Path(out).expanduser().resolve()
    if out == kit_root or kit_root in out.parents or out in kit_root.parents:
        raise ReleaseError(f"{out} is inside the kit ({kit_root}) or contains it; write the bundle elsewhere, "
                           "e.g. `bertlab release ../week7-student`.")
    replacing = _check_target(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.staging-", dir=out.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; the bundle is meant to be shared
    try:
        files = build_bundle(staging, log=log, hand_in=hand_in)
        problems = scan_bundle(staging)
        if problems:
            raise ReleaseError("The bundle would leak instructor-only material, so nothing was written:\n"
                               + "\n".join(f"- {p}" for p in problems))
        if replacing:
            _replace_bundle(out, staging, log)
        else:
            if out.exists():
                out.rmdir()  # empty: checked above
            os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    log(f"Wrote the student bundle to {out} ({len(files)} files; scanned: no solutions, hidden tests or "
        "grader files).")
    log(f"Students: cd {out} && pip install torch==2.13.0 && pip install -e . && bertlab check")
    return out


def _check_target(out: Path, force: bool) -> bool:
    """True when ``out`` holds an earlier bundle that --force may replace: one whose marker lists what
    its release wrote and that holds nothing else (caches aside) and nothing changed since."""
    if not out.exists():
        return False
    if not out.is_dir():
        raise ReleaseError(f"{out} exists and is not a folder.")
    if not any(out.iterdir()):
        return False
    if not force:
        raise ReleaseError(f"{out} exists and is not empty; use --force to replace an earlier bundle.")
    if not (out / BUNDLE_MARKER).is_file():
        raise ReleaseError(f"{out} is not a bundle written by `bertlab release` (it has no {BUNDLE_MARKER}), "
                           "so --force will not delete it. Remove it yourself or choose another folder.")
    _refuse_student_work(out, shown_as=out)
    return True


# ---------------------------------------------------------------------------------------------
# Replacing an earlier bundle without losing a student's work
# ---------------------------------------------------------------------------------------------

def _is_disposable(name: str) -> bool:
    """A cache that an install or a test run re-creates (a folder's or a file's name)."""
    return name in DISPOSABLE_NAMES or name.endswith(DISPOSABLE_SUFFIXES)


def _entries(root: Path) -> Iterator[tuple[str, Path]]:
    """(relative POSIX path, path) of every file and link under ``root``, disposable caches left out.

    Links are listed, not followed (a release writes none, and deleting one deletes only the link)."""
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        kept = []
        for name in dirs:
            if (here / name).is_symlink():
                names.append(name)  # os.walk does not descend into it: report the link itself
            elif not _is_disposable(name):
                kept.append(name)
        dirs[:] = kept
        for name in names:
            if not _is_disposable(name):
                yield (here / name).relative_to(root).as_posix(), here / name


def _read_manifest(bundle: Path, shown_as: Path) -> dict[str, str]:
    """The manifest in the marker of the earlier bundle at ``bundle``; ReleaseError when the marker
    cannot be read or predates manifests (then no file can be checked, so none may be deleted)."""
    advice = ("Copy any work you want to keep elsewhere and remove the folder by hand, or release into a "
              f"new folder, e.g. `bertlab release {_new_folder(shown_as)}`.")
    try:
        marker = json.loads((bundle / BUNDLE_MARKER).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ReleaseError(f"{shown_as}/{BUNDLE_MARKER} cannot be read ({exc}), so --force cannot tell a "
                           f"student's changes from the release's files and will not delete anything. {advice}")
    files = marker.get("files") if isinstance(marker, dict) else None
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise ReleaseError(f"{shown_as} was written by an older `bertlab release` that did not record what it "
                           f"wrote ({BUNDLE_MARKER} has no file list): the bundle predates the manifest and "
                           "cannot be checked for a student's changes, so --force will not delete it. " + advice)
    return files


def student_work(bundle: Path, manifest: dict[str, str]) -> list[tuple[str, str]]:
    """(relative path, why) for every file in ``bundle`` that replacing it would lose, sorted by path.

    A file counts when the release did not write it (``manifest`` lacks it) or it changed since (its
    sha256 differs, or it cannot be read). The marker and disposable caches never count."""
    found = []
    for rel, path in _entries(bundle):
        if rel == BUNDLE_MARKER:
            continue
        if rel not in manifest:
            why = "the learner's progress" if rel.startswith(".bertlab/") else "not written by the release"
            found.append((rel, why))
        elif path.is_symlink() or not _same_file(path, manifest[rel]):
            found.append((rel, "changed since the release"))
    return sorted(found)


def _same_file(path: Path, sha256: str) -> bool:
    """Whether the file's bytes still have the sha256 the release recorded."""
    try:
        return file_sha256(path) == sha256
    except OSError:
        return False  # unreadable: cannot be shown unchanged


def _new_folder(out: Path) -> Path:
    return out.with_name(out.name + "-new")


def _student_work_message(shown_as: Path, found: list[tuple[str, str]]) -> str:
    """The refusal: each file (at most MAX_LISTED), then what to do."""
    lines = [f"{shown_as} holds work that the earlier release did not write, so --force will not replace it "
             "(nothing was deleted):"]
    lines += [f"  - {rel} ({why})" for rel, why in found[:MAX_LISTED]]
    if len(found) > MAX_LISTED:
        lines.append(f"  ... and {len(found) - MAX_LISTED} more")
    lines.append("Move this work somewhere safe (out of the folder) and run the release again, or release into a "
                 f"new folder instead, e.g. `bertlab release {_new_folder(shown_as)}`.")
    return "\n".join(lines)


def _refuse_student_work(bundle: Path, shown_as: Path) -> None:
    """ReleaseError unless every file of the earlier bundle at ``bundle`` is one its release wrote,
    unchanged (messages name the folder as ``shown_as``)."""
    found = student_work(bundle, _read_manifest(bundle, shown_as))
    if found:
        raise ReleaseError(_student_work_message(shown_as, found))


def _replace_bundle(out: Path, staging: Path, log: Callable[[str], None]) -> None:
    """Put the new bundle at ``staging`` in the place of the earlier one at ``out``.

    The earlier bundle is first renamed aside (so nothing can be added to it through ``out``), checked
    once more, and put back if it now holds student work; only after the new bundle is in place is it
    deleted."""
    retired = out.with_name(f".{out.name}.replaced-{os.getpid()}-{os.urandom(4).hex()}")
    os.rename(out, retired)
    try:
        _refuse_student_work(retired, shown_as=out)
        os.replace(staging, out)
    except BaseException:
        os.rename(retired, out)
        raise
    shutil.rmtree(retired, ignore_errors=True)
    if retired.exists():
        log(f"note: could not delete all of the earlier bundle, moved aside to {retired}; remove it by hand.")
