"""The bundle's leak scan: every reason a bundle is not safe to give students (instructor-only
paths, nbgrader fence lines, lines of the solutions' fenced bodies, byte copies of instructor-only
files). ``bertlab release`` scans its staging folder before moving it into place."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from bertlab_grader.core.locations import (PACKAGE_DIR, PUBLIC_TESTS_DIR, REFERENCE_DIR,
                                           STUDENT_PACKAGE_DIR, SUITES_DIR, CHECKOUT)
from bertlab_grader.authoring.stubs import expected_exercises
from bertlab_grader.core.fences import fenced_bodies, is_fence_line

from bertlab_grader.authoring.bundle import files_under, is_junk

# Instructor-only: relative paths that must not exist in a bundle, and folder names that must not appear.
FORBIDDEN_PATHS = (("src", "bertlab_grader"), ("bertlab_grader",), ("grader",), ("solutions",), ("tests",))
FORBIDDEN_DIR_NAMES = {"bertlab_grader", "grader", "solutions", "hidden", "mutants", "demo_cohort"}
# nbgrader's markers: a line that starts with one of these is solution or hidden-test content.
# A line of a solution's fenced body this long (stripped) is distinctive enough to count as a leak.
MIN_LEAK_LINE = 24


def _text_lines(path: Path) -> list[str] | None:
    """The lines of a text file (a notebook's cell sources, decoded), or None for binary files."""
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None
    lines = text.splitlines()
    if path.suffix == ".ipynb":
        try:
            cells = json.loads(text).get("cells", [])
            for cell in cells:
                source = cell.get("source", "")
                lines += ("".join(source) if isinstance(source, list) else str(source)).splitlines()
        except (ValueError, AttributeError):
            pass
    return lines


def solution_fingerprints() -> dict[str, str]:
    """{distinctive stripped line: solution file} for every fenced body line of the reference solutions
    that is long enough and appears in no provided (shipped by design) bertlab file and no stub."""
    shipped = set()
    for path in [*STUDENT_PACKAGE_DIR.rglob("*.py"), *PUBLIC_TESTS_DIR.rglob("*.py")]:
        shipped.update(line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    shipped.update(line.strip() for text in expected_exercises().values() for line in text.splitlines())
    prints = {}
    for path in sorted(REFERENCE_DIR.glob("*.py")):
        for line in fenced_bodies(path.read_text(encoding="utf-8")):
            line = line.strip()
            if len(line) >= MIN_LEAK_LINE and line not in shipped:
                prints[line] = f"solutions/{path.name}"
    return prints


def _instructor_only_hashes() -> dict[str, str]:
    """{sha256: path} of every file of the instructor package with enough content to be recognisable
    (its copy of the docs aside: the student pages among them ship by design), but for a copy of a
    stub: the bundle ships the stubs (a whole submission of the kit that has not started a task, the
    demo's erin, holds one), as solution_fingerprints leaves their lines out."""
    shipped = {hashlib.sha256(text.encode("utf-8")).hexdigest() for text in expected_exercises().values()}
    hashes = {}
    # In a checkout the solutions and the hidden suites are folders of their own beside grader/.
    for root in dict.fromkeys((PACKAGE_DIR, REFERENCE_DIR, SUITES_DIR)):
        for path in files_under(root):
            rel = path.relative_to(root)
            if is_junk(path) or any(is_junk(p) for p in rel.parents) or rel.parts[0] == "kit_docs":
                continue
            data = path.read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            if len(data.strip()) >= 64 and digest not in shipped:
                hashes[digest] = _kit_name(path)
    return hashes


def _kit_name(path: Path) -> str:
    """How the instructor names one of the kit's files: its path in the checkout, or in site-packages."""
    if CHECKOUT is not None and path.is_relative_to(CHECKOUT):
        return path.relative_to(CHECKOUT).as_posix()
    return path.relative_to(PACKAGE_DIR.parent).as_posix()


def scan_bundle(bundle: Path) -> list[str]:
    """Every reason the bundle at ``bundle`` is not safe to give students (empty when it is)."""
    bundle = Path(bundle)
    problems: list[str] = []
    fingerprints = solution_fingerprints()
    secret_files = _instructor_only_hashes()
    for path in files_under(bundle):
        rel = path.relative_to(bundle)
        if any(rel.parts[: len(parts)] == parts for parts in FORBIDDEN_PATHS) \
                or FORBIDDEN_DIR_NAMES & set(rel.parts[:-1]):
            problems.append(f"{rel}: instructor-only path")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest in secret_files:
            problems.append(f"{rel}: a copy of {secret_files[digest]}")
        lines = _text_lines(path)
        if lines is None:
            continue
        for number, line in enumerate(lines, 1):
            if is_fence_line(line):
                problems.append(f"{rel}:{number}: nbgrader fence {line.strip()!r}")
            elif line.strip() in fingerprints:
                problems.append(f"{rel}:{number}: a line of {fingerprints[line.strip()]}'s solution "
                                f"({line.strip()[:60]!r})")
    return problems
