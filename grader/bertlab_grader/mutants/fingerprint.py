"""Behaviour fingerprints: how a bank entry, the reference or a submission behaves, as plain data.

For each task a *fingerprint* (``fingerprint(impl)`` in grader/bertlab_grader/mutants/<task>.py) calls the task's
functions on small fixed inputs and records what comes back (values, shapes, dtypes, the type of an
exception). grader/bertlab_grader/grading/hints.py compares a failing submission's fingerprint with each mutant's:
when they are the same, the submission gets the hint of that mutant's mistake. Fingerprints pass only
plain data, named models and trusted callables, so they run through the sandbox proxy like the hidden
tests do; they are deliberately small (milliseconds per task).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch

from bertlab.assertions import did_not_finish


class FingerprintAborted(Exception):
    """The fingerprint was not finished, so it matches no known mistake: the submission timed out or
    crashed while it was taken, or (``pruned_by``) it already differs from every known mistake."""


# The records a fingerprint taken now could still match (``pruned_by``); None: take it whole.
_CANDIDATES: contextvars.ContextVar = contextvars.ContextVar("fingerprint_candidates", default=None)


@contextlib.contextmanager
def pruned_by(candidates: Iterable[dict]) -> Iterator[None]:
    """Within this block, a ``Record`` whose latest key matches that key of none of ``candidates``
    raises ``FingerprintAborted`` at once: the whole record can then equal none of them (``same``
    compares every key), so the calls still to come would decide nothing. Hints only ask whether a
    fingerprint equals a known mistake's, and a hostile submission's calls can cost seconds each
    (one that forks 20 processes per call made the hints of one grading take 6.6 s)."""
    token = _CANDIDATES.set(tuple(candidates))
    try:
        yield
    finally:
        _CANDIDATES.reset(token)


class Record(dict):
    """A fingerprint's record, filled key by key in the order its calls are made (see ``pruned_by``)."""

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        candidates = _CANDIDATES.get()
        if candidates is not None and not any(key in c and same(value, c[key]) for c in candidates):
            raise FingerprintAborted(f"{key!r} matches no known mistake")


def normalise(value: Any, depth: int = 0) -> Any:
    """A comparable, plain description of a returned value."""
    if depth > 6:
        return ("deep",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float, np.integer, np.floating)):
        return ("number", float(value))
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(np.array(value))
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        return ("tensor", tuple(t.shape), str(t.dtype), t.to(torch.float64) if t.dtype != torch.bool else t)
    if isinstance(value, str):
        return ("str", value)
    if isinstance(value, (list, tuple)):
        return ("seq", type(value) is list, tuple(normalise(v, depth + 1) for v in value))
    if value is None:
        return ("none",)
    return ("object", type(value).__name__)


def outcome(call: Callable[[], Any]) -> Any:
    try:
        return normalise(call())
    except Exception as exc:  # noqa: BLE001 - the type of what the code raised is the record
        name = getattr(exc, "type_name", None) or type(exc).__name__
        if did_not_finish(exc):
            raise FingerprintAborted(str(exc)) from exc
        base = next((c.__name__ for c in type(exc).__mro__ if c.__module__ == "builtins"), name)
        return ("raises", base if base not in ("Exception", "BaseException") else name)


def same(a: Any, b: Any) -> bool:
    """Two normalised outcomes agree (tensors: same shape and dtype, values within 1e-4 relative)."""
    if isinstance(a, dict) and isinstance(b, dict):  # a Record and a plain dict compare alike
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype == torch.bool:
            return bool(torch.equal(a, b))
        return bool(torch.allclose(a, b, rtol=1e-4, atol=1e-6, equal_nan=True))
    if isinstance(a, tuple):
        if len(a) != len(b):
            return False
        if a and b and a[0] == "number" and b[0] == "number" and len(a) == 2:
            x, y = a[1], b[1]
            return (math.isnan(x) and math.isnan(y)) or abs(x - y) <= 1e-6 + 1e-4 * abs(y)
        return all(same(x, y) for x, y in zip(a, b))
    return a == b


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)
