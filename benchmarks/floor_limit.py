"""A pytest plugin for the in-process floor (cohort_benchmark.py): each hidden test may run at most as
long as the grader lets one call of a submission run.

    run_hidden_suite(impl, ..., extra_pytest_args=["-p", "floor_limit"])   # benchmarks/ on sys.path

Why: the sandboxed grader stops a call of a submission after its call limit (20 s of the submission's
CPU, `Sandbox(timeout_s=...)`) and the test fails. In one plain process nothing stops a call, so one
submission written as a Python loop over a 2,000,000-row corpus held the floor's process for half an
hour: a floor no grader pays. Here a test is stopped by SIGALRM after the same number of seconds of
wall time (this process's only thread of Python runs it, on a quiet machine), and counts as failed.

A test makes one call or several, so this limit is at most as generous as the grader's; the floor it
gives is no higher than what the grader must spend. ``STOPPED`` lists the tests it stopped, and
``SECONDS`` adds up each test's run (setup, call, teardown) by its task marker.
"""

from __future__ import annotations

import signal
import time
from collections import defaultdict

import pytest

LIMIT_S = 20.0  # the sandbox's call limit (grader/bertlab_grader/sandbox/launcher.py, Sandbox.timeout_s)
STOPPED: list[str] = []  # node ids of the tests stopped at the limit, in the order they ran
SECONDS: dict[str, float] = defaultdict(float)  # task -> seconds of its tests' runs


class FloorLimitReached(Exception):
    """A hidden test ran past the floor's limit (the sandbox's call limit)."""


def _stop(signum, frame):
    raise FloorLimitReached(f"stopped after {LIMIT_S:g} s, the grader's call limit")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    previous = signal.signal(signal.SIGALRM, _stop)
    signal.setitimer(signal.ITIMER_REAL, LIMIT_S)
    try:
        outcome = yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    excinfo = outcome.excinfo
    if excinfo is not None and isinstance(excinfo[1], FloorLimitReached):
        STOPPED.append(item.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    from bertlab.tasks import GRADED_TASKS

    tasks = [m.name for m in item.iter_markers() if m.name in GRADED_TASKS]  # as the grader reads them
    begun = time.perf_counter()
    yield
    SECONDS[tasks[0] if tasks else "(no task)"] += time.perf_counter() - begun
