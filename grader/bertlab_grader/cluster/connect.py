"""The main process's Dask client: a running scheduler (``--scheduler ADDRESS``) or a local cluster
it starts and stops itself (``--cluster local:N``).

Either way the connection is made before anything of the course changes, so an unreachable
scheduler is one line and exit 2 (``SchedulerUnreachable`` is a UsageError).

A local cluster binds only to 127.0.0.1: its scheduler, its workers and its HTTP dashboard (which
binds a port even when asked for none, so it gets ``127.0.0.1:0``). Its workers' ``local_directory``
is a temporary folder of the run, removed at the end (Dask's default, ``/tmp/dask-scratch-space``,
is shared by every cluster of the machine and left behind).
"""

from __future__ import annotations

import contextlib
import logging
import re
import shutil
import tempfile
from typing import Iterator, Optional

from bertlab.errors import UsageError
from bertlab_grader.core.failures import MAX_ATTEMPTS

CONNECT_TIMEOUT_S = 10.0


class SchedulerUnreachable(UsageError):
    """The scheduler named by --scheduler did not answer (exit 2, nothing changed)."""


def require_distributed():
    """Dask's ``distributed`` module, or a UsageError (exit 2, nothing changed) that says how to
    install it (``cluster/worker_setup.py`` takes Dask's WorkerPlugin through it, so importing the
    cluster's modules without the cluster extra says the same)."""
    try:
        import distributed
    except ImportError as exc:
        raise UsageError("grading on a cluster needs Dask distributed: pip install 'bertlab[cluster]' "
                         f"(here: {exc})") from exc
    return distributed


def parse_local(spec: str) -> int:
    """``local:N`` -> N (a positive number of worker processes)."""
    match = re.fullmatch(r"local:(\d+)", spec.strip())
    if not match or int(match.group(1)) < 1:
        raise UsageError(f"--cluster {spec!r}: write local:N, N the number of worker processes (e.g. local:4)")
    return int(match.group(1))


@contextlib.contextmanager
def dask_client(scheduler: Optional[str] = None, local: Optional[str] = None) -> Iterator:
    """A ``distributed.Client`` of ``scheduler`` (an address such as tcp://10.0.0.5:8786 or
    tls://...), or of a local cluster of ``local`` = "local:N" workers started for this block."""
    if (scheduler is None) == (local is None):
        raise UsageError("name either --scheduler ADDRESS or --cluster local:N, not both")
    distributed = require_distributed()
    import dask

    if local is not None:
        n = parse_local(local)
        scratch = tempfile.mkdtemp(prefix="bertlab-dask-")
        # As the local runner: a submission whose worker dies is tried once more, then reported.
        settings = {"distributed.scheduler.allowed-failures": MAX_ATTEMPTS - 1}
        try:
            with dask.config.set(settings), \
                    distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                                             dashboard_address="127.0.0.1:0", local_directory=scratch,
                                             silence_logs=logging.ERROR) as cluster, \
                    distributed.Client(cluster, set_as_default=False) as client:
                yield client
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return
    try:
        client = distributed.Client(scheduler, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise SchedulerUnreachable(
            f"cannot reach the Dask scheduler at {scheduler}: {exc}. Start one with `dask scheduler` "
            "(docs/cluster.md), check the address and port, then run this again (nothing was changed)") from exc
    try:
        yield client
    finally:
        with contextlib.suppress(Exception):
            client.close(timeout=5)
