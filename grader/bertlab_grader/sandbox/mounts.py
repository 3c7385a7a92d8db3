"""The mount plan: what the sandbox hides (the kit, the course, homes, a private /tmp) and what it
shows back read-only (the Python install, the student package), in the order bwrap needs.
"""

from __future__ import annotations

import importlib.util
import os
import site
import stat
import sys
from pathlib import Path
from typing import Iterable, Optional



# Folders that are hidden whatever the caller asks (and /tmp, which gets a private empty one).
ALWAYS_HIDDEN = ("/root", "/home", "/run")
# Top-level packages of the kit that must never be importable by student code, wherever installed:
# the instructor package (its reference solutions, hidden suites, mutant bank, demo cohort). Only its
# sandbox/inside/ is shown, elsewhere and under another name, for the server (``TemplateCommand.inside_root``, sandbox/template_process.py).
SECRET_PACKAGES = ("bertlab_grader",)


def path_exists(path) -> bool:
    return os.path.lexists(path)


def is_under(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def site_dirs() -> list[Path]:
    """The site directories the server's Python imports from (torch, numpy, transformers, ...)."""
    candidates = set(site.getsitepackages())
    candidates.update(p for p in sys.path if p and os.path.isdir(p)
                      and os.path.basename(p) in ("site-packages", "dist-packages"))
    return sorted({Path(os.path.realpath(p)) for p in candidates if os.path.isdir(p)})


def python_dirs() -> list[Path]:
    """What the server's Python needs, to be shown read-only when it lies in a hidden folder.

    The base install (its prefixes) whole; of a virtualenv only ``bin/``, ``lib*/`` and
    ``pyvenv.cfg``, since a venv often sits in a folder with other things (the kit, the course,
    submissions) and nothing else of that folder may be shown; and the site directories on sys.path.
    The Python install is not secret: it is shown even inside a folder the caller asked to hide.
    """
    exe_prefix = Path(os.path.realpath(sys.executable or "/usr/bin/python3")).parent.parent
    bases = {Path(os.path.realpath(p)) for p in (sys.base_prefix, sys.base_exec_prefix) if p} | {exe_prefix}
    paths = {p for p in bases if p.is_dir()}
    for prefix in {Path(os.path.realpath(p)) for p in (sys.prefix, sys.exec_prefix) if p} - bases:
        for name in ("bin", "lib", "lib64", "pyvenv.cfg"):
            if path_exists(prefix / name):
                paths.add(prefix / name)
    paths.update(site_dirs())
    return sorted(paths)


def package_dir(name: str) -> Optional[Path]:
    """Where an importable top-level package lives, without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(os.path.realpath(list(spec.submodule_search_locations)[0]))


def mode_allows_others(path: Path) -> bool:
    """Can a uid other than the owner's pass through the folder ``path`` (o+x)?"""
    try:
        return bool(os.stat(path).st_mode & stat.S_IXOTH)
    except OSError:
        return True  # not there: nothing to work around


def world_traversable(path: Path) -> bool:
    """Can an unprivileged uid reach ``path``? (every ancestor needs o+x)"""
    for p in [path, *path.parents]:
        try:
            if not os.stat(p).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    return True


def mount_plan(hide_dirs: Iterable[Path], hide_files: Iterable[Path], show: Iterable[Path],
                tmp: Path = Path("/tmp")) -> list[str]:
    """The bwrap options that hide ``hide_dirs`` (empty tmpfs), ``hide_files`` (/dev/null over them)
    and show ``show`` again read-only, on top of ``--ro-bind / /``.

    bwrap applies mounts in order, and a mount covers whatever was mounted below its path before:
    so every mount comes after the mounts of its ancestors (outermost first: sorted by depth; at the
    same path a hide comes before the show that undoes it). A hide inside an already hidden folder is
    dropped (nothing to hide), a show of something already visible too. Showing a path inside a
    tmpfs needs its parent folders there: bwrap would create them 0700, which the sandbox's
    unprivileged uid cannot traverse, so they are created 0755 first. A hidden file is covered only
    where it is still visible.
    """
    ops = ([(p, 0, "dir") for p in hide_dirs] + [(p, 2, "file") for p in hide_files]
           + [(p, 1, "show") for p in show])
    ops.sort(key=lambda op: (len(op[0].parts), op[1], str(op[0])))
    state: dict[Path, str] = {}   # path -> "hidden" / "shown", for the mounts applied so far
    made: set[Path] = set()
    args: list[str] = []

    def covering(path: Path) -> Optional[tuple[Path, str]]:
        for p in (path, *path.parents):
            if p in state:
                return p, state[p]
        return None

    for path, _, kind in ops:
        cover = covering(path)
        visible = cover is None or cover[1] == "shown"
        if kind == "dir":
            if visible:  # (inside a shown folder its parents exist: they are real folders)
                perms = "1777" if path == tmp else "0755"
                args += ["--perms", perms, "--tmpfs", str(path)]
                state[path] = "hidden"
        elif kind == "file":
            if visible:
                args += ["--ro-bind", "/dev/null", str(path)]
        elif not visible:
            _make_parents(path, cover[0], made, args)
            if path.is_symlink():  # a venv's lib64 -> lib: the same link, not a second copy
                args += ["--symlink", os.readlink(path), str(path)]
            else:
                args += ["--ro-bind", str(path), str(path)]
            state[path] = "shown"
    return args


def _make_parents(path: Path, top: Path, made: set, args: list) -> None:
    """``--dir`` (mode 0755) for each folder strictly between ``top`` (a mount) and ``path``."""
    for parent in reversed(path.parents):
        if is_under(parent, top) and parent != top and parent not in made:
            made.add(parent)
            args.extend(["--perms", "0755", "--dir", str(parent)])


# ================================================================================ output

