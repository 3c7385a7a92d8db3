"""Hidden suite, task cka: linear_cka and cka_matrix.

Expected values come from the reference (``reference.cka``) on the same inputs. Inputs are plain
tensors and arrays built here, plus layer representations computed in the trusted process with the
REFERENCE pooling (reference_data.py), so a pooling mistake never costs cka points.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bertlab.assertions import CKA_ILL_CONDITIONED_ATOL, CKA_ROUND_OFF  # the tolerances both suites share
from bertlab.assertions import call_on_valid_input
from bertlab.assertions import (check_close, check_scalar, check_shape, check_tensor, describe_change,
                            expect_value_error, fail, formula_recheck, generator, name_mistake,
                            precision_diagnosis, python_float, tensor_result)
from bertlab.mistakes import hint as mistake_hint

from bertlab_grader.hidden import reference_data as data

pytestmark = pytest.mark.cka

# Tolerances (bertlab/assertions.py says why): any input here may be ill-conditioned.
ATOL, ROUND_OFF = CKA_ILL_CONDITIONED_ATOL, CKA_ROUND_OFF


# ---------------------------------------------------------------------------------------------
# Inputs and the classic mistakes (to name them in messages)
# ---------------------------------------------------------------------------------------------

def make_pair(seed: int, n: int, d1: int, d2: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded float32 X [n, d1], Y [n, d2] sharing some linear structure, with non-zero column
    means and unequal column scales (so a missing centering or normalisation shows)."""
    g = generator(seed)
    X = torch.randn(n, d1, generator=g) * (0.5 + 2.5 * torch.rand(d1, generator=g)) + 4 * torch.randn(d1, generator=g)
    Y = 0.6 * (X @ torch.randn(d1, d2, generator=g)) / math.sqrt(d1) + torch.randn(n, d2, generator=g)
    Y = Y + 4 * torch.randn(d2, generator=g)
    return X.float(), Y.float()


def _cka_variant(X, Y, *, center: str = "columns", square: bool = True, normaliser: str = "gram") -> float:
    X = torch.as_tensor(X).double()
    Y = torch.as_tensor(Y).double()
    if center == "columns":
        X, Y = X - X.mean(0), Y - Y.mean(0)
    elif center == "rows":
        X, Y = X - X.mean(1, keepdim=True), Y - Y.mean(1, keepdim=True)
    cross = torch.linalg.norm(Y.T @ X) ** (2 if square else 1)
    if normaliser == "gram":
        denominator = torch.linalg.norm(X.T @ X) * torch.linalg.norm(Y.T @ Y)
    else:  # the squared Frobenius norms of the data, a common slip
        denominator = torch.linalg.norm(X) ** 2 * torch.linalg.norm(Y) ** 2
    return float(cross / denominator)


#: The fallback when no known formula gives the value and no rerun confirms a cause: the symptom is in
#: the message (input, expected, got); this names the first step to recheck, and no cause.
RECHECK = formula_recheck("the centering: subtract each column's mean from X and from Y (dim=0)")


def diagnose_cka(value: float, X, Y, otherwise: str = RECHECK, *, impl=None, expected: float = math.nan,
                 atol: float = 0.0) -> str:
    """Why linear_cka gave ``value`` on (X [n, d1], Y [n, d2]), said only where a check confirmed it:
    the teaching text of the one classic mistake (bertlab/mistakes.py) whose formula gives it; else,
    with ``impl`` and the right ``expected`` value, what a rerun on float64 copies shows about the
    precision (bertlab.assertions.precision_diagnosis); else ``otherwise`` (no cause named)."""
    known = name_mistake(value, {
        "cka_no_centering": _cka_variant(X, Y, center="none"),
        "cka_center_rows": _cka_variant(X, Y, center="rows"),
        "cka_no_square": _cka_variant(X, Y, square=False),
        "cka_wrong_normaliser": _cka_variant(X, Y, normaliser="data"),
    }, tol=1e-6)
    if known or impl is None or math.isnan(expected):
        return known or otherwise
    rerun = precision_diagnosis(lambda x, y: impl.cka.linear_cka(x, y), X, Y, expected, atol)
    return rerun or otherwise


