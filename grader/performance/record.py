"""The performance task's record: each distinct submission is timed once, and identical files reuse that
measurement, so identical submissions get identical points.

A timing is a measurement, and even the paired protocol of ``bertlab_grader.performance.timing`` scatters by
10-15% from one grading to the next (docs/hidden-suites.md, "Identical submissions, identical
grades"). Code whose true ratio sits on a band edge (correct code measured at 1.8x to 2.3x, against an
edge at 2x) would land in either band by chance, and two students who handed in the same files could
get different points. So a cohort run (``bertlab grade``) keeps, per course and assignment, what it
measured for each distinct submission:

    COURSE/.bertlab/timings-<assignment>.json
    {"format": 1, "protocol": "<sha256>",
     "submissions": {"<sha256 of the submission's files>":
                        {"masked_mean_pool": {"measured_at": "2026-12-01 03:10 UTC",
                                              "timing": {"reference": [s, ...], "student": [s, ...],
                                                         "gave_up": false}}, ...}}}

Only plain numbers are kept (the seconds of each call), never anything the submission returned: its
result on the timing input is computed afresh every time, so a right answer is still checked.

The key of a measurement is everything it depends on:

- the submission's files, byte for byte (``core.digest.sources_digest``, the digest results.json
  records too): change one character and it is timed again;
- the ``protocol`` (``protocol_digest``): the reference's code, the hidden performance suite, the
  protocol's own code, torch's version and the machine's processor. When any of these changes, the
  whole record is set aside and every submission is timed again.

``bertlab grade --retime`` sets the record aside on purpose. ``grade-one``, ``bertlab check``, the audit
and the Gradescope autograder keep no record: they grade one submission per run.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import time
from pathlib import Path
from typing import Iterator, Mapping, Optional

from bertlab.fileio import atomic_write_text

from bertlab_grader.core.digest import sources_digest

FORMAT = 1


def record_path(course: Path, assignment: str) -> Path:
    """Where a course keeps its timings of ``assignment``: ``COURSE/.bertlab/timings-<assignment>.json``."""
    return Path(course) / ".bertlab" / f"timings-{assignment}.json"


def protocol_digest() -> str:
    """The sha256 of everything a measurement depends on besides the submission (see the module docstring)."""
    import torch

    from bertlab_grader.core import locations

    digest = hashlib.sha256()
    files = locations.timing_protocol_files()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(f"torch {torch.__version__}\0{platform.machine()}\0{_processor()}\0{os.cpu_count()}".encode())
    return digest.hexdigest()


def _processor() -> str:
    """The processor's model name (Linux), else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


class TimingRecord:
    """One course's record of one assignment's timings, for one submission at a time (``submission``).

    Shared by the grader workers of a run: ``locked()`` holds an exclusive lock on the file (fcntl, so a
    worker killed mid-timing releases it with its process) around a look-up, the timing and the store."""

    def __init__(self, path: Path, protocol: str, submission: str = ""):
        self.path, self.protocol, self.submission = Path(path), protocol, submission

    def for_submission(self, submission: str) -> "TimingRecord":
        return TimingRecord(self.path, self.protocol, submission)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> dict:
        """The record's submissions, or {} when there is none, it is unreadable, or another protocol wrote it."""
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("protocol") != self.protocol:
            return {}
        submissions = data.get("submissions")
        return submissions if isinstance(submissions, dict) else {}

    def get(self, name: str) -> Optional[dict]:
        """The kept measurement {"measured_at", "timing"} of ``name`` for this submission, or None."""
        entry = self._read().get(self.submission, {}).get(name)
        if isinstance(entry, dict) and isinstance(entry.get("timing"), dict) and entry["timing"].get("reference"):
            return entry
        return None

    def put(self, name: str, timing: dict) -> None:
        """Keep ``timing`` (plain numbers) as this submission's measurement of ``name``. Call it under
        ``locked()``; written atomically."""
        submissions = self._read()
        submissions.setdefault(self.submission, {})[name] = {
            "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "timing": timing}
        data = {"format": FORMAT, "protocol": self.protocol, "submissions": submissions}
        atomic_write_text(self.path, json.dumps(data, indent=1, sort_keys=True))  # (under the lock)


_current: Optional[TimingRecord] = None


@contextlib.contextmanager
def use(record: Optional[TimingRecord], sources: Mapping[str, str]) -> Iterator[None]:
    """Within this block, ``compare_speed`` of this process reuses and keeps measurements of the
    submission made of ``sources`` in ``record`` (nothing happens when ``record`` is None)."""
    global _current
    before = _current
    _current = record.for_submission(sources_digest(sources)) if record is not None else None
    try:
        yield
    finally:
        _current = before


def current() -> Optional[TimingRecord]:
    """The record in use for the submission being graded, or None."""
    return _current


def set_aside(course: Path, assignment: str) -> bool:
    """``--retime``: remove the course's record of ``assignment`` (every submission is timed again).
    Returns whether there was one."""
    path = record_path(course, assignment)
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False
