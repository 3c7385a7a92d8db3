"""The quiet room of one host: the timing gate (gate.py) for grader processes that share no memory.

A cohort run's own workers share a ``TimingGate`` in shared memory, because one process starts them
all. Dask workers do not: each ``dask worker`` process is started on its own, several may run on one
host, and the main process of ``bertlab grade`` may run there too. A timing must still have the host to
itself (docs/cluster.md, "Identical files, identical points"), so this gate keeps its state in two
lock files of the host instead, with the same rules as ``TimingGate``:

- ``working()``: pass the door (take ``door`` exclusively and let go at once: a timer holds it while
  it waits and times), then hold ``work`` shared for as long as the work lasts;
- ``exclusive()``: leave work, close the door, wait until no one holds ``work`` (every other process
  finishes the test it is in: seconds at most), time, open the door, go back to work.

flock locks belong to the open file, so a process killed in the middle (a worker's kill -9) lets go
of everything it held; nothing needs forgetting. Files are opened close-on-exec: a sandbox started by
the worker holds none of them.

The folder is per user (``/tmp/bertlab-quiet-room-<uid>``, or ``BERTLAB_QUIET_ROOM``): grader processes
of one user on one host share it, and another user cannot hold it shut.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from bertlab_grader.performance.gate import MAX_WAIT_S, NO_ONE

POLL_S = 0.002


def default_room() -> Path:
    """This user's quiet room on this host."""
    return Path(os.environ.get("BERTLAB_QUIET_ROOM") or f"/tmp/bertlab-quiet-room-{os.getuid()}")


def _lock(fd: int, how: int, timeout: float) -> bool:
    """flock ``fd`` with ``how`` (LOCK_SH or LOCK_EX), polling for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_S)


class HostGate:
    """The timing gate of every grader process of this user on this host (see the module docstring).

    Same interface as ``TimingGate``: ``working()``, ``pause_point()``, ``timer_waiting()``, ``exclusive()``,
    ``forget()`` and a ``slot``."""

    def __init__(self, room: Optional[Path] = None):
        self.room = Path(room) if room is not None else default_room()
        self.room.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._door = os.open(self.room / "door.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._work = os.open(self.room / "work.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._depth = 0  # nested working() blocks of this process: the shared lock is held once
        self.slot = NO_ONE

    def _enter_work(self) -> None:
        if self._depth == 0:
            # (Bounded waits: should a timer hang, work goes on rather than stop the run.)
            if _lock(self._door, fcntl.LOCK_EX, 2 * MAX_WAIT_S):
                fcntl.flock(self._door, fcntl.LOCK_UN)
            _lock(self._work, fcntl.LOCK_SH, 2 * MAX_WAIT_S)
        self._depth += 1

    def _leave_work(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            fcntl.flock(self._work, fcntl.LOCK_UN)

    @contextmanager
    def working(self) -> Iterator[None]:
        """Around anything that is not timing: waits while another process of the host times."""
        self._enter_work()
        try:
            yield
        finally:
            self._leave_work()

    def pause_point(self) -> None:
        """Between two tests (``TimingGate.pause_point``): let go of work, pass the door (a timer
        holding it has the host now), take work again."""
        if self._depth == 0:
            return
        fcntl.flock(self._work, fcntl.LOCK_UN)
        if _lock(self._door, fcntl.LOCK_EX, 2 * MAX_WAIT_S):
            fcntl.flock(self._door, fcntl.LOCK_UN)
        _lock(self._work, fcntl.LOCK_SH, 2 * MAX_WAIT_S)

    def timer_waiting(self) -> bool:
        """Whether this process, at work, holds up a timer (``TimingGate.timer_waiting``): another
        process holds the door."""
        if self._depth == 0:
            return False
        try:
            fcntl.flock(self._door, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(self._door, fcntl.LOCK_UN)
        return False

    @contextmanager
    def exclusive(self) -> Iterator[float]:
        """Around a timing: yields the seconds it waited for the host to itself."""
        depth, self._depth = self._depth, 0
        if depth:
            fcntl.flock(self._work, fcntl.LOCK_UN)
        start = time.monotonic()
        closed = _lock(self._door, fcntl.LOCK_EX, 2 * MAX_WAIT_S)
        alone = _lock(self._work, fcntl.LOCK_EX, MAX_WAIT_S)  # (gives up: times under load rather than stop)
        try:
            yield time.monotonic() - start
        finally:
            if alone:
                fcntl.flock(self._work, fcntl.LOCK_UN)
            if depth:
                fcntl.flock(self._work, fcntl.LOCK_SH)  # back to work before the door opens: no timer slips in
            self._depth = depth
            if closed:
                fcntl.flock(self._door, fcntl.LOCK_UN)

    def forget(self, slot: int) -> None:
        """Nothing to do: a killed process's locks went with it."""

    def close(self) -> None:
        for fd in (self._door, self._work):
            try:
                os.close(fd)
            except OSError:
                pass
