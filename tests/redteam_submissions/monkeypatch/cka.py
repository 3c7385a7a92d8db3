"""Patches every comparison it can reach at import, then returns a wrong CKA.

In-process this would make torch.allclose, torch.testing.assert_close, numpy and pytest.approx
say "equal"; in the sandbox it only changes the server's copies.
"""

import numpy
import pytest
import torch
import torch.testing

torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.isclose = lambda a, b, *r, **k: torch.ones_like(torch.as_tensor(a), dtype=torch.bool)
torch.testing.assert_close = lambda *a, **k: None
numpy.allclose = lambda *a, **k: True
numpy.testing.assert_allclose = lambda *a, **k: None
pytest.approx = lambda expected, *a, **k: type("Yes", (), {"__eq__": lambda s, o: True})()
torch.Tensor.__eq__ = lambda self, other: True


def linear_cka(X, Y):
    return 0.5
