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
    """Masked mean with einsum."""
    if hidden_states.ndim != 3 or attention_mask.ndim != 2 or attention_mask.shape != hidden_states.shape[:2]:
        raise ValueError(f"expected hidden [B, T, D] and mask [B, T]; got {tuple(hidden_states.shape)} "
                         f"and {tuple(attention_mask.shape)}")
    work = torch.float64 if hidden_states.dtype == torch.float64 else torch.float32
    mask = attention_mask.ne(0).to(work)
    total = torch.einsum("btd,bt->bd", hidden_states.to(work), mask)
    count = mask.sum(dim=1).clamp(min=1.0)
    return (total / count[:, None]).to(hidden_states.dtype)
