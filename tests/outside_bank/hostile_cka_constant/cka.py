"""Outside bank, HOSTILE (task cka): every property of a CKA, none of its substance.

Inputs are validated exactly as the task asks (ValueError for bad shapes), the result is a Python float
in [0, 1], cka_matrix is a symmetric float64 [L, L] tensor with 1.0 on the diagonal; but the value is
always 0.5. It must earn nothing in cka.
"""

from __future__ import annotations

import torch


def _validate(X, Y) -> None:
    X, Y = torch.as_tensor(X), torch.as_tensor(Y)
    if X.dim() != 2 or Y.dim() != 2:
        raise ValueError("X and Y must be 2-D")
    if X.shape[0] != Y.shape[0]:
        raise ValueError("X and Y must have the same number of rows")
    if X.shape[0] < 2:
        raise ValueError("need at least 2 rows")


def linear_cka(X, Y) -> float:
    _validate(X, Y)
    return 0.5


def cka_matrix(reps):
    if len(reps) == 0:
        raise ValueError("reps is empty")
    for r in reps:
        _validate(reps[0], r)
    M = torch.full((len(reps), len(reps)), 0.5, dtype=torch.float64)
    M.fill_diagonal_(1.0)
    return M
