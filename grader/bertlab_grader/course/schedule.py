"""The schedule of a cohort run's worker pool: what is left to hand out, and what a finished job
means. No processes here: ``course/pool.py`` runs the workers and asks the schedule what to do, and
``tests/test_segments.py`` drives it without any."""

from __future__ import annotations

import json
import math
from pathlib import Path

from bertlab.fileio import atomic_write_text
from bertlab_grader.grading.segments import FINAL, Part, PartResult, final_part, segment_name, split_parts


class Job:
    """A submission to grade, whole (``part`` None) or one part of it (grader/bertlab_grader/grading/segments.py)."""

    __slots__ = ("submission", "attempt", "part")

    def __init__(self, submission, attempt: int = 1, part: Part | None = None):
        self.submission, self.attempt, self.part = submission, attempt, part

    def again(self) -> "Job":
        return Job(self.submission, self.attempt + 1, self.part)


class Schedule:
    """What the pool has left to hand out, and what its finished jobs mean (no processes here).

    Near the end of a run, when fewer whole submissions wait than there are workers, the next one is
    split into parts (grader/bertlab_grader/grading/segments.py) that run at once on the free workers: one slow
    submission (a hang, then another) then no longer leaves the other workers idle at the end. Its
    last part is queued first once the others are done, and only its result counts as the
    submission's; a part that fails fails the whole submission, once.

    ``part_seconds`` ({segment name: seconds}, ``segments.segment_name``): how long each part took when
    last graded; a split submission's parts are handed out longest first (``split_parts``), and the
    parts graded now update it (``finished``). The order changes no grade (segments.py).
    """

    def __init__(self, submissions, workers: int, part_seconds: dict[str, float] | None = None):
        self.queue: list[Job] = [Job(s) for s in submissions]
        self.workers = workers
        self.part_seconds = part_seconds if part_seconds is not None else {}
        self.done: dict[str, dict[int, PartResult]] = {}  # split submission -> {segment: what it gave}
        self.failed: set[str] = set()                # split submissions whose failure was reported

    def __bool__(self) -> bool:
        return bool(self.queue)

    def take(self) -> Job:
        """The next job to hand out (the queue must not be empty)."""
        job = self.queue.pop(0)
        whole_left = sum(1 for j in self.queue if j.part is None) + 1
        if job.part is None and job.attempt == 1 and self.workers > 1 and whole_left < self.workers:
            self.done[job.submission.student] = {}
            parts = [Job(job.submission, 1, part) for part in split_parts(self.part_seconds)]
            self.queue[:0] = parts[1:]
            return parts[0]
        return job

    def retry(self, job: Job) -> None:
        """Hand ``job`` out again, first (its worker died)."""
        if job.submission.student not in self.failed:
            self.queue.insert(0, job.again())

    def finished(self, job: Job, kind: str, payload, seconds: float | None = None):
        """What a finished ``job`` means: (submission, result, None) or (submission, None, grader
        failure cause) to report, or None while a split submission is not done. A part's ``payload``
        is its PartResult's JSON, as the worker sent it; ``seconds``, how long the job took."""
        student = job.submission.student
        if job.part is not None and not job.part.final and kind == "part" and seconds is not None:
            self.part_seconds[segment_name(job.part.segment)] = round(seconds, 3)
        if job.part is None:
            return (job.submission, payload, None) if kind == "result" else (job.submission, None, payload)
        if student in self.failed:
            return None  # its failure was reported already
        if kind != "part":
            self.failed.add(student)
            self.done.pop(student, None)
            self.queue[:] = [j for j in self.queue if j.submission.student != student]
            return job.submission, None, payload
        done = PartResult.from_json(payload)
        if job.part.final:
            del self.done[student]
            return job.submission, done.result, None
        self.done[student][job.part.segment] = done
        if len(self.done[student]) == FINAL:
            self.queue.insert(0, Job(job.submission, 1, final_part(self.done[student])))
        return None


def part_seconds_path(settings: "CourseSettings") -> Path:
    """Where a course keeps how long each part took (``Schedule.part_seconds``):
    ``COURSE/.bertlab/part-seconds-<assignment>.json``, {segment name: seconds}."""
    return settings.root / ".bertlab" / f"part-seconds-{settings.assignment}.json"


def read_part_seconds(path: Path) -> dict[str, float]:
    """The kept part seconds; {} when there are none or they cannot be read (they only order parts)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(document, dict):
        return {}
    return {str(name): float(value) for name, value in document.items()
            if isinstance(value, (int, float)) and math.isfinite(value) and value >= 0}


def keep_part_seconds(path: Path, seconds: dict[str, float]) -> None:
    """Keep ``seconds`` for the next run (written atomically; nothing when there are none). They only
    order parts: a course folder that cannot take them loses nothing else, and the run goes on."""
    if seconds:
        try:
            atomic_write_text(path, json.dumps(dict(sorted(seconds.items())), indent=1) + "\n")
        except OSError:
            pass
