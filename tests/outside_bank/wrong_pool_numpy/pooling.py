"""Outside bank, WRONG (task pooling): the right values, computed in NumPy, so no gradient survives.

A student at home in NumPy: every value is the masked mean the task asks for, but the result is a new
tensor built from a NumPy array, cut off from hidden_states. A SiameseBert built on it cannot be
fine-tuned: the mistake lives in pooling.py (the student's siamese.py is correct).
"""

from __future__ import annotations

import numpy as np
import torch


def masked_mean_pool(hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, T, D] and [B, T] -> [B, D]."""
    if hidden_states.dim() != 3 or attention_mask.dim() != 2 or attention_mask.shape != hidden_states.shape[:2]:
        raise ValueError("expected hidden_states [B, T, D] and attention_mask [B, T]")
    h = hidden_states.detach().cpu().to(torch.float64).numpy()        # MISTAKE: leaves autograd here
    m = (attention_mask.detach().cpu().numpy() != 0).astype(np.float64)
    summed = np.einsum("btd,bt->bd", h, m)
    counts = np.maximum(m.sum(axis=1, keepdims=True), 1.0)
    return torch.from_numpy(summed / counts).to(hidden_states.dtype)
