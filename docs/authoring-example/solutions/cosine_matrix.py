"""Task cosine_matrix: every pairwise cosine similarity between two sets of sentence vectors.

Sentence-BERT compares two sentences by the cosine of their vectors. For n vectors a and m vectors b,
the [n, m] matrix of every cosine is one matrix product of the rows scaled to length 1:

    cos[i, j] = a[i] . b[j] / (|a[i]| |b[j]|)

A zero vector has no direction: its cosine with anything is 0 here, never nan (divide by the norm
with a small floor, as F.normalize does).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor


def cosine_matrix(a: Float[Tensor, "n d"], b: Float[Tensor, "m d"]) -> Float[Tensor, "n m"]:
    """The cosine similarity of every row of a with every row of b.

    Inputs:
        a: [n, d] float tensor; b: [m, d] float tensor, with the same d.
    Returns:
        [n, m] float64 tensor: entry [i, j] is the cosine of a[i] and b[j], in [-1, 1] up to
        round-off; 0 where a[i] or b[j] is a zero vector.
    Raises:
        ValueError: if a or b is not 2-D, or their sizes d differ.
    The inputs are never modified.
    """
    ### BEGIN SOLUTION
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"a and b must be 2-D [n, d] and [m, d]; got shapes {tuple(a.shape)} and {tuple(b.shape)}.")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"a and b must have the same size d; got {a.shape[1]} and {b.shape[1]}.")
    # float64 first: the cosines of near-parallel vectors lose digits in float32.
    unit_a = F.normalize(a.to(torch.float64), dim=1)
    unit_b = F.normalize(b.to(torch.float64), dim=1)
    return unit_a @ unit_b.T
    ### END SOLUTION
