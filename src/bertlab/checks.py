"""Shared assertions for the public tests: every failure says what was expected, what came back,
and the likely mistake.

The order of checks is always the same: type, then exact shape (never broadcast), then NaN/inf, then
values. Nothing here knows the reference solution: expected values come from oracles written in the
test modules themselves.
"""

from __future__ import annotations

import re
from typing import Callable, Optional, Sequence

import pytest
import torch
from hypothesis import HealthCheck, Phase, settings


def property_settings(max_examples: int) -> settings:
    """Seeded Hypothesis settings shared by every property test.

    The same examples on every run and machine (derandomize); no example database written into the
    student's folder; no deadline (a remote, sandboxed implementation is slower per call); no shrink
    phase: the examples are small already, our messages explain the failure, and shrinking a test
    that fails on every input (a stub, a wrong formula) costs tens of seconds per test.
    """
    return settings(
        derandomize=True,
        database=None,
        deadline=None,
        max_examples=max_examples,
        phases=(Phase.explicit, Phase.generate),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# Where to start when a task is still a stub (shown with the NotImplementedError).
TASK_START = {
    "cka": "Start with linear_cka in exercises/cka.py: center the columns of X and Y, then apply the "
           "formula in its docstring in float64; cka_matrix can then call it for every pair.",
    "pooling": "Start with masked_mean_pool in exercises/pooling.py: sum the hidden states of the "
               "positions whose mask is 1 and divide by how many there are (at least 1).",
    "siamese": "Start with create_sbert and SiameseBert in exercises/siamese.py: keep the encoder, "
               "encode = masked_mean_pool of its last_hidden_state, forward = cosine of two encodes.",
    "retrieval": "Start with semantic_search in exercises/retrieval.py (cosine scores, top-k, ties by "
                 "ascending index, in blocks), then SemanticIndex on top of it.",
}

_STUB_MESSAGE = re.compile(r"^\s*(\w+)\s*:\s*implement\s+([\w.]+)")


def not_implemented_message(test_task: Optional[str], exc: BaseException) -> str:
    """The message a student sees when a test reaches a stub that still raises NotImplementedError.

    test_task is the task marker of the test; the stub's own message ("<task>: implement <name> ...")
    says which function is missing, which may belong to another task (siamese uses pooling).
    """
    text = str(exc).strip()
    match = _STUB_MESSAGE.match(text)
    stub_task = match.group(1) if match and match.group(1) in TASK_START else test_task
    function = match.group(2) if match else _raising_function(exc)
    raised = f"{function} raises NotImplementedError({text!r})" if function else f"NotImplementedError({text!r})"
    if stub_task and test_task and stub_task != test_task:
        head = (f"Task {test_task} cannot be checked yet: it needs task {stub_task}, which is not "
                f"implemented yet ({raised}).")
    else:
        head = f"Task {stub_task or test_task or '?'} is not implemented yet: {raised}."
    start = TASK_START.get(stub_task or "", "")
    command = f" Run `bertlab check --task {stub_task}` to see only this task." if stub_task else ""
    return f"{head} {start}{command}".strip()


def _raising_function(exc: BaseException) -> str:
    tb = exc.__traceback__
    name = ""
    while tb is not None:
        name = tb.tb_frame.f_code.co_name
        tb = tb.tb_next
    return name


# ---------------------------------------------------------------------------------------------
# Type, shape, finiteness
# ---------------------------------------------------------------------------------------------

def tensor_result(value, what: str) -> torch.Tensor:
    """Fail unless ``value`` is a torch.Tensor; return it detached (no autograd history)."""
    if not isinstance(value, torch.Tensor):
        pytest.fail(f"{what} should be a torch.Tensor; got {type(value).__name__}: {_short(value)}. "
                    "Return a tensor (torch.as_tensor / torch.stack), not a list or NumPy array.",
                    pytrace=False)
    return value.detach()


def check_shape(actual: torch.Tensor, expected: Sequence[int], what: str, hint: str = "") -> None:
    """Exact shape equality: [3, 4] is not [3, 1, 4] and not [4, 3], whatever broadcasting would do."""
    if tuple(actual.shape) != tuple(expected):
        pytest.fail(f"{what} has shape {list(actual.shape)}; expected {list(expected)}. {hint}".strip(),
                    pytrace=False)


def check_finite(actual: torch.Tensor, what: str, hint: str = "") -> None:
    """No NaN and no inf anywhere; names the first bad position."""
    bad = ~torch.isfinite(actual.float() if actual.dtype in (torch.bfloat16, torch.float16) else actual)
    if bad.any():
        position = tuple(int(i) for i in bad.nonzero()[0])
        kind = "NaN" if torch.isnan(actual[position]) else "inf"
        pytest.fail(f"{what} contains {kind} (first at index {list(position)}; {int(bad.sum())} bad "
                    f"entries in all). {hint}".strip(), pytrace=False)


def check_tensor(value, shape: Sequence[int], what: str, *, dtype: Optional[torch.dtype] = None,
                 shape_hint: str = "", finite_hint: str = "") -> torch.Tensor:
    """Type, exact shape, optional dtype, then finiteness; returns the detached tensor."""
    actual = tensor_result(value, what)
    check_shape(actual, shape, what, shape_hint)
    if dtype is not None and actual.dtype != dtype:
        pytest.fail(f"{what} has dtype {actual.dtype}; expected {dtype}. Cast the result back to the "
                    "input's dtype at the end (`.to(hidden_states.dtype)`).", pytrace=False)
    check_finite(actual, what, finite_hint)
    return actual


# ---------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------

def check_close(actual: torch.Tensor, expected: torch.Tensor, what: str, *, atol: float, rtol: float = 0.0,
                hint: str = "", diagnose: Optional[Callable[[torch.Tensor], str]] = None) -> None:
    """Values within atol + rtol * |expected|, compared in float64 with identical shapes.

    On failure, reports the worst position with both numbers; ``diagnose(actual)`` may return a more
    precise explanation (e.g. "this is the unmasked mean") which replaces ``hint``.
    """
    check_shape(actual, expected.shape, what)
    a, e = actual.detach().to(torch.float64), expected.detach().to(torch.float64)
    excess = (a - e).abs() - (atol + rtol * e.abs())
    if (excess > 0).any():
        worst = tuple(int(i) for i in (excess == excess.max()).nonzero()[0])
        where = f" at index {list(worst)}" if worst else ""
        explanation = (diagnose(actual) if diagnose else "") or hint
        pytest.fail(
            f"{what} is wrong{where}: expected {e[worst].item():.6g}, got {a[worst].item():.6g} "
            f"(tolerance {atol:g} + {rtol:g}*|expected|; {int((excess > 0).sum())} of {e.numel()} entries "
            f"off). {explanation}".strip(),
            pytrace=False,
        )


def close_to(actual: torch.Tensor, candidate: torch.Tensor, tol: float = 1e-4) -> bool:
    """True when ``actual`` matches ``candidate`` (same shape, within tol): used to name a mistake."""
    if tuple(actual.shape) != tuple(candidate.shape):
        return False
    a, c = actual.detach().to(torch.float64), candidate.detach().to(torch.float64)
    if not torch.isfinite(a).all() or not torch.isfinite(c).all():
        return False
    return bool(((a - c).abs() <= tol * (1 + c.abs())).all())


def expect_value_error(call: Callable[[], object], what: str, why: str) -> None:
    """``call()`` must raise ValueError; any other outcome fails with a message that says which input.

    NotImplementedError is re-raised so that the stub message ("task ... is not implemented yet") wins.
    """
    try:
        result = call()
    except ValueError:
        return
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001 - we report whatever the student raised
        pytest.fail(f"{what} raised {type(exc).__name__}({str(exc)[:200]!r}); expected ValueError because "
                    f"{why}. Check the input up front and `raise ValueError(...)` with a clear message.",
                    pytrace=False)
    pytest.fail(f"{what} returned {_short(result)} instead of raising ValueError, but {why}. "
                "Check the input up front and `raise ValueError(...)` with a clear message.", pytrace=False)


def _short(value, limit: int = 120) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor of shape {list(value.shape)}"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
