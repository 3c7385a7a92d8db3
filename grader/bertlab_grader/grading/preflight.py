"""Preflight: grade the reference solution in the very sandbox that will grade the students.

Before the first student, ``bertlab grade``, ``grade-one`` and ``demo`` (and ``doctor``) grade the
kit's reference solutions (solutions/) through the same warm worker and sandbox. The
reference must get full marks in every correctness task; anything less means the grader, not the
students, is broken (a sandbox that cannot import the kit, a model that does not load, a suite that
raises), and no student is graded until that is fixed. The performance task is left out: its speed bands depend on the machine's load.

A cohort run's workers share the work (``grading/segments.py``, ``preflight_share``): each grades the reference on its share of
the tasks in its own sandbox, so that together they cover every task, and every sandbox has run the
reference before its first student. With two workers that is about 2.2 s and 0.9 s instead of 2.9 s
each, on a one-hand-in run's critical path. The same worker code and mounts build every sandbox; only
the unprivileged uid differs.
"""

from __future__ import annotations

from typing import Optional, Sequence

from bertlab_grader.core.failures import GraderFailure
from bertlab_grader.core.locations import reference_sources
from bertlab.tasks import EXERCISE_TASKS

from bertlab_grader.grading.scoring import grade_sources
from bertlab_grader.core.points import POINTS_EPSILON

PREFLIGHT_STUDENT = "bertlab-preflight"  # never recorded anywhere


def shortfall(result: dict) -> Optional[str]:
    """The first correctness test the reference did not pass at full points, as one message, or None."""
    for test in result["tests"]:
        if test["task"] in EXERCISE_TASKS and test["points"] < test["max_points"] - POINTS_EPSILON:
            message = (test.get("message") or "").strip() or "(no message)"
            return f"{test['task']}/{test['name']} ({test['outcome']}): {message}"
    return None


def run_preflight(sandbox, assignment: str = "week7", tasks: Sequence[str] = EXERCISE_TASKS) -> Optional[str]:
    """Grade the reference in ``sandbox`` on the hidden tests of ``tasks``; None when it has full
    marks, else why not (a grader failure or the first test it lost points in)."""

    try:
        # Correctness only: the performance task's timed calls cost seconds and are not judged here.
        result = grade_sources(sandbox, reference_sources(), PREFLIGHT_STUDENT, assignment,
                               tasks=list(tasks), hints=False)
    except GraderFailure as exc:
        return f"{type(exc).__name__}: {exc}"
    return shortfall(result)


def explain(problem: str) -> str:
    """The instructor's message for a failed preflight: what happened, and what to check."""
    return ("Preflight failed: the reference solution, graded in this very sandbox, did not get full "
            f"marks, so no student was graded.\n  First problem: {problem}\n"
            "  Check: `bertlab doctor` (bubblewrap, the model, the course), and that the kit is installed "
            "completely; rerun with --debug for details.")
