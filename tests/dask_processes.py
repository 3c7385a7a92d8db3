"""Real Dask processes on 127.0.0.1 for the kit's cluster tests (test_cluster.py) and the cluster
benchmark (benchmarks/cluster_scale.py): a `dask scheduler` and its `dask worker`s, each started as
an instructor would start them, each in a session of its own so that stopping it stops what it started.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

DASK = [sys.executable, "-m", "dask"]


def _start(command: list, log: Path, env: dict | None = None) -> subprocess.Popen:
    with open(log, "ab") as out:  # (the child keeps its own copy of the descriptor)
        return subprocess.Popen([str(c) for c in command], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    """The process and everything it started (its session): a nanny's worker, a worker's sandbox."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(10)
            break
        except subprocess.TimeoutExpired:
            continue


class CliCluster:
    """A `dask scheduler` and its `dask worker`s, as separate processes on 127.0.0.1."""

    def __init__(self, base: Path):
        self.base, self.workers = base, {}
        scheduler_file = base / "scheduler.json"
        self.scheduler = _start(DASK + ["scheduler", "--host", "127.0.0.1", "--port", "0",
                                        "--dashboard-address", "127.0.0.1:0", "--scheduler-file", scheduler_file],
                                base / "scheduler.log")
        deadline = time.monotonic() + 60
        while not scheduler_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert scheduler_file.exists(), (base / "scheduler.log").read_text()[-2000:]
        self.address = json.loads(scheduler_file.read_text())["address"]

    def add_worker(self, name: str, env: dict | None = None) -> None:
        self.workers[name] = _start(DASK + ["worker", self.address, "--name", name, "--nworkers", "1",
                                            "--nthreads", "1", "--host", "127.0.0.1",
                                            "--dashboard-address", "127.0.0.1:0",
                                            "--local-directory", self.base / f"scratch-{name}"],
                                    self.base / f"worker-{name}.log", env)

    def client(self):
        from distributed import Client

        return Client(self.address, timeout=30, set_as_default=False)

    def wait_for_workers(self, n: int) -> None:
        with self.client() as client:
            client.wait_for_workers(n, timeout=120)

    def stop_worker(self, name: str) -> None:
        _stop(self.workers.pop(name))

    def close(self) -> None:
        for name in list(self.workers):
            self.stop_worker(name)
        _stop(self.scheduler)
