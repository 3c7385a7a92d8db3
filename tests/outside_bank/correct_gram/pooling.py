"""Task pooling with a bool mask and einsum (outside bank: correct, "Gram" style)."""

from __future__ import annotations

import torch


def masked_mean_pool(hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, T, D] and [B, T] -> [B, D]: mean over the positions whose mask is non-zero."""
    if hidden_states.ndim != 3 or attention_mask.ndim != 2:
        raise ValueError("expected hidden_states [B, T, D] and attention_mask [B, T]")
    B, T, _ = hidden_states.shape
    if tuple(attention_mask.shape) != (B, T):
        raise ValueError(f"attention_mask is {tuple(attention_mask.shape)}, expected {(B, T)}")
    keep = attention_mask.bool()                                        # [B, T]
    work = torch.float64 if hidden_states.dtype == torch.float64 else torch.float32
    total = torch.einsum("btd,bt->bd", hidden_states.to(work), keep.to(work))
    count = keep.sum(dim=1, keepdim=True).to(work)                      # [B, 1]
    pooled = torch.where(count > 0, total / count.clamp(min=1), torch.zeros_like(total))
    return pooled.to(hidden_states.dtype)
