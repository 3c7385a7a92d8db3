"""The assertions the public tests (bertlab/public_tests/) and the hidden suites (tests/hidden/)
share. Every failure says what was expected, what came back, and the likely mistake.

The order of checks is always the same: type, then exact shape (never broadcast), then NaN/inf, then
values, then the likely mistake (named from the table of known mistakes, bertlab/mistakes.py). A message
shows at most one expected number (at the worst position), never a whole expected array, never test
source and never a path of the kit: the grader shows the student only the message.

Nothing here knows the reference solution: expected values come from the test modules (oracles in the
public tests, the reference in the hidden suites). The code under test may be in this process or behind
the grading sandbox's proxy, so these helpers only look at plain results (tensors, numbers, lists),
never at the student's objects. A failure is ``pytest.fail`` raised here; the grader scores it as a
failed check (grader/bertlab_grader/grading/scoring.py knows this file).
"""

from __future__ import annotations

import math
import re
from numbers import Real
from typing import Callable, Mapping, Optional, Sequence

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from .errors import unfinished
from .mistakes import hint as mistake_hint
from .tasks import EXERCISE_FILES, EXERCISES


def fail(message: str):
    """Fail the current test with ``message`` (no traceback, no source: the message is the feedback)."""
    pytest.fail(message, pytrace=False)


