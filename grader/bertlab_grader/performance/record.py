"""The performance task's record: each distinct submission is timed once, and identical files reuse that
measurement, so identical submissions get identical points.

A timing is a measurement, and even the paired protocol of ``bertlab_grader.performance.timing`` scatters by
10-15% from one grading to the next (docs/hidden-suites.md, "Identical submissions, identical
grades"). The points follow the ratio on a continuous curve (``timing.points_fraction``), so that
scatter moves them by hundredths only; still, two students who handed in the same files should get
exactly the same points. So a cohort run (``bertlab grade``) keeps, per course and assignment, what it
measured for each distinct submission:

    COURSE/.bertlab/timings-<assignment>.json
    {"format": 1, "protocol": "<sha256>",
     "submissions": {"<sha256 of the submission's files>":
                        {"masked_mean_pool": {"measured_at": "2026-12-01 03:10 UTC",
                                              "timing": {"reference": [s, ...], "student": [s, ...],
                                                         "gave_up": false}}, ...}}}

Beside it, ``timings-<assignment>.json.journal`` holds the measurements made since the record was last
compacted, one JSON line each ({"protocol", "submission", "name", "entry"}): a store appends a line
instead of rewriting the record, and the end of a run folds the journal in (``compact``). The journal
belongs to the record beside it: a record that is missing, damaged or of another protocol is set
aside together with its journal.

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
from importlib import metadata
from pathlib import Path
from typing import Iterator, Mapping, Optional
import re

from bertlab.fileio import atomic_write_text

from bertlab_grader.core import locations
from bertlab_grader.core.digest import sources_digest
from bertlab_grader.sandbox import malloc_pin
from bertlab_grader.sandbox.inside import copies

FORMAT = 1


def record_path(course: Path, assignment: str) -> Path:
    """Where a course keeps its timings of ``assignment``: ``COURSE/.bertlab/timings-<assignment>.json``."""
    return Path(course) / ".bertlab" / f"timings-{assignment}.json"


def timing_protocol_files() -> list[Path]:
    """What a speed measurement depends on besides the submission: the solutions, the hidden
    performance suite (speed.py and every task's speed test), this room's timing protocol, and the
    sandbox's copies of each timed call's inputs and its malloc pin."""
    sandbox_files = [Path(copies.__file__), Path(malloc_pin.__file__)]
    return [*sorted(locations.REFERENCE_DIR.glob("*.py")), locations.SUITES_DIR / "speed.py",
            *sorted(locations.SUITES_DIR.glob("test_hidden_*_speed.py")), Path(__file__).with_name("timing.py"),
            *sandbox_files]


def protocol_digest() -> str:
    """The sha256 of everything a measurement depends on besides the submission (see the module docstring).
    (torch's version as its installed package says it, which is ``torch.__version__``: the main process
    of a run compacts the record at its end, and it does not import torch.)"""
    digest = hashlib.sha256()
    files = timing_protocol_files()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(f"torch {metadata.version('torch')}\0{platform.machine()}\0{_processor()}\0{os.cpu_count()}".encode())
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

    @property
    def journal(self) -> Path:
        """Measurements kept since the record was last compacted, one JSON line each: a store costs one
        short append, not a rewrite of the whole record (a course of 10,000 distinct submissions)."""
        return self.path.with_name(self.path.name + ".journal")

    def _read(self) -> dict:
        """The record's submissions, or {} when there is none, it is unreadable, or another protocol wrote
        it; then the journal's lines of this protocol on top."""
        # The journal belongs to the record it sits beside: a record that is missing, damaged or of
        # another protocol is set aside with its journal (``put`` starts both afresh).
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not (isinstance(data, dict) and data.get("format") == FORMAT and data.get("protocol") == self.protocol
                and isinstance(data.get("submissions"), dict)):
            return {}
        submissions: dict = data["submissions"]
        try:
            lines = self.journal.read_text().splitlines()
        except OSError:
            lines = []
        for line in lines:
            try:
                kept = json.loads(line)
            except ValueError:  # a line cut short by a kill: that measurement is simply made again
                continue
            if isinstance(kept, dict) and kept.get("protocol") == self.protocol and isinstance(kept.get("entry"), dict):
                submissions.setdefault(str(kept.get("submission")), {})[str(kept.get("name"))] = kept["entry"]
        return submissions

    def all_known(self) -> dict:
        """{submission digest: {name: {"measured_at", "timing"}}}: the whole record, read once."""
        return self._read()

    def get(self, name: str) -> Optional[dict]:
        """The kept measurement {"measured_at", "timing"} of ``name`` for this submission, or None."""
        entry = self._read().get(self.submission, {}).get(name)
        if isinstance(entry, dict) and isinstance(entry.get("timing"), dict) and entry["timing"].get("reference"):
            return entry
        return None

    def known(self) -> dict:
        """Every kept measurement of this submission: {name: {"measured_at", "timing"}} (plain data, as
        the main process of a cluster run hands it to the worker that grades a copy)."""
        entries = self._read().get(self.submission, {})
        return {name: entry for name in entries if (entry := self.get(name)) is not None}

    def put(self, name: str, timing: dict, measured_at: Optional[str] = None) -> None:
        """Keep ``timing`` (plain numbers) as this submission's measurement of ``name``, made at
        ``measured_at`` (default: now). Call it under ``locked()``: one line appended to the journal."""
        entry = {"measured_at": measured_at or _now(), "timing": timing}
        line = json.dumps({"protocol": self.protocol, "submission": self.submission, "name": name, "entry": entry},
                          sort_keys=True)
        if self._head_protocol() != self.protocol:
            # No record yet, a damaged one, or another protocol's: set it aside with its journal and
            # start this protocol's (every submission is timed again under it).
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path, json.dumps({"format": FORMAT, "protocol": self.protocol, "submissions": {}},
                                                    indent=1, sort_keys=True))
            self.journal.unlink(missing_ok=True)
        with open(self.journal, "a", encoding="utf-8") as out:
            out.write(line + "\n")

    def _head_protocol(self) -> Optional[str]:
        """The protocol the record names at its head, read from its first bytes (a store stays cheap
        however large the record is), or None. The record is written with sorted keys, so "format"
        and "protocol" come first."""
        try:
            with open(self.path, encoding="utf-8") as head:
                start = head.read(256)
        except (OSError, UnicodeDecodeError):
            return None
        match = re.match(r'\{\s*"format":\s*(\d+),\s*"protocol":\s*"([^"]*)"', start)
        return match.group(2) if match and int(match.group(1)) == FORMAT else None

    def compact(self) -> None:
        """Fold the journal into the record (written atomically), then drop it; at the end of a run."""
        with self.locked():
            if not self.journal.exists():
                return
            data = {"format": FORMAT, "protocol": self.protocol, "submissions": self._read()}
            atomic_write_text(self.path, json.dumps(data, indent=1, sort_keys=True))
            self.journal.unlink()


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


