"""The table of known mistakes, by id: every task's records (bertlab/teaching/<task>.py) in one table.

Read by every place that names a likely mistake to a student:

- the public tests and the hidden suites, through ``bertlab.assertions.name_mistake`` (their ``diagnose``
  helpers compute what each mistake would have returned and name the one the result matches);
- the grader's hints (``grader/bertlab_grader/grading/hints.py``): a submission whose behaviour fingerprint matches a
  mutant of the bank gets the hint of the mistake with the mutant's name (every mutant is one of these mistakes,
  so its id is the mutant's name);
- ``bertlab check``'s hints for the kinds of failure any task can show (``task`` None: a missing
  ValueError, a wrong type, shape or dtype, a NaN, a TypeError).

A hint says what to change and why, never the solution: these texts ship to students on purpose.
"""

from __future__ import annotations

import importlib
from typing import Optional

from bertlab.tasks import EXERCISES
from bertlab.teaching import any_task
from bertlab.teaching.records import Mistake


def _task_mistakes(task: str) -> tuple[Mistake, ...]:
    """teaching/<task>.py's MISTAKES; an ImportError naming the missing piece otherwise."""
    try:
        return tuple(importlib.import_module(f"bertlab.teaching.{task}").MISTAKES)
    except (ModuleNotFoundError, AttributeError) as exc:
        raise ImportError(f"task {task!r} has no teaching: src/bertlab/teaching/{task}.py must define MISTAKES "
                          f"(`bertlab new-task` writes one; {exc})") from None


MISTAKES: tuple[Mistake, ...] = tuple(m for e in EXERCISES for m in _task_mistakes(e.name)) + any_task.MISTAKES

_BY_ID: dict[str, Mistake] = {m.id: m for m in MISTAKES}
assert len(_BY_ID) == len(MISTAKES), "two mistakes share an id"


def mistake(mistake_id: str) -> Mistake:
    """The mistake called ``mistake_id``; KeyError otherwise."""
    try:
        return _BY_ID[mistake_id]
    except KeyError:
        raise KeyError(f"no known mistake {mistake_id!r}") from None


def find(mistake_id: str) -> Optional[Mistake]:
    """The mistake called ``mistake_id``, or None."""
    return _BY_ID.get(mistake_id)


def hint(mistake_id: str) -> str:
    """The teaching text of the mistake called ``mistake_id``; "" for an id the table does not hold.

    A test that names a mistake missing from the table still fails with its own message (no hint
    added): never a KeyError that would make the grader report the test as not graded.
    tests/test_registry.py checks that every id the suites name is in the table."""
    known = _BY_ID.get(mistake_id)
    return known.hint if known is not None else ""


def of_task(task: Optional[str]) -> tuple[Mistake, ...]:
    """The mistakes of ``task`` (None: those any task can show), in table order."""
    return tuple(m for m in MISTAKES if m.task == task)


def named_in(message: str) -> tuple[str, ...]:
    """The ids of the known mistakes whose teaching text ``message`` quotes (a test names a mistake by
    quoting its hint: ``bertlab.assertions.name_mistake``). Used to tell a message that names a cause
    from one that describes a symptom (``bertlab check`` leads with the first kind; ``bertlab audit``
    flags a message naming a mistake the code did not make)."""
    return tuple(m.id for m in MISTAKES if m.hint and m.hint in message)
