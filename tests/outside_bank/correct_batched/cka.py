"""Task cka through normalised centered Gram matrices (outside bank: correct, "batched" style).

With G = vec(Kc) / ||Kc||_F for Kc = Xc Xc^T, CKA(X, Y) = <G_X, G_Y>; cka_matrix stacks every G into one
[L, n*n] matrix and takes all pairwise dot products with a single matmul.
"""

from __future__ import annotations

import math

import torch


def _normalised_gram(M):
    """[n*n] unit vector of the centered Gram matrix of M [n, d], or None for zero variance."""
    M = torch.as_tensor(M).detach().double()
    if M.ndim != 2:
        raise ValueError(f"a representation must be [n, d], got shape {tuple(M.shape)}")
    if M.shape[0] < 2:
        raise ValueError("at least 2 examples are needed")
    centered = M - M.mean(0, keepdim=True)
    scale = M.abs().max() if M.numel() else torch.tensor(0.0, dtype=torch.float64)
    if centered.abs().max() <= 1e-10 * scale:
        return None
    gram = (centered @ centered.T).flatten()
    return gram / gram.norm()


def linear_cka(X, Y) -> float:
    """Linear CKA between X [n, d1] and Y [n, d2] (float64), nan when X or Y has zero variance."""
    X, Y = torch.as_tensor(X), torch.as_tensor(Y)
    if X.ndim != 2 or Y.ndim != 2:
        raise ValueError("X and Y must both be 2-D")
    if X.shape[0] != Y.shape[0]:
        raise ValueError("X and Y must describe the same n examples")
    gx, gy = _normalised_gram(X), _normalised_gram(Y)
    if gx is None or gy is None:
        return math.nan
    return min(1.0, max(0.0, float(gx @ gy)))


def cka_matrix(reps):
    """[L, L] float64 CKA matrix from one matmul of the stacked normalised Gram vectors."""
    if len(reps) == 0:
        raise ValueError("no representations given")
    if len({torch.as_tensor(r).shape[0] for r in reps}) > 1:
        raise ValueError("every representation must have the same number of rows")
    grams = [_normalised_gram(r) for r in reps]
    n_sq = next((g.numel() for g in grams if g is not None), 0)
    stacked = torch.stack([g if g is not None else torch.zeros(n_sq, dtype=torch.float64) for g in grams])
    M = (stacked @ stacked.T).clamp(0.0, 1.0)
    M = torch.triu(M) + torch.triu(M, diagonal=1).T   # exactly symmetric
    M.fill_diagonal_(1.0)
    for i, g in enumerate(grams):
        if g is None:
            M[i, :] = math.nan
            M[:, i] = math.nan
    return M
