"""The in-process floor's call limit (cohort_benchmark.py): each call of a submission's function may run
at most as long as the sandboxed grader lets it, and a call that ran out is not made again.

    impl = load_directory(folder)
    limit_calls(impl)                                    # before the suites run
    run_hidden_suite(impl, ..., extra_pytest_args=["-p", "floor_limit"])   # benchmarks/ on sys.path

Why: the sandboxed grader stops a call of a submission after its call limit (20 s of the submission's
CPU, ``Sandbox(timeout_s=...)``; longer inside a hidden test's ``impl.call_limit(seconds)`` block, for
the inputs that are large by design), the call raises, and a later call of the same function with
inputs of the same kind raises at once (``Session.request``'s memo of hung calls). In one plain process
nothing stops a call: one submission written as a Python loop over a 2,000,000-row corpus held the
floor's process for half an hour, a floor no grader pays. Here the same rules hold: SIGALRM after the
same number of seconds (of wall time: the floor runs on one torch thread, on a quiet machine), the
call raises ``FloorLimitReached``, and the same function called again with inputs of the same kind
raises at once. Functions defined at the top of the exercise modules are limited (a class's methods
are not: the Siamese wrapper's forward is MiniLM's bounded work).

``STOPPED`` lists the calls stopped at the limit; ``SECONDS`` adds up each test's run (setup, call,
teardown) by its task marker, so the floor can be given with and without the performance task.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import signal
import time
from collections import defaultdict

import pytest

from bertlab.tasks import EXERCISE_MODULES, GRADED_TASKS

LIMIT_S = 20.0  # the sandbox's call limit (grader/bertlab_grader/sandbox/launcher.py, Sandbox.timeout_s)
STOPPED: list[str] = []  # "module.function" of each call stopped at the limit, in the order they ran
SECONDS: dict[str, float] = defaultdict(float)  # task -> seconds of its tests' runs
HUNG: dict[tuple, str] = {}  # (module.function, kind of the inputs) -> why: made again, it raises at once


class FloorLimitReached(BaseException):
    """A submission's call ran past the grader's call limit. A BaseException, so that the submission's
    own ``except Exception`` cannot swallow it (in the sandbox the limit acts from outside)."""


_state = {"depth": 0, "limit_s": LIMIT_S}


def _stop(signum, frame):
    raise FloorLimitReached(f"stopped after {_state['limit_s']:g} s, the grader's call limit")


def _limited(fn, name: str):
    from bertlab_grader.sandbox.session import input_kind  # the grader's own notion of "the same kind"

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if _state["depth"]:  # a call from inside the submission: the outer call's limit covers it
            return fn(*args, **kwargs)
        key = (name, input_kind(list(args)), input_kind(dict(kwargs)))
        if key in HUNG:
            raise FloorLimitReached(HUNG[key])
        previous = signal.signal(signal.SIGALRM, _stop)
        signal.setitimer(signal.ITIMER_REAL, _state["limit_s"])
        _state["depth"] += 1
        try:
            return fn(*args, **kwargs)
        except FloorLimitReached as exc:
            STOPPED.append(name)
            HUNG[key] = str(exc)
            raise
        finally:
            _state["depth"] -= 1
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    return call


def limit_calls(impl) -> None:
    """Limit every top-level function of ``impl``'s exercise modules, and give ``impl`` the
    ``call_limit(seconds)`` block the hidden tests use for large inputs; forget earlier hangs."""
    HUNG.clear()
    for module_name in EXERCISE_MODULES:
        module = getattr(impl, module_name)
        for attr, value in list(vars(module).items()):
            if inspect.isfunction(value) and value.__module__ == module.__name__:
                setattr(module, attr, _limited(value, f"{module_name}.{attr}"))

    @contextlib.contextmanager
    def call_limit(seconds: float):
        previous = _state["limit_s"]
        _state["limit_s"] = max(previous, float(seconds))
        try:
            yield
        finally:
            _state["limit_s"] = previous

    impl.call_limit = call_limit


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    tasks = [m.name for m in item.iter_markers() if m.name in GRADED_TASKS]  # as the grader reads them
    begun = time.perf_counter()
    yield
    SECONDS[tasks[0] if tasks else "(no task)"] += time.perf_counter() - begun
