"""Grader failures: what the grader failed to do, as opposed to what a submission did.

A submission's own failures (a wrong value, an exception raised by its code, a call over its time
limit, its process killed by its own memory or process use) are grades. A ``GraderFailure`` is not:
the sandbox or a grader worker could not start or died while no student code ran, the reference or
a hidden suite raised, the gradebook could not be written. A submission hit by one gets no
results.json, no gradebook score and no feedback; the run names it with the cause, exits 1, and the
next run grades it again.
"""

from __future__ import annotations

from bertlab.errors import ReportedError, UsageError

__all__ = ["GraderFailure", "UsageError"]


class GraderFailure(ReportedError, RuntimeError):
    """The grader (not the submission) failed (exit code 1); ``str(exc)`` is the cause, for the instructor only."""