def property_settings(max_examples: int):
    """Seeded Hypothesis settings shared by every property test.

    The same examples on every run and machine (derandomize); no example database written into the
    student's folder; no deadline (a remote, sandboxed implementation is slower per call); no shrink
    phase: the examples are small already, our messages explain the failure, and shrinking a test
    that fails on every input (a stub, a wrong formula) costs tens of seconds per test.
    """
    from hypothesis import HealthCheck, Phase, settings

    return settings(
        derandomize=True,
        database=None,
        deadline=None,
        max_examples=max_examples,
        phases=(Phase.explicit, Phase.generate),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def generator(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed`` (seeded inputs)."""
    return torch.Generator().manual_seed(seed)


def short(value, limit: int = 120) -> str:
    """A short description of a returned value for messages (never more than ``limit`` characters
    of its repr)."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)} and dtype {value.dtype}"
    if isinstance(value, np.ndarray):
        return f"a NumPy array of shape {list(value.shape)} and dtype {value.dtype}"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def first_line(exc: BaseException, limit: int = 160) -> str:
    """The first line of an exception's message (its type name when it has none), shortened."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "..."


# One frame of the student's traceback as the grading sandbox reports it (remote.StudentError):
# '  File "cka.py", line 12, in linear_cka', always a bare file name, never a folder.
_STUDENT_FRAME = re.compile(r'^\s*File "(?P<file>[^"/\\]+)", line (?P<line>\d+)', re.MULTILINE)


def raised_where(exc: BaseException) -> str:
    """`` in cka.py, line 12``: where in the student's files ``exc`` was raised, or ``""``.

    Only an exception that crossed the grading sandbox carries the frames of the student's own files
    (``student_traceback``); the innermost one is where it was raised. A frame of any other file (the
    kit, torch) is never named: the student must never see a kit path, and could not act on it."""
    frames = _STUDENT_FRAME.findall(str(getattr(exc, "student_traceback", "") or ""))
    frames = [(name, line) for name, line in frames if name in EXERCISE_FILES]
    return f" in {frames[-1][0]}, line {frames[-1][1]}" if frames else ""


def call_on_valid_input(call, what: str, why_valid: str, advice: str):
    """``call()`` on an input the docstring allows; a ValueError there is a wrong answer, said as such:
    "<what> raised ValueError (<its message>) in <file>, line <n>, but <why_valid>. <advice>"."""
    try:
        return call()
    except ValueError as exc:
        raised = f"({first_line(exc)}){raised_where(exc)}"
    # Failed outside the except block, so the student's exception is not chained onto the message.
    fail(f"{what} raised ValueError {raised}, but {why_valid}. {advice}")


# ---------------------------------------------------------------------------------------------
# A stub not implemented yet; exceptions that are not a wrong answer
# ---------------------------------------------------------------------------------------------

# Where to start when a task is still a stub (shown with the NotImplementedError): the registry's
# ``start`` of each task (bertlab/tasks.py).
TASK_START = {e.name: e.start for e in EXERCISES}


def not_implemented_message(test_task: Optional[str], exc: BaseException) -> str:
    """The message a student sees when a test reaches a stub that still raises NotImplementedError.

    test_task is the task marker of the test. A stub's NotImplementedYet says which task and function
    are missing (the task may be another one: siamese uses pooling); a plain NotImplementedError (the
    student's own) counts for the task under test, named after the function that raised it.
    """
    found = unfinished(exc) or exc
    text = str(found).strip()
    stub_task = getattr(found, "task", None)
    stub_task = stub_task if stub_task in TASK_START else test_task
    function = getattr(found, "function", None) or _raising_function(found)
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


# The exceptions a runner that calls the code under test in another process raises when it did not
# answer (bertlab_grader.sandbox.remote): recognised by name, so this module imports nothing of the grader.
_DID_NOT_FINISH = ("SubmissionTimeout", "SubmissionCrashed")


def did_not_finish(exc: BaseException) -> bool:
    """True when the code under test timed out or its process crashed (the grader scores those as
    timeout/error, never as a wrong answer)."""
    return type(exc).__name__ in _DID_NOT_FINISH


def is_harness_error(exc: BaseException) -> bool:
    """True for exceptions that must propagate untouched instead of becoming a wrong answer: a stub
    not implemented yet (its own message wins), or code under test that did not finish."""
    return isinstance(exc, NotImplementedError) or did_not_finish(exc)


# ---------------------------------------------------------------------------------------------
# Type, shape, finiteness
# ---------------------------------------------------------------------------------------------

def tensor_result(value, what: str) -> torch.Tensor:
    """Fail unless ``value`` is a torch.Tensor; return it detached (no autograd history)."""
    if not isinstance(value, torch.Tensor):
        got = short(value) if isinstance(value, np.ndarray) else f"{type(value).__name__} {short(value)}"
        fail(f"{what} should be a torch.Tensor; got {got}. Return a tensor (torch.as_tensor / torch.stack), "
             "not a list or NumPy array.")
    return value.detach()


def check_shape(actual: torch.Tensor, expected: Sequence[int], what: str, hint: str = "") -> None:
    """Exact shape equality: [3, 4] is not [3, 1, 4] and not [4, 3], whatever broadcasting would do."""
    if tuple(actual.shape) != tuple(expected):
        fail(f"{what} has shape {list(actual.shape)}; expected {list(expected)}. {hint}".strip())


def check_finite(actual: torch.Tensor, what: str, hint: str = "") -> None:
    """No NaN and no inf anywhere (floating-point results); names the first bad position."""
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


def python_float(value, what: str) -> float:
    """Fail unless ``value`` is a real Python number (an int or float; NumPy scalars cross as floats)."""
    if isinstance(value, bool) or not isinstance(value, (float, int)):
        fail(f"{what} should be a Python float; got {short(value)}. "
             "Convert at the end with `.item()` or `float(...)`.")
    return float(value)


# ---------------------------------------------------------------------------------------------
# Values, and naming the likely mistake
# ---------------------------------------------------------------------------------------------

def check_close(actual: torch.Tensor, expected: torch.Tensor, what: str, *, atol: float, rtol: float = 0.0,
                hint: str = "", diagnose: Optional[Callable[[torch.Tensor], str]] = None) -> None:
    """Exact shape, then values within atol + rtol * |expected|, compared in float64.

    NaN where the expected value is NaN counts as equal; NaN anywhere else is wrong. On failure the
    message gives the worst position with both numbers; ``diagnose(actual)`` may name the mistake
    (e.g. "this is the unmasked mean"), which replaces ``hint``.
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


def check_scalar(value: float, expected: float, what: str, *, atol: float, hint: str = "",
                 diagnose: Optional[Callable[[], str]] = None) -> None:
    """A number within ``atol`` of ``expected``; nan must be nan and only where nan is expected.

    ``diagnose()`` is worked out only on a failure (it may call the code under test again, on inputs
    that tell one mistake from another); what it returns replaces ``hint`` when it is not empty."""
    def explanation() -> str:
        return ((diagnose() if diagnose else "") or hint).strip()

    if math.isnan(expected):
        if not math.isnan(value):
            fail(f"{what} should be nan; got {value:.6g}. {explanation()}".strip())
        return
    if math.isnan(value):
        fail(f"{what} is nan; expected {expected:.6g}. {explanation()}".strip())
    if abs(value - expected) > atol:
        fail(f"{what} is {value:.10g}; expected {expected:.10g} (tolerance {atol:g}). {explanation()}".strip())


def _as_tensor(value):
    if isinstance(value, Real) and not isinstance(value, bool):
        return torch.tensor(float(value), dtype=torch.float64)
    return value


def close(actual, candidate, tol: float = 1e-5) -> bool:
    """Same shape and within ``tol`` (relative to 1 + |candidate|), NaN exactly where the candidate has
    NaN: used to name a mistake, never to judge a result. Numbers compare as 0-d tensors; anything
    else that is not a tensor is never close."""
    actual, candidate = _as_tensor(actual), _as_tensor(candidate)
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


def name_mistake(actual, candidates: Mapping[str, object], tol: float = 1e-5) -> str:
    """The teaching text (bertlab/mistakes.py) of the one mistake whose result ``actual`` matches, or ''.

    candidates: {mistake id: what that mistake would have returned}; a candidate that is None (it could
    not be computed for this input) is skipped. A message that says "your code does X" must be one a
    check confirmed, so nothing is named when the value cannot tell: when ``actual`` holds a NaN (a NaN
    "matches" every formula that also divides by zero there), or when it matches two mistakes whose
    hints differ (this input does not tell them apart).
    """
    as_tensor = _as_tensor(actual)
    if isinstance(as_tensor, torch.Tensor) and as_tensor.is_floating_point() and bool(torch.isnan(as_tensor).any()):
        return ""
    matched = [mistake_id for mistake_id, candidate in candidates.items()
               if candidate is not None and close(actual, candidate, tol)]
    texts = {mistake_hint(mistake_id) for mistake_id in matched}
    return texts.pop() if len(texts) == 1 else ""


def precision_diagnosis(similarity: Callable[[object, object], object], X, Y, expected: float, atol: float,
                        what: str = "your linear_cka") -> str:
    """'' unless a rerun confirms that only the precision is wrong, else the sentence that says so.

    similarity(X, Y): the code under test (e.g. ``impl.cka.linear_cka``); X [n, d1], Y [n, d2] arrays
    or tensors of any dtype, on which it returned a wrong value whose right value is ``expected`` (a
    similarity that does not change when a column is shifted, such as CKA). It is called again on
    float64 copies of X and Y, then on float64 copies whose column means were subtracted beforehand
    (the same right value, with nothing large left to round). Right on the first: the code computes in
    the inputs' own dtype. Right only on the second: its arithmetic loses the small differences around
    a large mean (float32 somewhere). Off on float64 copies by float32 round-off only (FLOAT32_SCALE):
    float32 somewhere, or a small constant added. Anything else, an exception included: '' (no cause
    confirmed).
    Call it only after the known formula mistakes were ruled out: a code that never centers is right
    on centered copies too.
    """
    def rerun(x, y) -> float:
        try:
            value = float(similarity(x, y))
        except Exception as exc:  # noqa: BLE001 - a rerun that fails confirms nothing
            if is_harness_error(exc):
                raise
            return math.nan
        return value

    x64 = torch.as_tensor(np.array(X, copy=True) if isinstance(X, np.ndarray) else X).detach().to(torch.float64).clone()
    y64 = torch.as_tensor(np.array(Y, copy=True) if isinstance(Y, np.ndarray) else Y).detach().to(torch.float64).clone()
    as_float64 = rerun(x64.clone(), y64.clone())
    if abs(as_float64 - expected) <= atol:
        dtypes = sorted({str(getattr(v, "dtype", "")).replace("torch.", "") for v in (X, Y)})
        return (f"{what} returns the right value on float64 copies of these ({', '.join(dtypes)}) inputs, so the "
                "formula is right and the arithmetic is not done in float64: convert X and Y with "
                "`.to(torch.float64)` before any other step, as the docstring asks.")
    if abs(rerun(x64 - x64.mean(dim=0), y64 - y64.mean(dim=0)) - expected) <= atol:
        return (f"{what} returns the right value on float64 copies of these inputs whose column means were "
                "subtracted beforehand, but not on float64 copies as given: the formula is right and some step "
                "runs in lower precision (float32 loses the small differences around a large mean). Keep every "
                "step in float64, from the conversion of X and Y to the final division.")
    if abs(as_float64 - expected) <= FLOAT32_SCALE * max(abs(expected), 1e-3):
        return (f"On float64 copies of these inputs {what} is off by {abs(as_float64 - expected):.2g}, about the "
                "round-off of float32 arithmetic and far less than the formula mistakes we know: some step runs in float32 "
                "(a .float(), a tensor created without dtype=torch.float64) or adds a small constant. Keep every "
                "step in float64.")
    return ""


#: How far (relative) a value computed through float32 arithmetic may land from the exact one on a
#: well-conditioned input: a few hundred float32 ulps. Every formula mistake of the bank moves CKA by
#: far more (1e-3 relative or more, measured on the public and hidden inputs).
FLOAT32_SCALE = 1e-5


def formula_recheck(first_step: str) -> str:
    """The fallback when no cause is confirmed: the symptom is in the message already (input, expected,
    got); this names the step to recheck first and no cause."""
    return f"No known mistake gives this value. Recheck the formula on this input step by step, starting with {first_step}."


def _last_real_token(actual: torch.Tensor, h: torch.Tensor, mask: torch.Tensor, expected: torch.Tensor,
                     tol: float) -> Optional[torch.Tensor]:
    """What pool_last_token returns: each row's last real token [B, D] (float64). A row with no real
    token has none, so whatever ``actual`` holds there counts as matching. None when ``actual`` is not
    [B, D], or when on the rows with tokens the last token IS the mean (one-token rows): then the value
    cannot tell this mistake from the right answer."""
    B, T, D = h.shape
    counts = (mask != 0).sum(dim=1)
    real = counts > 0
    if tuple(actual.shape) != (B, D) or not bool(real.any()):
        return None
    last = h[torch.arange(B), (counts - 1).clamp(min=0)]
    if close(last[real], expected[real], tol):
        return None
    return torch.where(real[:, None], last, actual.detach().to(torch.float64))


def name_pooling_mistake(actual: torch.Tensor, hidden: torch.Tensor, mask: torch.Tensor, expected: torch.Tensor,
                         tol: float) -> str:
    """The teaching text of the classic masked_mean_pool mistake whose formula gives ``actual``, or ''.

    hidden [B, T, D], mask [B, T], expected [B, D] (the right mean). A mistake whose formula gives the
    right answer on this input (the unmasked mean of a batch without padding, the first token of
    one-token rows) is never named: its value says nothing about the code.
    """
    h = hidden.to(torch.float64)
    m = (mask != 0).to(torch.float64).unsqueeze(-1)  # [B, T, 1]
    masked_sum = (h * m).sum(dim=1)
    candidates = {
        "pool_mask_ignored": h.mean(dim=1),
        "pool_divide_by_length": masked_sum / hidden.shape[1],
        "pool_sum": masked_sum,
        "pool_cls": h[:, 0],
        "pool_last_token": _last_real_token(actual, h, mask, expected, tol),
        "pool_inverted_mask": (h * (1 - m)).sum(dim=1) / (1 - m).sum(dim=1).clamp(min=1),
        "pool_constant": torch.zeros_like(expected),
        "pool_right_padding_assumed": _first_positions_mean(h, mask),
    }
    distinct = {name: c for name, c in candidates.items() if c is not None and not close(c, expected, tol)}
    return name_mistake(actual, distinct, tol=tol)


def _first_positions_mean(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, D]: the mean of each row's first ``count`` positions, count = its number of real tokens:
    the masked mean only where the padding is all on the right."""
    counts = (mask != 0).sum(dim=1, keepdim=True)  # [B, 1]
    first = (torch.arange(h.shape[1])[None, :] < counts).to(h.dtype).unsqueeze(-1)  # [B, T, 1]
    return (h * first).sum(dim=1) / counts.clamp(min=1).to(h.dtype)


# ---------------------------------------------------------------------------------------------
# Inputs the code under test must leave alone
# ---------------------------------------------------------------------------------------------

def _how_changed(before: torch.Tensor, after: torch.Tensor) -> str:
    """What an in-place change did, as far as the two tensors show it ('' when no pattern fits).
    before, after: float64 tensors of the same shape, at least one entry different."""
    rows_b = before.reshape(before.shape[0], -1) if before.dim() > 1 else before.reshape(1, -1)
    rows_a = after.reshape(rows_b.shape)
    if before.dim() >= 2 and bool(torch.allclose(after.mean(dim=0), torch.zeros_like(after.mean(dim=0)), atol=1e-6)) \
            and close(after, before - before.mean(dim=0), 1e-6):
        return "its column means were subtracted in place (`x -= x.mean(0)`, `.sub_(...)`)"
    shift = rows_a - rows_b
    if close(shift, shift[:, :1].expand_as(shift), 1e-9) or close(shift, shift[:1].expand_as(shift), 1e-9):
        return "a number was subtracted or added in place (`-=`, `+=`, `.sub_`, `.add_`)"
    zeroed = (rows_a == 0) & (rows_b != 0)
    if bool(zeroed.any()) and bool(torch.equal(rows_a[~zeroed], rows_b[~zeroed])):
        return "some entries were set to 0 in place (`*= mask`, `masked_fill_`, `x[...] = 0`)"
    nonzero = rows_b != 0
    if bool(nonzero.any()) and bool(torch.equal(rows_a[~nonzero], rows_b[~nonzero])):
        ratio = torch.where(nonzero, rows_a / torch.where(nonzero, rows_b, torch.ones_like(rows_b)), torch.nan)
        per_row = torch.nanmean(ratio, dim=1, keepdim=True)
        if close(torch.nan_to_num(ratio, nan=0.0), torch.where(nonzero, per_row.expand_as(ratio), 0.0), 1e-6):
            norms = rows_a.norm(dim=1)
            if close(norms[rows_b.norm(dim=1) > 0], torch.ones_like(norms[rows_b.norm(dim=1) > 0]), 1e-5):
                return "its rows were divided by their norms in place (`x /= x.norm(dim=1, keepdim=True)`, `.div_`)"
            return "it was divided or multiplied in place (`/=`, `*=`, `.div_`, `.mul_`)"
    return ""


def describe_change(name: str, before, after) -> str:
    """'' when ``after`` still equals ``before``; otherwise which argument changed and how, e.g.
    "the caller's mask changed: 7 of 18 entries differ (at [0, 1] it was 1, now 0.1667); its rows
    were divided ... in place". before: the test's own untouched copy; after: the object the code
    under test was given (a tensor or a NumPy array; a value of another kind compares by ==)."""
    if isinstance(before, np.ndarray):
        before, after = torch.from_numpy(np.array(before)), torch.from_numpy(np.array(after))
    if not isinstance(before, torch.Tensor):
        return "" if before == after else f"the caller's {name} changed."
    if isinstance(after, torch.Tensor) and after.shape == before.shape and after.dtype == before.dtype \
            and torch.equal(after, before):
        return ""
    if not isinstance(after, torch.Tensor) or after.shape != before.shape:
        return f"the caller's {name} changed shape in place (from {list(before.shape)})."
    if after.dtype != before.dtype:
        return f"the caller's {name} changed dtype in place (from {before.dtype} to {after.dtype})."
    b, a = before.detach().to(torch.float64), after.detach().to(torch.float64)
    differ = (a != b) & ~(torch.isnan(a) & torch.isnan(b))
    where = [int(i) for i in differ.nonzero()[0]] if differ.any() else []
    first = (f" (at {where} it was {b[tuple(where)].item():.4g}, now {a[tuple(where)].item():.4g})" if where else "")
    how = _how_changed(b, a) if b.dim() >= 1 and b.numel() else ""
    return (f"the caller's {name} changed: {int(differ.sum())} of {b.numel()} entries differ{first}"
            f"{'; ' + how if how else ''}.")


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------

def expect_value_error(call: Callable[[], object], what: str, why: str) -> None:
    """``call()`` must raise ValueError; any other outcome fails with a message that says which input.

    A stub's NotImplementedError (its own message wins) and a timeout or crash of the code under test
    propagate untouched (``is_harness_error``).
    """
    try:
        result = call()
    except ValueError:
        return
    except Exception as exc:  # noqa: BLE001 - we report whatever the code under test raised
        if is_harness_error(exc):
            raise
        name = getattr(exc, "type_name", None) or type(exc).__name__
        fail(f"{what} raised {name} ({first_line(exc)}){raised_where(exc)}; expected ValueError because {why}. "
             "Check the input up front and `raise ValueError(...)` with a clear message.")
    fail(f"{what} returned {short(result)} instead of raising ValueError, but {why}. "
         "Check the input up front and `raise ValueError(...)` with a clear message.")


# ---- semantic search: which answers are right (both suites use the same rule)

def true_cosines(queries: torch.Tensor, corpus: torch.Tensor) -> torch.Tensor:
    """[Q, N] float64 cosines of queries [Q, D] (or one query [D]) against corpus [N, D]."""
    q = queries if queries.dim() == 2 else queries[None]
    return F.normalize(q.double(), dim=1) @ F.normalize(corpus.double(), dim=1).T


def index_problem(indices: torch.Tensor, expected_indices: torch.Tensor, cosines: torch.Tensor, *,
                  atol: float, rtol: float, exact_ties: bool) -> str:
    """Why ``indices`` [Q, k] are not a right answer ('' when they are).

    cosines: [Q, N] float64 true cosines. exact_ties: the data make equal cosines bit-identical in every
    implementation (then ties are part of the answer: ascending index, also at the k-th place, so the
    indices must equal the reference's). Otherwise two hits whose true cosines differ by round-off may
    come back in either order, or either one at the k-th place: an index is right when its true cosine
    is the expected one at its rank, within the tolerance of the score check.
    """
    if torch.equal(indices, expected_indices):
        return ""
    n_corpus = cosines.shape[1]
    if exact_ties:
        row, col = [int(i) for i in (indices != expected_indices).nonzero()[0]]
        return (f"indices differ at [{row}, {col}]: expected corpus index {int(expected_indices[row, col])}, "
                f"got {int(indices[row, col])}.")
    if ((indices < 0) | (indices >= n_corpus)).any():
        row, col = [int(i) for i in ((indices < 0) | (indices >= n_corpus)).nonzero()[0]]
        return f"index [{row}, {col}] is {int(indices[row, col])}, outside the corpus (0 to {n_corpus - 1})."
    for row in range(indices.shape[0]):
        if len(set(indices[row].tolist())) != indices.shape[1]:
            return f"row {row} returns a corpus index twice: each of the k hits must be a different corpus row."
    wanted = torch.sort(cosines, dim=1, descending=True).values[:, : indices.shape[1]]
    got = cosines.gather(1, indices)
    off = (got - wanted).abs() > atol + rtol * wanted.abs()
    if off.any():
        row, col = [int(i) for i in off.nonzero()[0]]
        return (f"indices differ at [{row}, {col}]: expected corpus index {int(expected_indices[row, col])} "
                f"(or any row with the same cosine up to round-off), got {int(indices[row, col])}, whose cosine "
                f"is {float(got[row, col]):.6g}, not {float(wanted[row, col]):.6g}.")
    return ""


# ---- tolerances: how far a correct answer may land from the exact one (both suites read these)

#: CKA on well-conditioned inputs (n <= 64, column offsets a few times the spread; the public tests'):
#: any correct float64 form (d x d or n x n Gram, a centering matrix, another summation order) lands
#: well under 1e-12 from the exact value; these leave a wide margin and stay orders of magnitude below
#: the smallest change a known mistake makes (float32 arithmetic included: about 1e-7).
CKA_ATOL, CKA_RTOL = 1e-10, 1e-8
#: CKA on any input the hidden suite uses, ill-conditioned ones included (column offset / spread 1e5):
#: the least accurate correct float64 form, the textbook HSIC one with H = I - 11^T/n, loses about
#: eps * (offset / spread)^2, 5e-8 there. float32 arithmetic misses it on those inputs.
CKA_ILL_CONDITIONED_ATOL = 1e-6
#: A correct float64 CKA on a range bound, a diagonal or the two halves of a symmetric matrix: a few
#: ulps times the number of summed terms (below 1e-12). The formula written literally, with no clamp,
#: may return 1.0000000000000002: round-off, not a mistake.
CKA_ROUND_OFF = 1e-9


def working_eps(dtype: torch.dtype) -> float:
    """Machine epsilon of the coarsest precision a correct implementation may compute in for ``dtype``.

    The docstring fixes the output dtype, not the working precision: half-precision input may be summed
    in float32 or in its own dtype, and float64 input may be summed in float32 and cast back (the
    lesson's "accumulate in float32" recipe); float32 is never required to be exceeded.
    """
    return max(torch.finfo(dtype).eps, torch.finfo(torch.float32).eps)


def pooling_round_off(dtype: torch.dtype, longest: int, scale: float) -> tuple[float, float]:
    """(atol, name_tol) for a masked mean of rows of at most ``longest`` real tokens, in ``dtype``,
    whose entries' exact masked mean of absolute values is at most ``scale``.

    atol: how far a correct masked mean may land from the exact (float64) mean. Summing n values with
    unit round-off u = eps / 2 errs by about 0.3 * sqrt(n) * u * mean|x| per entry (a random walk; a
    Python loop that accumulates float16 rounds at every token, torch's sum/einsum/bmm accumulate half
    precision in float32 and round once), and the count, the division and the cast back add about one
    rounding each. (4 + sqrt(n)) * eps * max mean|x| is over 5 standard deviations above that walk
    (measured: a float16 loop over 300 tokens is off by at most 6 eps * mean|x|), while every known
    mistake is off by a whole token's worth of value or more.
    name_tol: the relative tolerance within which a result "is" a mistake's formula (the mistake's own
    output carries the same round-off).
    """
    relative = (4 + math.sqrt(longest)) * working_eps(dtype)
    return relative * scale, max(relative, 1e-4)
