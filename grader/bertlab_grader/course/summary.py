"""What a cohort run did with every folder under submitted/: the summary ``bertlab grade`` prints at
the end and keeps for ``bertlab report`` (the folders not graded, and why, live nowhere else: a grader
failure writes no results.json).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from bertlab.fileio import atomic_write_text
from bertlab_grader.course.adjustments import KEPT, SET_ASIDE
from bertlab_grader.course.settings import CourseSettings


@dataclass
class RunSummary:
    """What a cohort run did with every folder under submitted/."""

    graded: list[str] = field(default_factory=list)
    regraded: list[str] = field(default_factory=list)      # graded again: files changed, or asked for
    unchanged: list[str] = field(default_factory=list)     # graded before, files the same: skipped
    not_graded: dict[str, str] = field(default_factory=dict)  # student -> grader failure cause
    stale: set[str] = field(default_factory=set)            # not graded now, an earlier result still stands
    layout: list = field(default_factory=list)              # bertlab_grader.course.submissions.LayoutProblem
    stopped: str | None = None                              # the whole run stopped: why
    retried: list[str] = field(default_factory=list)        # on a cluster: started again after a worker died
    unfit_workers: dict[str, str] = field(default_factory=dict)  # on a cluster: worker address -> why it cannot grade
    adjustments: list = field(default_factory=list)         # grader/bertlab_grader/course/adjustments.py: kept or set aside

    @property
    def exit_code(self) -> int:
        return 1 if (self.not_graded or self.stopped) else 0

    def format(self) -> str:
        def names(students: list[str], limit: int = 12) -> str:
            students = sorted(students)
            shown = ", ".join(students[:limit])
            return shown + (f" and {len(students) - limit} more" if len(students) > limit else "")

        lines = ["", "Summary:"]
        if self.stopped:
            lines.append(f"  STOPPED before grading: {self.stopped}")
        lines.append(f"  graded: {len(self.graded)}" + (f" ({names(self.graded)})" if self.graded else ""))
        if self.regraded:
            lines.append(f"    of them graded again because their files changed or --regrade named them: "
                         f"{names(self.regraded)}")
        lines.append(f"  unchanged since last grading (skipped): {len(self.unchanged)}")
        lines.append(f"  not graded because of the grader: {len(self.not_graded)}"
                     + (" (no grade, results.json or feedback written for this run; the next run grades them)"
                        if self.not_graded else ""))
        for student, cause in sorted(self.not_graded.items()):
            first = cause.strip().splitlines()[0] if cause.strip() else cause
            if student in self.stale:
                first += " [their earlier result, for files that have since changed, stands until then]"
            lines.append(f"    {student}: {first}")
        if self.retried:
            lines.append(f"  started again on another Dask worker after theirs stopped (each recorded once): "
                         f"{len(self.retried)} ({names(self.retried)})")
        if self.unfit_workers:
            lines.append(f"  Dask workers that could not grade (they graded nothing): {len(self.unfit_workers)}")
            for address, cause in sorted(self.unfit_workers.items()):
                lines.append(f"    {address}: {cause.strip().splitlines()[0] if cause.strip() else cause}")
        kept = [a.student for a in self.adjustments if a.action == KEPT]
        set_aside = [a.student for a in self.adjustments if a.action == SET_ASIDE]
        if kept:
            lines.append(f"  manual scores and extra credit kept (the same files graded again): {names(kept)}")
        if set_aside:
            lines.append(f"  manual scores and extra credit set aside (the files changed; look again in formgrader, "
                         f"the old ones are in .bertlab/set-aside-adjustments-*.json): {names(set_aside)}")
        if self.layout:
            lines.append(f"  folders under submitted/ holding no submission (not graded): {len(self.layout)}")
            for problem in self.layout:
                lines.append(f"    {problem}")
        return "\n".join(lines)


def last_run_path(settings: CourseSettings) -> Path:
    """Where the last run's summary is kept: ``COURSE/.bertlab/last-run-<assignment>.json``."""
    return settings.root / ".bertlab" / f"last-run-{settings.assignment}.json"


def write_last_run(settings: CourseSettings, summary: RunSummary) -> Path:
    """Keep the run's summary (what ``summary.format()`` prints) for ``bertlab report``: the folders not
    graded and why live nowhere else, since a grader failure writes no results.json. Written atomically.

    Format: {"assignment", "finished" (ISO 8601, UTC), "graded", "regraded", "unchanged": [student ids],
    "not_graded": {student: cause}, "stale": [ids whose earlier result still stands],
    "layout_problems": [{"folder", "found", "expected"}], "stopped": why the run stopped, or null,
    "retried": [ids started again on another Dask worker], "unfit_workers": {Dask worker address: cause}}."""
    document = {
        "assignment": settings.assignment,
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "graded": sorted(summary.graded), "regraded": sorted(summary.regraded),
        "unchanged": sorted(summary.unchanged), "not_graded": dict(sorted(summary.not_graded.items())),
        "stale": sorted(summary.stale), "layout_problems": [asdict(p) for p in summary.layout],
        "stopped": summary.stopped, "retried": sorted(summary.retried),
        "unfit_workers": dict(sorted(summary.unfit_workers.items())),
    }
    path = last_run_path(settings)
    atomic_write_text(path, json.dumps(document, indent=1) + "\n")
    return path