def student_cka(impl, X, Y, what: str):
    """linear_cka on copies of a valid input (X [n, d1], Y [n, d2], same n >= 2), returned as is (its
    type has its own test). A ValueError here is a wrong answer with its own message: valid input must
    not be rejected."""
    return call_on_valid_input(lambda: impl.cka.linear_cka(_copy(X), _copy(Y)), what,
                               "this input is valid: both are 2-D with the same number of rows n >= 2",
                               "Raise ValueError only for the cases the docstring lists.")


def _copy(value):
    # In process, the code under test gets its own copy: a mistake that writes into its input must
    # not corrupt the reference's input (through the sandbox, arguments are copies anyway).
    return value.clone() if isinstance(value, torch.Tensor) else np.array(value, copy=True)


def check_cka_value(impl, reference, X, Y, what: str, atol: float = ATOL) -> float:
    value = float(student_cka(impl, X, Y, what))  # the type has its own test
    expected = reference.cka.linear_cka(X, Y)
    check_scalar(value, expected, what, atol=atol,
                 diagnose=lambda: diagnose_cka(value, X, Y, impl=impl, expected=expected, atol=atol))
    return value


# ---------------------------------------------------------------------------------------------
# linear_cka
# ---------------------------------------------------------------------------------------------

@pytest.mark.points(3)
def test_linear_cka_matches_reference(impl, reference):
    # n > d (the d x d form is natural), n < d (the n x n Gram form is), square, and the minimum n = 2.
    for seed, n, d1, d2 in [(0, 40, 8, 5), (1, 10, 30, 20), (2, 64, 64, 64), (3, 2, 3, 1), (4, 300, 20, 40)]:
        X, Y = make_pair(seed, n, d1, d2)
        check_cka_value(impl, reference, X, Y, f"linear_cka(X [{n}, {d1}], Y [{n}, {d2}])")


@pytest.mark.points(1)
def test_linear_cka_returns_python_float(impl, reference):
    X, Y = make_pair(10, 20, 6, 4)
    value = python_float(student_cka(impl, X, Y, "linear_cka(X, Y)"), "linear_cka(X, Y)")
    if not -ROUND_OFF <= value <= 1.0 + ROUND_OFF:
        fail(f"linear_cka(X, Y) = {value:.10g} is outside [0, 1] by more than round-off; CKA is a "
             f"normalised similarity. {diagnose_cka(value, X, Y)}")
    # The type counts only with the right value (a constant float is a float too).
    expected = reference.cka.linear_cka(X, Y)
    check_scalar(value, expected, "linear_cka(X, Y)", atol=ATOL,
                 diagnose=lambda: diagnose_cka(value, X, Y, impl=impl, expected=expected, atol=ATOL))


@pytest.mark.points(2)
def test_linear_cka_identity_and_symmetry(impl, reference):
    X, Y = make_pair(11, 30, 7, 9)
    self_value = float(student_cka(impl, X, X, "linear_cka(X, X)"))
    check_scalar(self_value, 1.0, "linear_cka(X, X)", atol=ROUND_OFF,
                 hint="A representation is perfectly similar to itself; check the normalisation.")
    forward = float(student_cka(impl, X, Y, "linear_cka(X, Y)"))
    backward = float(student_cka(impl, Y, X, "linear_cka(Y, X)"))
    check_scalar(backward, forward, "linear_cka(Y, X) (should equal linear_cka(X, Y))", atol=ROUND_OFF,
                 hint="CKA is symmetric: ||Yc^T Xc|| = ||Xc^T Yc||, and the denominator is a product.")
    check_cka_value(impl, reference, X, Y, "linear_cka(X, Y)")


