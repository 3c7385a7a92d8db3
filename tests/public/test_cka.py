"""Public tests of task cka: linear_cka and cka_matrix.

Expected values come from `numpy_cka`, a line-by-line NumPy transcription of the formula in the task
(no reference solution is shipped). Properties: symmetry, CKA(X, X) = 1, invariance to shifts,
rotations and isotropic scaling, sensitivity to a stretch of one feature, the [0, 1] range.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from bertlab.assertions import CKA_ATOL, CKA_ROUND_OFF, CKA_RTOL  # the tolerances both suites share
from bertlab.assertions import (check_close, check_shape, check_tensor, describe_change, expect_value_error, formula_recheck,
                            name_mistake, precision_diagnosis, property_settings, tensor_result)

pytestmark = pytest.mark.cka

# Tolerances (bertlab/assertions.py says why): these inputs are well-conditioned.
ATOL, RTOL, ROUND_OFF = CKA_ATOL, CKA_RTOL, CKA_ROUND_OFF


# ---------------------------------------------------------------------------------------------
# Oracle and data
# ---------------------------------------------------------------------------------------------

def numpy_cka(X, Y, *, center: bool = True, square: bool = True) -> float:
    """The task's formula, transcribed: ||Yc^T Xc||_F^2 / (||Xc^T Xc||_F * ||Yc^T Yc||_F).

    ``center=False`` / ``square=False`` give the two classic mistakes, to name them in messages.
    """
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    if center:
        X = X - X.mean(axis=0, keepdims=True)  # column (feature) means
        Y = Y - Y.mean(axis=0, keepdims=True)
    cross = np.linalg.norm(Y.T @ X, "fro") ** (2 if square else 1)
    return float(cross / (np.linalg.norm(X.T @ X, "fro") * np.linalg.norm(Y.T @ Y, "fro")))


def numpy_of(t: torch.Tensor) -> np.ndarray:
    """The exact values of a tensor of any float dtype as a float64 array."""
    return t.detach().to(torch.float64).numpy()


def make_pair(seed: int, n: int, d1: int, d2: int, shared: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded float32 X [n, d1], Y [n, d2]; Y shares a fraction ``shared`` of X's structure.

    Columns get non-zero means (offsets) on purpose: an implementation that forgets to center gives
    a different number.
    """
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d1)) * rng.uniform(0.5, 3.0, size=d1) + rng.normal(scale=4.0, size=d1)
    mixed = X @ rng.normal(size=(d1, d2))
    Y = shared * mixed / (np.abs(mixed).max() + 1e-12) + (1 - shared) * rng.normal(size=(n, d2))
    Y = Y + rng.normal(scale=4.0, size=d2)
    return torch.tensor(X, dtype=torch.float32), torch.tensor(Y, dtype=torch.float32)


def random_orthogonal(seed: int, d: int) -> torch.Tensor:
    """A seeded random orthogonal [d, d] float64 matrix (QR of a Gaussian matrix)."""
    rng = np.random.default_rng(seed)
    q, r = np.linalg.qr(rng.normal(size=(d, d)))
    return torch.tensor(q * np.sign(np.diag(r)), dtype=torch.float64)


pairs = st.builds(
    make_pair,
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 40),
    d1=st.integers(1, 12),
    d2=st.integers(1, 12),
    shared=st.floats(0.0, 1.0),
)


def own_copy(value):
    """A copy of a tensor or array: what the code under test gets, so that the test's own inputs stay
    untouched for the expected answer whatever the code does to its arguments."""
    return value.clone() if isinstance(value, torch.Tensor) else np.array(value, copy=True)


