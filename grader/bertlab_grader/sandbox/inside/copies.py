"""A fresh copy of a call's inputs, by the one rule both sides of a timing use: tensors cloned, arrays
copied, lists, tuples and dicts rebuilt, everything else as it is (the student's inputs here, in the
sandbox; the reference's in performance/timing.py).

A copy per call, so the code under test may change its inputs in place, or remember the objects it
was given, and neither carries over to the next call. The values themselves are the caller's: the
performance task draws independent inputs for every timed call (performance/timing.py,
``TimedInputs``), so nothing a call remembers about its inputs, by bytes or by any other key, is met
again.
"""

from __future__ import annotations


def fresh_copy(value):
    """A copy of a stashed value: tensors and arrays cloned, containers rebuilt, the rest as is."""
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, (list, tuple)):
        items = [fresh_copy(v) for v in value]
        return type(value)(items) if type(value) in (list, tuple) else items
    if isinstance(value, dict):
        return {k: fresh_copy(v) for k, v in value.items()}
    return value
