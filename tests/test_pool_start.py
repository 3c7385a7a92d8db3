"""Waiting for a pool's workers to start (``course/pool.py``: ``wait_until_ready``), with stand-in
workers: real processes that say what a grader worker says once its start-up and preflight are over.

`bertlab grade --watch` announces that it is watching only after this wait, so the first hand-in is
graded by warm workers. A worker that cannot start, fails its preflight or dies while starting stops
the watch before any student is graded.
"""

from __future__ import annotations

import multiprocessing as mp
import time

import pytest

from bertlab_grader.core.failures import RunStopped
from bertlab_grader.course.pool import wait_until_ready

CTX = mp.get_context("fork")


def _say(conn, message, delay: float) -> None:
    time.sleep(delay)
    if message is not None:
        conn.send(message)
    conn.close()


class StandInWorker:
    """What ``wait_until_ready`` reads of a grader worker: its pipe, its process, ``ready``."""

    def __init__(self, message, delay: float = 0.0):
        self.conn, child = CTX.Pipe()
        self.process = CTX.Process(target=_say, args=(child, message, delay), daemon=True)
        self.process.start()
        child.close()
        self.ready = False


def test_returns_once_every_worker_is_ready_however_late():
    pool = [StandInWorker(("ready", None), delay=0.4), StandInWorker(("ready", None))]
    started = time.monotonic()
    wait_until_ready(pool)
    assert all(w.ready for w in pool)
    assert time.monotonic() - started >= 0.3, "returned before the slower worker said it was ready"


def test_a_failed_preflight_stops_with_the_reference_s_first_problem():
    problem = "cka/test_linear_cka_matches_reference (failed): got 0.5, expected 1.0"
    pool = [StandInWorker(("ready", None)), StandInWorker(("ready", problem))]
    with pytest.raises(RunStopped) as caught:
        wait_until_ready(pool)
    assert "Preflight failed" in str(caught.value) and problem in str(caught.value)


def test_a_worker_that_cannot_start_stops_with_its_cause():
    pool = [StandInWorker(("fatal", "SandboxUnavailable: bubblewrap is not installed"))]
    with pytest.raises(RunStopped, match="could not start: SandboxUnavailable: bubblewrap"):
        wait_until_ready(pool)


def test_a_worker_that_dies_without_a_word_stops_the_wait():
    pool = [StandInWorker(None, delay=0.1)]
    with pytest.raises(RunStopped, match="died while starting"):
        wait_until_ready(pool)
