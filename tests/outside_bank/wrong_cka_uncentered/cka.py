"""Outside bank, WRONG (task cka): correct_gram/cka.py with the centering left out (uncentered CKA).

||Yc^T Xc||_F^2 = <Kx, Ky>_F with Kx = Xc Xc^T, so CKA = <Kx, Ky> / (||Kx||_F ||Ky||_F). The result is
clipped to [0, 1] against round-off.
"""

from __future__ import annotations

import numpy as np
import torch


def _to_numpy(M) -> np.ndarray:
    if isinstance(M, torch.Tensor):
        M = M.detach().cpu().to(torch.float64).numpy()  # via float64: NumPy has no bfloat16
    return np.array(M, dtype=np.float64)  # np.array copies: the caller's data is never touched


def _centered_gram(M: np.ndarray):
    """Kc = Mc Mc^T for the column-centered Mc; None when every row is (numerically) the same."""
    Mc = M  # MISTAKE: the columns are never centered
    if np.abs(Mc).max(initial=0.0) <= 1e-10 * np.abs(M).max(initial=0.0):
        return None
    return Mc @ Mc.T


def _check_pair(X: np.ndarray, Y: np.ndarray) -> None:
    if X.ndim != 2 or Y.ndim != 2:
        raise ValueError(f"expected 2-D inputs, got {X.ndim}-D and {Y.ndim}-D")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"row counts differ: {X.shape[0]} and {Y.shape[0]}")
    if X.shape[0] < 2:
        raise ValueError("need at least 2 rows")


def _cka_of_grams(Kx, Ky) -> float:
    if Kx is None or Ky is None:
        return float("nan")
    value = np.sum(Kx * Ky) / (np.linalg.norm(Kx) * np.linalg.norm(Ky))
    return float(np.clip(value, 0.0, 1.0))


def linear_cka(X, Y) -> float:
    """Linear CKA of X [n, d1] and Y [n, d2] as a Python float; nan for a zero-variance input."""
    X, Y = _to_numpy(X), _to_numpy(Y)
    _check_pair(X, Y)
    return _cka_of_grams(_centered_gram(X), _centered_gram(Y))


def cka_matrix(reps):
    """[L, L] float64 tensor of pairwise CKA; each Gram matrix is built once, each pair scored once."""
    reps = [_to_numpy(r) for r in reps]
    if not reps:
        raise ValueError("reps is empty")
    for r in reps:
        _check_pair(reps[0], r)
    grams = [_centered_gram(r) for r in reps]
    L = len(reps)
    M = np.ones((L, L))
    for i in range(L):
        for j in range(i + 1, L):
            M[i, j] = M[j, i] = _cka_of_grams(grams[i], grams[j])
    for i, gram in enumerate(grams):
        if gram is None:
            M[i, :] = np.nan
            M[:, i] = np.nan
    return torch.from_numpy(M)