@pytest.mark.points(2)
def test_linear_cka_invariances(impl, reference):
    X, Y = make_pair(12, 50, 6, 5)
    check_cka_value(impl, reference, X, Y, "linear_cka(X, Y)")
    g = generator(112)
    q, r = torch.linalg.qr(torch.randn(6, 6, generator=g, dtype=torch.float64))
    rotation = (q * torch.sign(torch.diagonal(r))).float()
    cases = {
        "an orthogonal rotation of X": X @ rotation,
        "X scaled by 3.7": X * 3.7,
        "X shifted by a constant per column": X + 5.0 * torch.randn(6, generator=g),
    }
    for what, transformed in cases.items():
        # Compared with the reference on the same (float32) transformed input: the rotation and the shift
        # are rounded to float32, which moves the true CKA by about 1e-7; that is not the student's error.
        value = float(student_cka(impl, transformed, Y, f"linear_cka of {what} with Y"))
        check_scalar(value, reference.cka.linear_cka(transformed, Y), f"linear_cka of {what} with Y", atol=ATOL,
                     hint=diagnose_cka(value, transformed, Y, otherwise="CKA must not change under rotations, "
                                       "uniform scaling or shifts of either input."))
    stretched = X * torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 12.0])
    check_cka_value(impl, reference, stretched, Y, "linear_cka of X with one feature stretched 12x")


@pytest.mark.points(2)
def test_linear_cka_numpy_inputs(impl, reference):
    X, Y = make_pair(13, 25, 5, 8)
    cases = {
        "NumPy float64 X and Y": (X.double().numpy(), Y.double().numpy()),
        "NumPy float32 X and Y": (X.numpy(), Y.numpy()),
        "a NumPy X and a tensor Y": (X.double().numpy(), Y),
    }
    for what, (x, y) in cases.items():
        try:
            value = float(student_cka(impl, x, y, f"linear_cka with {what}"))
        except (AttributeError, TypeError) as exc:
            fail(f"linear_cka with {what} raised {type(exc).__name__}: {exc}. Convert first with "
                 "torch.as_tensor(X) (it accepts arrays and tensors alike).")
        expected = reference.cka.linear_cka(x, y)
        check_scalar(value, expected, f"linear_cka with {what}", atol=ATOL,
                     diagnose=lambda: diagnose_cka(value, x, y, impl=impl, expected=expected, atol=ATOL))


@pytest.mark.points(2)
def test_linear_cka_low_precision_inputs(impl, reference):
    # float16 products overflow above 65504 and bfloat16 keeps 3 significant digits: both must be
    # converted to float64 before any arithmetic.
    g = generator(14)
    X = torch.randn(128, 16, generator=g) * 20 + 5
    Y = X @ torch.randn(16, 8, generator=g) + torch.randn(128, 8, generator=g) * 30
    for dtype in (torch.float16, torch.bfloat16):
        x, y = X.to(dtype), Y.to(dtype)
        value = float(student_cka(impl, x, y, f"linear_cka of {dtype} inputs"))
        expected = reference.cka.linear_cka(x, y)
        check_scalar(value, expected, f"linear_cka of {dtype} inputs", atol=ATOL,
                     diagnose=lambda: diagnose_cka(value, x, y, impl=impl, expected=expected, atol=ATOL))


@pytest.mark.points(1)
def test_linear_cka_ill_conditioned_float32(impl, reference):
    # Large column offsets, small spread: float32 gets this about 3e-5 wrong; float64 (even through
    # the Gram form with a centering matrix) within 1e-7.
    g = generator(15)
    X = (torch.randn(200, 10, generator=g) * 0.1 + 1e4).float()
    Y = ((X.double() - 1e4) @ torch.randn(10, 6, generator=g, dtype=torch.float64)
         + torch.randn(200, 6, generator=g, dtype=torch.float64) * 0.05 + 3e4).float()
    value = float(student_cka(impl, X, Y, "linear_cka of float32 data with large offsets"))
    expected = reference.cka.linear_cka(X, Y)
    check_scalar(value, expected, "linear_cka of float32 data with large offsets", atol=ATOL,
                 diagnose=lambda: diagnose_cka(value, X, Y, impl=impl, expected=expected, atol=ATOL))