def cka_of(impl, X, Y, what: str, *, own_copies: bool = True) -> float:
    """Call linear_cka (on copies of X and Y unless ``own_copies`` is False: the inputs-unchanged test)
    and check type, NaN, range: a Python float in [0, 1] up to round-off."""
    value = impl.cka.linear_cka(*((own_copy(X), own_copy(Y)) if own_copies else (X, Y)))
    if isinstance(value, torch.Tensor) or not isinstance(value, float):
        pytest.fail(f"{what}: linear_cka returned {type(value).__name__} {value!r}; expected a Python float. "
                    "Convert at the end with float(...) or .item().", pytrace=False)
    if math.isnan(value) or math.isinf(value):
        pytest.fail(f"{what}: linear_cka returned {value}, but neither input has zero variance here (the rows "
                    f"of X are not all the same vector, nor those of Y), so CKA is defined. "
                    f"{diagnose(value, numpy_of(torch.as_tensor(X)), numpy_of(torch.as_tensor(Y)), defined=True)}",
                    pytrace=False)
    if not -ROUND_OFF <= value <= 1.0 + ROUND_OFF:
        pytest.fail(f"{what}: linear_cka returned {value!r}, outside [0, 1] by more than round-off. "
                    f"{diagnose(value, numpy_of(torch.as_tensor(X)), numpy_of(torch.as_tensor(Y)))}",
                    pytrace=False)
    return value


def diagnose(value: float, X, Y, defined: bool = False, *, impl=None, expected: float = math.nan,
             inputs: tuple = ()) -> str:
    """Name the classic mistake (bertlab/mistakes.py) whose formula gives ``value`` on (X, Y), if one
    does; else, with ``impl`` and the right ``expected`` value, what a rerun of linear_cka on float64
    copies of ``inputs`` (the arguments as given, default X and Y) shows about the precision; otherwise a
    neutral hint that names no cause. X [n, d1], Y [n, d2] float64 arrays. ``defined``: the inputs
    have variance, so a nan is a 0/0 of the code's own making."""
    with np.errstate(invalid="ignore", divide="ignore"):  # a wrong variant may well be 0/0 (nan): it matches
        known = name_mistake(value, {                       # only a nan result then
            "cka_no_centering": numpy_cka(X, Y, center=False),
            "cka_center_rows": numpy_cka(X - X.mean(axis=1, keepdims=True), Y - Y.mean(axis=1, keepdims=True),
                                         center=False),
            "cka_no_square": numpy_cka(X, Y, square=False),
            "cka_transposed": numpy_cka(np.asarray(X).T, np.asarray(Y).T) if np.shape(X)[1] == np.shape(Y)[1] else None,
        }, tol=1e-6)
    if known:
        return known
    if impl is not None and not math.isnan(expected):
        confirmed = precision_diagnosis(impl.cka.linear_cka, *(inputs or (X, Y)), expected, ATOL + RTOL * abs(expected))
        if confirmed:
            return confirmed
    if defined:
        return ("Find the 0/0 or the overflow: check which norm is 0, and that the zero-variance test fires "
                "only when every row is the same vector (compare the centered norm with a small fraction of the "
                "raw norm).")
    return formula_recheck("the centering: subtract each column's mean (dim=0) from X and from Y, in float64")


def check_cka(impl, X, Y, what: str) -> None:
    value = cka_of(impl, X, Y, what)
    expected = numpy_cka(numpy_of(X), numpy_of(Y))
    if abs(value - expected) > ATOL + RTOL * abs(expected):
        pytest.fail(f"{what}: linear_cka gave {value!r}; the formula gives {expected!r} "
                    f"(X {list(X.shape)}, Y {list(Y.shape)}). "
                    f"{diagnose(value, numpy_of(X), numpy_of(Y), impl=impl, expected=expected, inputs=(X, Y))}",
                    pytrace=False)


# ---------------------------------------------------------------------------------------------
# linear_cka: examples first (quick, readable failures), then properties
# ---------------------------------------------------------------------------------------------

def test_linear_cka_small_example_matches_the_formula(impl):
    X, Y = make_pair(seed=0, n=20, d1=5, d2=7, shared=0.5)
    check_cka(impl, X, Y, "X [20, 5] vs Y [20, 7]")


@property_settings(max_examples=40)
@given(pair=pairs)
def test_linear_cka_matches_the_formula(impl, pair):
    X, Y = pair
    check_cka(impl, X, Y, "random pair")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_linear_cka_computes_in_float64(impl, dtype):
    # Half-precision inputs ("any float dtype"): doing the arithmetic in the input dtype loses about 3
    # digits (float32 about 7); the task says float64. NumPy has no bfloat16: convert with torch first.
    X, Y = make_pair(seed=1, n=64, d1=16, d2=8, shared=0.7)
    X16, Y16 = X.to(dtype), Y.to(dtype)
    value = cka_of(impl, X16, Y16, f"{dtype} inputs")
    expected = numpy_cka(numpy_of(X16), numpy_of(Y16))
    if abs(value - expected) > ATOL + RTOL * expected:
        pytest.fail(f"{dtype} inputs: linear_cka gave {value!r}; in float64 the formula gives {expected!r}. "
                    f"{diagnose(value, numpy_of(X16), numpy_of(Y16), impl=impl, expected=expected, inputs=(X16, Y16))}",
                    pytrace=False)


