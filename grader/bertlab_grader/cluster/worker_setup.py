"""On each Dask worker: what a local grader worker has, set up once, checked before it grades.

``GraderPlugin`` is a ``distributed.WorkerPlugin``. The main process registers it
(``Client.register_plugin``) when a run starts; the scheduler hands it to every worker that is there
and to every worker that joins later (a new machine, or a worker its nanny restarted after a crash).
On each, ``setup`` starts one ``GraderThread``, which

1. installs the host's quiet room for timings (grader/bertlab_grader/performance/host_gate.py),
2. checks bubblewrap (a real start), unless the instructor named ``--unsafe-no-sandbox``,
3. loads torch, MiniLM and the hidden suites' reference data (``warm_up``),
4. opens a warm sandbox under an unprivileged uid of its own on this host (``SANDBOX_UID_BASE`` + a
   slot no other worker of the host holds: RLIMIT_NPROC counts processes per uid),
5. grades the reference solution in it (the preflight).

Only then does the worker get the resource ``RESOURCE`` = 1, and Dask gives ``bertlab-grader`` tasks
only to workers that hold it: a worker whose bubblewrap cannot start or whose preflight falls short
grades nothing, and ``status()`` says why (the run and ``bertlab doctor --scheduler`` print it).

Why a thread of its own: a sandbox's template is tied to the thread that started it (bwrap
--die-with-parent follows the creating thread), and Dask runs tasks on a pool of threads that come
and go. So one long-lived thread owns the sandbox, and a task hands it the submission and waits.

Dask's worker processes are daemonic: nothing here starts a ``multiprocessing`` child (the sandbox is
a ``subprocess``). The nanny sets OMP/MKL/OPENBLAS_NUM_THREADS=1, MALLOC_TRIM_THRESHOLD_=65536 and a
fixed PYTHONHASHSEED for the worker: the sandbox's environment is built from scratch
(``Sandbox._environment``), torch runs on one thread either way, and both sides of a timing pin
malloc themselves (grader/bertlab_grader/sandbox/malloc_pin.py), so none of it reaches a grade.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import fcntl
import os
import queue
import socket
import threading
import time
from typing import Callable, Optional

from bertlab_grader.cluster.connect import require_distributed

# Dask's base class, through the one check that says what to install without the cluster extra (a
# UsageError, exit 2) instead of an ImportError; every importer of this module (and of dispatch.py) gets it.
WorkerPlugin = require_distributed().WorkerPlugin

PLUGIN_NAME = "bertlab-grader"
RESOURCE = "bertlab-grader"  # held (= 1) by a worker whose grader is warm and passed its preflight
SANDBOX_UID_BASE = 62000     # a Dask worker's sandbox uid (the local runner's are 61000 + k)
MAX_SLOTS = 512
WARMING, READY, UNFIT, CLOSED = "warming", "ready", "unfit", "closed"

_grader: Optional["GraderThread"] = None  # this worker process's grader, while the plugin is registered
_host_gate = None                         # this host's quiet room, opened once per process
_slot: Optional[tuple[int, int]] = None   # (slot, the fd of the flock that holds it for this process's life)


def current() -> Optional["GraderThread"]:
    """This worker process's grader, or None."""
    return _grader


def status() -> dict:
    """What this worker can do (run on each worker by ``Client.run``): plain data.

    {"state": warming|ready|unfit|closed|none, "cause": why it cannot grade or None, "host", "pid",
     "steps": [[check, "ok"|"FAIL", text], ...]}"""
    grader = _grader
    base = {"host": socket.gethostname(), "pid": os.getpid()}
    if grader is None:
        return {**base, "state": "none", "cause": "the bertlab grader plugin is not set up on this worker", "steps": []}
    return {**base, "state": grader.state, "cause": grader.cause, "steps": [list(s) for s in grader.steps]}


