"""The mutant bank's entries for task cka: CKA (linear_cka, cka_matrix).

Mutants (one realistic mistake each: the mistake of the same name in bertlab/teaching/cka.py holds
the hint a student gets) and variants (correct, but not the reference's way). To add a mutant: add its
mistake there, a ``Mutant(...)`` here, then run ``bertlab audit --only <name>``.
"""

from __future__ import annotations

import torch

from bertlab_grader.mutants.fingerprint import Record, gen, normalise, outcome
from bertlab_grader.mutants.recipe import SCALE_FREE_KEY, Mutant, Variant

MUTANTS = (
    Mutant("cka_no_centering", "cka", "cka.py",
           "the columns are never centered (uncentered CKA)",
           (("    return M - M.mean(dim=0, keepdim=True)", "    return M"),)),
    Mutant("cka_center_rows", "cka", "cka.py",
           "centers each row (example) instead of each column (feature)",
           (("    return M - M.mean(dim=0, keepdim=True)", "    return M - M.mean(dim=1, keepdim=True)"),)),
    Mutant("cka_no_square", "cka", "cka.py",
           "the numerator ||Yc^T Xc||_F is not squared",
           (("cross, self_x, self_y = (Kx * Ky).sum(), torch.linalg.norm(Kx), torch.linalg.norm(Ky)",
             "cross, self_x, self_y = (Kx * Ky).sum().sqrt(), torch.linalg.norm(Kx), torch.linalg.norm(Ky)"),
            ("        cross = torch.linalg.norm(Yc.T @ Xc) ** 2", "        cross = torch.linalg.norm(Yc.T @ Xc)"))),
    Mutant("cka_wrong_normaliser", "cka", "cka.py",
           "divides by ||Xc||_F^2 ||Yc||_F^2 instead of ||Xc^T Xc||_F ||Yc^T Yc||_F",
           (("cross, self_x, self_y = (Kx * Ky).sum(), torch.linalg.norm(Kx), torch.linalg.norm(Ky)",
             "cross, self_x, self_y = (Kx * Ky).sum(), Kx.trace(), Ky.trace()"),
            ("        self_x, self_y = torch.linalg.norm(Xc.T @ Xc), torch.linalg.norm(Yc.T @ Yc)",
             "        self_x, self_y = torch.linalg.norm(Xc) ** 2, torch.linalg.norm(Yc) ** 2"))),
    Mutant("cka_no_float64", "cka", "cka.py",
           "computes in the input dtype instead of float64",
           (("    M = M.detach().to(torch.float64)\n", "    M = M.detach()\n"),)),
    Mutant("cka_float32", "cka", "cka.py",
           "converts X and Y to float32 (not float64) before centering",
           (("    M = M.detach().to(torch.float64)\n    return M - M.mean(dim=0, keepdim=True)",
             "    M = M.detach().to(torch.float32)\n    return M - M.mean(dim=0, keepdim=True)"),
            ("    raw_norm = torch.linalg.norm(torch.as_tensor(raw).detach().to(torch.float64))",
             "    raw_norm = torch.linalg.norm(torch.as_tensor(raw).detach().to(torch.float32))"),
            ("        hsic = torch.empty(L, L, dtype=torch.float64)", "        hsic = torch.empty(L, L, dtype=torch.float32)"),
            ("    result[:, undefined] = float(\"nan\")\n    return result",
             "    result[:, undefined] = float(\"nan\")\n    return result.double()"))),
    Mutant("cka_zscored", "cka", "cka.py",
           "standardises each column (z-scores) instead of only centering it",
           (("    M = M.detach().to(torch.float64)\n    return M - M.mean(dim=0, keepdim=True)",
             "    M = M.detach().to(torch.float64)\n"
             "    return (M - M.mean(dim=0, keepdim=True)) / M.std(dim=0, keepdim=True).clamp(min=1e-12)"),)),
    Mutant("cka_mixed_n", "cka", "cka.py",
           "scales the cross term by 1/(n - 1)^2 and the self terms by 1/n^2 (covariances with mixed n)",
           (("    cka = (cross / (self_x * self_y)).item()",
             "    cka = ((cross / (n - 1) ** 2) / ((self_x / n) * (self_y / n))).item()"),)),
    Mutant("cka_returns_tensor", "cka", "cka.py",
           "linear_cka returns a 0-d tensor instead of a Python float",
           (("    cka = (cross / (self_x * self_y)).item()", "    cka = cross / (self_x * self_y)"),
            ("    return min(max(cka, 0.0), 1.0)", "    return cka.clamp(0.0, 1.0)"))),
    Mutant("cka_no_row_check", "cka", "cka.py",
           "X and Y with different n fail inside matmul (RuntimeError) instead of a ValueError",
           (("    if Xc.shape[0] != Yc.shape[0]:\n        raise ValueError(",
             "    if False:\n        raise ValueError("),)),
    Mutant("cka_numpy_unsupported", "cka", "cka.py",
           "NumPy inputs crash (the code calls tensor methods on an ndarray)",
           (("    M = torch.as_tensor(M)\n    if M.dim() != 2:", "    if M.dim() != 2:"),)),
    Mutant("cka_no_constant_check", "cka", "cka.py",
           "no zero-variance check: constant inputs give 0 (or round-off) instead of nan",
           (("    if _is_constant(Xc, X) or _is_constant(Yc, Y):\n        return float(\"nan\")\n", ""),)),
    Mutant("cka_matrix_upper_only", "cka", "cka.py",
           "cka_matrix fills only the upper triangle",
           (("    result = (result + result.T) / 2  # exactly symmetric despite round-off",
             "    result = torch.triu(result)"),)),
    Mutant("cka_matrix_float32", "cka", "cka.py",
           "cka_matrix returns float32 (e.g. built with torch.zeros(L, L))",
           (("    result[:, undefined] = float(\"nan\")\n    return result",
             "    result[:, undefined] = float(\"nan\")\n    return result.float()"),)),
    Mutant("cka_in_place_centering", "cka", "cka.py",
           "centers the caller's float64 input in place (X -= X.mean(0))",
           (("    M = M.detach().to(torch.float64)\n    return M - M.mean(dim=0, keepdim=True)",
             "    M = M.detach().to(torch.float64)\n    M -= M.mean(dim=0, keepdim=True)\n    return M"),)),
    Mutant("cka_matrix_centers_in_place", "cka", "cka.py",
           "cka_matrix converts each representation with torch.as_tensor(r, dtype=torch.float64) and centers "
           "it in place: a float64 tensor or array passed in is changed (float32 ones are copied)",
           (("    constant = [_is_constant(c, r) for c, r in zip(centered, reps)]\n", ""),
            ("    centered = [_centered_float64(r, f\"reps[{i}]\") for i, r in enumerate(reps)]\n",
             "    for i, r in enumerate(reps):\n"
             "        _centered_float64(r, f\"reps[{i}]\")  # for its checks only (2-D, n >= 2)\n"
             "    centered = [torch.as_tensor(r, dtype=torch.float64) for r in reps]\n"
             "    constant = [_is_constant(c - c.mean(dim=0, keepdim=True), c) for c in centered]\n"
             "    for c in centered:\n"
             "        c -= c.mean(dim=0, keepdim=True)\n"))),
    Mutant("cka_matrix_empty", "cka", "cka.py",
           "cka_matrix([]) fails with IndexError instead of ValueError",
           (("    if len(reps) == 0:\n        raise ValueError(", "    if False:\n        raise ValueError("),)),
    # Hostile entries: form without substance. They must earn nothing in cka.
    Mutant("cka_constant_float", "cka", "cka.py",
           "linear_cka validates its inputs (and returns nan for zero variance) but returns 0.5 otherwise",
           (("    cka = (cross / (self_x * self_y)).item()", "    cka = 0.5"),)),
    Mutant("cka_always_value_error", "cka", "cka.py",
           "linear_cka raises ValueError for every input",
           (("    Xc = _centered_float64(X, \"X\")\n",
             "    raise ValueError(\"X and Y must be 2-D [n, d] matrices with the same n >= 2\")\n"),)),
)


