"""Task performance: masked_mean_pool's speed against the reference (tests/hidden/speed.py explains the protocol)."""

from __future__ import annotations

import pytest
import torch

from bertlab.assertions import close, generator
from bertlab_grader.hidden.speed import score_speed, speed_seed
from bertlab_grader.performance.timing import TimedInputs, compare_speed, reference_call, student_call

pytestmark = pytest.mark.performance


@pytest.mark.points(3)
def test_masked_mean_pool_speed(impl, reference, record_property):
    def draw(n: int):
        g = generator(speed_seed(501, n))
        # Many short rows: a Python loop over the batch shows here (one small op per sentence).
        hidden = torch.randn(512, 16, 128, generator=g)
        mask = (torch.arange(16)[None, :] < torch.randint(1, 17, (512, 1), generator=g)).long()
        return (hidden, mask), {}

    inputs = TimedInputs(draw)
    def is_right(got, want, variant: int) -> bool:
        return isinstance(got, torch.Tensor) and close(got, want, 1e-5)

    timing, got, want = compare_speed(student_call(impl, impl.pooling.masked_mean_pool, inputs),
                                      reference_call(impl, reference.pooling.masked_mean_pool, inputs),
                                      name="masked_mean_pool", right=is_right)
    right = is_right(got, want, timing.variant)
    score_speed(record_property, timing, "masked_mean_pool(hidden [512, 16, 128], mask)", right,
                "shape or values differ")
