"""The task registry: the one place that says which tasks the kit has.

Every other module (the student's `bertlab check` and progress, the stub generator, the grader's
scoring, sandbox, course and runner, the test suites' markers) reads its task list from here, and
``Exercise.pieces`` says where each piece of a task lives.
Points are not here: each hidden test carries its own ``@pytest.mark.points(n)``, and a task is
worth the sum of its tests (``bertlab_grader.grading.scoring.max_points_by_task``), so they cannot disagree.
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

    def pieces(self) -> dict[str, str]:
        """Where each piece of this task lives in the kit's checkout, by role; every path carries the
        task's name, so ``git ls-files '*<task>*'`` lists the whole task (tests/test_architecture.py
        checks both). The student bundle ships the stub, the public test, the teaching and the page."""
        return {
            "stub": f"exercises/{self.filename}",
            "solution": f"solutions/{self.filename}",
            "public test": f"tests/public/test_{self.name}.py",
            "hidden test": f"tests/hidden/test_hidden_{self.name}.py",
            "teaching (idea, mistakes, probes)": f"src/bertlab/teaching/{self.name}.py",
            "mutants and their fingerprint": f"grader/mutants/{self.name}.py",
            "benchmark": f"benchmarks/test_bench_{self.name}.py",
            "concept page": f"docs/concepts/{self.concept}",
        }


EXERCISES: tuple[Exercise, ...] = (
    Exercise("cka", "cka", ("linear_cka", "cka_matrix"), "1-cka.md"),
    Exercise("pooling", "pooling", ("masked_mean_pool",), "4a-pooling.md"),
    Exercise("siamese", "siamese", ("SiameseBert", "create_sbert"), "4b-siamese.md"),
    Exercise("retrieval", "retrieval", ("semantic_search", "SemanticIndex"), "5-retrieval.md"),
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
