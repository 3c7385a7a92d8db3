"""Task cosine_matrix with F.cosine_similarity broadcast over every pair (outside bank: correct,
"batched" style)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[n, d], [m, d] -> [n, m]: entry [i, j] is the cosine of a[i] and b[j] (0 for a zero vector)."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[-1] != b.shape[-1]:
        raise ValueError(f"need a [n, d] and b [m, d] with one d; got {list(a.shape)} and {list(b.shape)}")
    # [n, 1, d] against [1, m, d]: one cosine per pair, its norms floored at eps (a zero row gives 0).
    return F.cosine_similarity(a.double().unsqueeze(1), b.double().unsqueeze(0), dim=-1, eps=1e-12)