@pytest.mark.points(1)
def test_linear_cka_zero_variance_is_nan(impl, reference):
    # Every row the same vector (like BERT's layer-0 [CLS]): CKA is 0/0, documented as nan. float64
    # rows leave round-off after centering, so a missing check gives an arbitrary number instead.
    g = generator(16)
    constant = torch.randn(12, generator=g, dtype=torch.float64).repeat(7, 1)
    Y = torch.randn(7, 4, generator=g, dtype=torch.float64)
    # nan counts only next to the right number where CKA is defined (always returning nan is wrong).
    check_cka_value(impl, reference, torch.randn(7, 12, generator=g, dtype=torch.float64), Y,
                    "linear_cka(X [7, 12], Y [7, 4]) (both with variance)")
    for what, (x, y) in {"linear_cka(constant X, Y)": (constant, Y),
                         "linear_cka(Y, constant X)": (Y, constant)}.items():
        value = float(student_cka(impl, x, y, what))
        check_scalar(value, reference.cka.linear_cka(x, y), what, atol=0.0,
                     hint="A representation whose rows are all equal has no variance: CKA is undefined "
                          "there and the docstring says to return nan. Test the centered norm against "
                          "a small fraction of the raw norm (round-off is not variance).")


@pytest.mark.points(2)
def test_linear_cka_rejects_bad_shapes(impl, reference):
    X, Y = make_pair(17, 10, 4, 3)
    # Rejecting bad shapes counts only next to the right answer on good ones (raising ValueError for
    # everything rejects them too).
    check_cka_value(impl, reference, X, Y, "linear_cka(X [10, 4], Y [10, 3]) (valid input)")
    expect_value_error(lambda: impl.cka.linear_cka(X[:, 0].clone(), Y.clone()),
                       "linear_cka(X of shape [10], Y [10, 3])", "X is 1-D, not [n, d]")
    expect_value_error(lambda: impl.cka.linear_cka(X.reshape(2, 5, 4).clone(), Y.clone()),
                       "linear_cka(X [2, 5, 4], Y [10, 3])", "X is 3-D (token states must be pooled first)")
    expect_value_error(lambda: impl.cka.linear_cka(X.clone(), Y[:9].clone()),
                       "linear_cka(X [10, 4], Y [9, 3])", "X and Y describe different numbers of examples")
    expect_value_error(lambda: impl.cka.linear_cka(X[:1].clone(), Y[:1].clone()),
                       "linear_cka(X [1, 4], Y [1, 3])", "one example cannot be centered (n < 2)")


@pytest.mark.points(1)
def test_linear_cka_leaves_inputs_unchanged(impl, reference):
    X, Y = make_pair(18, 15, 5, 5)
    x, y = X.double(), Y.double().numpy()  # float64: a conversion would return the input itself
    x_before, y_before = x.clone(), y.copy()
    result = impl.cka.linear_cka(x, y)
    changed = describe_change("X (a float64 tensor)", x_before, x)
    if changed:
        fail(f"linear_cka(X, Y) changed its input X in place: {changed} The caller's data are not yours to "
             "change: center a copy, `Xc = X - X.mean(dim=0, keepdim=True)`.")
    changed = describe_change("Y (a float64 NumPy array)", y_before, y)
    if changed:
        fail(f"linear_cka(X, Y) changed its input Y in place: {changed} torch.as_tensor shares a NumPy "
             "array's memory, so an in-place step on the tensor changes the caller's array. Center a copy.")
    # The point is for a right answer that also leaves the inputs alone: doing nothing earns nothing.
    value = python_float(result, "linear_cka(X, Y)")
    expected = reference.cka.linear_cka(x_before.clone(), y_before.copy())
    check_scalar(value, expected, "linear_cka(X, Y) (float64 tensor and NumPy inputs)", atol=ATOL,
                 diagnose=lambda: diagnose_cka(value, x_before.clone(), y_before.copy(), impl=impl,
                                               expected=expected, atol=ATOL))