# ---------------------------------------------------------------------------------------------
# Variants: correct, but not the reference's way
# ---------------------------------------------------------------------------------------------


_CKA_GRAM = '''def linear_cka(X: Matrix, Y: Matrix) -> float:
    """Linear CKA in its Gram (n x n) form: <Kx, Ky> / (||Kx|| ||Ky||), Kx = Xc Xc^T."""
    X = torch.as_tensor(X).detach().to(torch.float64)
    Y = torch.as_tensor(Y).detach().to(torch.float64)
    if X.dim() != 2 or Y.dim() != 2:
        raise ValueError(f"X and Y must be 2-D; got {tuple(X.shape)} and {tuple(Y.shape)}")
    if X.shape[0] != Y.shape[0] or X.shape[0] < 2:
        raise ValueError(f"X and Y need the same n >= 2 rows; got {X.shape[0]} and {Y.shape[0]}")
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    if torch.linalg.norm(Xc) <= 1e-10 * torch.linalg.norm(X) or torch.linalg.norm(Yc) <= 1e-10 * torch.linalg.norm(Y):
        return float("nan")
    Kx, Ky = Xc @ Xc.T, Yc @ Yc.T
    value = float((Kx * Ky).sum() / (torch.linalg.norm(Kx) * torch.linalg.norm(Ky)))
    return min(max(value, 0.0), 1.0)
'''