@property_settings(max_examples=25)
@given(pair=pairs)
def test_linear_cka_of_a_representation_with_itself_is_one(impl, pair):
    X, _ = pair
    value = cka_of(impl, X, X, "CKA(X, X)")
    if abs(value - 1.0) > ROUND_OFF:
        pytest.fail(f"CKA(X, X) should be 1 for any X with variance; got {value!r} for X {list(X.shape)}. "
                    "The numerator must be the squared norm ||Xc^T Xc||_F^2 and the denominator the product "
                    "of the two (unsquared) norms.", pytrace=False)


@property_settings(max_examples=25)
@given(pair=pairs)
def test_linear_cka_is_symmetric(impl, pair):
    X, Y = pair
    xy, yx = cka_of(impl, X, Y, "CKA(X, Y)"), cka_of(impl, Y, X, "CKA(Y, X)")
    if abs(xy - yx) > ATOL + RTOL * abs(xy):
        pytest.fail(f"CKA(X, Y) = {xy!r} but CKA(Y, X) = {yx!r}; CKA is symmetric. Does one of the norms "
                    "in the denominator use the wrong matrix?", pytrace=False)


@property_settings(max_examples=25)
@given(pair=pairs, shift_seed=st.integers(0, 2**32 - 1))
def test_linear_cka_ignores_a_shift_of_either_input(impl, pair, shift_seed):
    X, Y = pair
    rng = np.random.default_rng(shift_seed)
    # A shift b (|b| up to ~200) adds round-off of about eps * |b| ~ 4e-14 to each centered entry; the
    # columns here spread by far more than 1e-4, so a correct CKA moves by far less than 1e-7.
    X64, Y64 = X.double(), Y.double()
    before = cka_of(impl, X64, Y64, "CKA(X, Y)")
    shifted_x = X64 + torch.tensor(rng.normal(scale=50.0, size=X.shape[1]))
    shifted_y = Y64 + torch.tensor(rng.normal(scale=50.0, size=Y.shape[1]))
    for name, args in (("X + b", (shifted_x, Y64)), ("Y + b", (X64, shifted_y))):
        after = cka_of(impl, *args, f"CKA({name})")
        if abs(after - before) > 1e-7:
            pytest.fail(f"adding a constant vector b to every row of one input changed CKA from {before!r} to "
                        f"{after!r} ({name}); centering each column removes any such shift. "
                        f"{diagnose(after, *(numpy_of(a) for a in args))}", pytrace=False)


@property_settings(max_examples=25)
@given(pair=pairs, rotation_seed=st.integers(0, 2**32 - 1), scale=st.floats(1e-3, 1e3))
def test_linear_cka_ignores_rotations_and_isotropic_scaling(impl, pair, rotation_seed, scale):
    X, Y = pair
    X64, Y64 = X.double(), Y.double()
    before = cka_of(impl, X64, Y64, "CKA(X, Y)")
    transformed = {
        "X @ Q (Q orthogonal)": (X64 @ random_orthogonal(rotation_seed, X.shape[1]), Y64),
        "Y @ Q (Q orthogonal)": (X64, Y64 @ random_orthogonal(rotation_seed + 1, Y.shape[1])),
        f"{scale:.3g} * X": (scale * X64, Y64),
        f"{scale:.3g} * Y": (X64, scale * Y64),
    }
    for name, args in transformed.items():
        after = cka_of(impl, *args, f"CKA after {name}")
        if abs(after - before) > 1e-7:
            pytest.fail(f"CKA changed from {before!r} to {after!r} after {name}. Linear CKA must not change "
                        "under a rotation or a uniform scaling of either input (each feature must not be "
                        f"normalised separately). {diagnose(after, *(numpy_of(a) for a in args))}", pytrace=False)


