"""Regenerate the checkout's exercises/ (the task stubs and the lesson notebook) from the reference.

For kit developers, after editing solutions/, the lesson's source (grader/bertlab_grader/authoring/lesson/Week_7_encoder.py)
or what builds the notebook from it (grader/bertlab_grader/authoring/notebook.py):

    python tools/build_exercises.py          # rewrite exercises/
    python tools/build_exercises.py --check  # exit 1 when exercises/ is stale (what tests/test_stubs.py checks)

It also rewrites the student guide's task lists (docs/student-guide.md, the blocks the task registry
generates: bertlab_grader.authoring.task_files.stale_task_lists) when an edit of the registry or of a
solution's signature has made them stale.

`bertlab release` generates the same files into every bundle from the installed kit; this only keeps
the checkout's copy (what a self-paced learner in a clone works in) current.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bertlab_grader.authoring.notebook import NOTEBOOK_NAME, notebook_text
from bertlab_grader.authoring.stubs import expected_exercises
from bertlab_grader.authoring.task_files import stale_task_lists

EXERCISES = Path(__file__).resolve().parents[1] / "exercises"


def expected_files() -> dict[str, str]:
    """{file name: text} that exercises/ should hold."""
    return {**expected_exercises(), NOTEBOOK_NAME: notebook_text()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale files (exit 1 if any)")
    args = parser.parse_args(argv)
    stale = [name for name, text in expected_files().items()
             if not (EXERCISES / name).is_file() or (EXERCISES / name).read_text(encoding="utf-8") != text]
    # The checkout whose exercises/ this is (a test's empty folder has no docs/: nothing to rewrite).
    pages = stale_task_lists(EXERCISES.parent)
    if args.check:
        for name in stale:
            print(f"exercises/{name} is stale: run `python tools/build_exercises.py`.")
        for page in pages:
            print(f"{page}'s task lists are stale: run `python tools/build_exercises.py`.")
        return 1 if stale or pages else 0
    EXERCISES.mkdir(exist_ok=True)
    for name in stale:
        (EXERCISES / name).write_text(expected_files()[name], encoding="utf-8")
        print(f"wrote exercises/{name}")
    for page, text in pages.items():
        (EXERCISES.parent / page).write_text(text, encoding="utf-8")
        print(f"wrote {page}")
    if not stale and not pages:
        print("exercises/ is up to date.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
