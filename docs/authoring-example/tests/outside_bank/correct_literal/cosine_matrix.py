"""Task cosine_matrix, the formula as the docstring gives it (outside bank: correct, "literal" style).

Each row divided by its own norm (floored, so a zero row stays zero), then one product, in float64.
"""

from __future__ import annotations

import torch


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[n, d] and [m, d] -> [n, m] cosines, 0 for a zero row."""
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"a and b must be 2-D, got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"a has d={a.shape[1]} but b has d={b.shape[1]}")
    a64, b64 = a.double(), b.double()
    a_norm = a64.norm(dim=1, keepdim=True).clamp(min=1e-12)  # [n, 1]
    b_norm = b64.norm(dim=1, keepdim=True).clamp(min=1e-12)  # [m, 1]
    return (a64 / a_norm) @ (b64 / b_norm).T
