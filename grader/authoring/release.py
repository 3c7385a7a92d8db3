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

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from bertlab import __version__
from bertlab.errors import UsageError
from bertlab.tasks import EXERCISE_MODULES
from bertlab_grader.core.locations import (DOCS_DIR, KIT_ROOT, PACKAGE_DIR, PUBLIC_TESTS_DIR, REFERENCE_DIR,
                                           STUDENT_PACKAGE_DIR, SUITES_DIR, CHECKOUT)
from bertlab_grader.authoring.stubs import expected_exercises
from bertlab_grader.core.fences import fenced_bodies, is_fence_line

BUNDLE_DISTRIBUTION = "bertlab-student"
BUNDLE_MARKER = ".bertlab-bundle.json"
# Student-facing docs (files or folders under docs/); everything else in docs/ is for instructors.
STUDENT_DOCS = ("student-guide.md", "self-paced.md", "troubleshooting.md", "architecture.md", "commands.md",
                "results-format.md", "course-layout.md", "hidden-checks.md", "concepts")
# Never copied, wherever they appear.
JUNK_NAMES = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache", ".hypothesis", ".benchmarks", ".bertlab",
              ".DS_Store"}
JUNK_SUFFIXES = (".pyc", ".pyo", ".egg-info")
# Instructor-only: relative paths that must not exist in a bundle, and folder names that must not appear.
FORBIDDEN_PATHS = (("src", "bertlab_grader"), ("bertlab_grader",), ("grader",), ("solutions",), ("tests",))
FORBIDDEN_DIR_NAMES = {"bertlab_grader", "grader", "solutions", "hidden", "mutants", "demo_cohort"}
# nbgrader's markers: a line that starts with one of these is solution or hidden-test content.
# A line of a solution's fenced body this long (stripped) is distinctive enough to count as a leak.
MIN_LEAK_LINE = 24
# What --force may delete from an earlier bundle although the release did not write it: caches that an
# install or a test run re-creates and that hold no student work. Not here on purpose: .bertlab/ (the
# learner's progress) and .ipynb_checkpoints/ (Jupyter's autosaves of the student's notebook).
DISPOSABLE_NAMES = {"__pycache__", ".pytest_cache", ".hypothesis", ".benchmarks", ".DS_Store"}
DISPOSABLE_SUFFIXES = (".pyc", ".pyo", ".egg-info")
# A refusal names at most this many of the student's files.
MAX_LISTED = 20

STUDENT_README = """\
# bertlab, week 7: transfer learning with BERT and Sentence-BERT

You implement four small pieces of the lesson, test them with one command, then use them in the
lesson notebook (`exercises/Week_7_encoder.ipynb`).

| task | file | what you write |
| --- | --- | --- |
| cka | `exercises/cka.py` | `linear_cka`, `cka_matrix`: how similar two layers' representations are |
| pooling | `exercises/pooling.py` | `masked_mean_pool`: one vector per sentence, padding ignored |
| siamese | `exercises/siamese.py` | `SiameseBert`, `create_sbert`: Sentence-BERT around one shared encoder |
| retrieval | `exercises/retrieval.py` | `semantic_search`, `SemanticIndex`: top-k search by cosine, in blocks |

Work in that order: siamese uses your pooling, and retrieval is easiest once siamese works.

## Set-up (Python 3.10 or newer; everything runs offline on a CPU)

```bash
pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
pip install -e .
```

Install torch first, on its own, from PyTorch's CPU index: left to choose, pip may pull a
multi-gigabyte GPU build. (Where your instructor's machine already holds the CPU wheel, plain
`pip install torch==2.13.0` finds it.)

## Check your work

```bash
bertlab check
bertlab check --task cka
bertlab check --task cka -v
```

`bertlab check` runs the public tests on your `exercises/` and prints, per task, how many tests pass,
the first failure in full with a hint, your progress so far, and which task to work on next. It exits
with status 0 only when every task passes. Run it anywhere in this folder (or pass `--dir exercises`).
The same tests, installed with the `bertlab` package, run with plain pytest from this folder:

```bash
python -m pytest --pyargs bertlab.public_tests -m cka
```

Your instructor grades with more tests than these, so passing here is necessary, not sufficient:
read the docstrings (Inputs, Returns, Raises) and handle every case they describe.

## Read more

- `docs/student-guide.md`: the tasks, the ideas behind them, and the figures to expect.
- `docs/self-paced.md`: working without an instructor (hints, progress, comparing with the reference).
- `docs/concepts/`: one page per idea of the lesson (CKA, inside BERT, fine-tuning, pooling, Sentence-BERT,
  semantic search).
"""

BUNDLE_GITIGNORE = """\
__pycache__/
*.pyc
*.egg-info/
.pytest_cache/
.hypothesis/
.benchmarks/
.ipynb_checkpoints/
.bertlab/
"""


class ReleaseError(UsageError, ValueError):
    """The bundle was not written: the message says why (target, or what would have leaked)."""


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------

def release(out: Path, force: bool = False, kit_root: Path = KIT_ROOT,
            log: Callable[[str], None] = print) -> Path:
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
        files = build_bundle(staging, log=log)
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

