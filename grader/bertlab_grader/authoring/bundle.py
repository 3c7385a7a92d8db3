"""The student bundle's files: the student package and its public tests, the stubs and notebook
generated from the solutions, the student pages, a README and its own pyproject.toml."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Callable, Iterator

from bertlab.version import __version__
from bertlab.handin.ways import DEFAULT_WAY, HAND_IN_FILE, WAYS
from bertlab.tasks import ASSIGNMENT, EXERCISE_MODULES, EXERCISES
from bertlab_grader.authoring.notebook import NOTEBOOK_NAME, notebook_text
from bertlab_grader.authoring.stubs import expected_exercises
from bertlab_grader.core.locations import (DOCS_DIR, PUBLIC_TESTS_DIR, STUDENT_PACKAGE_DIR)


BUNDLE_DISTRIBUTION = "bertlab-student"
BUNDLE_MARKER = ".bertlab-bundle.json"
# Student-facing docs (files or folders under docs/); everything else in docs/ is for instructors.
STUDENT_DOCS = ("student-guide.md", "self-paced.md", "troubleshooting.md", "architecture.md", "commands.md",
                "results-format.md", "course-layout.md", "hidden-checks.md", "concepts")
# Never copied, wherever they appear.
JUNK_NAMES = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache", ".hypothesis", ".benchmarks", ".bertlab",
              ".DS_Store"}
JUNK_SUFFIXES = (".pyc", ".pyo", ".egg-info")

_NUMBER_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def _tasks_section() -> str:
    """The README's opening and task table, from the registry (bertlab/tasks.py)."""
    count = len(EXERCISES)
    word = _NUMBER_WORDS[count] if count < len(_NUMBER_WORDS) else str(count)
    rows = "\n".join(f"| {e.name} | `exercises/{e.filename}` | {', '.join(f'`{f}`' for f in e.functions)}"
                     f"{': ' + e.summary if e.summary else ''} |" for e in EXERCISES)
    uses = [f"{e.name} uses your {' and '.join(e.uses)}" for e in EXERCISES if e.uses]
    order = "Work in that order" + (f": {'; '.join(uses)}." if uses else ".")
    return (f"You implement {word} small piece{'s' if count != 1 else ''} of the lesson, test them with one command, "
            "then use them in the\nlesson notebook (`exercises/Week_7_encoder.ipynb`).\n\n"
            "| task | file | what you write |\n| --- | --- | --- |\n" + rows + "\n\n" + order + "\n\n")


_README_TITLE = """\
# bertlab, week 7: transfer learning with BERT and Sentence-BERT

"""

_README_REST = """\
## Set-up (Python 3.10 or newer; everything runs offline on a CPU)

```bash
pip install torch==2.13.0
pip install -e .
```

Install torch first, on its own, pinned: the course machines (and any machine your instructor set up)
hold its CPU build, and the pin finds it without the network. On your own machine with the network,
where plain pip would pull a multi-gigabyte GPU build, take the CPU build from PyTorch's index
instead: `pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu`.

## Check your work

```bash
bertlab check
bertlab check --task {first}
bertlab check --task {first} -v
```

`bertlab check` runs the public tests on your `exercises/` and prints, per task, how many tests pass,
the first failure in full with a hint, your progress so far, and which task to work on next. It exits
with status 0 only when every task passes. Run it anywhere in this folder (or pass `--dir exercises`).
The same tests, installed with the `bertlab` package, run with plain pytest from this folder:

```bash
python -m pytest --pyargs bertlab.public_tests -m {first}
```

Your instructor grades with more tests than these, so passing here is necessary, not sufficient:
read the docstrings (Inputs, Returns, Raises) and handle every case they describe.

## Hand in

```bash
bertlab submit
```

`bertlab submit` copies your task files into a fresh folder, runs the public tests on that copy, and
packs exactly those files into `week7-submission.zip` (beside `exercises/`), with a manifest of what it
checked. A file that does not import is refused, and nothing is written. `HAND-IN.md` says where the
archive goes in this course.

## Read more

- `docs/student-guide.md`: the tasks, the ideas behind them, and the figures to expect.
- `docs/self-paced.md`: working without an instructor (hints, progress, comparing with the reference).
- `docs/concepts/`: one page per idea of the lesson (CKA, inside BERT, fine-tuning, pooling, Sentence-BERT,
  semantic search).
"""


#: The student bundle's README.md: the tasks from the registry, then the set-up and how to check.
STUDENT_README = (_README_TITLE + _tasks_section()
                  + _README_REST.replace("{first}", EXERCISES[0].name))

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




def student_packages() -> list[str]:
    """The student package and its subpackages, as the bundle's pyproject lists them: ``bertlab``, each
    folder of it with an ``__init__.py`` (``bertlab.check``, ``bertlab.teaching``), ``bertlab.public_tests``."""
    subpackages = sorted(f"bertlab.{d.name}" for d in STUDENT_PACKAGE_DIR.iterdir()
                         if (d / "__init__.py").is_file() and d.name != "public_tests")
    return ["bertlab", *subpackages, "bertlab.public_tests"]


def is_junk(path: Path) -> bool:
    return path.name in JUNK_NAMES or path.name.endswith(JUNK_SUFFIXES)


def _copy_tree(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, ignore=lambda folder, names: [n for n in names if is_junk(Path(folder) / n)])


def build_bundle(dest: Path, log: Callable[[str], None] = print, hand_in: str = DEFAULT_WAY) -> list[Path]:
    """Write every bundle file into the (empty) folder ``dest``; returns the files, relative to it.
    ``hand_in``: how this course takes the hand-in (bertlab/handin/ways.py), written to HAND-IN.md."""
    dest = Path(dest)
    # The student package and its public tests: one folder in a wheel, two in a checkout
    # (src/bertlab/ and tests/public/); the bundle always gets them as one package.
    shutil.copytree(STUDENT_PACKAGE_DIR, dest / "src" / "bertlab",
                    ignore=lambda folder, names: [n for n in names if is_junk(Path(folder) / n)
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
    (dest / HAND_IN_FILE).write_text(WAYS[hand_in].replace("{archive}", f"{ASSIGNMENT}-submission.zip") + "\n",
                                     encoding="utf-8")
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
            "description": "bertlab, week 7, student bundle: the exercises, `bertlab check`, `bertlab submit` and the lesson.",
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


def files_under(root: Path) -> Iterator[Path]:
    return (p for p in sorted(Path(root).rglob("*")) if p.is_file())


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
    return {p.relative_to(root).as_posix(): file_sha256(p) for p in files_under(root)
            if p.relative_to(root).as_posix() != BUNDLE_MARKER}
