"""A self-paced learner's progress: which tasks passed, and when, kept next to exercises/.

`bertlab check` records every run of the student's own exercises/ in ``.bertlab/progress.json`` in the
workspace (the folder holding exercises/, bertlab/workspace.py) and shows it after the summary. The file is small,
human-readable JSON; deleting it only forgets the history. Format (version 1)::

    {"version": 1,
     "tasks": {"cka": {"status": "passed", "passed": 7, "total": 7,
                       "first_passed": "2025-11-29T10:02:11+01:00", "last_run": "2025-11-29T10:40:03+01:00",
                       "runs": 3}},
     "history": [{"when": "2025-11-29T10:40:03+01:00", "tasks": {"cka": "passed 7/7"}}]}

``status`` is the task's status at its last run ("passed", "failed", "not started"); ``first_passed``
is when it first passed (kept when a later run fails, so a learner sees both). ``history`` keeps the
last HISTORY_LIMIT runs.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Mapping

from .fileio import atomic_write_text  # noqa: E402
from .tasks import EXERCISE_TASKS  # noqa: E402
PROGRESS_DIR = ".bertlab"
PROGRESS_FILE = "progress.json"
HISTORY_LIMIT = 50
VERSION = 1


def progress_path(root: Path) -> Path:
    """Where the progress of the kit (or bundle) at ``root`` is kept."""
    return Path(root) / PROGRESS_DIR / PROGRESS_FILE


def now() -> str:
    """The current local time, ISO 8601 to the second, with its UTC offset."""
    return datetime.now().astimezone().isoformat(timespec="seconds")


def empty_progress() -> dict:
    return {"version": VERSION, "tasks": {}, "history": []}


def load_progress(root: Path) -> dict:
    """The recorded progress, or an empty record when there is none or the file is unreadable.

    A damaged file never stops a check: it is treated as empty (and replaced at the next record).
    """
    path = progress_path(root)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return empty_progress()
    if not isinstance(data, dict) or not isinstance(data.get("tasks"), dict):
        return empty_progress()
    data.setdefault("history", [])
    data["version"] = VERSION
    return data


def record_run(root: Path, results: Mapping[str, Mapping], when: str | None = None) -> dict:
    """Add one check run to the progress file and return the updated record.

    ``results`` maps a task to ``{"status": ..., "passed": int, "total": int}`` for the tasks that
    ran. Tasks not in ``results`` keep their earlier record. The file is replaced atomically.
    """
    when = when or now()
    progress = load_progress(root)
    if not results:
        return progress
    for task, result in results.items():
        entry = progress["tasks"].setdefault(task, {"runs": 0})
        entry.update(status=result["status"], passed=int(result["passed"]), total=int(result["total"]),
                     last_run=when, runs=int(entry.get("runs", 0)) + 1)
        if result["status"] == "passed":
            entry.setdefault("first_passed", when)
    progress["history"].append({
        "when": when,
        "tasks": {task: f"{r['status']} {r['passed']}/{r['total']}" for task, r in results.items()},
    })
    progress["history"] = progress["history"][-HISTORY_LIMIT:]
    atomic_write_text(progress_path(root), json.dumps(progress, indent=2) + "\n")
    return progress


def passed_tasks(progress: Mapping) -> list[str]:
    """Tasks whose last recorded run passed, in lesson order."""
    tasks = progress.get("tasks", {})
    return [t for t in EXERCISE_TASKS if tasks.get(t, {}).get("status") == "passed"]


def describe_task(progress: Mapping, task: str) -> str:
    """One line about a task's record, e.g. 'passed 7/7 (first passed 2025-11-29 10:02)'."""
    entry = progress.get("tasks", {}).get(task)
    if not entry:
        return "never checked"
    text = f"{entry['status']} {entry['passed']}/{entry['total']} (last run {_short_time(entry['last_run'])}"
    if entry.get("first_passed"):
        text += f", first passed {_short_time(entry['first_passed'])}"
    return text + ")"


def format_progress(progress: Mapping) -> list[str]:
    """Lines summarising the record: one per task, in lesson order."""
    done = len(passed_tasks(progress))
    lines = [f"Progress: {done} of {len(EXERCISE_TASKS)} tasks passed"]
    width = max(len(t) for t in EXERCISE_TASKS)
    lines += [f"  {task:<{width}}  {describe_task(progress, task)}" for task in EXERCISE_TASKS]
    return lines


def _short_time(stamp: str) -> str:
    """'2025-11-29T10:02:11+01:00' -> '2025-11-29 10:02' (the learner's own clock)."""
    try:
        return datetime.fromisoformat(stamp).strftime("%Y-%m-%d %H:%M")
    except (TypeError, ValueError):
        return str(stamp)
