"""The timing gate (grader/performance/gate.py): a grader worker times only while no other works.

Real processes, as in a cohort run; each test takes about a second.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

from bertlab_grader.performance import gate as timing_gate
from bertlab_grader.performance.gate import NO_ONE, TimingGate


def _ctx():
    return mp.get_context("fork")


def _work_for(gate, slot, seconds, events):
    timing_gate.install(gate, slot)
    with timing_gate.working():
        events.put(("work-start", slot, time.monotonic()))
        time.sleep(seconds)
        events.put(("work-end", slot, time.monotonic()))


def _time_for(gate, slot, seconds, events):
    timing_gate.install(gate, slot)
    with timing_gate.working():
        with timing_gate.exclusive():
            events.put(("time-start", slot, time.monotonic()))
            time.sleep(seconds)
            events.put(("time-end", slot, time.monotonic()))


def _hold_forever(gate, slot, ready):
    timing_gate.install(gate, slot)
    with timing_gate.exclusive():
        ready.set()
        time.sleep(3600)


def _collect(events, n):
    got = {}
    for _ in range(n):
        kind, slot, when = events.get(timeout=30)
        got[(kind, slot)] = when
    return got


def test_a_timing_waits_for_work_in_progress_and_holds_back_new_work():
    ctx = _ctx()
    gate, events = TimingGate(ctx, slots=3), ctx.Queue()
    busy = ctx.Process(target=_work_for, args=(gate, 0, 0.6, events))
    busy.start()
    assert events.get(timeout=30)[0] == "work-start"
    timer = ctx.Process(target=_time_for, args=(gate, 1, 0.6, events))
    timer.start()
    time.sleep(0.2)  # the timer is now waiting for slot 0 to finish, with the gate closed
    late = ctx.Process(target=_work_for, args=(gate, 2, 0.0, events))
    late.start()
    got = _collect(events, 5)
    for p in (busy, timer, late):
        p.join(30)
    assert got[("time-start", 1)] >= got[("work-end", 0)], "the timing began while another worker was working"
    assert got[("work-start", 2)] >= got[("time-end", 1)], "a worker started working during a timing"


def test_a_killed_timer_is_forgotten_and_work_goes_on():
    ctx = _ctx()
    gate, ready = TimingGate(ctx, slots=2), ctx.Event()
    holder = ctx.Process(target=_hold_forever, args=(gate, 0, ready))
    holder.start()
    assert ready.wait(30)
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(30)
    gate.forget(0)
    timing_gate.install(gate, NO_ONE)
    try:
        start = time.monotonic()
        with timing_gate.working():
            pass
        with timing_gate.exclusive() as waited:
            pass
    finally:
        timing_gate.install(None, NO_ONE)
    assert time.monotonic() - start < 5, "work waited for a timer that had been killed and forgotten"
    assert waited < 5


def test_without_a_gate_both_are_free():
    timing_gate.install(None, NO_ONE)
    with timing_gate.working():
        with timing_gate.exclusive() as waited:
            assert waited == 0.0
