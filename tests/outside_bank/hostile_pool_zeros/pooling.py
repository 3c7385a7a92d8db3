"""Outside bank, HOSTILE (task pooling): the right shape, dtype and validation, always zeros.

An all-padding row does come back as zeros (as the task asks), but so does every other row. It must
earn nothing in pooling.
"""

from __future__ import annotations

import torch


def masked_mean_pool(hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    if hidden_states.dim() != 3 or attention_mask.dim() != 2 or attention_mask.shape != hidden_states.shape[:2]:
        raise ValueError("expected hidden_states [B, T, D] and attention_mask [B, T]")
    B, _, D = hidden_states.shape
    return torch.zeros(B, D, dtype=hidden_states.dtype)
