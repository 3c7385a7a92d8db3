"""What a Dask worker runs for one submission: plain data in, JSON text out.

The payload is JSON text made by the main process (grader/bertlab_grader/cluster/dispatch.py):

    {"student": "alice", "assignment": "week7", "run": "<this run's id>",
     "files": {"cka.py": "<text>", ...},              # the submission's files, nothing of the course's paths
     "known_timings": {"masked_mean_pool": {"measured_at", "timing"}, ...}}   # identical files timed before

The answer is JSON text too, so the main process never unpickles anything a worker (let alone a
sandbox) made:

    {"result": {...results.json...}, "measured": {name: {"measured_at", "timing"}}, "worker": address}
    {"grader_failure": "cause", "worker": address}     # the grader failed: never a grade
    {"unfit": "cause", "worker": address}              # this worker cannot grade: the main process sends
                                                       # the submission elsewhere
"""

from __future__ import annotations

import json

from bertlab_grader.core.failures import SUBMISSION_DEADLINE_S

EVENT_TOPIC = "bertlab-grading"  # one event per start of a grading: a submission started twice was re-run


def grade_submission(payload: str) -> str:
    """Grade one submission on this worker's grader thread (grader/bertlab_grader/cluster/worker_setup.py)."""
    from distributed import get_worker

    from bertlab_grader.cluster import worker_setup

    worker = get_worker()
    job = json.loads(payload)
    grader = worker_setup.current()
    if grader is None or grader.state != worker_setup.READY:
        cause = grader.cause if grader is not None and grader.cause else "its grader is not ready"
        return json.dumps({"unfit": cause, "worker": worker.address})
    worker.log_event(EVENT_TOPIC, {"student": job["student"], "worker": worker.address, "run": job.get("run")})
    answer = grader.grade(job, timeout=SUBMISSION_DEADLINE_S)
    return json.dumps({**answer, "worker": worker.address})


def echo(payload: str) -> str:
    """The same trip as ``grade_submission`` with no grading: Dask's own cost per submission
    (scheduling, transfer both ways), measured by benchmarks/cluster_scale.py."""
    return json.dumps({"echo": len(payload)})
