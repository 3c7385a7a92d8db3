"""Task performance: semantic_search's speed against the reference (tests/hidden/speed.py explains the protocol)."""

from __future__ import annotations

import pytest
import torch

from bertlab.assertions import close, generator, index_problem, true_cosines
from bertlab_grader.hidden.speed import score_speed, speed_seed
from bertlab_grader.performance.timing import TimedInputs, compare_speed, reference_call, student_call

pytestmark = pytest.mark.performance


@pytest.mark.points(4)
def test_semantic_search_speed(impl, reference, record_property):
    def draw(n: int):
        g = generator(speed_seed(502, n))
        corpus = torch.randn(8192, 128, generator=g)
        queries = torch.randn(32, 128, generator=g)
        return (queries, corpus), {"top_k": 10}

    inputs = TimedInputs(draw)
    # About 3 ms a call.
    def is_right(got, want, variant: int) -> bool:
        (queries, corpus), _ = inputs.get(variant)  # the inputs these results answer
        return (isinstance(got, (tuple, list)) and len(got) == 2 and isinstance(got[1], torch.Tensor)
                and close(got[0], want[0], 1e-5) and got[1].shape == want[1].shape
                # Hits whose cosines differ by round-off may come in either order (retrieval's own rule).
                and not index_problem(got[1].long(), want[1], true_cosines(queries, corpus), atol=1e-5, rtol=0.0,
                                      exact_ties=False))

    timing, got, want = compare_speed(student_call(impl, impl.retrieval.semantic_search, inputs),
                                      reference_call(impl, reference.retrieval.semantic_search, inputs),
                                      name="semantic_search", right=is_right)
    right = is_right(got, want, timing.variant)
    score_speed(record_property, timing, "semantic_search(queries [32, 128], corpus [8192, 128], top_k=10)",
                right, "scores or indices differ")
