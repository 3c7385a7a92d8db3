"""Task pooling: masked mean pooling, from token vectors to one sentence vector.

A batch of sentences is padded to a common length T, so some positions hold [PAD] tokens whose hidden
states mean nothing. The attention mask marks the real tokens (1) and the padding (0). The sentence
vector is the mean of the real tokens' vectors only:

    pooled[b] = sum_t mask[b, t] * hidden[b, t] / sum_t mask[b, t]

This is the pooling of Sentence-BERT and of the DAN baseline; the only difference between them is
whether `hidden` is contextual (a Transformer's output) or a plain embedding lookup.
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Num
from torch import Tensor


def masked_mean_pool(
    hidden_states: Float[Tensor, "B T D"],
    attention_mask: Num[Tensor, "B T"],
) -> Float[Tensor, "B D"]:
    """Masked mean, one sentence at a time."""
    if hidden_states.dim() != 3:
        raise ValueError("hidden_states must be [B, T, D]")
    if attention_mask.dim() != 2 or tuple(attention_mask.shape) != tuple(hidden_states.shape[:2]):
        raise ValueError("attention_mask must be [B, T] like hidden_states")
    rows = []
    for b in range(hidden_states.shape[0]):
        keep = attention_mask[b] != 0
        if keep.any():
            rows.append(hidden_states[b][keep].float().mean(dim=0) if hidden_states.dtype != torch.float64
                        else hidden_states[b][keep].mean(dim=0))
        else:
            rows.append(torch.zeros(hidden_states.shape[2], dtype=torch.float64 if hidden_states.dtype == torch.float64
                                    else torch.float32))
    return torch.stack(rows).to(hidden_states.dtype)
