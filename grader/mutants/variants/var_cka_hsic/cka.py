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

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

Matrix = Union[Float[Tensor, "n d"], Float[np.ndarray, "n d"]]

# A centered matrix whose norm is below this fraction of the raw matrix's norm is "constant":
# identical rows still leave float round-off of about 1e-16 after subtracting their mean.
_ZERO_VARIANCE_RTOL = 1e-10


def linear_cka(X: Matrix, Y: Matrix) -> float:
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
    if Kx.trace().clamp(min=0).sqrt() <= 1e-6 * torch.linalg.norm(X) or             Ky.trace().clamp(min=0).sqrt() <= 1e-6 * torch.linalg.norm(Y):
        return float("nan")
    return float((hsic(Kx, Ky) / torch.sqrt(hsic(Kx, Kx) * hsic(Ky, Ky))).clamp(0.0, 1.0))


def cka_matrix(reps: Sequence[Matrix]) -> Float[Tensor, "L L"]:
    """Pairwise linear CKA between L representations of the same n examples.

    Inputs:
        reps: a sequence of L matrices, reps[i] of shape [n, d_i] (d_i may differ, n may not).
    Returns:
        [L, L] float64 tensor M with M[i, j] = linear_cka(reps[i], reps[j]): symmetric, 1.0 on the
        diagonal, and ``nan`` in every row and column of a zero-variance representation.
    Raises:
        ValueError: if reps is empty or the matrices do not share the same number of rows.
    """
    if len(reps) == 0:
        raise ValueError("cka_matrix needs at least one representation, got an empty sequence.")
    centered = [_centered_float64(r, f"reps[{i}]") for i, r in enumerate(reps)]
    rows = {c.shape[0] for c in centered}
    if len(rows) > 1:
        raise ValueError(f"every representation must have the same number of rows (examples); got {sorted(rows)}.")
    L, n = len(centered), centered[0].shape[0]
    constant = [_is_constant(c, r) for c, r in zip(centered, reps)]
    if n <= max(c.shape[1] for c in centered):
        # One matmul for all pairs: <K_i, K_j> over flattened n x n Gram matrices.
        grams = torch.stack([(c @ c.T).reshape(-1) for c in centered])  # [L, n*n]
        hsic = grams @ grams.T  # [L, L]
    else:
        hsic = torch.empty(L, L, dtype=torch.float64)
        for i in range(L):
            for j in range(i, L):
                hsic[i, j] = hsic[j, i] = torch.linalg.norm(centered[j].T @ centered[i]) ** 2
    scale = hsic.diagonal().sqrt()
    result = (hsic / (scale[:, None] * scale[None, :])).clamp(0.0, 1.0)
    result = (result + result.T) / 2  # exactly symmetric despite round-off
    result.fill_diagonal_(1.0)
    undefined = torch.tensor(constant)
    result[undefined, :] = float("nan")
    result[:, undefined] = float("nan")
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
