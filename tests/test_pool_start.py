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


def _children_templates(parent: int) -> list[int]:
    """The pids of the bubblewrap'd sandbox templates whose parent is ``parent`` (a sandbox's own,
    which preloads MiniLM: not the reference solutions' second one, ``Sandbox.reference_host``)."""
    import os
    from pathlib import Path

    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        if ppid == parent and os.path.basename(command[0]) == b"bwrap" and b"bertlab_sandbox.server" in command \
                and b"minilm" in command:
            found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_the_main_process_starts_each_workers_template_and_the_worker_adopts_it(tmp_path):
    """``start_workers`` starts each worker's sandbox template in this process, before the workers
    exist (they wait for the fork server's imports), and hands it over: the worker grades its preflight
    in that template instead of starting one of its own (``Sandbox._adopt`` kills a template that is
    not the one it would start, and starts its own). Once the pool is stopped, the template is gone and
    reaped, whoever ended it."""
    import os

    from bertlab_grader.course.pool import start_workers, stop_workers
    from bertlab_grader.course.settings import CourseSettings
    from bertlab_grader.sandbox.bubblewrap import bubblewrap_status
    from bertlab_grader.sandbox.template_process import can_hand_off

    if not bubblewrap_status()[0] or not can_hand_off():
        pytest.skip("needs bubblewrap and pidfds")
    course = tmp_path / "course"
    course.mkdir()
    pool = start_workers(1, CourseSettings(course, "week7"))
    try:
        ours = pool[0].template.proc.pid
        wait_until_ready(pool)
        assert _children_templates(os.getpid()) == [ours], "the template this process started is not running"
        assert _children_templates(pool[0].process.pid) == [], "the worker started a template of its own"
    finally:
        stop_workers(pool)
    assert not os.path.exists(f"/proc/{ours}"), "the handed-off template outlived its worker, or was not reaped"


def test_the_main_process_of_a_run_imports_neither_torch_nor_pytest():
    """The main process of `bertlab grade` runs beside the workers' fork server (torch, transformers and
    the hidden suites: 4 s of one core) and the sandbox templates it starts: it reads the suites'
    points from the kit's cache (grading/kept_points.py) and starts the templates with
    sandbox/template_process.py, so that its own start-up costs the workers no core."""
    import subprocess
    import sys

    modules = ["bertlab_grader.cli", "bertlab_grader.course.runner", "bertlab_grader.course.pool",
               "bertlab_grader.course.watch", "bertlab_grader.course.schedule", "bertlab_grader.course.journal",
               "bertlab_grader.course.gradebook", "bertlab_grader.sandbox.template_process",
               "bertlab_grader.grading.kept_points", "bertlab_grader.performance.record"]
    probe = (f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
             "print(sorted(m for m in ('torch', 'pytest', 'transformers') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]", f"the main process's modules import {proc.stdout.strip()}"
