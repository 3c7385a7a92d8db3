"""An instructor's manual score or extra credit (formgrader) is a decision about the code they read.

The rule, applied each time a student's result is recorded again:
- **Same files** (``bertlab grade --regrade``, ``--retime``, a re-sync): the adjustment is **kept**, as
  nbgrader's own autograder keeps it, and the grade is flagged for review (``needs_manual_grade``).
- **Changed files** (the student handed in again): the adjustment is **set aside**. It was given for code
  that is no longer the code graded, and applying it silently could add or take points for lines nobody
  read. The new code's automatic score stands; what was set aside (each task's manual score and extra
  credit, and the digests of the files then and now) is appended to
  ``COURSE/.bertlab/set-aside-adjustments-<assignment>.json``, and the run's summary names the student,
  so the instructor can look at the new code and enter an adjustment again.

Which files were graded is known from results.json's ``submission_digest`` (the earlier one, read
before it is replaced, and the new result's). A result without a digest on either side (a results
file written by hand, an old kit) counts as the same files: nothing is set aside on a guess.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from bertlab.fileio import atomic_write_text

KEPT, SET_ASIDE = "kept", "set aside"


@dataclass
class Adjustment:
    """What happened to one student's adjustments when their result was recorded again."""

    student: str
    action: str                                   # KEPT or SET_ASIDE
    tasks: dict[str, dict] = field(default_factory=dict)  # task -> {"manual_score": x, "extra_credit": y}


def set_aside_path(settings: "CourseSettings") -> Path:
    """``COURSE/.bertlab/set-aside-adjustments-<assignment>.json``: the adjustments a new submission set
    aside. (``CourseSettings`` in quotes: settings.py imports the config, which imports this room.)"""
    return settings.root / ".bertlab" / f"set-aside-adjustments-{settings.assignment}.json"


def previous_digest(results_json: Path) -> Optional[str]:
    """The ``submission_digest`` of the results.json about to be replaced (None when there is none)."""
    try:
        return json.loads(results_json.read_text(encoding="utf-8")).get("submission_digest")
    except (OSError, ValueError, AttributeError):
        return None


def files_changed(before: Optional[str], now: Optional[str]) -> bool:
    return before is not None and now is not None and before != now


def apply_rule(grades: dict, student: str, changed: bool) -> Optional[Adjustment]:
    """Keep or set aside the adjustments among ``grades`` (task -> nbgrader Grade, changed in place);
    None when the student has none."""
    adjusted = {task: {"manual_score": g.manual_score, "extra_credit": g.extra_credit}
                for task, g in grades.items() if g.manual_score is not None or g.extra_credit}
    if not adjusted:
        return None
    if not changed:
        for task in adjusted:
            grades[task].needs_manual_grade = grades[task].manual_score is not None
        return Adjustment(student, KEPT, adjusted)
    for task in adjusted:
        grades[task].manual_score = None
        grades[task].extra_credit = None
        grades[task].needs_manual_grade = False
    return Adjustment(student, SET_ASIDE, adjusted)


def remember_set_aside(settings: "CourseSettings", adjustment: Adjustment, before: Optional[str],
                       now: Optional[str]) -> Path:
    """Append a set-aside adjustment to the course's file of them; returns the file."""
    path = set_aside_path(settings)
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
        entries = entries if isinstance(entries, list) else []
    except (OSError, ValueError):
        entries = []
    entries.append({"student": adjustment.student, "set_aside": datetime.datetime.now(datetime.timezone.utc)
                    .isoformat(timespec="seconds"), "tasks": adjustment.tasks,
                    "files_then": before, "files_now": now})
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(entries, indent=1) + "\n")
    return path
