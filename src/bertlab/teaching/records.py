"""The record of one known mistake (the task files of this package hold them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Mistake:
    """One known mistake."""

    id: str              # unique; for a mistake the mutant bank makes, the mutant's name
    task: Optional[str]  # the task it belongs to; None for a kind of failure of any task
    name: str            # a short name of the mistake
    hint: str            # the teaching text shown to the student
    # False for a mistake no returned value shows (the memory a call holds): the hidden test that
    # measures it says the hint in its own message, and the behaviour fingerprints never look for it.
    fingerprinted: bool = True
