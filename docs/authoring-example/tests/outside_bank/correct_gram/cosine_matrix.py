"""Task cosine_matrix in NumPy: raw dot products over the outer product of the norms (outside bank:
correct, "Gram" style)."""

from __future__ import annotations

import numpy as np
import torch


def cosine_matrix(a, b) -> torch.Tensor:
    """Every cosine of a row of a [n, d] with a row of b [m, d], as an [n, m] float64 tensor."""
    A = a.detach().cpu().to(torch.float64).numpy() if isinstance(a, torch.Tensor) else np.asarray(a, np.float64)
    B = b.detach().cpu().to(torch.float64).numpy() if isinstance(b, torch.Tensor) else np.asarray(b, np.float64)
    if A.ndim != 2 or B.ndim != 2:
        raise ValueError(f"expected 2-D inputs, got {A.ndim}-D and {B.ndim}-D")
    if A.shape[1] != B.shape[1]:
        raise ValueError(f"sizes differ: {A.shape[1]} and {B.shape[1]}")
    dots = A @ B.T                                                    # [n, m]
    norms = np.outer(np.linalg.norm(A, axis=1), np.linalg.norm(B, axis=1))
    safe = np.where(norms > 0, norms, 1.0)
    return torch.from_numpy(np.where(norms > 0, dots / safe, 0.0))