# The Gram form above (about 3x the reference's time on the timed input: half points), answering
# from memory when the inputs come again times a positive factor (CKA ignores a scale): a key blind
# to scale (recipe.SCALE_FREE_KEY). It earned full points while timed call n got the same inputs
# times 1 + n/128; every timed call now gets an independent draw (tests/test_performance.py).
_CKA_GRAM_SCALE_MEMO = _CKA_GRAM.replace("def linear_cka(", "def _cka_by_gram(", 1) + SCALE_FREE_KEY + \
    '''

_ANSWERS = {}  # scale-free key of X [n, d1] and Y [n, d2] -> their CKA


def linear_cka(X: Matrix, Y: Matrix) -> float:
    """The Gram form's CKA, remembered up to scale (CKA(aX, bY) = CKA(X, Y) for a, b > 0)."""
    if not isinstance(X, torch.Tensor) or not isinstance(Y, torch.Tensor):
        return _cka_by_gram(X, Y)
    key, _ = _scale_free_key(X, Y)
    if key not in _ANSWERS:
        _ANSWERS[key] = _cka_by_gram(X, Y)
    return _ANSWERS[key]
'''

_CKA_NUMPY = '''def linear_cka(X: Matrix, Y: Matrix) -> float:
    """Linear CKA computed with NumPy in float64; returns a Python float."""
    x = torch.as_tensor(X).detach().to(torch.float64).numpy()
    y = torch.as_tensor(Y).detach().to(torch.float64).numpy()
    if x.ndim != 2 or y.ndim != 2:
        raise ValueError("X and Y must be 2-D [n, d] matrices")
    if x.shape[0] != y.shape[0]:
        raise ValueError("X and Y must have the same number of rows")
    if x.shape[0] < 2:
        raise ValueError("CKA needs at least 2 examples")
    xc = x - x.mean(axis=0, keepdims=True)
    yc = y - y.mean(axis=0, keepdims=True)
    if np.linalg.norm(xc) <= 1e-10 * np.linalg.norm(x) or np.linalg.norm(yc) <= 1e-10 * np.linalg.norm(y):
        return float("nan")
    cross = np.linalg.norm(yc.T @ xc, "fro") ** 2
    value = cross / (np.linalg.norm(xc.T @ xc, "fro") * np.linalg.norm(yc.T @ yc, "fro"))
    return float(np.clip(value, 0.0, 1.0))
'''

