"""The task registry: the one place that says which tasks the kit has.

Every other module (the student's `bertlab check` and progress, the stub generator, the grader's
scoring, sandbox, course and runner, the test suites' markers) reads its task list from here.
Points are not here: each hidden test carries its own ``@pytest.mark.points(n)``, and a task is
worth the sum of its tests (``grader.scoring.max_points_by_task``), so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Exercise:
    """One task a student implements: ``exercises/<module>.py`` defines ``functions``."""

    name: str                   # the task, as in markers, results.json and `bertlab check --task`
    module: str                 # exercises/<module>.py (and the reference's file of the same name)
    functions: tuple[str, ...]  # what the stub leaves to the student, in the order to write them
    concept: str                # the concept page under docs/concepts/

    @property
    def filename(self) -> str:
        return f"{self.module}.py"


EXERCISES: tuple[Exercise, ...] = (
    Exercise("cka", "cka", ("linear_cka", "cka_matrix"), "1-cka.md"),
    Exercise("pooling", "pooling", ("masked_mean_pool",), "4-sbert.md"),
    Exercise("siamese", "siamese", ("SiameseBert", "create_sbert"), "4-sbert.md"),
    Exercise("retrieval", "retrieval", ("semantic_search", "SemanticIndex"), "5-semantic-search.md"),
)

#: The exercise tasks in the order students do them (and reports list them).
EXERCISE_TASKS: tuple[str, ...] = tuple(e.name for e in EXERCISES)
#: The exercise modules (one per exercise task).
EXERCISE_MODULES: tuple[str, ...] = tuple(e.module for e in EXERCISES)
#: The files a submission holds.
EXERCISE_FILES: tuple[str, ...] = tuple(e.filename for e in EXERCISES)
#: The graded task that is not an exercise of its own: speed of the student's code against the reference.
PERFORMANCE = "performance"
#: Every graded task, in gradebook order.
GRADED_TASKS: tuple[str, ...] = EXERCISE_TASKS + (PERFORMANCE,)


def exercise(name: str) -> Exercise:
    """The exercise called ``name``; KeyError naming the known ones otherwise."""
    for e in EXERCISES:
        if e.name == name:
            return e
    raise KeyError(f"no task {name!r}; the tasks are {', '.join(EXERCISE_TASKS)}")
