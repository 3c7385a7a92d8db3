"""Hidden suite, task performance: linear_cka, masked_mean_pool and semantic_search against the
reference, on the same inputs, in the same run, interleaved (grader/performance/timing.py).

Points by band of the median of paired time ratios (<= 2x full, <= 20x half, else none), and only
for a right answer. In a cohort run, identical files reuse the first measurement
(grader/performance/record.py). A partial score is recorded as the user property ``bertlab_points_fraction`` and the test
fails with a message saying how fast the code was; grader/grading/scoring.py turns that into points.

Every timed call gets inputs of its own: ``draw(n)`` of each test draws those of call n (the same recipe,
a generator seeded by n, so other values), and the two calls of a pair share them (grader/performance/timing.py:
TimedInputs). Nothing a submission remembers about earlier inputs, by their bytes or by a key blind to
scale, answers a later call. A call's inputs are sent into the sandbox before it is timed (student_call);
the timed call works on a fresh copy there and only its result travels back, as the reference's does
(reference_call). The right answer is checked on the inputs the last results answered (``timing.variant``).
"""

from __future__ import annotations

import pytest
import torch

from bertlab.assertions import close, fail, generator
from bertlab_grader.performance.timing import TimedInputs, compare_speed, reference_call, student_call
from bertlab_grader.performance.timing import POINTS_PROPERTY, RATIO_PROPERTY

from bertlab.assertions import index_problem, true_cosines

pytestmark = pytest.mark.performance


def _seed(base: int, variant: int) -> int:
    """The seed of input variant ``variant`` of the test seeded ``base`` (< 1000): variant 0 draws what the
    test drew before every call had inputs of its own, and no two tests or variants share a seed."""
    return base + 1000 * variant


def score_speed(record_property, timing, what: str, right: bool, wrong_why: str) -> None:
    if not right:
        record_property(POINTS_PROPERTY, 0.0)
        fail(f"{what}: speed is scored only for a right answer, and the result of the last timed call "
             f"differs from the reference's on the same inputs ({wrong_why}). Fix the task's correctness first.")
    message = timing.describe(what)
    record_property(RATIO_PROPERTY, timing.ratio)
    record_property(POINTS_PROPERTY, timing.fraction)
    if timing.fraction < 1.0:
        fail(message)


@pytest.mark.points(3)
def test_linear_cka_speed(impl, reference, record_property):
    # n > d: the d x d products (about 0.16 G multiply-adds in float64) are the efficient route here;
    # the n x n Gram form costs about three times as much.
    def draw(n: int):
        g = generator(_seed(500, n))
        X = torch.randn(1024, 256, generator=g)
        Y = X[:, :192] @ torch.randn(192, 192, generator=g) + torch.randn(1024, 192, generator=g)
        return (X, Y), {}

    inputs = TimedInputs(draw)
    # About 10 ms a call on one core: the trip through the sandbox is small next to it.
    timing, got, want = compare_speed(student_call(impl, impl.cka.linear_cka, inputs),
                                      reference_call(impl, reference.cka.linear_cka, inputs), name="linear_cka")
    right = abs(float(got) - float(want)) <= 1e-6
    score_speed(record_property, timing, "linear_cka(X [1024, 256], Y [1024, 192])", right,
                f"{float(got):.6g} vs {float(want):.6g}")


@pytest.mark.points(3)
def test_masked_mean_pool_speed(impl, reference, record_property):
    def draw(n: int):
        g = generator(_seed(501, n))
        # Many short rows: a Python loop over the batch shows here (one small op per sentence).
        hidden = torch.randn(512, 16, 128, generator=g)
        mask = (torch.arange(16)[None, :] < torch.randint(1, 17, (512, 1), generator=g)).long()
        return (hidden, mask), {}

    inputs = TimedInputs(draw)
    timing, got, want = compare_speed(student_call(impl, impl.pooling.masked_mean_pool, inputs),
                                      reference_call(impl, reference.pooling.masked_mean_pool, inputs),
                                      name="masked_mean_pool")
    right = isinstance(got, torch.Tensor) and close(got, want, 1e-5)
    score_speed(record_property, timing, "masked_mean_pool(hidden [512, 16, 128], mask)", right,
                "shape or values differ")


@pytest.mark.points(4)
def test_semantic_search_speed(impl, reference, record_property):
    def draw(n: int):
        g = generator(_seed(502, n))
        corpus = torch.randn(8192, 128, generator=g)
        queries = torch.randn(32, 128, generator=g)
        return (queries, corpus), {"top_k": 10}

    inputs = TimedInputs(draw)
    # About 3 ms a call.
    timing, got, want = compare_speed(student_call(impl, impl.retrieval.semantic_search, inputs),
                                      reference_call(impl, reference.retrieval.semantic_search, inputs),
                                      name="semantic_search")
    (queries, corpus), _ = inputs.get(timing.variant)  # the inputs the last results answer
    right = (isinstance(got, (tuple, list)) and len(got) == 2 and isinstance(got[1], torch.Tensor)
             and close(got[0], want[0], 1e-5) and got[1].shape == want[1].shape
             # Hits whose cosines differ by round-off may come in either order (retrieval's own rule).
             and not index_problem(got[1].long(), want[1], true_cosines(queries, corpus), atol=1e-5, rtol=0.0,
                                   exact_ties=False))
    score_speed(record_property, timing, "semantic_search(queries [32, 128], corpus [8192, 128], top_k=10)",
                right, "scores or indices differ")
