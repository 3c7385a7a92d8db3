"""Task cka: linear Centered Kernel Alignment, a similarity score between two representations.

Two representations of the same n inputs, X [n, d1] and Y [n, d2], are compared after centering each
column (feature):

    CKA(X, Y) = ||Yc^T Xc||_F^2 / (||Xc^T Xc||_F * ||Yc^T Yc||_F)

It is 1 when Y is an orthogonal transform and/or a uniform scaling of X, and 0 when the two share no
linear structure. Because it ignores rotations and scale, it can compare layers of different width.

Zero-variance inputs: if every row of X is the same vector (BERT's layer-0 [CLS] vector is, for every
input), Xc is all zeros and the formula is 0/0. We return ``nan`` for that case instead of inventing a
number, so a heatmap shows the undefined row as a gap rather than hiding it.
"""

# Student version of task cka, generated from the reference solution.
# Replace each `raise NotImplementedYet(...)` with your code; run `bertlab check --task cka`.

from __future__ import annotations

from typing import Sequence, Union

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from bertlab.errors import NotImplementedYet

Matrix = Union[Float[Tensor, "n d"], Float[np.ndarray, "n d"]]

# A centered matrix whose norm is below this fraction of the raw matrix's norm is "constant":
# identical rows still leave float round-off of about 1e-16 after subtracting their mean.
_ZERO_VARIANCE_RTOL = 1e-10


def linear_cka(X: Matrix, Y: Matrix) -> float:
    """Linear CKA between two representations of the same n examples.

    Inputs:
        X: [n, d1] Tensor or ndarray, any float dtype.
        Y: [n, d2] Tensor or ndarray, same n.
    Returns:
        A Python float in [0, 1], computed in float64; ``nan`` when X or Y has zero variance
        (all rows identical), because CKA is undefined there. [0, 1] holds up to float round-off: the
        formula written literally in float64 may return 1.0000000000000002, which is fine (no clamp
        is needed; one is allowed).
    Raises:
        ValueError: if X or Y is not 2-D, if their numbers of rows differ, or if n < 2.
    The inputs are never modified (center copies: for a float64 array, torch.as_tensor shares its memory).
    """
    # TODO: Implement for task cka.
    raise NotImplementedYet("cka", "linear_cka")


def cka_matrix(reps: Sequence[Matrix]) -> Float[Tensor, "L L"]:
    """Pairwise linear CKA between L representations of the same n examples.

    Inputs:
        reps: a sequence of L matrices, reps[i] of shape [n, d_i] (d_i may differ, n may not).
    Returns:
        [L, L] float64 tensor M with M[i, j] = linear_cka(reps[i], reps[j]): symmetric, and 1.0 on the
        diagonal except where reps[i] has zero variance: its whole row and column are ``nan``, its
        diagonal entry M[i, i] included (linear_cka(reps[i], reps[i]) is nan).
    Raises:
        ValueError: if reps is empty or the matrices do not share the same number of rows.
    The inputs are never modified.
    """
    # TODO: Implement for task cka.
    raise NotImplementedYet("cka", "cka_matrix")


# (Task cka: any helper functions you want can go here.)
