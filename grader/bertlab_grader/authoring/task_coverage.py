"""What each registered task is missing for the kit to teach and grade it: read by `bertlab audit`
and tests/test_registry.py, so that a gap is named instead of failing silently later.

Without mutants the audit proves nothing about the task's hidden tests; without a fingerprint no
student ever gets a hint for it (grader/bertlab_grader/grading/hints.py finds nothing to compare); without teaching
(an IDEA and MISTAKES in src/bertlab/teaching/<task>.py) `bertlab check` has nothing to say.
"""

from __future__ import annotations

import importlib

from bertlab.tasks import EXERCISES


def coverage_gaps() -> list[str]:
    """One line per gap: the task, what is missing, and the file that should hold it."""
    gaps = []
    for task in EXERCISES:
        bank_file = f"grader/bertlab_grader/mutants/{task.name}.py"
        try:
            bank = importlib.import_module(f"bertlab_grader.mutants.{task.name}")
        except ModuleNotFoundError:
            gaps.append(f"task {task.name}: no mutant bank ({bank_file} is missing; `bertlab new-task` writes one)")
            bank = None
        if bank is not None:
            if not getattr(bank, "MUTANTS", ()):
                gaps.append(f"task {task.name}: no mutants ({bank_file}: MUTANTS is empty), so the audit cannot "
                            "show that its hidden tests catch a mistake")
            if not callable(getattr(bank, "fingerprint", None)):
                gaps.append(f"task {task.name}: no behaviour fingerprint ({bank_file}: def fingerprint(impl)), so "
                            "no student gets a hint for it")
        teaching_file = f"src/bertlab/teaching/{task.name}.py"
        try:
            teaching = importlib.import_module(f"bertlab.teaching.{task.name}")
        except ModuleNotFoundError:
            gaps.append(f"task {task.name}: no teaching ({teaching_file} is missing)")
            continue
        if not str(getattr(teaching, "IDEA", "")).strip():
            gaps.append(f"task {task.name}: no IDEA in {teaching_file} (what `bertlab check` says to reread)")
        if not getattr(teaching, "MISTAKES", ()):
            gaps.append(f"task {task.name}: no MISTAKES in {teaching_file} (the hints its mutants give)")
        if not task.start.strip():
            gaps.append(f"task {task.name}: no start in src/bertlab/tasks.py (the first thing to write)")
    return gaps