@property_settings(max_examples=20)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(4, 50), stretch=st.floats(3.0, 30.0))
def test_linear_cka_changes_under_a_stretch_of_one_feature(impl, seed, n, stretch):
    # X's centered columns u, v are orthonormal and Y = 3u. Then, exactly:
    #   CKA(X, Y) = 1 / sqrt(2);  CKA(X diag(1, s), Y) = 1 / sqrt(1 + s^4);  CKA(X diag(s, 1), Y) = s^2 / sqrt(1 + s^4).
    # A general (non-orthogonal) linear map changes CKA: that is what makes it a useful comparison.
    rng = np.random.default_rng(seed)
    centered = rng.normal(size=(n, 2))
    centered -= centered.mean(axis=0)
    u_v, _ = np.linalg.qr(centered)  # orthonormal columns, still centered
    offset = rng.normal(scale=2.0, size=2)
    X = torch.tensor(u_v + offset)
    Y = torch.tensor(3.0 * u_v[:, :1] + 1.5)
    cases = {
        "X": (X, 1 / math.sqrt(2)),
        f"X @ diag(1, {stretch:.3g}) (noise feature stretched)": (X @ torch.diag(torch.tensor([1.0, stretch], dtype=torch.float64)),
                                                                   1 / math.sqrt(1 + stretch**4)),
        f"X @ diag({stretch:.3g}, 1) (shared feature stretched)": (X @ torch.diag(torch.tensor([stretch, 1.0], dtype=torch.float64)),
                                                                    stretch**2 / math.sqrt(1 + stretch**4)),
    }
    for name, (Xi, expected) in cases.items():
        value = cka_of(impl, Xi, Y, f"CKA({name}, Y)")
        if abs(value - expected) > 1e-8:
            pytest.fail(f"CKA({name}, Y) should be {expected:.6f} (Y is a multiple of X's first centered feature, "
                        f"so a stretch of one feature must change CKA); got {value!r}. If every case gives the same "
                        "number, your version is invariant to all linear maps: did you whiten or standardise the "
                        "features (CCA-like) instead of only centering them?", pytrace=False)


def test_linear_cka_accepts_numpy_arrays(impl):
    X, Y = make_pair(seed=2, n=30, d1=6, d2=4, shared=0.6)
    from_tensors = cka_of(impl, X, Y, "tensors")
    for name, args in {
        "float32 ndarrays": (X.numpy(), Y.numpy()),
        "float64 ndarrays": (numpy_of(X), numpy_of(Y)),
        "ndarray X, tensor Y": (X.numpy(), Y),
    }.items():
        value = cka_of(impl, *args, name)
        if abs(value - from_tensors) > ATOL + RTOL * from_tensors:
            pytest.fail(f"linear_cka on {name} gave {value!r}, but {from_tensors!r} on the same values as tensors. "
                        "Convert the inputs with torch.as_tensor(...) first.", pytrace=False)


def test_linear_cka_leaves_inputs_unchanged(impl):
    # float64 inputs: converting them to float64 returns the same memory (torch.as_tensor shares a NumPy
    # array's memory too), so centering in place (X -= X.mean(0)) would change the caller's data.
    X, Y = make_pair(seed=9, n=15, d1=5, d2=4, shared=0.5)
    x, y = X.double(), numpy_of(Y)
    x_before, y_before = x.clone(), y.copy()
    value = cka_of(impl, x, y, "float64 tensor X, float64 ndarray Y", own_copies=False)
    changed = [describe_change(name, before, now) for name, now, before in
               (("X (a float64 tensor)", x, x_before), ("Y (a float64 NumPy array)", y, y_before))]
    changed = [c for c in changed if c]
    if changed:
        pytest.fail(f"linear_cka changed its inputs in place: {' '.join(changed)} Center copies "
                    "(Xc = X - X.mean(dim=0, keepdim=True)), never the inputs in place.", pytrace=False)
    expected = numpy_cka(x_before.numpy(), y_before)
    if abs(value - expected) > ATOL + RTOL * abs(expected):
        pytest.fail(f"float64 tensor X, float64 ndarray Y: linear_cka gave {value!r}; the formula gives {expected!r}. "
                    f"{diagnose(value, x_before.numpy(), y_before, impl=impl, expected=expected, inputs=(x_before.clone(), y_before.copy()))}",
                    pytrace=False)


