"""Outside bank, WRONG (task pooling): returns the last real token's vector instead of the mean."""

from __future__ import annotations

import torch


def masked_mean_pool(hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, T, D] and [B, T] -> [B, D]."""
    if hidden_states.dim() != 3 or attention_mask.dim() != 2 or attention_mask.shape != hidden_states.shape[:2]:
        raise ValueError("expected hidden_states [B, T, D] and attention_mask [B, T]")
    # MISTAKE: "the sentence vector is the last real token" (GPT-style), not the mean of the real tokens.
    last = (attention_mask != 0).long().sum(dim=1) - 1                      # [B]
    pooled = hidden_states[torch.arange(hidden_states.shape[0]), last.clamp(min=0)]
    pooled = torch.where((last >= 0).unsqueeze(-1), pooled, torch.zeros_like(pooled))
    return pooled
