"""Outside bank, WRONG (task pooling): correct_literal/pooling.py dividing by the padded length T."""

from __future__ import annotations

import torch


def masked_mean_pool(hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, T, D] hidden states, [B, T] 0/1 mask -> [B, D]."""
    if hidden_states.dim() != 3:
        raise ValueError(f"hidden_states must be [B, T, D], got {tuple(hidden_states.shape)}")
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be [B, T], got {tuple(attention_mask.shape)}")
    if attention_mask.shape != hidden_states.shape[:2]:
        raise ValueError(f"mask {tuple(attention_mask.shape)} does not match hidden {tuple(hidden_states.shape)}")
    mask = attention_mask.to(hidden_states.dtype).unsqueeze(-1)  # [B, T, 1]
    summed = (hidden_states * mask).sum(dim=1)                    # [B, D]
    return summed / hidden_states.shape[1]                        # MISTAKE: T, not the number of real tokens
