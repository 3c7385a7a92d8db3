"""Hints: name the likely mistake when a submission behaves like a known mutant.

For each task a *fingerprint* (grader/bertlab_grader/mutants/<task>.py, ``fingerprint``) calls the task's functions on
small fixed inputs and records what comes back (values, shapes, dtypes, the type of an exception). The
same fingerprint is taken once per process of every mutant of the bank (trusted code, in process) and
of the reference. When a failing submission's fingerprint equals a mutant's, the failing tests of
that task that the mutant fails too get the mutant's hint ("your CKA matches the uncentered formula:
did you subtract the column means?"); a test the mutant passes was failed for another reason, and
keeps its own message alone (``diagnose_failures``).

A hint is written once, in the table of known mistakes (bertlab/mistakes.py), under the name of the
mutant that makes that mistake: it never quotes hidden test source or expected arrays.

The bank's side of a hint (each mutant's fingerprint, the reference's, and which hidden tests a mutant
fails) is a pure function of the kit, computed on one torch thread: it is kept on disk with the hidden
suites' reference data (grader/bertlab_grader/core/kept_reference.py), so that a grading process that
meets a known mistake reads it back instead of fingerprinting the task's mutants and grading one of
them again (up to 2 s of a late hand-in's wait).
"""

from __future__ import annotations

import functools
from typing import Callable, Iterable, Optional

from bertlab.mistakes import find as find_mistake

from bertlab.implementations import load_implementation, load_directory
from bertlab_grader.core.kept_reference import kept
from bertlab_grader.mutants.bank import FINGERPRINTS, bank_entry, load_bank
from bertlab_grader.mutants.fingerprint import FingerprintAborted, pruned_by, same


# ---------------------------------------------------------------------------------------------
# Known mistakes
# ---------------------------------------------------------------------------------------------

def fingerprint(impl, task: str) -> dict:
    """The behaviour fingerprint of ``impl`` for ``task``."""
    return FINGERPRINTS[task](impl)


@kept
def reference_record(task: str) -> dict:
    """The reference's fingerprint for ``task`` (kept on disk: the module docstring)."""
    return fingerprint(load_implementation("reference"), task)


@kept
def mistake_record(name: str, task: str) -> dict:
    """The fingerprint for ``task`` of the bank's mutant ``name`` (kept on disk: the module docstring)."""
    return fingerprint(load_directory(bank_entry(name).path), task)


@functools.lru_cache(maxsize=None)
def known_mistakes(task: str) -> tuple:
    """((entry, record), ...) for every mutant of ``task`` whose known mistake (its record in
    bertlab/mistakes.py) a fingerprint can show, i.e. that carries a hint."""
    return tuple((entry, mistake_record(entry.name, task)) for entry in load_bank(kinds=("mutant",))
                 if entry.task == task and entry.hint)  # a known mistake that a fingerprint can show


def matching_mistakes(impl, task: str) -> list:
    """The bank entries whose fingerprint equals ``impl``'s (empty when it behaves like the
    reference, or like nothing we know)."""
    if task not in FINGERPRINTS:
        return []
    known = known_mistakes(task)
    if not known:
        return []
    try:
        # Stopped as soon as it differs from every known mistake: the rest of its calls could not
        # change the answer (a hostile submission's cost seconds each).
        with pruned_by(record for _, record in known):
            record = fingerprint(impl, task)
    except FingerprintAborted:
        return []
    if same(record, reference_record(task)):
        return []
    return [entry for entry, mistake in known if same(record, mistake)]


def diagnose(impl, task: str) -> Optional[str]:
    """The hint for ``impl``'s ``task`` (the known mistake its fingerprint matches), or None."""
    matches = matching_mistakes(impl, task)
    return find_mistake(matches[0].name).hint if matches else None


# ---------------------------------------------------------------------------------------------
# Which tests a hint explains
# ---------------------------------------------------------------------------------------------

_MUTANT_FAILURES: dict[tuple[str, str], frozenset] = {}


def remember_mutant_failures(name: str, task: str, failing: Iterable[str]) -> None:
    """Record the hidden tests of ``task`` that the mutant ``name`` fails (the audit grades every
    mutant anyway, so it hands the answer over instead of grading the mutant twice)."""
    _MUTANT_FAILURES[(name, task)] = frozenset(failing)


#: grade(mutant name, task) -> the names of the hidden tests of ``task`` that the bank's mutant fails
#: (scoring.py's grading, passed in by its caller: this module is below the grading in the house).
Grade = Callable[[str, str], Iterable[str]]


def mutant_fails(entry, task: str, grade: Grade) -> frozenset:
    """The names of the hidden tests of ``task`` that the bank entry ``entry`` fails: what the audit
    handed over, else ``grade``'s answer (in process: the bank is the kit's own code; the sandbox is
    for students')."""
    key = (entry.name, task)
    if key not in _MUTANT_FAILURES:
        remember_mutant_failures(entry.name, task, grade(entry.name, task))
    return _MUTANT_FAILURES[key]


def diagnose_failures(impl, task: str, failing: Iterable[str], grade: Grade) -> dict[str, str]:
    """{test name: hint} for the failing tests of ``task`` (names) that the known mistake
    ``impl``'s fingerprint matches explains: those the mutant that makes that mistake fails too. A
    failing test the mutant passes is failed for another reason, and keeps its own message alone."""
    matches = matching_mistakes(impl, task)
    if not matches:
        return {}
    explained = mutant_fails(matches[0], task, grade)
    hint = find_mistake(matches[0].name).hint
    return {name: hint for name in failing if name in explained}
