"""Task cka: linear Centered Kernel Alignment, a similarity score between two representations.

Two representations of the same n inputs, X [n, d1] and Y [n, d2], are compared after centering each
column (feature):

    CKA(X, Y) = ||Yc^T Xc||_F^2 / (||Xc^T Xc||_F * ||Yc^T Yc||_F)

It is 1 when Y is an orthogonal transform and/or a uniform scaling of X, and 0 when the two share no
linear structure. Because it ignores rotations and scale, it can compare layers of different width.

Zero-variance inputs: if every row of X is the same vector (BERT's layer-0 [CLS] vector is, for every
input), Xc is all zeros and the formula is 0/0. We return ``nan`` for that case instead of inventing a
number, so a heatmap shows the undefined row as a gap rather than hiding it.
"""

from __future__ import annotations

from typing import Sequence, Union

import math

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

Matrix = Union[Float[Tensor, "n d"], Float[np.ndarray, "n d"]]

# A centered matrix whose norm is below this fraction of the raw matrix's norm is "constant":
# identical rows still leave float round-off of about 1e-16 after subtracting their mean.
_ZERO_VARIANCE_RTOL = 1e-10


def linear_cka(X: Matrix, Y: Matrix) -> float:
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


def cka_matrix(reps: Sequence[Matrix]) -> Float[Tensor, "L L"]:
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


def _centered_float64(M: Matrix, name: str) -> Float[Tensor, "n d"]:
    """Validate M as an [n, d] matrix with n >= 2 and return its column-centered float64 copy."""
    M = torch.as_tensor(M)
    if M.dim() != 2:
        raise ValueError(
            f"{name} must be a 2-D [n_examples, n_features] matrix; got shape {tuple(M.shape)}. "
            "Did you forget to pool over tokens (e.g. masked_mean_pool) before comparing layers?"
        )
    if M.shape[0] < 2:
        raise ValueError(f"{name} has {M.shape[0]} row(s); CKA needs at least 2 examples to center.")
    M = M.detach().to(torch.float64)
    return M - M.mean(dim=0, keepdim=True)


def _is_constant(centered: Tensor, raw: Matrix) -> bool:
    """True when centering left nothing but round-off: every row was the same vector."""
    raw_norm = torch.linalg.norm(torch.as_tensor(raw).detach().to(torch.float64))
    return bool(torch.linalg.norm(centered) <= _ZERO_VARIANCE_RTOL * raw_norm)
