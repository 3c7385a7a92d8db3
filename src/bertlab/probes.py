"""Measurements that must run where the code under test runs, and return only plain numbers.

Some properties cannot be read off a returned value. Whether a loss on the Siamese wrapper's output
trains the encoder it wraps is one: the autograd graph lives next to the student's objects. While
grading, those objects stay in the sandbox (bertlab_grader/sandbox), so the measurement runs there
too and only a small dict of numbers and flags comes back. In `bertlab check` (the student's own
code, in process) the same function runs in process.

Tests call a probe with ``run_probe(impl, name, *args)``; ``impl`` decides where it runs. The worker
looks probes up in ``PROBES`` (captured when the worker starts, before any submitted code is
imported), so a submission cannot swap the function the grader asked for.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Callable, Optional

from bertlab.tasks import EXERCISES


def substitute(module, name: str, replacement, dependents=()):
    """Set ``module.name = replacement`` and re-import each of ``dependents``, so that a name bound
    with ``from .module import name`` sees the replacement too. Returns the previous value.

    The hidden siamese suite uses it to judge a wrapper whose own pooling raises: the student's
    siamese.py runs over a stand-in pooling (the grader's, called back from the sandbox), so the
    pooling mistake is charged in the pooling task only; it puts the student's function back after.
    """
    previous = getattr(module, name)
    setattr(module, name, replacement)
    for dependent in dependents:
        # The sandbox's loader runs each module once; it re-runs one on request instead.
        reexecute = getattr(getattr(dependent, "__loader__", None), "reexecute", None)
        reexecute(dependent) if callable(reexecute) else importlib.reload(dependent)
    return previous


def _task_probes() -> dict[str, Callable[..., dict]]:
    """Every task's probes: the ``PROBES`` dict of src/bertlab/teaching/<task>.py, where it has one."""
    found: dict[str, Callable[..., dict]] = {}
    for e in EXERCISES:
        for name, probe in getattr(importlib.import_module(f"bertlab.teaching.{e.name}"), "PROBES", {}).items():
            if name in found:
                raise ValueError(f"two tasks define the probe {name!r}")
            found[name] = probe
    return found


PROBES: dict[str, Callable[..., dict]] = {**_task_probes(), "substitute": substitute}


def run_probe(impl, name: str, *args, limit_s: Optional[float] = None):
    """Run the probe ``name`` where ``impl``'s code runs: through the sandbox for a graded
    submission (its ``probe`` attribute), in this process otherwise. ``limit_s``: the time limit of
    this call through the sandbox, where it should exceed the usual per-call limit (a probe on inputs
    that are large by design); in process there is none."""
    remote = getattr(impl, "probe", None)
    if callable(remote):
        limit = getattr(impl, "call_limit", None)
        with (limit(limit_s) if limit_s is not None and callable(limit) else contextlib.nullcontext()):
            return remote(name)(*args)
    return PROBES[name](*args)


@contextlib.contextmanager
def substituted(impl, module, name: str, value):
    """``with substituted(impl, impl.retrieval, "MAX_BLOCK_SCORES", 4096) as done:`` the code under test
    sees ``module.name = value`` (set where it runs: the ``substitute`` probe), put back afterwards.
    ``done`` is False, and nothing is set, where the module has no such name (a submission that deleted
    a constant of its stub runs as written)."""
    try:
        previous = run_probe(impl, "substitute", module, name, value, [])
    except AttributeError:
        yield False
        return
    except Exception as exc:  # noqa: BLE001 - through the sandbox an AttributeError arrives as its report
        if getattr(exc, "type_name", "") != "AttributeError":
            raise
        yield False
        return
    try:
        yield True
    finally:
        run_probe(impl, "substitute", module, name, previous, [])
