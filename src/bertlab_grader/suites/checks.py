"""Assertions shared by the hidden suites. Every failure message teaches.

The order is always: type, exact shape (never broadcast), NaN/inf, values, then the likely mistake.
A message shows at most one expected number (at the worst position), never a whole expected array and
never test source; the grader (grader/scoring.py) shows the student only the message.

Code under test may be in this process (solutions, ``--impl DIR``) or behind the sandbox proxy, so
these helpers only look at plain results (tensors, numbers, lists) and never at the student's objects.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping, Optional, Sequence

import numpy as np
import pytest
import torch


def fail(message: str):
    """Fail the current test with ``message`` (no traceback, no source: the message is the feedback)."""
    pytest.fail(message, pytrace=False)


def short(value, limit: int = 120) -> str:
    """A short description of a returned value for messages."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)} and dtype {value.dtype}"
    if isinstance(value, np.ndarray):
        return f"a NumPy array of shape {list(value.shape)}"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def is_harness_error(exc: BaseException) -> bool:
    """True for exceptions that must propagate untouched: a stub not implemented yet, a sandbox
    timeout or crash (the grader scores those as error/timeout, not as a wrong answer)."""
    if isinstance(exc, NotImplementedError):
        return True
    return type(exc).__name__ in ("SubmissionTimeout", "SubmissionCrashed")


# ---------------------------------------------------------------------------------------------
# Type, shape, finiteness
# ---------------------------------------------------------------------------------------------

def tensor_result(value, what: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        fail(f"{what} should be a torch.Tensor; got {short(value)}. Return a tensor, not a list or NumPy array.")
    return value.detach()


def check_shape(actual: torch.Tensor, expected: Sequence[int], what: str, hint: str = "") -> None:
    if tuple(actual.shape) != tuple(expected):
        fail(f"{what} has shape {list(actual.shape)}; expected {list(expected)}. {hint}".strip())


def check_finite(actual: torch.Tensor, what: str, hint: str = "") -> None:
    values = actual.float() if actual.dtype in (torch.float16, torch.bfloat16) else actual
    if not values.is_floating_point():
        return
    bad = ~torch.isfinite(values)
    if bad.any():
        position = [int(i) for i in bad.nonzero()[0]]
        kind = "NaN" if torch.isnan(values[tuple(position)]) else "inf"
        fail(f"{what} contains {kind} (first at index {position}; {int(bad.sum())} bad entries in all). "
             f"{hint}".strip())


def check_tensor(value, shape: Sequence[int], what: str, *, dtype: Optional[torch.dtype] = None,
                 shape_hint: str = "", finite_hint: str = "", dtype_hint: str = "") -> torch.Tensor:
    """Type, exact shape, optional dtype, then no NaN/inf; returns the detached tensor."""
    actual = tensor_result(value, what)
    check_shape(actual, shape, what, shape_hint)
    if dtype is not None and actual.dtype != dtype:
        fail(f"{what} has dtype {actual.dtype}; expected {dtype}. {dtype_hint}".strip())
    check_finite(actual, what, finite_hint)
    return actual


def close(actual, candidate, tol: float = 1e-5) -> bool:
    """Same shape and within ``tol`` (relative to 1 + |candidate|): used to name a mistake."""
    if not isinstance(actual, torch.Tensor) or not isinstance(candidate, torch.Tensor):
        return False
    if tuple(actual.shape) != tuple(candidate.shape):
        return False
    a, c = actual.detach().to(torch.float64), candidate.detach().to(torch.float64)
    same_nan = torch.isnan(a) == torch.isnan(c)
    if not bool(same_nan.all()):
        return False
    a, c = torch.nan_to_num(a), torch.nan_to_num(c)
    return bool(((a - c).abs() <= tol * (1 + c.abs())).all())


def name_mistake(actual, candidates: Mapping[str, torch.Tensor], tol: float = 1e-5) -> str:
    """The explanation of the first candidate ``actual`` matches, or ''."""
    for explanation, candidate in candidates.items():
        if candidate is not None and close(actual, candidate, tol):
            return explanation
    return ""


def check_close(actual: torch.Tensor, expected: torch.Tensor, what: str, *, atol: float, rtol: float = 0.0,
                hint: str = "", diagnose: Optional[Callable[[torch.Tensor], str]] = None) -> None:
    """Exact shape, then values within atol + rtol*|expected| (compared in float64).

    The message gives the worst position with both numbers; ``diagnose(actual)`` may name the mistake.
    NaN where the expected value is NaN counts as equal.
    """
    check_shape(actual, expected.shape, what)
    a, e = actual.detach().to(torch.float64), expected.detach().to(torch.float64)
    nan_mismatch = torch.isnan(a) != torch.isnan(e)
    if nan_mismatch.any():
        position = [int(i) for i in nan_mismatch.nonzero()[0]]
        got, want = a[tuple(position)].item(), e[tuple(position)].item()
        explanation = (diagnose(actual) if diagnose else "") or hint
        fail(f"{what} is wrong at index {position}: expected {want:.6g}, got {got:.6g}. {explanation}".strip())
    a, e = torch.nan_to_num(a), torch.nan_to_num(e)
    excess = (a - e).abs() - (atol + rtol * e.abs())
    if (excess > 0).any():
        worst = tuple(int(i) for i in (excess == excess.max()).nonzero()[0])
        where = f" at index {list(worst)}" if worst else ""
        explanation = (diagnose(actual) if diagnose else "") or hint
        fail(f"{what} is wrong{where}: expected {e[worst].item():.6g}, got {a[worst].item():.6g} "
             f"(tolerance {atol:g} + {rtol:g}*|expected|; {int((excess > 0).sum())} of {e.numel()} entries off). "
             f"{explanation}".strip())


def python_float(value, what: str) -> float:
    """Fail unless ``value`` is a real Python number (an int or float; NumPy scalars cross as floats)."""
    if isinstance(value, bool) or not isinstance(value, (float, int)):
        fail(f"{what} should be a Python float; got {short(value)}. "
             "Convert at the end with `.item()` or `float(...)`.")
    return float(value)


def check_scalar(value: float, expected: float, what: str, *, atol: float, hint: str = "") -> None:
    if math.isnan(expected):
        if not math.isnan(value):
            fail(f"{what} should be nan; got {value:.6g}. {hint}".strip())
        return
    if math.isnan(value):
        fail(f"{what} is nan; expected {expected:.6g}. {hint}".strip())
    if abs(value - expected) > atol:
        fail(f"{what} is {value:.10g}; expected {expected:.10g} (tolerance {atol:g}). {hint}".strip())


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------

def expect_value_error(call: Callable[[], object], what: str, why: str) -> None:
    """``call()`` must raise ValueError. Anything else fails and says which input it was."""
    try:
        result = call()
    except ValueError:
        return
    except Exception as exc:  # noqa: BLE001 - we report whatever the code under test raised
        if is_harness_error(exc):
            raise
        fail(f"{what} raised {type(exc).__name__} ({first_line(exc)}); expected ValueError because {why}. "
             "Check the input up front and `raise ValueError(...)` with a clear message.")
    fail(f"{what} returned {short(result)} instead of raising ValueError, but {why}. "
         "Check the input up front and `raise ValueError(...)` with a clear message.")


def first_line(exc: BaseException, limit: int = 160) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "..."


# ---------------------------------------------------------------------------------------------
# Seeded inputs
# ---------------------------------------------------------------------------------------------

def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)