def file_sha256(path: Path) -> str:
    """The hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def bundle_manifest(root: Path) -> dict[str, str]:
    """{relative POSIX path: sha256} of every file under ``root`` but the marker: what a release wrote."""
    root = Path(root)
    return {p.relative_to(root).as_posix(): file_sha256(p) for p in _files(root)
            if p.relative_to(root).as_posix() != BUNDLE_MARKER}


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


# ---------------------------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------------------------

def student_packages() -> list[str]:
    """The student package and its subpackages, as the bundle's pyproject lists them: ``bertlab``, each
    folder of it with an ``__init__.py`` (``bertlab.check``, ``bertlab.teaching``), ``bertlab.public_tests``."""
    subpackages = sorted(f"bertlab.{d.name}" for d in STUDENT_PACKAGE_DIR.iterdir()
                         if (d / "__init__.py").is_file() and d.name != "public_tests")
    return ["bertlab", *subpackages, "bertlab.public_tests"]


def _is_junk(path: Path) -> bool:
    return path.name in JUNK_NAMES or path.name.endswith(JUNK_SUFFIXES)


def _copy_tree(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, ignore=lambda folder, names: [n for n in names if _is_junk(Path(folder) / n)])


def build_bundle(dest: Path, log: Callable[[str], None] = print) -> list[Path]:
    """Write every bundle file into the (empty) folder ``dest``; returns the files, relative to it."""
    from bertlab_grader.authoring.notebook import NOTEBOOK_NAME, notebook_text

    dest = Path(dest)
    # The student package and its public tests: one folder in a wheel, two in a checkout
    # (src/bertlab/ and tests/public/); the bundle always gets them as one package.
    shutil.copytree(STUDENT_PACKAGE_DIR, dest / "src" / "bertlab",
                    ignore=lambda folder, names: [n for n in names if _is_junk(Path(folder) / n)
                                                  or (Path(folder) == STUDENT_PACKAGE_DIR and n == "public_tests")])
    _copy_tree(PUBLIC_TESTS_DIR, dest / "src" / "bertlab" / "public_tests")

    # The stubs and the notebook are generated from the installed reference now: a stale copy never ships.
    exercises = dest / "exercises"
    exercises.mkdir()
    for name, text in expected_exercises().items():
        (exercises / name).write_text(text, encoding="utf-8")
    (exercises / NOTEBOOK_NAME).write_text(notebook_text(), encoding="utf-8")

    (dest / "docs").mkdir()
    for name in STUDENT_DOCS:
        source = DOCS_DIR / name
        if source.is_dir():
            _copy_tree(source, dest / "docs" / name)
        elif source.is_file():
            shutil.copy2(source, dest / "docs" / name)
        else:
            log(f"note: docs/{name} is missing from this kit; the bundle has no copy of it.")

    (dest / "README.md").write_text(STUDENT_README, encoding="utf-8")
    (dest / "pyproject.toml").write_text(bundle_pyproject(), encoding="utf-8")
    (dest / ".gitignore").write_text(BUNDLE_GITIGNORE, encoding="utf-8")
    # Last: the marker records every file written above, so a later --force can tell them from a student's.
    (dest / BUNDLE_MARKER).write_text(json.dumps({
        "bertlab_bundle": 1, "kit_version": __version__, "tasks": list(EXERCISE_MODULES),
        "files": bundle_manifest(dest),
    }, indent=2) + "\n", encoding="utf-8")
    return sorted(p.relative_to(dest) for p in dest.rglob("*") if p.is_file())


def bundle_pyproject() -> str:
    """The bundle's pyproject.toml (written with tomli-w): distribution bertlab-student, package
    bertlab from src/, its dependencies read from bertlab/requirements.txt (the student list, the same
    file the kit's own pyproject reads), the `bertlab` script. No entry point adds instructor commands."""
    import tomli_w

    document = {
        "build-system": {"requires": ["setuptools>=68"], "build-backend": "setuptools.build_meta"},
        "project": {
            "name": BUNDLE_DISTRIBUTION,
            "version": __version__,
            "description": "bertlab, week 7, student bundle: the exercises, `bertlab check` and the lesson.",
            "readme": "README.md",
            "requires-python": ">=3.10",
            "dynamic": ["dependencies"],
            "scripts": {"bertlab": "bertlab.cli:main"},
        },
        "tool": {
            "setuptools": {
                "package-dir": {"": "src"},
                "packages": student_packages(),
                "dynamic": {"dependencies": {"file": ["src/bertlab/requirements.txt"]}},
                "package-data": {"bertlab": ["requirements.txt", "data/**/*"],
                                 "bertlab.public_tests": ["pytest.ini"]},
            },
            # `python -m pytest --pyargs bertlab.public_tests` from the bundle: the suites' plugin.
            "pytest": {"ini_options": {"addopts": "-p no:cacheprovider -p bertlab.pytest_plugin"}},
        },
    }
    return "# Generated by `bertlab release`.\n\n" + tomli_w.dumps(document)


# ---------------------------------------------------------------------------------------------
# Scanning
# ---------------------------------------------------------------------------------------------

def _files(root: Path) -> Iterator[Path]:
    return (p for p in sorted(Path(root).rglob("*")) if p.is_file())


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
    (its copy of the docs aside: the student pages among them ship by design)."""
    hashes = {}
    # In a checkout the solutions and the hidden suites are folders of their own beside grader/.
    for root in dict.fromkeys((PACKAGE_DIR, REFERENCE_DIR, SUITES_DIR)):
        for path in _files(root):
            rel = path.relative_to(root)
            if _is_junk(path) or any(_is_junk(p) for p in rel.parents) or rel.parts[0] == "kit_docs":
                continue
            data = path.read_bytes()
            if len(data.strip()) >= 64:
                hashes[hashlib.sha256(data).hexdigest()] = _kit_name(path)
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
    for path in _files(bundle):
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

