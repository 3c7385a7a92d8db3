"""Public tests of task cosine_matrix (the student runs these with `bertlab check --task cosine_matrix`).

The oracle is written the slow, obvious way: one pair at a time, in float64. Every test also demands
the right matrix on valid input, so a stub or a constant earns nothing.
"""

from __future__ import annotations

import math

import pytest
import torch

from bertlab.assertions import call_on_valid_input, check_close, check_tensor, close, expect_value_error
from bertlab.mistakes import hint as mistake_hint

pytestmark = pytest.mark.cosine_matrix


def oracle(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[n, m]: each pair's cosine from its dot product and norms, 0 for a zero vector."""
    out = torch.zeros(len(a), len(b), dtype=torch.float64)
    for i, u in enumerate(a.tolist()):
        for j, v in enumerate(b.tolist()):
            norms = math.sqrt(sum(x * x for x in u)) * math.sqrt(sum(y * y for y in v))
            out[i, j] = sum(x * y for x, y in zip(u, v)) / norms if norms else 0.0
    return out


def check_cosines(impl, a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    value = call_on_valid_input(lambda: impl.cosine_matrix.cosine_matrix(a.clone(), b.clone()), what,
                                "the docstring allows any 2-D a and b of the same d", "Raise only for what its Raises: lists.")
    actual = check_tensor(value, (len(a), len(b)), what)
    expected = oracle(a, b)
    raw = a.double() @ b.double().T
    check_close(actual, expected, what, atol=1e-6,
                diagnose=lambda got: mistake_hint("cosmat_raw_dot") if close(got, raw, 1e-6) else "")


def test_cosine_matrix_matches_a_pair_by_pair_loop(impl):
    g = torch.Generator().manual_seed(0)
    check_cosines(impl, torch.randn(4, 6, generator=g) * 5, torch.randn(3, 6, generator=g), "cosine_matrix(a [4, 6], b [3, 6])")


def test_cosine_matrix_rejects_different_sizes(impl):
    check_cosines(impl, torch.ones(2, 3), torch.eye(3), "cosine_matrix(a [2, 3], b [3, 3])")
    expect_value_error(lambda: impl.cosine_matrix.cosine_matrix(torch.ones(2, 3), torch.ones(2, 4)),
                       "cosine_matrix(a [2, 3], b [2, 4])", "a and b have different sizes d")
