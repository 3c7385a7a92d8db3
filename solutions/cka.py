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
    """Linear CKA between two representations of the same n examples.

    Inputs:
        X: [n, d1] Tensor or ndarray, any float dtype.
        Y: [n, d2] Tensor or ndarray, same n.
    Returns:
        A Python float in [0, 1], computed in float64; ``nan`` when X or Y has zero variance
        (all rows identical), because CKA is undefined there. [0, 1] holds up to float round-off: the
        formula written literally in float64 may return 1.0000000000000002, which is fine (no clamp
        is needed; one is allowed).
    Raises:
        ValueError: if X or Y is not 2-D, if their numbers of rows differ, or if n < 2.
    The inputs are never modified (center copies: for a float64 array, torch.as_tensor shares its memory).
    """
    ### BEGIN SOLUTION
    Xc = _centered_float64(X, "X")
    Yc = _centered_float64(Y, "Y")
    if Xc.shape[0] != Yc.shape[0]:
        raise ValueError(
            f"X and Y must describe the same examples: X has {Xc.shape[0]} rows, Y has {Yc.shape[0]}."
        )
    if _is_constant(Xc, X) or _is_constant(Yc, Y):
        return float("nan")
    n, d1 = Xc.shape
    d2 = Yc.shape[1]
    if n < max(d1, d2):
        # Gram form: ||Yc^T Xc||_F^2 = <Xc Xc^T, Yc Yc^T>, with n x n matrices instead of d x d.
        Kx, Ky = Xc @ Xc.T, Yc @ Yc.T
        cross, self_x, self_y = (Kx * Ky).sum(), torch.linalg.norm(Kx), torch.linalg.norm(Ky)
    else:
        cross = torch.linalg.norm(Yc.T @ Xc) ** 2
        self_x, self_y = torch.linalg.norm(Xc.T @ Xc), torch.linalg.norm(Yc.T @ Yc)
    cka = (cross / (self_x * self_y)).item()
    # Round-off can push a perfect match a hair above 1.
    return min(max(cka, 0.0), 1.0)
    ### END SOLUTION


def cka_matrix(reps: Sequence[Matrix]) -> Float[Tensor, "L L"]:
    """Pairwise linear CKA between L representations of the same n examples.

    Inputs:
        reps: a sequence of L matrices, reps[i] of shape [n, d_i] (d_i may differ, n may not).
    Returns:
        [L, L] float64 tensor M with M[i, j] = linear_cka(reps[i], reps[j]): symmetric, and 1.0 on the
        diagonal except where reps[i] has zero variance: its whole row and column are ``nan``, its
        diagonal entry M[i, i] included (linear_cka(reps[i], reps[i]) is nan).
    Raises:
        ValueError: if reps is empty or the matrices do not share the same number of rows.
    The inputs are never modified.
    """
    ### BEGIN SOLUTION
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
    ### END SOLUTION


### BEGIN SOLUTION
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
### END SOLUTION
