"""Task performance: linear_cka's speed against the reference (tests/hidden/speed.py explains the protocol)."""

from __future__ import annotations

import pytest
import torch

from bertlab.assertions import close, generator
from bertlab_grader.hidden.speed import score_speed, speed_seed
from bertlab_grader.performance.timing import TimedInputs, compare_speed, reference_call, student_call

pytestmark = pytest.mark.performance


@pytest.mark.points(3)
def test_linear_cka_speed(impl, reference, record_property):
    # n > d: the d x d products (about 0.16 G multiply-adds in float64) are the efficient route here;
    # the n x n Gram form costs about three times as much.
    def draw(n: int):
        g = generator(speed_seed(500, n))
        X = torch.randn(1024, 256, generator=g)
        Y = X[:, :192] @ torch.randn(192, 192, generator=g) + torch.randn(1024, 192, generator=g)
        return (X, Y), {}

    inputs = TimedInputs(draw)
    # About 10 ms a call on one core: the trip through the sandbox is small next to it.
    def is_right(got, want, variant: int) -> bool:
        return abs(float(got) - float(want)) <= 1e-6

    timing, got, want = compare_speed(student_call(impl, impl.cka.linear_cka, inputs),
                                      reference_call(impl, reference.cka.linear_cka, inputs), name="linear_cka",
                                      right=is_right)
    right = is_right(got, want, timing.variant)
    score_speed(record_property, timing, "linear_cka(X [1024, 256], Y [1024, 192])", right,
                f"{float(got):.6g} vs {float(want):.6g}")