class KnownTimings:
    """A record of one submission held in memory: what a Dask worker grades with (grader/bertlab_grader/cluster/).

    The main process keeps the course's ``TimingRecord`` and hands the worker the measurements it
    already has for these files (``known``); whatever the worker measures anew lands in ``measured``,
    goes back with the result, and the main process keeps it. Same interface as ``TimingRecord``."""

    def __init__(self, known: Optional[Mapping] = None):
        self.known_entries = {name: dict(entry) for name, entry in (known or {}).items()}
        self.measured: dict = {}

    def for_submission(self, submission: str) -> "KnownTimings":
        return self

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        yield  # (one submission, one process: nothing to share)

    def get(self, name: str) -> Optional[dict]:
        entry = self.measured.get(name) or self.known_entries.get(name)
        if isinstance(entry, dict) and isinstance(entry.get("timing"), dict) and entry["timing"].get("reference"):
            return entry
        return None

    def put(self, name: str, timing: dict, measured_at: Optional[str] = None) -> None:
        self.measured[name] = {"measured_at": measured_at or _now(), "timing": timing}


_current = None  # TimingRecord or KnownTimings


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


def compact(path: Path) -> None:
    """At the end of a run: fold the journal of the record at ``path`` into it (lines another protocol
    wrote are dropped with it)."""
    path = Path(path)
    if path.with_name(path.name + ".journal").exists():
        TimingRecord(path, protocol_digest()).compact()


def set_aside(course: Path, assignment: str) -> bool:
    """``--retime``: remove the course's record of ``assignment`` (every submission is timed again).
    Returns whether there was one."""
    path = record_path(course, assignment)
    removed = False
    for kept in (path, path.with_name(path.name + ".journal")):
        try:
            kept.unlink()
            removed = True
        except FileNotFoundError:
            pass
    return removed