@pytest.mark.parametrize("case", ["X is 1-D", "X is 3-D", "Y is 1-D", "n differs", "n is 1"])
def test_linear_cka_rejects_bad_shapes(impl, case):
    X, Y = make_pair(seed=3, n=10, d1=4, d2=3, shared=0.5)
    # Rejecting the bad inputs counts only next to the right answer on the good ones (a function that
    # raises ValueError for everything rejects them too).
    check_cka(impl, X, Y, "X [10, 4] vs Y [10, 3] (valid)")
    X, Y, why = {
        "X is 1-D": (X[:, 0], Y, "X must be a 2-D [n, d1] matrix"),
        "X is 3-D": (X.reshape(10, 2, 2), Y, "X must be a 2-D [n, d1] matrix (pool the tokens first)"),
        "Y is 1-D": (X, Y[:, 0], "Y must be a 2-D [n, d2] matrix"),
        "n differs": (X, Y[:9], "X has 10 rows and Y has 9: the rows must be the same examples"),
        "n is 1": (X[:1], Y[:1], "with a single example there is nothing to center (n >= 2 is required)"),
    }[case]
    expect_value_error(lambda: impl.cka.linear_cka(X, Y),
                       f"linear_cka(X {list(X.shape)}, Y {list(Y.shape)})", why)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_linear_cka_of_a_constant_representation_is_nan(impl, dtype):
    # Layer-0 [CLS] is the same vector for every input: zero variance, so CKA is 0/0, undefined, and
    # the task's docstring says: return nan. In float64, the mean of n copies of a value is rounded,
    # so centering leaves round-off instead of exact zeros: test a tolerance, not only `== 0`.
    n = 10
    vector = torch.randn(16, generator=torch.Generator().manual_seed(4), dtype=torch.float64).to(dtype)
    constant = vector.unsqueeze(0).repeat(n, 1)
    if dtype == torch.float64:
        assert (constant - constant.mean(dim=0)).abs().max() > 0, "test set-up: expected centering round-off"
    X, Y = make_pair(seed=5, n=n, d1=2, d2=5, shared=0.0)
    # nan counts only next to a number where CKA is defined (a function that always returns nan is wrong).
    check_cka(impl, X, Y, "X [10, 2] vs Y [10, 5] (both with variance)")
    for name, args in (("CKA(constant, Y)", (constant, Y)), ("CKA(Y, constant)", (Y, constant))):
        value = impl.cka.linear_cka(*args)
        if not isinstance(value, float) or not math.isnan(value):
            pytest.fail(f"{name}: every row of the constant input is the same vector, so it has zero variance and "
                        f"CKA is 0/0 (undefined); expected nan, got {value!r}. Detect it after centering: the "
                        "centered matrix is zero up to round-off, so compare its norm to a small tolerance relative "
                        "to the input's norm (exact `== 0` misses round-off).", pytrace=False)


# ---------------------------------------------------------------------------------------------
# cka_matrix
# ---------------------------------------------------------------------------------------------

def layer_stack(seed: int, n: int, widths: list[int]) -> list[torch.Tensor]:
    """L float32 representations [n, d_i] that drift apart layer by layer (like a network's layers)."""
    rng = np.random.default_rng(seed)
    current = rng.normal(size=(n, widths[0]))
    reps = []
    for width in widths:
        current = np.tanh(current @ rng.normal(size=(current.shape[1], width)) / math.sqrt(current.shape[1]))
        current = current + 0.3 * rng.normal(size=current.shape)
        reps.append(torch.tensor(current, dtype=torch.float32))
    return reps


def oracle_matrix(reps: list[torch.Tensor]) -> torch.Tensor:
    L = len(reps)
    return torch.tensor([[numpy_cka(numpy_of(reps[i]), numpy_of(reps[j])) for j in range(L)] for i in range(L)],
                        dtype=torch.float64)


