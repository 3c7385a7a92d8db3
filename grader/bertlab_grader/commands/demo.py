"""`bertlab demo`: build a course holding the embedded demo cohort, grade it end to end, show the gradebook.

Fully offline. The cohort (see grader/bertlab_grader/commands/demo_cohort/README.md): a full solution, untouched stubs, a
partial solution, a buggy one (mistakes from the mutant bank), a hostile one, and a zip submission.

Exit code: that of `bertlab grade` (0, 1 or 2), and 1 as well when alice, who handed in the
reference solution, does not get full marks in every correctness task: a demo that grades the
reference wrong must not look like a success.
"""

from __future__ import annotations

import sys
import tempfile
import zipfile
from pathlib import Path

from bertlab.tasks import EXERCISE_FILES
from bertlab_grader.authoring.stubs import expected_exercises
from bertlab_grader.core.locations import reference_sources
from bertlab_grader.course.pool import start_fork_server
from bertlab_grader.course.results import load_results
from bertlab_grader.course.runner import RunOptions, grade_course
from bertlab_grader.course.settings import CourseSettings
from bertlab_grader.grading.preflight import shortfall

COHORT_DIR = Path(__file__).parent / "demo_cohort"  # the demo's six students (this room's own data)

ASSIGNMENT = "week7"

# dave's bugs: mutants of the bank (grader/bertlab_grader/mutants/<task>.py), each replacing its one file.
BUGGY_FROM_BANK = ("cka_no_centering", "pool_divide_by_length", "ret_ascending")


def _stub_files() -> dict[str, str]:
    return expected_exercises()  # the untouched stubs, as a student receives them


def _buggy_files() -> dict[str, str]:
    from bertlab_grader.mutants.bank import load_bank

    files = reference_sources()
    for mutant in BUGGY_FROM_BANK:
        found = [e for e in load_bank(mutant, kinds=("mutant",)) if e.name == mutant]
        if not found:
            continue  # a task this kit's registry no longer has (bertlab remove-task)
        entry = found[0]
        files[entry.file] = (entry.path / entry.file).read_text()
    return files


def cohort() -> dict[str, dict[str, str]]:
    """student -> {filename: source} for the directory submissions of the demo."""
    solution, stubs = reference_sources(), _stub_files()
    done = EXERCISE_FILES[:2]  # carol finished the first two tasks and left the others as stubs
    partial = {name: (solution if name in done else stubs)[name] for name in solution}
    hostile = {p.name: p.read_text() for p in sorted((COHORT_DIR / "erin").glob("*.py"))}
    return {"alice": solution, "bob": stubs, "carol": partial, "dave": _buggy_files(), "erin": hostile}


def build_demo_course(course: Path) -> Path:
    """Write the cohort into ``course/submitted/<student>/week7/`` (frank's as a zip)."""
    for student, files in cohort().items():
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (folder / name).write_text(text)
    frank = course / "submitted" / "frank" / ASSIGNMENT
    frank.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(frank / "submission.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in reference_sources().items():
            archive.writestr(name, text)
    return course


def run_demo(keep: str | None = None, workers: int | None = None, unsafe_no_sandbox: bool = False) -> int:
    if keep:
        course = Path(keep).resolve()
        if course.exists() and any(course.iterdir()):
            print(f"bertlab demo: {course} exists and is not empty; choose a new folder for --keep.", file=sys.stderr)
            return 2
        course.mkdir(parents=True, exist_ok=True)
    else:
        course = Path(tempfile.mkdtemp(prefix="bertlab-demo-"))
    print(f"Demo course: {course}")
    print("Cohort: alice (solution), bob (stubs), carol (partial), dave (buggy), erin (hostile), frank (zip)\n")
    # The workers' fork server warms up (torch, MiniLM, the reference data: about 6 s of one core)
    # while the course is built (about 1 s); grade_course finds it running.
    start_fork_server()
    build_demo_course(course)
    settings = CourseSettings(course, ASSIGNMENT, unsafe_no_sandbox=unsafe_no_sandbox)
    code = grade_course(settings, RunOptions(workers=workers))
    alice = load_results(settings).get("alice")
    problem = "alice was not graded" if alice is None else shortfall(alice)
    if problem is not None:
        print(f"\nbertlab demo: FAILED: the reference solution (alice) did not get full marks: {problem}",
              file=sys.stderr)
        code = code or 1
    if code == 0 and not keep:
        print(f"\nThe course stays in {course} for you to look at (delete it when done).")
    return code

