"""One grader worker times by the wall clock at a time, while the others wait: the performance task's
quiet room, for the timings that need it.

With N grader workers on N cores, a worker timing a 1-5 ms call by the wall clock shares the machine
with the other workers' correctness tests, and its sandboxed submission must be woken for every call
while the other cores are busy: the same correct submission measured 0.8x in one run and 4.9x in
another, and its performance points flipped between cohorts (issue 11, docs/hidden-suites.md
"Identical submissions, identical grades"). Since issue 41 a timing reads each side's CPU clock, which
that waiting does not move; since issue 44 such a timing runs beside the other workers, who go on with
their correctness tests (``bertlab_grader.performance.timing.compare_speed``), each worker's timings on
a CPU of their own (``timing_cpu``). The gate is for a timing by the wall clock only (the submission
started a process or a thread, so its CPU clock does not show all its work; or no sandbox), which is
exclusive:

- everything a worker does for a submission (starting its sandbox, the correctness tests, the hints)
  is *work*: it enters through the gate, and many workers work at once;
- a worker about to time by the wall clock (``bertlab_grader.performance.timing.compare_speed``) leaves work, closes the gate
  so no one enters, waits until every other worker has left work (each finishes the test it is in:
  seconds at most), times, and opens the gate again;
- a worker passes a pause point (``pause_point``) before every hidden test and before the hints: it
  leaves work there and passes the gate, so a timer waits for the test each other worker is in, never
  for the rest of its submission;
- and within a test, a call that waits for the submission asks ``timer_waiting`` every 50 ms: when a
  timer waits, the sandbox stops the submission's processes (SIGSTOP), the worker passes a pause
  point, and the submission goes on afterwards with that time not counted against its limit
  (grader/bertlab_grader/sandbox/give_way.py). So a timer never waits for another student's long call or hang.

The main process writes its batches of results into the gradebook as work too (checking a result
and journaling it do not wait: grader/bertlab_grader/course/journal.py). A worker killed while working or
timing (a submission over its deadline) is cleared by the runner (``forget``), so the others never
wait for it; and a timer never waits for the others longer than ``MAX_WAIT_S`` (it times under load
rather than stop the run).

Within one process the gate is installed once (``install``); ``working()`` and ``exclusive()`` are
no-ops where none is installed (``grade-one``, ``bertlab check``, the kit's tests: a single grader).
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Iterator, Optional

from bertlab_grader.sandbox import give_way

IDLE, WORKING = 0, 1
NO_ONE = -1
MAX_WAIT_S = 60.0
POLL_S = 0.002


class TimingGate:
    """Shared by the main process (slot ``NO_ONE`` never times) and ``slots`` grader workers.

    ``ctx`` is the multiprocessing context the workers start with; the gate must be created before
    them and passed to each as a Process argument."""

    def __init__(self, ctx, slots: int):
        self._gate = ctx.Lock()                           # held by the worker that times
        self._holder = ctx.Value("i", NO_ONE, lock=False)  # its slot (read by forget; written under _gate)
        self._state = ctx.Array("b", slots + 1, lock=False)  # per slot, IDLE or WORKING; last: the main process
        self.slot = NO_ONE                                # this process's slot, set by install()

    def _index(self, slot: int) -> int:
        return len(self._state) - 1 if slot == NO_ONE else slot

    @contextmanager
    def working(self) -> Iterator[None]:
        """Around anything that is not timing: waits while another worker times."""
        # (A bounded wait: should a timer die without being forgotten, work goes on rather than hang.)
        entered = self._gate.acquire(timeout=2 * MAX_WAIT_S)
        self._state[self._index(self.slot)] = WORKING
        if entered:
            self._gate.release()
        try:
            yield
        finally:
            self._state[self._index(self.slot)] = IDLE

    def pause_point(self) -> None:
        """Inside work, between two tests: a timer waiting for this worker may take the machine now.
        The worker leaves work and passes the gate (it waits there while a timer holds it), then
        works on. So a timer waits for the test each other worker is in, not for its whole submission."""
        me = self._index(self.slot)
        if self._state[me] != WORKING:
            return
        self._state[me] = IDLE
        entered = self._gate.acquire(timeout=2 * MAX_WAIT_S)
        self._state[me] = WORKING
        if entered:
            self._gate.release()

    def timer_waiting(self) -> bool:
        """Whether this worker, at work, holds up another worker that wants to time now (a long call
        or a hang of its submission: the sandbox then stops the submission and gives way)."""
        holder = self._holder.value
        return self._state[self._index(self.slot)] == WORKING and holder not in (NO_ONE, self.slot)

    @contextmanager
    def exclusive(self) -> Iterator[float]:
        """Around a timing: the caller leaves work, waits for the machine to itself, and goes back to
        work afterwards. Yields the seconds it waited for the others."""
        me = self._index(self.slot)
        was_working = self._state[me] == WORKING
        self._state[me] = IDLE
        start = time.monotonic()
        closed = self._gate.acquire(timeout=2 * MAX_WAIT_S)
        if closed:
            self._holder.value = self.slot
        try:
            while any(state == WORKING for i, state in enumerate(self._state) if i != me):
                if time.monotonic() - start > MAX_WAIT_S:
                    break
                time.sleep(POLL_S)
            if was_working:
                self._state[me] = WORKING
            yield time.monotonic() - start
        finally:
            if closed:
                self._holder.value = NO_ONE
                self._gate.release()

    def forget(self, slot: int) -> None:
        """The worker in ``slot`` was killed: it works no more, and a gate it held is opened."""
        self._state[self._index(slot)] = IDLE
        if self._holder.value == slot and slot != NO_ONE:
            self._holder.value = NO_ONE
            try:
                self._gate.release()
            except ValueError:  # released meanwhile
                pass


_installed: Optional[TimingGate] = None


def install(gate: Optional[TimingGate], slot: int) -> None:
    """Make ``gate`` this process's gate, as ``slot`` (a worker's slot, or NO_ONE for the main process)."""
    global _installed
    if gate is not None:
        gate.slot = slot
    _installed = gate
    give_way.install(None if gate is None else gate.timer_waiting, None if gate is None else gate.pause_point)


def timing_cpu() -> Optional[int]:
    """The CPU this worker's timings run on: worker slot k takes the k-th CPU this process may use (modulo
    their number), so two workers timing at the same moment do not share one. None outside a cohort
    run (no gate installed) or in the main process."""
    if _installed is None or _installed.slot == NO_ONE or not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[_installed.slot % len(cpus)] if cpus else None


@contextmanager
def working() -> Iterator[None]:
    """``TimingGate.working`` of this process's gate, or nothing."""
    if _installed is None:
        yield
    else:
        with _installed.working():
            yield


def pause_point() -> None:
    """``TimingGate.pause_point`` of this process's gate (between two hidden tests), or nothing."""
    if _installed is not None:
        _installed.pause_point()


@contextmanager
def exclusive() -> Iterator[float]:
    """``TimingGate.exclusive`` of this process's gate, or nothing (yields 0.0)."""
    if _installed is None:
        yield 0.0
    else:
        with _installed.exclusive() as waited:
            yield waited
