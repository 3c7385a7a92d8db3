"""Grading on a Dask cluster: `bertlab grade COURSE --scheduler tcp://HOST:PORT` or `--cluster local:N`
(docs/cluster.md).

    connect.py       the main process's Dask client: a scheduler's address, or a local cluster of N workers
    worker_setup.py  the WorkerPlugin: on each Dask worker, one grader thread with a warm sandbox, warmed
                     up and preflighted, before the worker is offered any submission
    task.py          what a Dask worker runs for one submission: plain data in, JSON text out
    dispatch.py      the main process's side: a bounded number of submissions in flight, results taken
                     back one by one, faults turned into "not graded because of the grader"

The main process (grader/bertlab_grader/course/runner.py) stays the only writer of the course.
"""