# ---------------------------------------------------------------------------------------------
# cka_matrix
# ---------------------------------------------------------------------------------------------

def _mixed_reps(seed: int, n: int = 20, widths=(3, 7, 12, 30)) -> list[torch.Tensor]:
    base, _ = make_pair(seed, n, 6, 1)
    g = generator(seed + 1000)
    return [base @ torch.randn(6, d, generator=g) + (0.3 + i) * torch.randn(n, d, generator=g)
            for i, d in enumerate(widths)]


def check_entry_is_linear_cka(impl, reference, reps, i: int, j: int, what: str) -> None:
    """cka_matrix's contract is M[i, j] = linear_cka(reps[i], reps[j]): linear_cka must give the right
    value on one defined pair of the same inputs. So the matrix's points, like every cka point, need a
    right linear_cka too (one that returns a constant, or always raises, earns nothing in cka)."""
    check_cka_value(impl, reference, reps[i], reps[j],
                    f"linear_cka(reps[{i}], reps[{j}]) (the entry [{i}, {j}] of {what})")


def check_matrix(impl, reference, reps, what: str) -> torch.Tensor:
    L = len(reps)
    actual = check_tensor(impl.cka.cka_matrix([r.clone() for r in reps]), (L, L), what,
                          shape_hint="One row and one column per representation.",
                          finite_hint="Only a zero-variance representation may give nan.")
    return _check_matrix_values(actual, reference.cka.cka_matrix(reps), what)


def _check_matrix_values(actual, expected, what):
    if actual.dtype != torch.float64:
        fail(f"{what} has dtype {actual.dtype}; expected torch.float64 (create it with "
             "dtype=torch.float64: CKA values are computed in float64, keep them).")
    if not torch.allclose(actual, actual.T, rtol=0.0, atol=ROUND_OFF, equal_nan=True):
        fail(f"{what} is not symmetric: M[i, j] must equal M[j, i] (fill both halves).")
    check_close(actual, expected, what, atol=ATOL,
                hint="Entry [i, j] must be linear_cka(reps[i], reps[j]), with 1.0 on the diagonal.")
    return actual


@pytest.mark.points(2)
def test_cka_matrix_matches_reference(impl, reference):
    reps, what = _mixed_reps(20), "cka_matrix of 4 representations of widths 3, 7, 12, 30"
    check_matrix(impl, reference, reps, what)
    check_entry_is_linear_cka(impl, reference, reps, 1, 3, what)
    # The docstring: the inputs are never modified. In float64, tensors and a NumPy array (the docstring
    # takes both: torch.as_tensor, even with dtype=torch.float64, then shares the caller's memory, so
    # centering in place would change it), and the matrix must still be right. Expected values come
    # from this test's own untouched copies.
    reps64 = [r.double() for r in reps]
    reps64[2] = reps64[2].numpy()
    before = [r.copy() if isinstance(r, np.ndarray) else r.clone() for r in reps64]
    _check_matrix_values(tensor_result(impl.cka.cka_matrix(reps64), what), reference.cka.cka_matrix(before),
                         f"{what} (float64 tensors and a float64 NumPy array reps[2])")
    changes = [describe_change(f"reps[{i}]" + (" (a float64 NumPy array)" if isinstance(b, np.ndarray) else ""), b, r)
               for i, (r, b) in enumerate(zip(reps64, before))]
    changes = [c for c in changes if c]
    if changes:
        # The centering hint only where the change IS a centering; any other change is described as it is.
        centered = all("column means were subtracted" in c for c in changes)
        advice = (mistake_hint("cka_matrix_centers_in_place") if centered else
                  "torch.as_tensor(r, dtype=torch.float64) and r.to(torch.float64) return the caller's own tensor "
                  "when it is float64 already (and share a float64 NumPy array's memory): work on new tensors.")
        fail(f"cka_matrix changed {len(changes)} of its float64 inputs in place: {' '.join(changes)} {advice}")


