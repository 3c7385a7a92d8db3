"""Is this course usable for what a command is about to do? One definition of each check.

Every command that reads or grades a course (``bertlab grade``, ``doctor``, ``report``, ``similar``,
``export``) composes the checks it needs from these, before anything is written. Each raises
UsageError with one line: what is wrong, then what to do (exit 2, nothing changed).
"""

from __future__ import annotations

from bertlab.errors import UsageError
from bertlab_grader.course.config import check_gradebook, CourseError, gradebook_assignments, known_assignments
from bertlab_grader.course.settings import CourseSettings
from bertlab_grader.course.submissions import valid_id

SEE_A_COURSE = "(or run `bertlab demo --keep DIR` to see one)"


def require_assignment_name(assignment: str) -> None:
    """``assignment`` can name an nbgrader assignment (letters, digits, ``_``, ``-``, ``.``)."""
    if not valid_id(assignment):
        raise UsageError(f"{assignment!r} cannot be an assignment name; pass the one the students handed in "
                         "with --assignment (e.g. week7).")


def require_course_folder(settings: CourseSettings, what: str = "") -> None:
    """The course is a folder; ``what`` says which course is meant (default: the one students hand in to)."""
    course, assignment = settings.root, settings.assignment
    if not course.is_dir():
        what = what or f"the nbgrader course folder that holds submitted/<student>/{assignment}/ {SEE_A_COURSE}"
        raise UsageError(f"no course folder at {course}. Give {what}.")


def require_submissions(settings: CourseSettings, purpose: str = "to grade", empty_ok: bool = False) -> None:
    """``COURSE/submitted/`` exists and (unless ``empty_ok``: the command says so itself) holds something."""
    course, assignment = settings.root, settings.assignment
    submitted = course / "submitted"
    if not submitted.is_dir():
        raise UsageError(f"{course} has no submitted/ folder, so there is nothing {purpose}. Put each "
                         f"student's files in {submitted}/<student>/{assignment}/ {SEE_A_COURSE}.")
    if not empty_ok and not any(not p.name.startswith(".") for p in submitted.iterdir()):
        raise UsageError(f"{submitted} is empty: there is nothing {purpose}. Each student's files go in "
                         f"{submitted}/<student>/{assignment}/.")


def require_known_assignment(settings: CourseSettings) -> None:
    """The course knows its assignment (the source notebook or the gradebook), and the gradebook opens."""
    assignment = settings.assignment
    known = known_assignments(settings)
    if assignment not in known:
        listed = ", ".join(sorted(known)) if known else "none"
        raise UsageError(f"unknown assignment {assignment!r}: this course knows {listed}. "
                         "Pass one of them with --assignment (nothing was changed).")
    try:
        check_gradebook(settings)
    except CourseError as exc:
        raise UsageError(str(exc)) from None


def require_graded_assignment(settings: CourseSettings) -> None:
    """The gradebook can be read and holds the assignment (something was graded there)."""
    course, assignment = settings.root, settings.assignment
    try:
        known = gradebook_assignments(settings)
    except Exception as exc:  # noqa: BLE001 - a broken config or an unreachable server: one line
        raise UsageError(f"cannot read the gradebook of {course}: {type(exc).__name__}: {exc}") from None
    if assignment not in known:
        held = ", ".join(sorted(known)) if known else "no assignment yet"
        raise UsageError(f"the gradebook of {course} has no assignment {assignment!r} (it holds {held}). "
                         f"Pass the graded one with --assignment, or grade it first: "
                         f"`bertlab grade {course} --assignment {assignment}`. Nothing was written.")


def check_course_folder(settings: CourseSettings, empty_ok: bool = False) -> None:
    """The first, cheap part of ``check_course_for_grading``: the folder and its submissions (what a
    mistyped path fails), before `bertlab grade` starts any process."""
    require_course_folder(settings)
    require_submissions(settings, empty_ok=empty_ok)


def check_course_for_grading(settings: CourseSettings, empty_ok: bool = False) -> None:
    """What `bertlab grade` (and `bertlab doctor COURSE`) needs: the folder, submissions (an empty
    submitted/ with ``empty_ok``: `bertlab grade --watch` waits for the first hand-in), the
    assignment, a gradebook that opens."""
    check_course_folder(settings, empty_ok)
    require_known_assignment(settings)