_CKA_MATRIX_LOOP = '''def cka_matrix(reps: Sequence[Matrix]) -> Float[Tensor, "L L"]:
    """Pairwise linear_cka, one pair at a time (symmetric: each pair computed once)."""
    if len(reps) == 0:
        raise ValueError("cka_matrix needs at least one representation")
    rows = {int(torch.as_tensor(r).shape[0]) for r in reps}
    if len(rows) != 1:
        raise ValueError(f"all representations need the same number of rows; got {sorted(rows)}")
    L = len(reps)
    result = torch.zeros(L, L, dtype=torch.float64)
    for i in range(L):
        for j in range(i, L):
            value = 1.0 if i == j else linear_cka(reps[i], reps[j])
            result[i, j] = result[j, i] = value
    for i in range(L):
        if math.isnan(linear_cka(reps[i], reps[i])):
            result[i, :] = float("nan")
            result[:, i] = float("nan")
    return result
'''

_CKA_HSIC = '''def linear_cka(X: Matrix, Y: Matrix) -> float:
    """Linear CKA as normalised HSIC with the centering matrix H = I - 11^T / n."""
    X = torch.as_tensor(X).detach().double()
    Y = torch.as_tensor(Y).detach().double()
    if X.ndim != 2 or Y.ndim != 2 or X.shape[0] != Y.shape[0] or X.shape[0] < 2:
        raise ValueError(f"expected X [n, d1] and Y [n, d2] with the same n >= 2; got {tuple(X.shape)}, {tuple(Y.shape)}")
    n = X.shape[0]
    H = torch.eye(n, dtype=torch.float64) - 1.0 / n
    Kx, Ky = H @ (X @ X.T) @ H, H @ (Y @ Y.T) @ H

    def hsic(A, B):
        return (A * B).sum()

    # trace(H K H) = ||Xc||_F^2; centering the Gram matrix leaves round-off of about 1e-16 * trace(K),
    # so "no variance" is judged on the square roots with a correspondingly looser threshold.
    if Kx.trace().clamp(min=0).sqrt() <= 1e-6 * torch.linalg.norm(X) or \
            Ky.trace().clamp(min=0).sqrt() <= 1e-6 * torch.linalg.norm(Y):
        return float("nan")
    return float((hsic(Kx, Ky) / torch.sqrt(hsic(Kx, Kx) * hsic(Ky, Ky))).clamp(0.0, 1.0))
'''

# The lesson's formula as a student may type it: float64, d x d products, no clamp (so a perfect
# match may come out as 1.0000000000000002), and zero variance tested as "every row equals the first".
_CKA_LITERAL = '''def linear_cka(X: Matrix, Y: Matrix) -> float:
    """The docstring's formula written literally in float64: d x d products, no clamp, no Gram form.

    X [n, d1], Y [n, d2] -> a Python float (round-off may leave it a few ulps outside [0, 1]).
    """
    X = torch.as_tensor(X).detach().to(torch.float64)
    Y = torch.as_tensor(Y).detach().to(torch.float64)
    if X.dim() != 2 or Y.dim() != 2:
        raise ValueError(f"X and Y must be 2-D [n, d] matrices; got {tuple(X.shape)} and {tuple(Y.shape)}")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but Y has {Y.shape[0]}")
    if X.shape[0] < 2:
        raise ValueError("CKA needs at least 2 examples")
    # Zero variance means every row is the same vector: test that directly (exact, no tolerance).
    if bool((X == X[0]).all()) or bool((Y == Y[0]).all()):
        return float("nan")
    Xc = X - X.mean(dim=0, keepdim=True)
    Yc = Y - Y.mean(dim=0, keepdim=True)
    numerator = torch.linalg.norm(Yc.T @ Xc, "fro") ** 2
    denominator = torch.linalg.norm(Xc.T @ Xc, "fro") * torch.linalg.norm(Yc.T @ Yc, "fro")
    return (numerator / denominator).item()
'''

_CKA_MATRIX_LITERAL = '''def cka_matrix(reps: Sequence[Matrix]) -> Float[Tensor, "L L"]:
    """M[i, j] = linear_cka(reps[i], reps[j]) for every i and j, literally: [L, L] float64."""
    if len(reps) == 0:
        raise ValueError("cka_matrix needs at least one representation")
    L = len(reps)
    result = torch.empty(L, L, dtype=torch.float64)
    for i in range(L):
        for j in range(L):
            result[i, j] = linear_cka(reps[i], reps[j])
    return result
'''