@pytest.mark.points(1)
def test_cka_matrix_zero_variance_row_is_nan(impl, reference):
    reps = _mixed_reps(21, widths=(5, 8, 4))
    g = generator(121)
    reps.insert(1, torch.randn(9, generator=g, dtype=torch.float64).repeat(20, 1))
    what = "cka_matrix with a constant reps[1]"
    actual = tensor_result(impl.cka.cka_matrix([r.clone() for r in reps]), what)
    check_shape(actual, (4, 4), what)
    expected = reference.cka.cka_matrix(reps)
    if not torch.isnan(actual[1]).all() or not torch.isnan(actual[:, 1]).all():
        fail("cka_matrix with a zero-variance reps[1]: row 1 and column 1 should be nan (CKA is undefined "
             "for a representation whose rows are all equal, as in linear_cka), the diagonal included.")
    _check_matrix_values(actual, expected, what)
    check_entry_is_linear_cka(impl, reference, reps, 0, 2, what)


@pytest.mark.points(1)
def test_cka_matrix_rejects_bad_input(impl, reference):
    reps = _mixed_reps(22, widths=(4, 5))
    # Rejecting bad input counts only next to the right answer on good input.
    check_matrix(impl, reference, reps, "cka_matrix of 2 valid representations of widths 4, 5")
    check_entry_is_linear_cka(impl, reference, reps, 0, 1, "cka_matrix of 2 valid representations")
    expect_value_error(lambda: impl.cka.cka_matrix([]), "cka_matrix([])", "there is nothing to compare")
    expect_value_error(lambda: impl.cka.cka_matrix([reps[0].clone(), reps[1][:15].clone()]),
                       "cka_matrix([X [20, 4], Y [15, 5]])", "the representations have different numbers of rows")


# ---------------------------------------------------------------------------------------------
# The lesson: residual-flat untrained encoder, staircase in the trained one
# ---------------------------------------------------------------------------------------------

def _off_diagonal(m: torch.Tensor) -> torch.Tensor:
    return m[~torch.eye(m.shape[0], dtype=torch.bool)]


@pytest.mark.points(2)
def test_untrained_tinybert_is_flat(impl, reference):
    for seed in data.UNTRAINED_SEEDS:
        reps = data.untrained_reps(seed)
        what = f"cka_matrix of an untrained 4-layer TinyBERT (seed {seed}, frozen MiniLM embeddings)"
        matrix = check_matrix(impl, reference, reps, what)
        low = float(_off_diagonal(matrix).min())
        if not low > 0.9:
            fail(f"{what}: the smallest off-diagonal CKA is {low:.3f}; the residual stream keeps every "
                 "layer above 0.9 before training.")
        check_cka_value(impl, reference, reps[0], reps[-1], f"linear_cka(block 1, block 4) (seed {seed})")


@pytest.mark.points(2)
def test_trained_minilm_staircase(impl, reference):
    reps = data.trained_reps()
    matrix = check_matrix(impl, reference, reps, "cka_matrix of MiniLM's 7 hidden states (mean-pooled)")
    L = matrix.shape[0]
    distance = (torch.arange(L)[:, None] - torch.arange(L)[None, :]).abs()
    adjacent, distant = matrix[distance == 1].mean().item(), matrix[distance >= 4].mean().item()
    if not adjacent > distant + 0.1:
        fail(f"No staircase in trained MiniLM: adjacent layers average {adjacent:.3f}, layers 4 or more "
             f"apart {distant:.3f}; training should make distant layers clearly less similar.")
    check_entry_is_linear_cka(impl, reference, reps, 1, L - 1, "cka_matrix of MiniLM's hidden states")
    untrained = impl.cka.cka_matrix([r.clone() for r in data.untrained_reps(data.UNTRAINED_SEEDS[0])])
    trained_min, untrained_min = float(matrix.min()), float(_off_diagonal(torch.as_tensor(untrained)).min())
    if not trained_min < untrained_min - 0.1:
        fail(f"Trained MiniLM's lowest CKA ({trained_min:.3f}) should be clearly below the untrained "
             f"encoder's ({untrained_min:.3f}).")