def _claim_slot(room) -> int:
    """A sandbox slot no other grader process of this host holds (a flock kept for the process's life)."""
    global _slot
    if _slot is not None:
        return _slot[0]
    room.mkdir(mode=0o700, parents=True, exist_ok=True)
    for slot in range(MAX_SLOTS):
        fd = os.open(room / f"slot-{slot}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        _slot = (slot, fd)
        return slot
    raise RuntimeError(f"all {MAX_SLOTS} sandbox slots of this host are taken")


class GraderThread:
    """The one thread of a Dask worker process that grades (see the module docstring)."""

    def __init__(self, assignment: str, hide: list[str], unsafe_no_sandbox: bool,
                 on_ready: Callable[[], None], on_unfit: Callable[[], None]):
        self.assignment, self.hide, self.unsafe_no_sandbox = assignment, list(hide), unsafe_no_sandbox
        self.on_ready, self.on_unfit = on_ready, on_unfit
        self.state, self.cause = WARMING, None
        self.steps: list[tuple[str, str, str]] = []
        self.grader = None  # a PreparedGrader once the sandbox is open
        self._jobs: "queue.Queue" = queue.Queue()
        self._thread = threading.Thread(target=self._main, name="bertlab grader", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # -- set-up ------------------------------------------------------------------------------------

    def _step(self, name: str, ok: bool, text: str) -> None:
        self.steps.append((name, "ok" if ok else "FAIL", text))
        if not ok:
            self.state, self.cause = UNFIT, f"{name}: {text}"

    def _prepare(self) -> bool:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import torch

        torch.set_num_threads(1)  # one core per worker process, as in the local runner
        from bertlab_grader.performance import gate as timing_gate
        from bertlab_grader.performance.host_gate import HostGate, default_room

        global _host_gate
        if _host_gate is None:  # one per process: a later run's set-up reuses it
            _host_gate = HostGate()
        timing_gate.install(_host_gate, timing_gate.NO_ONE)
        from bertlab_grader.sandbox.bubblewrap import bubblewrap_status

        if not self.unsafe_no_sandbox:
            ok, why = bubblewrap_status()
            self._step("bubblewrap", ok, why)
            if not ok:
                return False
        start = time.monotonic()
        from bertlab_grader.grading.scoring import warm_up

        warm_up()
        self._step("model", True, f"MiniLM and the reference data loaded ({time.monotonic() - start:.1f} s)")
        slot = _claim_slot(default_room())
        # Paths of the main host that this host lacks hide nothing here (and a sandbox needs them to exist).
        hide = [p for p in self.hide if os.path.exists(p)]
        from bertlab_grader.grading.prepared import PreparedGrader

        self.grader = PreparedGrader.start(self.assignment, hide, SANDBOX_UID_BASE + slot, self.unsafe_no_sandbox)
        if self.grader.problem is not None:
            self._step("preflight", False, f"the reference solution did not get full marks in the sandbox: "
                                           f"{self.grader.problem}")
            return False
        self._step("preflight", True, f"the reference solution gets full marks in the sandbox "
                                      f"({self.grader.preflight_s:.0f} s, sandbox uid {SANDBOX_UID_BASE + slot})")
        return True

    def _main(self) -> None:
        try:
            fit = self._prepare()
        except Exception as exc:  # noqa: BLE001 - whatever stops a grader from starting: the worker grades nothing
            self._step("set-up", False, f"{type(exc).__name__}: {exc}")
            fit = False
        if fit and self.state == WARMING:
            self.state = READY
            self.on_ready()
        else:
            self.on_unfit()
            self._close_sandbox()
            return
        while True:
            job = self._jobs.get()
            if job is None:
                break
            payload, answer = job
            if not answer.set_running_or_notify_cancel():
                continue
            answer.set_result(self._grade(payload))
        self._close_sandbox()

    def _close_sandbox(self) -> None:
        if self.grader is not None:
            self.grader.close()
            self.grader = None

    # -- grading -----------------------------------------------------------------------------------

    def _grade(self, payload: dict) -> dict:
        """One submission: {"result": results dict, "measured": new timings} or {"grader_failure": cause}."""
        from bertlab_grader.performance import record as timing_record

        known = timing_record.KnownTimings(payload.get("known_timings") or {})
        try:
            result = self.grader.grade(dict(payload["files"]), payload["student"], timings=known)
        except Exception as exc:  # noqa: BLE001 - a grader failure or a grader bug: never the student's
            return {"grader_failure": f"{type(exc).__name__}: {exc}"}
        return {"result": result, "measured": known.measured}

    def grade(self, payload: dict, timeout: float) -> dict:
        """Hand ``payload`` to the grader thread and wait for its answer (at most ``timeout`` seconds)."""
        answer: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put((payload, answer))
        try:
            return answer.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            # The thread is stuck in a grading: this worker grades no more (its nanny's restart, or the
            # next run, gives it a fresh grader).
            self.state, self.cause = UNFIT, f"a grading ran past {timeout:g} s; this worker grades no more"
            self.on_unfit()
            return {"grader_failure": f"grading took longer than {timeout:g} s (BERTLAB_SUBMISSION_DEADLINE_S)"}

    def stop(self) -> None:
        self.state = CLOSED
        self._jobs.put(None)
        # Still warming up or grading (a run stopped by Ctrl-C): it closes its sandbox when it gets here.
        self._thread.join(5)


class GraderPlugin(WorkerPlugin):
    """Set up a grader on each Dask worker for one run (see the module docstring).

    Sent to the workers by pickle, like every Dask plugin: it holds plain data only (the assignment,
    the main host's paths to hide, the --unsafe-no-sandbox flag)."""

    name = PLUGIN_NAME
    idempotent = False  # a new run replaces the last run's grader: the assignment or the kit may differ

    def __init__(self, assignment: str, hide: list[str], unsafe_no_sandbox: bool = False):
        self.assignment, self.hide, self.unsafe_no_sandbox = assignment, list(hide), bool(unsafe_no_sandbox)

    async def setup(self, worker) -> None:
        global _grader
        loop = asyncio.get_running_loop()

        def offer(amount: int) -> Callable[[], None]:
            # (called from the grader thread: the worker's own loop tells the scheduler)
            return lambda: asyncio.run_coroutine_threadsafe(worker.set_resources(**{RESOURCE: amount}), loop)

        await worker.set_resources(**{RESOURCE: 0})
        _grader = GraderThread(self.assignment, self.hide, self.unsafe_no_sandbox, offer(1), offer(0))
        _grader.start()  # warms up in the background: the worker stays responsive meanwhile

    async def teardown(self, worker) -> None:
        global _grader
        grader, _grader = _grader, None
        try:
            await worker.set_resources(**{RESOURCE: 0})
        except Exception:  # noqa: BLE001 - the scheduler may be gone already
            pass
        if grader is not None:
            await asyncio.get_running_loop().run_in_executor(None, grader.stop)