VARIANTS = (
    Variant("var_cka_gram", "cka", "cka.py", "linear_cka always in the n x n Gram form",
            {"linear_cka": _CKA_GRAM}),
    Variant("var_cka_numpy", "cka", "cka.py",
            "linear_cka in NumPy (returns a Python float via numpy); cka_matrix loops over linear_cka",
            {"linear_cka": _CKA_NUMPY, "cka_matrix": _CKA_MATRIX_LOOP}, (("import numpy as np\n", "import math\n\nimport numpy as np\n"),)),
    Variant("var_cka_hsic", "cka", "cka.py", "linear_cka as normalised HSIC with the centering matrix H",
            {"linear_cka": _CKA_HSIC}),
    Variant("var_cka_literal", "cka", "cka.py",
            "linear_cka and cka_matrix exactly as their docstrings say: the formula in float64, no clamp, "
            "every [i, j] of the matrix computed separately",
            {"linear_cka": _CKA_LITERAL, "cka_matrix": _CKA_MATRIX_LITERAL}),
    Variant("var_cka_gram_scale_memo", "cka", "cka.py",
            "linear_cka in the n x n Gram form, answering from memory when the inputs come again times a positive factor",
            {"linear_cka": _CKA_GRAM_SCALE_MEMO}),
)


# ---------------------------------------------------------------------------------------------
# The behaviour fingerprint the hints compare (grader/bertlab_grader/mutants/fingerprint.py)
# ---------------------------------------------------------------------------------------------

def fingerprint(impl) -> dict:
    """What this task\'s functions return on small fixed inputs (values, shapes, dtypes, exception types)."""
    g = gen(900)
    X = torch.randn(6, 4, generator=g) * torch.tensor([0.5, 1.0, 2.0, 3.0]) + 3
    Y = X[:, :3] @ torch.randn(3, 3, generator=g) + torch.randn(6, 3, generator=g) + 2
    Xw, Yw = torch.randn(5, 8, generator=g) + 1, torch.randn(5, 7, generator=g) - 1
    big = torch.randn(64, 6, generator=g) * 30 + 5
    constant = torch.randn(5, generator=g, dtype=torch.float64).repeat(7, 1)
    other = torch.randn(7, 3, generator=g, dtype=torch.float64)
    x_in = X.double().clone()
    cka = impl.cka
    record = Record()  # filled call by call: a hint's search may stop it early
    record["tall"] = outcome(lambda: cka.linear_cka(X.clone(), Y.clone()))
    record["wide"] = outcome(lambda: cka.linear_cka(Xw.clone(), Yw.clone()))
    record["numpy"] = outcome(lambda: cka.linear_cka(X.double().numpy(), Y.double().numpy()))
    record["half"] = outcome(lambda: cka.linear_cka(big.half(), (big[:, :3] * 2 + 1).half()))
    record["constant"] = outcome(lambda: cka.linear_cka(constant.clone(), other.clone()))
    record["mismatch"] = outcome(lambda: cka.linear_cka(X.clone(), Y[:5].clone()))
    record["matrix"] = outcome(lambda: cka.cka_matrix([X.clone(), Y.clone(), (X[:, :2] * 2 + 1).clone()]))
    record["matrix_empty"] = outcome(lambda: cka.cka_matrix([]))
    record["in_place_call"] = outcome(lambda: cka.linear_cka(x_in, Y.double().clone()))
    record["in_place_input"] = normalise(x_in)
    # float64 columns with a large offset and a small spread: float32 arithmetic anywhere loses them (off
    # by far more than the 1e-4 a fingerprint tolerates), float64 arithmetic does not.
    offset_x = torch.randn(40, 4, generator=g, dtype=torch.float64) * 0.1 + 1e5
    offset_y = (offset_x - 1e5) @ torch.randn(4, 3, generator=g, dtype=torch.float64) \
        + 0.05 * torch.randn(40, 3, generator=g, dtype=torch.float64) - 2e5
    record["offset"] = outcome(lambda: cka.linear_cka(offset_x.clone(), offset_y.clone()))
    return record
