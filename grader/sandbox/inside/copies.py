"""A fresh copy of a call's inputs, by the one rule both sides of a timing use: tensors cloned, arrays
copied, lists, tuples and dicts rebuilt, everything else as it is (the student's inputs here, in the
sandbox; the reference's in performance/timing.py).

``variant`` n > 0 scales every floating-point tensor and array by ``variant_scale(n)`` while copying
(one pass over the data, as a clone is): the performance task times call n on variant n, so no timed
call sees input values an earlier call saw, and an answer remembered by the bytes of its inputs is
never reused. Integer and bool inputs (masks, indices) are copied as they are, so every variant is a
valid input of the same shapes; the tasks it is used for are unchanged by a positive scale (CKA,
cosine rankings) or change with it (a mean), and both sides are given the same variant.
"""

from __future__ import annotations


def variant_scale(variant: int) -> float:
    """The factor of variant ``variant``: 1 for variant 0, then 1 + n/128, exact in every float dtype
    down to bfloat16 for n < 128 (and harmlessly rounded beyond)."""
    return 1.0 + variant / 128.0


def fresh_copy(value, variant: int = 0):
    """A copy of a stashed value: tensors and arrays cloned (floating ones scaled for a variant),
    containers rebuilt, the rest as is."""
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        if variant and value.is_floating_point():
            return torch.mul(value, variant_scale(variant))
        return value.clone()
    if isinstance(value, np.ndarray):
        if variant and np.issubdtype(value.dtype, np.floating):
            return np.multiply(value, value.dtype.type(variant_scale(variant)))
        return value.copy()
    if isinstance(value, (list, tuple)):
        items = [fresh_copy(v, variant) for v in value]
        return type(value)(items) if type(value) in (list, tuple) else items
    if isinstance(value, dict):
        return {k: fresh_copy(v, variant) for k, v in value.items()}
    return value
