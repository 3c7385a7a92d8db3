"""Task pooling: masked mean pooling, from token vectors to one sentence vector.

A batch of sentences is padded to a common length T, so some positions hold [PAD] tokens whose hidden
states mean nothing. The attention mask marks the real tokens (1) and the padding (0). The sentence
vector is the mean of the real tokens' vectors only:

    pooled[b] = sum_t mask[b, t] * hidden[b, t] / sum_t mask[b, t]

This is the pooling of Sentence-BERT and of the DAN baseline; the only difference between them is
whether `hidden` is contextual (a Transformer's output) or a plain embedding lookup.
"""

# Student version of task pooling, generated from the reference solution.
# Replace each `raise NotImplementedYet(...)` with your code; run `bertlab check --task pooling`.

from __future__ import annotations

import torch
from jaxtyping import Float, Num
from torch import Tensor

from bertlab.errors import NotImplementedYet


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
    # TODO: Implement for task pooling.
    raise NotImplementedYet("pooling", "masked_mean_pool")
