"""Task cka, written straight from the lesson's formula (outside bank: correct, "literal" style).

CKA(X, Y) = ||Yc^T Xc||_F^2 / (||Xc^T Xc||_F * ||Yc^T Yc||_F), computed in float64, never clamped:
a value such as 1.0000000000000002 is float round-off of a correct formula, not a mistake.
"""

from __future__ import annotations

import torch

# The stub's own threshold: a centered matrix this much smaller than the raw one is "constant".
_ZERO_VARIANCE_RTOL = 1e-10


def _as_float64(M) -> torch.Tensor:
    """Any [n, d] Tensor or ndarray as a float64 tensor (a copy: the caller's data is never touched)."""
    return torch.as_tensor(M).detach().to(torch.float64).clone()


def linear_cka(X, Y) -> float:
    """Linear CKA of X [n, d1] and Y [n, d2]; nan when either has zero variance."""
    X, Y = _as_float64(X), _as_float64(Y)
    if X.dim() != 2 or Y.dim() != 2:
        raise ValueError(f"X and Y must be 2-D, got shapes {tuple(X.shape)} and {tuple(Y.shape)}")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but Y has {Y.shape[0]}")
    if X.shape[0] < 2:
        raise ValueError("CKA needs at least 2 examples")
    Xc = X - X.mean(dim=0)
    Yc = Y - Y.mean(dim=0)
    if torch.linalg.norm(Xc) <= _ZERO_VARIANCE_RTOL * torch.linalg.norm(X):
        return float("nan")
    if torch.linalg.norm(Yc) <= _ZERO_VARIANCE_RTOL * torch.linalg.norm(Y):
        return float("nan")
    numerator = torch.linalg.norm(Yc.T @ Xc, "fro") ** 2
    denominator = torch.linalg.norm(Xc.T @ Xc, "fro") * torch.linalg.norm(Yc.T @ Yc, "fro")
    return float(numerator / denominator)


def cka_matrix(reps):
    """[L, L] float64 tensor with M[i, j] = linear_cka(reps[i], reps[j]), every entry computed."""
    if len(reps) == 0:
        raise ValueError("cka_matrix needs at least one representation")
    n_rows = [torch.as_tensor(r).shape[0] for r in reps]
    if len(set(n_rows)) != 1:
        raise ValueError(f"all representations must have the same number of rows, got {n_rows}")
    L = len(reps)
    M = torch.empty(L, L, dtype=torch.float64)
    for i in range(L):
        for j in range(L):
            M[i, j] = linear_cka(reps[i], reps[j])
    return M
