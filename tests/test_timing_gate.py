"""The timing gate (grader/bertlab_grader/performance/gate.py): a grader worker times only while no other works.

Real processes, as in a cohort run; each test takes about a second.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import pytest

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


def _work_in_tests(gate, slot, tests, seconds, events):
    """``tests`` tests of ``seconds`` each in one block of work, a pause point before each (as a grader
    worker runs a submission's hidden tests)."""
    timing_gate.install(gate, slot)
    with timing_gate.working():
        events.put(("work-start", slot, time.monotonic()))
        for i in range(tests):
            timing_gate.pause_point()
            events.put((f"test-{i}", slot, time.monotonic()))
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


def _busy_then_timer_then_late(ctx, work_for, time_for, gate, work_s: float, settle_s: float) -> dict:
    """Slot 0 works for ``work_s``; slot 1 then asks to time; after ``settle_s`` (the timer waits for
    slot 0, the gate closed) slot 2 asks to work. The five events, with their times."""
    events = ctx.Queue()
    busy = ctx.Process(target=work_for, args=(gate, 0, work_s, events))
    busy.start()
    assert events.get(timeout=60)[0] == "work-start"
    timer = ctx.Process(target=time_for, args=(gate, 1, 0.6, events))
    timer.start()
    time.sleep(settle_s)
    late = ctx.Process(target=work_for, args=(gate, 2, 0.0, events))
    late.start()
    got = _collect(events, 5)
    for p in (busy, timer, late):
        p.join(60)
    return got


def test_a_timing_waits_for_work_in_progress_and_holds_back_new_work():
    ctx = _ctx()
    got = _busy_then_timer_then_late(ctx, _work_for, _time_for, TimingGate(ctx, slots=3), work_s=0.6, settle_s=0.2)
    assert got[("time-start", 1)] >= got[("work-end", 0)], "the timing began while another worker was working"
    assert got[("work-start", 2)] >= got[("time-end", 1)], "a worker started working during a timing"


def _timer_between_tests(ctx, work_in_tests, time_for, gate, start_s: float, tests: int = 4) -> dict:
    """Slot 0 runs ``tests`` tests of 0.5 s in one block of work; ``start_s`` after it started, slot 1
    asks to time."""
    events = ctx.Queue()
    worker = ctx.Process(target=work_in_tests, args=(gate, 0, tests, 0.5, events))
    worker.start()
    assert events.get(timeout=60)[0] == "work-start"
    time.sleep(start_s)
    timer = ctx.Process(target=time_for, args=(gate, 1, 0.6, events))
    timer.start()
    got = _collect(events, tests + 1 + 2)
    for p in (worker, timer):
        p.join(60)
    return got


def _assert_timed_between_two_tests(got: dict) -> None:
    tests = sorted(when for (kind, _), when in got.items() if kind.startswith("test-"))
    start, end = got[("time-start", 1)], got[("time-end", 1)]
    assert start < got[("work-end", 0)], "the timer waited for the worker's whole block of work"
    assert not any(t < start < t + 0.5 for t in tests), "the timing began while a test was running"
    assert not any(start < t < end for t in tests), "a test started during the timing"


def test_a_timer_waits_for_the_test_in_progress_not_the_whole_submission():
    ctx = _ctx()
    _assert_timed_between_two_tests(_timer_between_tests(ctx, _work_in_tests, _time_for, TimingGate(ctx, slots=2),
                                                         start_s=0.2))


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


def _wait_on_a_long_call(make_gate, slot, seconds, events):
    """One call of ``seconds`` in one block of work, as Session._next_message waits for a sandboxed
    call: it asks ``timer_waiting`` as it waits, and gives way (``pause_point``) when a timer waits.
    Each 10 ms it waited at work is a tick."""
    gate = make_gate()
    timing_gate.install(gate, slot)
    with timing_gate.working():
        events.put(("work-start", slot, time.monotonic()))
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if gate.timer_waiting():
                events.put(("gave-way", slot, time.monotonic()))
                gate.pause_point()
            events.put(("tick", slot, time.monotonic()))
            time.sleep(0.01)
        events.put(("work-end", slot, time.monotonic()))


def _time_with(make_gate, slot, seconds, events):
    _time_for(make_gate(), slot, seconds, events)


def _timer_during_a_long_call(ctx, make_gate, start_s: float) -> tuple[dict, list[float]]:
    """Slot 0 waits on a call of 4 s; ``start_s`` after it started, slot 1 asks to time (0.6 s).
    ``make_gate`` is called in each process (a spawned one must open the host gate's files itself)."""
    events = ctx.Queue()
    worker = ctx.Process(target=_wait_on_a_long_call, args=(make_gate, 0, 4.0, events))
    worker.start()
    assert events.get(timeout=60)[0] == "work-start"
    time.sleep(start_s)
    timer = ctx.Process(target=_time_with, args=(make_gate, 1, 0.6, events))
    timer.start()
    got, ticks = {}, []
    while ("work-end", 0) not in got or ("time-end", 1) not in got:
        kind, slot, when = events.get(timeout=60)
        ticks.append(when) if kind == "tick" else got.setdefault((kind, slot), when)
    for p in (worker, timer):
        p.join(60)
    return got, ticks


def _assert_timed_during_the_call(got: dict, ticks: list[float]) -> None:
    start, end = got[("time-start", 1)], got[("time-end", 1)]
    assert ("gave-way", 0) in got, "the waiting worker never saw that a timer waited"
    assert start < got[("work-end", 0)] - 1.0, "the timer waited for the whole call"
    assert not any(start < t < end for t in ticks), "the worker went on waiting at work during the timing"


@pytest.mark.slow  # (4 s or more: the fast loop stays under 5 minutes, docs/architecture.md)
def test_a_timer_does_not_wait_for_another_workers_long_call():
    ctx = _ctx()
    gate = TimingGate(ctx, slots=2)
    _assert_timed_during_the_call(*_timer_during_a_long_call(ctx, lambda: gate, start_s=0.3))


def test_a_worker_that_is_not_held_up_sees_no_timer_waiting():
    ctx = _ctx()
    gate = TimingGate(ctx, slots=2)
    timing_gate.install(gate, 0)
    try:
        with timing_gate.working():
            assert not gate.timer_waiting(), "no timer at all"
            with timing_gate.exclusive():  # (a timer's own timed calls wait on the sandbox too)
                assert not gate.timer_waiting(), "a timer does not wait for itself"
    finally:
        timing_gate.install(None, NO_ONE)


def test_without_a_gate_both_are_free():
    timing_gate.install(None, NO_ONE)
    with timing_gate.working():
        with timing_gate.exclusive() as waited:
            assert waited == 0.0


# ---------------------------------------------------------------------------------------------------
# The host's quiet room (grader/bertlab_grader/performance/host_gate.py): the same rules for processes that share
# nothing but the host, as the Dask workers of one machine.


def _host_work_for(room, slot, seconds, events):
    from bertlab_grader.performance.host_gate import HostGate

    _work_for(HostGate(room), slot, seconds, events)


def _host_time_for(room, slot, seconds, events):
    from bertlab_grader.performance.host_gate import HostGate

    _time_for(HostGate(room), slot, seconds, events)


def _host_work_in_tests(room, slot, tests, seconds, events):
    from bertlab_grader.performance.host_gate import HostGate

    _work_in_tests(HostGate(room), slot, tests, seconds, events)


@pytest.mark.slow  # (4 s or more: the fast loop stays under 5 minutes, docs/architecture.md)
def test_the_host_gate_lets_a_timer_in_between_two_tests(tmp_path):
    ctx = mp.get_context("spawn")
    # (a spawned interpreter starts slowly: the worker runs more tests meanwhile)
    _assert_timed_between_two_tests(_timer_between_tests(ctx, _host_work_in_tests, _host_time_for, tmp_path,
                                                         start_s=0.2, tests=10))


def _host_hold_forever(room, ready):
    from bertlab_grader.performance.host_gate import HostGate

    _hold_forever(HostGate(room), NO_ONE, ready)


def test_the_host_gate_keeps_a_timing_alone_across_unrelated_processes(tmp_path):
    ctx = mp.get_context("spawn")  # fresh interpreters: nothing shared but the folder
    # (spawned interpreters start slowly: longer work, and a longer settle before the late one)
    got = _busy_then_timer_then_late(ctx, _host_work_for, _host_time_for, tmp_path, work_s=1.5, settle_s=1.0)
    assert got[("time-start", 1)] >= got[("work-end", 0)], "the timing began while another process was working"
    assert got[("work-start", 2)] >= got[("time-end", 1)], "a process started working during a timing"


class _HostGateIn:
    """A picklable maker of a HostGate in ``room`` (for spawned processes)."""

    def __init__(self, room):
        self.room = room

    def __call__(self):
        from bertlab_grader.performance.host_gate import HostGate

        return HostGate(self.room)


@pytest.mark.slow  # (4 s or more: the fast loop stays under 5 minutes, docs/architecture.md)
def test_the_host_gate_does_not_keep_a_timer_waiting_for_a_long_call(tmp_path):
    ctx = mp.get_context("spawn")
    # (spawned interpreters start slowly: the timer asks later, still well within the call)
    _assert_timed_during_the_call(*_timer_during_a_long_call(ctx, _HostGateIn(tmp_path), start_s=1.5))


def test_a_killed_timer_leaves_the_host_gate_open(tmp_path):
    from bertlab_grader.performance.host_gate import HostGate

    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    holder = ctx.Process(target=_host_hold_forever, args=(tmp_path, ready))
    holder.start()
    assert ready.wait(60)
    os.kill(holder.pid, signal.SIGKILL)  # its flocks go with its process: nothing to forget
    holder.join(30)
    gate = HostGate(tmp_path)
    timing_gate.install(gate, NO_ONE)
    try:
        start = time.monotonic()
        with timing_gate.working():
            with timing_gate.exclusive() as waited:
                pass
    finally:
        timing_gate.install(None, NO_ONE)
        gate.close()
    assert time.monotonic() - start < 5 and waited < 5, "the host gate stayed shut after its timer was killed"
