"""The single writer of a cohort run: a result is durable once its journal line is synced; the
gradebook and the course's files are written behind the journal, many results at a time, and a run
killed before they were written has its journal replayed by the next run.

Why: recording one result at a time cost three gradebook commits and three synced files per result
(41.5 results/s on SQLite, 32.9 on PostgreSQL, measured for issue 33). One journal line per result,
synced by a thread while the writer goes on, and one gradebook transaction per batch record over 200
per second on both (docs/cluster.md, "Scale").

The journal of a run::

    COURSE/.bertlab/recording-<assignment>-<ns since the epoch>-<pid>.jsonl

one JSON line per result, appended, and synced (fsync) before its batch is written::

    {"format": 1, "result": {the results dict, validated and checked against results.schema.json},
     "timestamp": "the submission time nbgrader's collect step wrote" or null}

The writer holds an exclusive lock (flock) on its journal while it runs; the kernel drops the lock
when the process dies, kill -9 included. A journal nobody holds is an orphan, left by a run that was
killed (or that could not write its last batch): :func:`replay` records every one of its results that
results.json does not already hold, then removes it. The runner replays before it decides which
submissions are unchanged (results.json's ``submission_digest``), so a replayed result is skipped by
that run like any other one recorded earlier.

Order within a batch, as for one result before (docs/course-layout.md): the gradebook (one
transaction), then per result the graded notebook and results.json last, each replaced atomically.
Those files are not synced one by one: at the end of the run one filesystem sync covers them, and only
then is the journal removed. Until then the journal holds every result of the run.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from bertlab_grader.core.failures import GraderFailure
from bertlab_grader.course import gradebook as course_gradebook
from bertlab_grader.course.results import autograded_dir, checked_result
from bertlab_grader.course.settings import CourseSettings


log = logging.getLogger(__name__)

FORMAT = 1
BATCH_SIZE = 200     # results per gradebook transaction
MAX_WAIT_S = 2.0     # a result waits at most this long (to the next result's arrival) for its batch


def journal_paths(settings: CourseSettings) -> list[Path]:
    """Every journal of the assignment in the course, oldest first (the name carries its start time)."""
    folder = settings.root / ".bertlab"
    paths = folder.glob(f"recording-{settings.assignment}-*.jsonl") if folder.is_dir() else []
    return sorted(paths, key=lambda p: p.name)


def sync_files(course: Path) -> None:
    """Write everything the course's filesystem holds in memory to disk (syncfs; sync where the C
    library has none): what a batch wrote without syncing, before the journal that covers it goes."""
    libc_name = ctypes.util.find_library("c")
    syncfs = getattr(ctypes.CDLL(libc_name, use_errno=True), "syncfs", None) if libc_name else None
    if syncfs is not None:
        fd = os.open(course, os.O_RDONLY)
        try:
            if syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    os.sync()


class Journal:
    """One run's journal, locked while this process writes it.

    ``append`` writes a line; a thread of the journal syncs what was written, one fsync for all the
    lines written while the previous one ran (a group commit: results that arrive together cost one
    sync, and the writer's thread never waits for the disk). ``wait_synced`` returns once every line
    written so far is on disk: the writer calls it before it writes a batch into the gradebook, so
    nothing reaches the gradebook or results.json that the journal could lose. A line is on disk at
    most one fsync after it was written; a kill of the process (kill -9 included) loses no line
    written, only a machine's crash can lose the lines not yet synced, and their results with them,
    whole: those submissions are graded again."""

    def __init__(self, settings: CourseSettings):
        folder = settings.root / ".bertlab"
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path = folder / f"recording-{settings.assignment}-{time.time_ns():020d}-{os.getpid()}.jsonl"
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        # The file's name must survive a crash too: sync the folder once.
        folder_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(folder_fd)
        finally:
            os.close(folder_fd)
        self.lines = 0          # written
        self._synced = 0        # of them on disk
        self._error: OSError | None = None
        self._closing = False
        self._changed = threading.Condition()
        self._syncer = threading.Thread(target=self._sync_forever, name=f"journal sync {self.path.name}",
                                        daemon=True)
        self._syncer.start()

    def _sync_forever(self) -> None:
        with self._changed:
            while True:
                while self._synced >= self.lines and not self._closing:
                    self._changed.wait()
                if self._synced >= self.lines:
                    return
                lines = self.lines
                self._changed.release()
                try:
                    os.fsync(self._fd)
                    error = None
                except OSError as exc:
                    error = exc
                finally:
                    self._changed.acquire()
                if error is not None:
                    self._error = error
                else:
                    self._synced = lines
                self._changed.notify_all()
                if error is not None:
                    return

    def append(self, entry: Mapping) -> None:
        """Write one line; the journal's thread syncs it."""
        data = (json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        with self._changed:
            if self._error is not None:
                raise self._error
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
            self.lines += 1
            self._changed.notify_all()

    def wait_synced(self) -> None:
        """Return once every line written is on disk (OSError if the disk refused a sync)."""
        with self._changed:
            while self._synced < self.lines and self._error is None:
                self._changed.wait()
            if self._error is not None:
                raise self._error

    def close(self, remove: bool) -> None:
        """Stop the syncing thread, close (and unlock) the journal; ``remove`` it when everything it
        holds is on disk."""
        if self._fd < 0:
            return
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._syncer.join()
        if remove:
            self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = -1


def read_entries(path: Path) -> list[dict]:
    """The entries of a journal, in order. A last line cut short (the process was killed while
    writing it, so it was never synced, and its result never counted as recorded) is left out."""
    entries = []
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            if number == len(lines):  # no newline after it: the cut-short last line
                log.info("%s: its last line was cut short by the kill, and was never recorded", path)
            else:
                log.warning("%s, line %d: not JSON, left out", path, number)
            continue
        if isinstance(entry, dict) and entry.get("format") == FORMAT and isinstance(entry.get("result"), dict):
            entries.append(entry)
        else:
            log.warning("%s, line %d: not a journal entry of format %d, left out", path, number, FORMAT)
    return entries


def _orphans(settings: CourseSettings) -> list[tuple[Path, int]]:
    """The journals no live writer holds, each opened and locked by this process: (path, fd)."""
    found = []
    for path in journal_paths(settings):
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:  # its writer finished and removed it just now
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a run in progress writes it
            os.close(fd)
            continue
        found.append((path, fd))
    return found


def _already_recorded(settings: CourseSettings, result: Mapping) -> bool:
    """results.json holds exactly this result (one of the settings' assignment): it was recorded
    completely (results.json is written last)."""
    path = autograded_dir(settings, result["student"]) / "results.json"
    try:
        return json.loads(path.read_text(encoding="utf-8")) == result
    except (OSError, ValueError):
        return False


def replay(settings: CourseSettings, on_adjustment: Callable | None = None) -> list[str]:
    """Record what the journals of killed runs of ``settings``' assignment hold and the course does
    not; remove those journals. Returns the students whose results were recorded now.

    Each entry is checked again (it was read back from disk). A student's last entry wins. An entry
    that cannot be recorded on its own (a task the gradebook does not grade) is left out with a
    warning: that student has no results.json for it, so the run grades them again. If the gradebook
    cannot be written at all, GraderFailure: the journal stays, and nothing newer is recorded over it."""
    course, assignment = settings.root, settings.assignment
    orphans = _orphans(settings)
    if not orphans:
        return []
    try:
        latest: dict[str, dict] = {}
        for path, _ in orphans:
            for entry in read_entries(path):
                try:
                    result = checked_result(entry["result"])
                    sources = course_gradebook.checked_sources(entry.get("sources"))
                except ValueError as exc:
                    log.warning("%s: an entry that is not a valid result, left out: %s", path, exc)
                    continue
                if result["assignment"] == assignment:
                    latest[result["student"]] = {"result": result, "timestamp": entry.get("timestamp"),
                                                 "sources": sources}
        todo = [e for e in latest.values() if not _already_recorded(settings, e["result"])]
        recorded = []
        if todo:
            try:
                outcomes = course_gradebook.record_results(settings, todo, on_adjustment=on_adjustment,
                                                           sync=False)
            except Exception as exc:  # noqa: BLE001 - the gradebook or the disk
                names = ", ".join(str(p) for p, _ in orphans)
                raise GraderFailure(
                    f"the results a killed run journaled ({len(todo)} in {names}) could not be recorded: "
                    f"{type(exc).__name__}: {exc}. Nothing was graded; make the gradebook writable and run "
                    "again (the journal is kept until they are recorded)") from exc
            for entry, outcome in zip(todo, outcomes):
                if isinstance(outcome, Exception):
                    log.warning("%s: its journaled result could not be recorded (%s); it is graded again",
                                entry["result"]["student"], outcome)
                else:
                    recorded.append(entry["result"]["student"])
            try:
                sync_files(course)
            except OSError as exc:  # the files may not be on disk yet: keep the journals, the next run checks again
                log.warning("the course's files could not be synced (%s); the journals stay until they are", exc)
                return recorded
        for path, _ in orphans:
            path.unlink(missing_ok=True)
        return recorded
    finally:
        for _, fd in orphans:
            os.close(fd)


class ResultWriter:
    """The run's one writer: ``record`` journals a result (its line synced by the journal's thread) and
    queues it; the queue is
    written (``gradebook.record_results``: one gradebook transaction, then the files) when it
    holds ``batch_size`` results, when its oldest waited ``max_wait_s`` by the next result's arrival,
    and at ``close``.

    ``on_recorded(student)`` / ``on_failed(student, cause)`` are told per result once its batch is
    written. A batch that could not be written leaves the journal in place: the next run replays it.
    ``written``: student -> the result (as checked, once, by ``record``) whose batch was written, so
    the run need not read results.json back.

    ``between_timings``: a context manager each batch is written inside (the runner passes
    ``performance.gate.working``: a batch is a second of CPU, kept out of a worker's timing). Checking
    a result and journaling it never wait for it; only a batch's writing does."""

    def __init__(self, settings: CourseSettings, *, on_adjustment: Callable | None = None,
                 between_timings: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
                 batch_size: int = BATCH_SIZE, max_wait_s: float = MAX_WAIT_S):
        self.settings = settings
        self.on_adjustment = on_adjustment
        self.between_timings = between_timings
        self.written: dict[str, dict] = {}
        self.batch_size = max(1, batch_size)
        self.max_wait_s = max_wait_s
        self._pending: list[tuple[dict, Callable | None, Callable | None]] = []
        self._oldest = 0.0
        self._journal: Journal | None = None
        self._unwritten = False  # a batch failed: its results live only in the journal

    def __enter__(self) -> "ResultWriter":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def record(self, result: Mapping, *, on_recorded: Callable[[str], None] | None = None,
               on_failed: Callable[[str, str], None] | None = None,
               sources: Mapping[str, str] | None = None) -> None:
        """Check ``result`` (ValueError when it is not a valid result: nothing is journaled), journal
        it, queue it, and write the queue if it is due. ``sources``: the files graded, which the graded
        notebook shows (journaled with the result)."""
        entry = course_gradebook.prepare_record(self.settings, result, sources=sources)
        if self._journal is None:
            self._journal = Journal(self.settings)
        self._journal.append({"format": FORMAT, **entry})
        if not self._pending:
            self._oldest = time.monotonic()
        self._pending.append((entry, on_recorded, on_failed))
        if len(self._pending) >= self.batch_size or time.monotonic() - self._oldest >= self.max_wait_s:
            self.flush()

    def flush(self) -> None:
        """Write the queued results now."""
        batch, self._pending = self._pending, []
        if not batch:
            return
        failed_before, self._unwritten = self._unwritten, True  # (a Ctrl-C mid-batch keeps the journal)
        try:
            self._journal.wait_synced()  # nothing reaches the gradebook that the journal could lose
            with self.between_timings():
                outcomes = course_gradebook.record_results(
                    self.settings, [entry for entry, _, _ in batch],
                    on_adjustment=self.on_adjustment, sync=False)
        except Exception as exc:  # noqa: BLE001 - the gradebook or the disk: the journal keeps them
            outcomes = [exc] * len(batch)
        self._unwritten = failed_before
        for (entry, on_recorded, on_failed), outcome in zip(batch, outcomes):
            student = entry["result"]["student"]
            if isinstance(outcome, Exception):
                self._unwritten = True
                if on_failed is not None:
                    on_failed(student, f"the result could not be recorded: {type(outcome).__name__}: {outcome}")
            else:
                self.written[student] = entry["result"]
                if on_recorded is not None:
                    on_recorded(student)

    def close(self) -> None:
        """Write what is queued, sync the course's files, and remove the journal (kept if a batch failed,
        for the next run to replay)."""
        try:
            self.flush()
        finally:
            if self._journal is not None:
                done = not self._unwritten and not self._pending
                if done:
                    try:
                        sync_files(self.settings.root)
                    except OSError as exc:  # the files may not be on disk: the journal stays, replayed next run
                        log.warning("the course's files could not be synced (%s); %s is kept for the next run",
                                    exc, self._journal.path)
                        done = False
                self._journal.close(remove=done)
                self._journal = None
