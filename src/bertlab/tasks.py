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
    """One task a student implements: ``exercises/<module>.py`` defines ``functions``.

    Everything the rest of the kit needs to know about a task beyond its own pieces (``pieces()``) is
    recorded here: the grader's segments, the student README's table, the "where to start" message,
    which tasks the performance task times and ``bertlab remove-task``'s refusal are derived from these
    fields, never written again elsewhere. (``bertlab check --watch`` reads which file imports which
    from the files themselves: check/affected.py.) docs/authoring.md is the instructor's guide.
    """

    name: str                   # the task, as in markers, results.json and `bertlab check --task`
    module: str                 # exercises/<module>.py (and the reference's file of the same name)
    functions: tuple[str, ...]  # what the stub leaves to the student, in the order to write them
    concept: str                # the concept page under docs/concepts/
    summary: str = ""           # the student README's table: what the functions do, in a few words
    start: str = ""             # shown while the stub is untouched: the first thing to write
    uses: tuple[str, ...] = ()  # the tasks whose modules this task's code imports (siamese uses pooling)
    timed: bool = False         # the performance task times it: tests/hidden/test_hidden_<name>_speed.py

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
            "mutants and their fingerprint": f"grader/bertlab_grader/mutants/{self.name}.py",
            "benchmark": f"benchmarks/test_bench_{self.name}.py",
            "concept page": f"docs/concepts/{self.concept}",
            **({"speed test (task performance)": f"tests/hidden/test_hidden_{self.name}_speed.py"} if self.timed else {}),
        }


EXERCISES: tuple[Exercise, ...] = (
    Exercise("cka", "cka", ("linear_cka", "cka_matrix"), "1-cka.md",
             summary="how similar two layers' representations are",
             start="Start with linear_cka in exercises/cka.py: center the columns of X and Y, then apply the "
                   "formula in its docstring in float64; cka_matrix can then call it for every pair.",
             timed=True),
    Exercise("pooling", "pooling", ("masked_mean_pool",), "4a-pooling.md",
             summary="one vector per sentence, padding ignored",
             start="Start with masked_mean_pool in exercises/pooling.py: sum the hidden states of the "
                   "positions whose mask is 1 and divide by how many there are (at least 1).",
             timed=True),
    Exercise("siamese", "siamese", ("SiameseBert", "create_sbert"), "4b-siamese.md",
             summary="Sentence-BERT around one shared encoder",
             start="Start with create_sbert and SiameseBert in exercises/siamese.py: keep the encoder, "
                   "encode = masked_mean_pool of its last_hidden_state, forward = cosine of two encodes.",
             uses=("pooling",)),
    Exercise("retrieval", "retrieval", ("semantic_search", "SemanticIndex"), "5-retrieval.md",
             summary="top-k search by cosine, in blocks",
             start="Start with semantic_search in exercises/retrieval.py (cosine scores, top-k, ties by "
                   "ascending index, in blocks), then SemanticIndex on top of it.",
             timed=True),
)

#: The exercise tasks in the order students do them (and reports list them).
EXERCISE_TASKS: tuple[str, ...] = tuple(e.name for e in EXERCISES)
#: The exercise modules (one per exercise task).
EXERCISE_MODULES: tuple[str, ...] = tuple(e.module for e in EXERCISES)
#: The files a submission holds.
EXERCISE_FILES: tuple[str, ...] = tuple(e.filename for e in EXERCISES)
#: The tasks whose code each headline figure of the lesson needs (src/bertlab/headline.py measures
#: them, for `bertlab lesson` and the notebook), by figure. Written here, with the tasks, so that no other
#: file names several tasks at once. A figure whose task this course removed (`bertlab remove-task`
#: leaves this table as it is) says "not part of this course" instead of a value.
LESSON_FIGURE_TASKS: dict[str, tuple[str, ...]] = {
    "cka_untrained": ("pooling", "cka"),
    "cka_trained": ("pooling", "cka"),
    "cka_cls": ("cka",),  # MiniLM's [CLS] states: why the lesson's [CLS] staircase is left out
    "params_bert_base": (),
    "cls_early_late": (),
    "finetune": ("pooling",),
    "sts_sbert": ("siamese",),
    "sts_dan": ("pooling",),
    "search_sbert": ("siamese", "retrieval"),
    "search_dan": ("pooling", "retrieval"),
}
#: The assignment's name in nbgrader (the course's folders, `bertlab submit`'s archive and exchange).
ASSIGNMENT = "week7"
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


def dependents(name: str) -> tuple[str, ...]:
    """The tasks whose code uses task ``name`` (``dependents("pooling") == ("siamese",)``)."""
    return tuple(e.name for e in EXERCISES if name in e.uses)


def task_groups() -> tuple[tuple[str, ...], ...]:
    """The exercise tasks grouped so that a task and every task it uses, directly or not, share a
    group; groups and their tasks in registry order. The grader grades each group in a process of its
    own (grader/bertlab_grader/grading/segments.py): a task whose tests call another task's code needs that module."""
    group_of = {e.name: {e.name} for e in EXERCISES}
    for e in EXERCISES:
        for used in e.uses:
            merged = group_of[e.name] | group_of[used]
            for name in merged:
                group_of[name] = merged
    groups: list[tuple[str, ...]] = []
    for e in EXERCISES:
        group = tuple(t for t in EXERCISE_TASKS if t in group_of[e.name])
        if group not in groups:
            groups.append(group)
    return tuple(groups)


def _check_registry() -> None:
    """Fail at import, with a message naming the entry, on a registry no kit room could use."""
    names = [e.name for e in EXERCISES]
    for e in EXERCISES:
        if not e.name.isidentifier() or not e.module.isidentifier():
            raise ValueError(f"task {e.name!r}: its name and module must be Python identifiers")
        if names.count(e.name) != 1 or e.name == PERFORMANCE:
            raise ValueError(f"task {e.name!r} is registered twice, or clashes with {PERFORMANCE!r}")
        unknown = [u for u in e.uses if u not in names or names.index(u) >= names.index(e.name)]
        if unknown:
            raise ValueError(f"task {e.name!r} uses {unknown}: a used task must be registered before it")


_check_registry()
