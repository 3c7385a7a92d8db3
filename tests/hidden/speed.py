"""Hidden suite, task performance: what every speed test shares. The tests are the timed tasks' own
pieces, one file each (tests/hidden/test_hidden_<task>_speed.py, marked ``performance``; the registry's
``timed`` says which tasks have one): each times a task's function against the reference, on the same
inputs, in the same run, interleaved (grader/bertlab_grader/performance/timing.py).

Points on a continuous curve of the median of paired time ratios (timing.points_fraction: full up to 2x,
0.73 at 100x, half at about 254x, none from 2000x), each call measured by its process's CPU time where that can be trusted, and only
for a right answer. In a cohort run, identical files reuse the first measurement
(grader/bertlab_grader/performance/record.py). A partial score is recorded as the user property ``bertlab_points_fraction`` and the test
fails with a message saying how fast the code was; grader/bertlab_grader/grading/scoring.py turns that into points.

Every timed call gets inputs of its own: ``draw(n)`` of each test draws those of call n (the same recipe,
a generator seeded by n, so other values), and the two calls of a pair share them (grader/bertlab_grader/performance/timing.py:
TimedInputs). Nothing a submission remembers about earlier inputs, by their bytes or by a key blind to
scale, answers a later call. A call's inputs are sent into the sandbox before it is timed (student_call);
the timed call works on a fresh copy there and only its result travels back, as the reference's does
(reference_call). The right answer is checked on the inputs the last results answered (``timing.variant``).
"""

from __future__ import annotations

from bertlab.assertions import fail
from bertlab_grader.performance.timing import POINTS_PROPERTY, RATIO_PROPERTY


def speed_seed(base: int, variant: int) -> int:
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