@pytest.mark.parametrize("n, widths", [(40, [8, 8, 8, 8]), (12, [16, 4, 32, 8, 16]), (60, [3])])
def test_cka_matrix_matches_pairwise_formula(impl, n, widths):
    reps = layer_stack(seed=n, n=n, widths=widths)
    L = len(reps)
    M = check_tensor(impl.cka.cka_matrix(reps), [L, L], f"cka_matrix of {L} representations",
                     dtype=torch.float64, shape_hint="One row and one column per representation.",
                     finite_hint="No input here has zero variance, so every entry is defined.",
                     dtype_hint="The docstring asks for a float64 matrix: create it with dtype=torch.float64.")
    check_close(M, oracle_matrix(reps), f"cka_matrix of {L} representations (widths {widths}, n={n})",
                atol=1e-7, hint="Entry [i, j] must be linear CKA of reps[i] and reps[j].")
    # CKA(i, j) and CKA(j, i) computed separately may differ by round-off; that is still symmetric.
    asymmetry = (M.to(torch.float64) - M.T.to(torch.float64)).abs().max().item()
    if asymmetry > ROUND_OFF:
        pytest.fail(f"cka_matrix is not symmetric: M[i, j] and M[j, i] differ by up to {asymmetry:.3g}. CKA is "
                    "symmetric, so both must hold linear CKA of the same pair (e.g. compute each pair once and "
                    "write it to [i, j] and [j, i]).", pytrace=False)
    diagonal = M.diagonal().to(torch.float64)
    if (diagonal - 1).abs().max() > ROUND_OFF:
        pytest.fail(f"the diagonal of cka_matrix should be 1.0 (CKA of a representation with itself); got "
                    f"{diagonal.tolist()}.", pytrace=False)
    # The docstring's contract: M[i, j] = linear_cka(reps[i], reps[j]); checked on one pair.
    check_cka(impl, reps[0], reps[-1], f"linear_cka(reps[0], reps[{L - 1}]) (entry [0, {L - 1}] of cka_matrix)")


def check_tensor_allowing_nan(value, L: int) -> torch.Tensor:
    """Type and shape of a cka_matrix result that may legitimately hold nan; inf is never right."""
    M = tensor_result(value, "cka_matrix")
    check_shape(M, [L, L], "cka_matrix")
    if torch.isinf(M).any():
        pytest.fail("cka_matrix contains inf; an undefined CKA is nan and a defined one lies in [0, 1].",
                    pytrace=False)
    return M


def test_cka_matrix_marks_a_constant_representation_with_nan(impl):
    reps = layer_stack(seed=6, n=20, widths=[8, 8, 8])
    cls_like = torch.randn(8, generator=torch.Generator().manual_seed(7)).repeat(20, 1)  # zero variance
    reps = [cls_like] + reps
    M = check_tensor_allowing_nan(impl.cka.cka_matrix(reps), 4)
    nan = torch.isnan(M)
    expected_nan = torch.zeros(4, 4, dtype=torch.bool)
    expected_nan[0, :] = expected_nan[:, 0] = True
    if not torch.equal(nan, expected_nan):
        pytest.fail(f"reps[0] has zero variance, so row 0 and column 0 of cka_matrix (and only those) must be nan; "
                    f"nan positions came back as\n{nan.int().tolist()}\nexpected\n{expected_nan.int().tolist()}.",
                    pytrace=False)
    defined = M[1:, 1:].to(torch.float64)
    check_close(defined, oracle_matrix(reps[1:]), "cka_matrix entries between defined representations", atol=1e-7,
                hint="One undefined representation must not change the other entries.")
    if (defined - defined.T).abs().max() > ROUND_OFF or (defined.diagonal() - 1).abs().max() > ROUND_OFF:
        pytest.fail("the defined part of cka_matrix must be symmetric with 1.0 on its diagonal.", pytrace=False)


@pytest.mark.parametrize("case", ["empty", "rows differ"])
def test_cka_matrix_rejects_bad_inputs(impl, case):
    reps = layer_stack(seed=8, n=10, widths=[4, 4])
    # Rejecting bad input counts only next to the right answer on good input.
    M = check_tensor(impl.cka.cka_matrix(reps), [2, 2], "cka_matrix of 2 valid representations",
                     shape_hint="One row and one column per representation.")
    check_close(M, oracle_matrix(reps), "cka_matrix of 2 valid representations", atol=1e-7,
                hint="Entry [i, j] must be linear CKA of reps[i] and reps[j].")
    reps, why = {
        "empty": ([], "there is no representation to compare"),
        "rows differ": ([reps[0], reps[1][:9]], "the representations have 10 and 9 rows (examples)"),
    }[case]
    expect_value_error(lambda: impl.cka.cka_matrix(reps), f"cka_matrix({case})", why)
