"""Hidden suite, task cosine_matrix (graded by `bertlab grade`; never shipped to students).

Expected values come from ``reference.cosine_matrix.cosine_matrix`` on the same seeded inputs. Each
test carries its points; the task is worth their sum. Every test also demands the right matrix on
valid input, so a stub or a constant earns nothing.
"""

from __future__ import annotations

import pytest
import torch

from bertlab.assertions import call_on_valid_input, check_close, check_tensor, close, expect_value_error, generator
from bertlab.mistakes import hint as mistake_hint

pytestmark = pytest.mark.cosine_matrix


def vectors(seed: int, n: int, d: int) -> torch.Tensor:
    """Seeded float32 rows of very different lengths (a raw dot product is far from a cosine)."""
    g = generator(seed)
    return torch.randn(n, d, generator=g) * torch.rand(n, 1, generator=g) * 20


def check_answer(impl, reference, a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    value = call_on_valid_input(lambda: impl.cosine_matrix.cosine_matrix(a.clone(), b.clone()), what,
                                "the docstring allows any 2-D a and b of the same d", "Raise only for what its Raises: lists.")
    actual = check_tensor(value, (len(a), len(b)), what)
    expected = reference.cosine_matrix.cosine_matrix(a.clone(), b.clone())
    raw = a.double() @ b.double().T
    one_side = torch.nn.functional.normalize(a.double(), dim=1) @ b.double().T

    def diagnose(got):
        if close(got, raw, 1e-5):
            return mistake_hint("cosmat_raw_dot")
        if close(got, one_side, 1e-5):
            return mistake_hint("cosmat_one_side")
        return ""

    # float32 inputs: a correct float32 computation is within about 1e-6 of the float64 cosines.
    check_close(actual, expected, what, atol=1e-5, diagnose=diagnose)


@pytest.mark.points(2)
def test_cosine_matrix_matches_reference(impl, reference):
    check_answer(impl, reference, vectors(1, 7, 16), vectors(2, 5, 16), "cosine_matrix(a [7, 16], b [5, 16])")
    check_answer(impl, reference, vectors(3, 1, 3), vectors(4, 9, 3), "cosine_matrix(a [1, 3], b [9, 3])")


@pytest.mark.points(1)
def test_cosine_matrix_zero_vectors_score_zero(impl, reference):
    a, b = vectors(5, 4, 8), vectors(6, 3, 8)
    a[2], b[0] = 0.0, 0.0
    check_answer(impl, reference, a, b, "cosine_matrix(a [4, 8] with a zero row 2, b [3, 8] with a zero row 0)")


@pytest.mark.points(1)
def test_cosine_matrix_rejects_bad_input(impl, reference):
    check_answer(impl, reference, vectors(7, 3, 4), vectors(8, 2, 4), "cosine_matrix(a [3, 4], b [2, 4])")
    expect_value_error(lambda: impl.cosine_matrix.cosine_matrix(torch.ones(2, 3), torch.ones(2, 4)),
                       "cosine_matrix(a [2, 3], b [2, 4])", "a and b have different sizes d")
    expect_value_error(lambda: impl.cosine_matrix.cosine_matrix(torch.ones(3), torch.ones(2, 3)),
                       "cosine_matrix(a [3], b [2, 3])", "a is not 2-D")
