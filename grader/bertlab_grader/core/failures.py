"""Grader failures: what the grader failed to do, as opposed to what a submission did.

A submission's own failures (a wrong value, an exception raised by its code, a call over its time
limit, its process killed by its own memory or process use) are grades. A ``GraderFailure`` is not:
the sandbox or a grader worker could not start or died while no student code ran, the reference or
a hidden suite raised, the gradebook could not be written. A submission hit by one gets no
results.json, no gradebook score and no feedback; the run names it with the cause, exits 1, and the
next run grades it again.
"""

from __future__ import annotations

import os

from bertlab.errors import ReportedError

__all__ = ["GraderFailure", "RunStopped", "SUBMISSION_DEADLINE_S", "MAX_ATTEMPTS"]

# When a fault becomes "not graded because of the grader" (the local runner and a Dask cluster alike):
SUBMISSION_DEADLINE_S = float(os.environ.get("BERTLAB_SUBMISSION_DEADLINE_S", 600))  # whole suite, one student
MAX_ATTEMPTS = 2  # a submission whose grader worker dies is tried once more, then reported (not graded)


class GraderFailure(ReportedError, RuntimeError):
    """The grader (not the submission) failed (exit code 1); ``str(exc)`` is the cause, for the instructor only."""


class RunStopped(GraderFailure):
    """The whole run stopped (a failed preflight, a sandbox that cannot start, a cluster gone): what
    finished is recorded, the rest is named as not graded."""
