"""Task pooling, one sentence at a time with boolean indexing (outside bank: correct, "batched" style)."""

from __future__ import annotations

import torch


def masked_mean_pool(hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, T, D] and [B, T] -> [B, D]; a sentence with no real token pools to zeros."""
    if hidden_states.dim() != 3 or attention_mask.dim() != 2 \
            or hidden_states.shape[0] != attention_mask.shape[0] or hidden_states.shape[1] != attention_mask.shape[1]:
        raise ValueError(f"shapes {tuple(hidden_states.shape)} and {tuple(attention_mask.shape)} "
                         "are not [B, T, D] and [B, T]")
    rows = []
    for sentence, mask in zip(hidden_states, attention_mask):
        real = sentence[mask != 0]                          # [n_real, D]
        if real.shape[0] == 0:
            rows.append(torch.zeros_like(sentence[0]))
        else:
            rows.append(real.double().mean(dim=0).to(sentence.dtype))
    if not rows:
        return hidden_states.new_zeros(0, hidden_states.shape[2])
    return torch.stack(rows)
