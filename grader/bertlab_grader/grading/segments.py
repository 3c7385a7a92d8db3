"""Grading segments: a submission's hidden tests in groups of tasks, each group graded in a fresh
process of the submission that imports only the modules its tests call. The groups come from the
registry (``bertlab.tasks.task_groups``: a task shares a segment with the tasks it ``uses``), and the
performance task comes last. With the kit's four tasks:

    segment 0   cka                  imports cka.py
    segment 1   pooling, siamese     imports pooling.py, siamese.py (siamese uses pooling)
    segment 2   retrieval            imports retrieval.py
    segment 3   performance          imports all four, times them, then the hints of every task

Every grading runs the segments in this order (the hidden suites' own order: tests/hidden/conftest.py
sorts them so), and every segment starts a fresh process of the submission
(``RemoteImplementation.start_segment``), with what the segments before it learned about hangs and
crashes: a call that timed out is not made again with inputs of the same kind, a module whose import
hung is not imported again (grader/bertlab_grader/sandbox/session.py).

Why segments: a hostile submission's hangs cost their time limit one after the other. One that hangs
in cka.py's import and again in pooling's function pays 20 s + 20 s in one process. Since no segment
before the last calls a module of another (a segment whose tests call two modules holds both),
all but the last can also run at once, on different grader workers, and give the same grades:

- the memos a segment could take from an earlier one are about calls it never makes (another
  module's functions) or modules it never imports first (another task's);
- the last segment (the performance timing and the hints) runs after the other three, seeded with
  all their memos, as it would be in one process;
- each segment's process is fresh and prints into an output of its own, in both ways of grading.

The worker pool grades the last submissions of a run this way (``split_parts``, ``final_part``,
grader/bertlab_grader/course/schedule.py), so that one slow submission at the end does not leave the other workers idle.
``tests/test_segments.py`` grades hostile and mutant submissions both ways and compares every test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from bertlab.tasks import EXERCISE_MODULES, EXERCISE_TASKS, GRADED_TASKS, PERFORMANCE, exercise, task_groups

SEGMENTS: tuple[tuple[str, ...], ...] = task_groups() + ((PERFORMANCE,),)
FINAL = len(SEGMENTS) - 1  # the performance segment: last, after every other; the hints run in it

assert sorted(t for seg in SEGMENTS for t in seg) == sorted(GRADED_TASKS), "every graded task in one segment"
assert SEGMENTS[FINAL] == (PERFORMANCE,)

def segment_of(task: str) -> int:
    """The index in SEGMENTS of the segment that grades ``task``."""
    for index, tasks in enumerate(SEGMENTS):
        if task in tasks:
            return index
    raise ValueError(f"unknown task {task!r}; the tasks are {GRADED_TASKS}")


def modules_of(segment: int) -> list[str]:
    """The submission's modules that a segment's process imports before its first test."""
    if segment == FINAL:
        return list(EXERCISE_MODULES)  # the timing calls into all of them, and so do the hints
    return [exercise(task).module for task in SEGMENTS[segment]]


def merge_memos(memos: list[dict]) -> dict:
    """The memos of several segments (``Session.export_memos``) as one, earlier segments first."""
    merged: dict[str, dict] = {"skip": {}, "hung": {}, "failed_hard": {}}
    for memo in memos:
        for kind in merged:
            for key, value in memo.get(kind, {}).items():
                merged[kind].setdefault(key, value)
    return merged


# ---------------------------------------------------------------------------------------------------
# A submission graded in parts, on several workers
#
# A part and what grading it learned cross a process boundary (the pool's pipe; the same JSON would
# carry them to a Dask worker): each is a typed value here, and ``to_json`` / ``from_json`` are their
# one encoding. The memos' keys are tuples (a call's kind, ``sandbox/session.py``), which JSON has
# not: they travel as [key, value] pairs, the key's lists made tuples again on the way in.


def _tuples(value):
    """A JSON value with every list made a tuple, all the way down (a memo's key as it was)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def memos_to_json(memos: dict) -> dict:
    """A session's memos (``Session.export_memos``) as JSON-ready data."""
    return {"skip": {module: dict(info) for module, info in memos.get("skip", {}).items()},
            "hung": [[key, message] for key, message in memos.get("hung", {}).items()],
            "failed_hard": [[key, list(value)] for key, value in memos.get("failed_hard", {}).items()]}


def memos_from_json(data: dict) -> dict:
    """The memos ``memos_to_json`` encoded, as ``Session.seed_memos`` takes them."""
    return {"skip": {module: dict(info) for module, info in data.get("skip", {}).items()},
            "hung": {_tuples(key): message for key, message in data.get("hung", [])},
            "failed_hard": {_tuples(key): tuple(value) for key, value in data.get("failed_hard", [])}}


@dataclass(frozen=True)
class Part:
    """One part of a submission graded in segments: the tasks of ``segment``, with or without the
    hints; the final part also carries what the earlier parts learned (``seed``, merged memos) and
    their tests (``earlier_tests``), which come first in its result."""

    segment: int
    tasks: tuple[str, ...]
    hints: bool
    seed: dict | None = None
    earlier_tests: tuple[dict, ...] = ()

    @property
    def final(self) -> bool:
        return self.segment == FINAL

    def to_json(self) -> dict:
        return {"segment": self.segment, "tasks": list(self.tasks), "hints": self.hints,
                "seed": None if self.seed is None else memos_to_json(self.seed),
                "earlier_tests": [dict(t) for t in self.earlier_tests]}

    @classmethod
    def from_json(cls, data: dict) -> "Part":
        return cls(int(data["segment"]), tuple(data["tasks"]), bool(data["hints"]),
                   None if data.get("seed") is None else memos_from_json(data["seed"]),
                   tuple(dict(t) for t in data.get("earlier_tests", ())))


@dataclass(frozen=True)
class PartResult:
    """What grading a part gave: its results dict (the whole submission's, for the final part) and
    the memos its session learned about the submission's hangs and crashes."""

    result: dict
    memos: dict

    def to_json(self) -> dict:
        return {"result": self.result, "memos": memos_to_json(self.memos)}

    @classmethod
    def from_json(cls, data: dict) -> "PartResult":
        return cls(dict(data["result"]), memos_from_json(data["memos"]))


def segment_name(index: int) -> str:
    """A segment's name, as its recorded seconds are kept (course/schedule.py): its tasks, joined by "+"."""
    return "+".join(SEGMENTS[index])


def split_parts(seconds: Mapping[str, float] | None = None) -> list[Part]:
    """The parts that may run at once: every segment but the last, without hints. Longest first, by
    ``seconds`` ({segment_name: how long it took when last graded as a part}; registry order where none
    is known): the final part waits for the last of them, and a worker that starts on the longest
    while the others share the rest finishes them soonest."""
    seconds = seconds or {}
    order = sorted(range(FINAL), key=lambda index: -seconds.get(segment_name(index), 0.0))
    return [Part(index, tuple(SEGMENTS[index]), hints=False) for index in order]


def final_part(done: dict[int, PartResult]) -> Part:
    """The last part, once every other is ``done`` ({segment: its PartResult}): the performance
    segment seeded with their memos, then the hints of every task, over all the tests."""
    missing = sorted(set(range(FINAL)) - set(done))
    if missing:
        raise ValueError(f"segments {missing} are not graded yet")
    return Part(FINAL, tuple(SEGMENTS[FINAL]), hints=True, seed=merge_memos([done[i].memos for i in range(FINAL)]),
                earlier_tests=tuple(t for i in range(FINAL) for t in done[i].result["tests"]))


def preflight_share(slot: int, workers: int) -> tuple[str, ...]:
    """The tasks whose hidden tests the worker in ``slot`` of a pool of ``workers`` grades the
    reference on: every correctness task is graded by one worker of the pool at least, and every
    worker grades one task at least (its sandbox has then imported the kit, loaded the models and run
    the reference). One worker grades them all."""
    if workers <= 1:
        return tuple(EXERCISE_TASKS)
    n = min(workers, len(EXERCISE_TASKS))
    return tuple(t for i, t in enumerate(EXERCISE_TASKS) if i % n == slot % n)
