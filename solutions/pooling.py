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
    """Mean of the hidden states over the positions whose mask is 1, wherever they are.

    Inputs:
        hidden_states: [B, T, D] float tensor (any float dtype). Padding positions hold finite values
            of any size, which must not change the result (whether inf or nan there leaks into it is
            not specified: no test puts them there).
        attention_mask: [B, T] of 0/1, as int, bool or float. The real tokens may sit anywhere:
            padding on the right, on the left, or holes in the middle.
    Returns:
        [B, D] tensor in the dtype of hidden_states. A row whose mask is all 0 gives zeros, not NaN.
        Differentiable: SBERT is fine-tuned through this function, so the gradient must reach
        hidden_states at the real tokens (and nowhere else): compute with torch operations on the
        tensors themselves (no .detach(), .item(), NumPy or torch.no_grad() inside).
    Raises:
        ValueError: if hidden_states is not 3-D, the mask is not 2-D, or their B and T differ.
    The inputs are never modified.
    """
    ### BEGIN SOLUTION
    if hidden_states.dim() != 3:
        raise ValueError(f"hidden_states must be [B, T, D]; got shape {tuple(hidden_states.shape)}.")
    if attention_mask.dim() != 2 or attention_mask.shape != hidden_states.shape[:2]:
        raise ValueError(
            f"attention_mask must be [B, T] = {tuple(hidden_states.shape[:2])} to match hidden_states; "
            f"got {tuple(attention_mask.shape)}."
        )
    # Half precision sums of many tokens lose digits; accumulate in float32 and cast back at the end.
    compute_dtype = torch.promote_types(hidden_states.dtype, torch.float32)
    weights = (attention_mask != 0).to(compute_dtype)  # [B, T]; nonzero counts as "real token"
    # A batched mat-vec sums the real tokens without materialising a [B, T, D] masked copy.
    summed = torch.bmm(weights.unsqueeze(1), hidden_states.to(compute_dtype)).squeeze(1)  # [B, D]
    counts = weights.sum(dim=1, keepdim=True).clamp(min=1.0)  # [B, 1]; all-padding rows -> 0 / 1
    return (summed / counts).to(hidden_states.dtype)
    ### END SOLUTION
