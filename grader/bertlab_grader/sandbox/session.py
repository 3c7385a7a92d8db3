"""The trusted side of one submission: its forked child in the sandbox, the requests sent to it,
the callbacks it makes, stashed values.
"""

from __future__ import annotations

import itertools
import os
import secrets
import select
import signal
import socket
import time
from typing import Callable, Optional, Protocol

import numpy as np
import torch

from bertlab_grader.sandbox import give_way
from bertlab_grader.sandbox import cpu_clock
from bertlab_grader.sandbox.bubblewrap import SandboxError
from bertlab_grader.sandbox.inside import rpc
from bertlab_grader.sandbox.output import Output
from bertlab_grader.sandbox.remote import (Remote, StudentError, SubmissionCrashed, SubmissionTimeout,
                                           HandleRef, student_exception)


class TemplateHost(Protocol):
    """What a session needs of the sandbox whose warm template forks its children: the launcher's
    ``Sandbox`` (sandbox/launcher.py) is the one implementation. The launcher imports this module, so
    the session names the interface here instead of importing the class; tests/test_sandbox.py checks
    that ``Sandbox`` has every member and that the session uses no other.

    ``generation`` bumps at every template (re)start: a child of an older one is gone. ``exited``:
    job -> its exit report, as the template sent it. ``limits``: the rlimits every child runs under.
    """

    generation: int
    exited: dict[int, dict]
    limits: dict

    def scrub(self, text: str) -> str:
        """``text`` the submission's process wrote, without the kit's and Python's folders."""

    def start_job(self, job_msg: dict, fds: list[int]) -> int:
        """Fork a child for a job; its id."""

    def end_job(self, job: int) -> None:
        """Kill a job's child and everything it left."""

    def pause_job(self, job: int, pause: bool = True) -> None:
        """Stop or continue a job's child and everything it started."""

    def control_fileno(self) -> int:
        """The template's control socket, to wait on with select."""

    def pump_control(self, timeout: float = 0.0) -> Optional[dict]:
        """Read one control message if one arrives within ``timeout``."""

    def restart(self, reason: str = "") -> None:
        """Replace the template."""

    def job_process(self, job: int) -> Optional[int]:
        """The pid, as the trusted side sees it, of a job's child; None where it cannot be found."""

    def census(self) -> Optional[tuple]:
        """What the sandbox holds and has started (the last pid it handed out, the other processes):
        equal before and after a call when the call started nothing and no helper was there; None
        where it cannot be told."""


class _Deadline:
    """When a wait for the submission ends; it moves later by time that was not the submission's
    (callbacks into trusted code, a pause while another worker timed, and, with ``queued``, the time
    the submission's process spent waiting for a CPU on a busy machine).

    Why the last: a limit on the wall clock alone gives a verdict that depends on the machine's load.
    A memory bomb that meets its memory limit after 2 s of work on a quiet machine took over 3 s
    beside a busy test run, and the same files were graded "timed out" once and "MemoryError" the
    next time. Time spent runnable but not running is the load's; time spent running or asleep (a
    wait that never ends) is the submission's. ``queued()`` gives the seconds the process has spent
    waiting for a CPU so far (``cpu_clock.queued_seconds``); the deadline forgives what it grew by,
    up to ``MAX_FORGIVEN`` times the limit, so that a machine that never frees a CPU still ends the
    wait."""

    MAX_FORGIVEN = 4.0

    def __init__(self, seconds: float, queued: Optional[Callable[[], Optional[float]]] = None):
        self.at = time.monotonic() + seconds
        self.queued = queued
        self.counted = queued() if queued is not None else None
        self.forgivable = self.MAX_FORGIVEN * seconds

    def left(self) -> float:
        return self.at - time.monotonic()

    def extend(self, seconds: float) -> None:
        self.at += seconds

    def forgive_queueing(self) -> bool:
        """At the deadline: move it later by the time the process waited for a CPU since the last
        look (True), or say that the wait is over (False)."""
        if self.counted is None or self.forgivable <= 0:
            return False
        now = self.queued()
        if now is None or now - self.counted < 0.005:
            return False
        extra = min(now - self.counted, self.forgivable)
        self.counted, self.forgivable = now, self.forgivable - extra
        self.at += extra
        return True


class TemplateFailed(Exception):
    """The template died, stopped answering or broke the control protocol."""


class _Child:
    """One forked process serving a session."""

    def __init__(self, job: int, chan: rpc.Channel, nonce: str, template_generation: int):
        self.job, self.chan, self.nonce = job, chan, nonce
        self.template_generation = template_generation
        self.pid: Optional[int] = None  # as the trusted side sees it (Session.busy_seconds), once looked up


class _ChildGone(Exception):
    """The child is gone (and killed): ``kind`` is "timeout" or "crash"; ``module`` the import blamed."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.module: Optional[str] = None


class Stashed:
    """A value kept in the submission's process by ``Session.stash``; as an argument, a fresh copy.
    ``kind`` is the value's ``input_kind``, so a call on stashed inputs is the same kind of call as
    one on the values themselves."""

    __slots__ = ("sid", "generation", "kind")

    def __init__(self, sid: int, generation: int, kind: tuple = ()):
        self.sid, self.generation, self.kind = sid, generation, kind

    def __repr__(self) -> str:
        return f"<value #{self.sid} stashed in the sandbox>"


def input_kind(value, depth: int = 0):
    """What kind of input ``value`` is, without its sizes or values: tensors and arrays by dtype and
    number of dimensions, containers by what they hold (the first few items), the rest by type.

    A call that timed out is not made again with inputs of the same kind (``Session.request``): an
    endless loop would otherwise cost the whole time limit once per test. Sizes are left out on
    purpose: every test of a task calls with its own shapes, and a hang does not care.
    """
    if depth > 4:
        return "..."
    if isinstance(value, Stashed):
        return value.kind
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), value.dim())
    if isinstance(value, np.ndarray):
        return ("array", str(value.dtype), value.ndim)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(input_kind(v, depth + 1) for v in list(value)[:4])
    if isinstance(value, dict):
        return ("dict",) + tuple((str(k), input_kind(v, depth + 1)) for k, v in list(value.items())[:8])
    if isinstance(value, Remote):
        return ("remote",) + callee(value)
    return type(value).__name__


def callee(remote: Remote) -> tuple:
    """What a request to ``remote`` reaches, the same for every object of one type: ``("module",
    "pooling", "masked_mean_pool")``, or a method of a handle by the type the submission's object has."""
    root = remote._bl_root
    base = ("handle", remote._bl_type or "object") if root[0] == "handle" else (root[0], root[1])
    return base + tuple(map(str, remote._bl_path))


class Session:
    """The trusted side of one submission: starts children, sends requests, serves callbacks."""

    def __init__(self, sandbox: TemplateHost, sources: dict[str, str], call_timeout_s: float):
        self.sandbox = sandbox  # the launcher's Sandbox, whose template forks this session's children
        self.sources = sources
        self.timeout_s = float(call_timeout_s)
        self.child: Optional[_Child] = None
        self.generation = 0              # bumps with every child: handles of an older one are stale
        self.skip: dict[str, dict] = {}  # module -> why it is no longer imported (timeout/crash)
        # (what was called, the kind of its inputs) -> the message of its timeout: not called again
        self.hung: dict[tuple, str] = {}
        # what was called -> how it first failed hard (timed out, or crashed its process), whatever
        # its inputs; with ``no_retry_of_hung`` (the hints) it is not called again
        self.failed_hard: dict[tuple, BaseException] = {}
        self.no_retry_of_hung = False
        self.eager: Optional[list[str]] = None  # the modules a new child imports first (None: all)
        self._segment_start = False  # the next child is a segment's first: no "restarted" note
        self.module_errors: dict[str, Optional[dict]] = {}
        self.callbacks: dict[int, object] = {}
        self._models: dict[int, tuple] = {}
        self._callback_ids: dict[int, int] = {}
        self._releases: list[tuple[int, int]] = []
        self._requests = itertools.count(1)
        self._out = Output()
        self._closed = False
        # The reference's own session that the performance task times against this one, on the same
        # path (performance/timing.py, reference_twin); closed with this one.
        self.reference_twin: Optional["Session"] = None

    # ---- public helpers used by RemoteImplementation
    def output(self) -> str:
        """What the submission's process printed (head and tail), without sandbox-side folders."""
        return self.sandbox.scrub(self._out.text())

    def import_errors(self) -> dict[str, str]:
        self._ensure_child()
        errors = {m: info["message"] for m, info in self.module_errors.items() if info}
        errors.update({m: info["message"] for m, info in self.skip.items()})
        return errors

    # ---- grading segments (grader/bertlab_grader/grading/segments.py)
    def start_segment(self, modules: list[str]) -> None:
        """Begin a segment of the grading: the next request goes to a fresh child that imports
        ``modules`` first (the others when a request names them), and what the submission prints
        is collected anew. What timed out or crashed earlier (``skip``, ``hung``, ``failed_hard``)
        is kept: a segment is graded the same whether the one before ran here or elsewhere."""
        self._drop_child()
        self._out.close()
        self._out = Output()
        self.module_errors = {}
        self.eager = list(modules)
        self._segment_start = True

    def export_memos(self) -> dict:
        """What this session learned about the submission's hangs and crashes, as plain data for
        another session of the same submission (``seed_memos``)."""
        return {"skip": {m: dict(info) for m, info in self.skip.items()},
                "hung": dict(self.hung),
                "failed_hard": {key: (type(exc).__name__, exc.message, exc.type_name)
                                for key, exc in self.failed_hard.items()}}

    def seed_memos(self, memos: dict) -> None:
        """Take what other sessions of this submission learned (``export_memos``), earlier first."""
        for module, info in memos.get("skip", {}).items():
            self.skip.setdefault(module, dict(info))
        for key, message in memos.get("hung", {}).items():
            self.hung.setdefault(key, message)
        for key, (kind, message, type_name) in memos.get("failed_hard", {}).items():
            cls = SubmissionTimeout if kind == "SubmissionTimeout" else SubmissionCrashed
            self.failed_hard.setdefault(key, cls(message, type_name=type_name))

    def release(self, hid: int, generation: int) -> None:
        self._releases.append((hid, generation))  # sent with the next request

    # ---- child life cycle
    def _alive(self) -> bool:
        return (self.child is not None and self.child.template_generation == self.sandbox.generation
                and self.child.job not in self.sandbox.exited)

    def _ensure_child(self) -> _Child:
        if self._alive():
            return self.child
        if self.child is not None:
            self._drop_child()
        for _ in range(len(self.sources) + 2):
            child = self._spawn()
            try:
                self._await_ready(child)
                return child
            except _ChildGone as gone:
                if gone.module is None:
                    # Gone before it announced its first import: no student code had run (every
                    # module announces itself before it executes, and ending the previous child
                    # killed everything it left), so the server or the template failed, not the
                    # submission. Scoring it would blame the student for the grader.
                    raise SandboxError(f"the submission's process failed before any submitted code ran: "
                                       f"{gone}") from None
                self.skip[gone.module] = {"kind": gone.kind, "message": str(gone)}
        raise SubmissionCrashed("the submission's process could not be started")

    def _spawn(self) -> _Child:
        if self.generation and not self._segment_start:
            self._out.add(b"\n[the submission's process was restarted]\n")
        self._segment_start = False
        nonce = secrets.token_hex(16)
        mine, theirs = socket.socketpair()
        out_r, out_w = os.pipe()
        try:
            job = self.sandbox.start_job({"nonce": nonce, "sources": self.sources, "skip": self.skip,
                                          "eager": self.eager, "limits": self.sandbox.limits},
                                         [theirs.fileno(), out_w])
        except BaseException:
            mine.close()
            os.close(out_r)
            raise
        finally:
            theirs.close()
            os.close(out_w)
        self._out.attach(out_r)
        self.generation += 1
        self.child = _Child(job, rpc.Channel(mine, share_large=True), nonce, self.sandbox.generation)
        return self.child

    def _await_ready(self, child: _Child) -> None:
        """Wait for the child's imports; a module that hangs or kills the process is blamed."""
        current = None
        deadline = _Deadline(self.timeout_s + 10.0)  # the fork itself, under load
        while True:
            try:
                msg, _ = self._next_message(child, deadline)
            except _ChildGone as gone:
                gone.module = current
                if current:
                    what = "did not finish importing" if gone.kind == "timeout" else "crashed while importing"
                    gone.args = (f"{current}.py {what}: {gone}",)
                raise
            op = msg.get("op")
            if op == "importing":
                current = str(msg.get("module"))
                deadline = _Deadline(self.timeout_s)
            elif op == "ready":
                modules = msg.get("modules")
                self.module_errors = modules if isinstance(modules, dict) else {}
                return
            elif op != "hello":
                self._drop_child()
                raise SubmissionCrashed(f"protocol violation while starting: unexpected {op!r}")

    def _drop_child(self) -> None:
        child, self.child = self.child, None
        if child is None:
            return
        child.chan.close()
        if child.template_generation == self.sandbox.generation:
            self.sandbox.end_job(child.job)

    @property
    def closed(self) -> bool:
        return self._closed

    # ---- what the performance task reads from outside the submission's process
    def process_id(self) -> Optional[int]:
        """The pid, as this side sees it, of the submission's current process; None when there is
        none or it cannot be found."""
        child = self.child
        if child is None or child.template_generation != self.sandbox.generation:
            return None
        if child.pid is None:
            child.pid = self.sandbox.job_process(child.job) or 0
        return child.pid or None

    def _queued_clock(self) -> Optional[Callable[[], Optional[float]]]:
        """``queued()``: the seconds the submission's process has waited for a CPU (``_Deadline``), or
        None where its pid is unknown."""
        pid = self.process_id()
        return (lambda: cpu_clock.queued_seconds(pid)) if pid and cpu_clock.queued_seconds(pid) is not None else None

    def busy_seconds(self) -> Optional[float]:
        """CPU seconds the submission's current process has used (all its threads), read from the
        kernel's clock of that process (sandbox/cpu_clock.py), so nothing inside can change it; None
        when there is no process or its pid cannot be found."""
        pid = self.process_id()
        return cpu_clock.cpu_seconds(pid) if pid else None

    def census(self) -> Optional[tuple]:
        """(the child's job, the sandbox's census): equal before and after a call when the same process
        served it and nothing in the sandbox started a process or a thread (``TemplateHost.census``)."""
        child = self.child
        if child is None:
            return None
        taken = self.sandbox.census()
        return None if taken is None else (child.job, self.sandbox.generation) + taken

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._drop_child()
            self._out.close()
            if self.reference_twin is not None:
                self.reference_twin.close()

    # ---- waiting for the child
    def _gone(self, child: _Child, kind: str, why: str, died: bool = False) -> _ChildGone:
        """Kill the child (if needed) and describe what happened, with its last output."""
        status = self.sandbox.exited.get(child.job)
        if status is None and died:
            # Give the template a moment to report the exit status (a crash is read as EOF first).
            deadline = time.monotonic() + 2.0
            try:
                while child.job not in self.sandbox.exited and time.monotonic() < deadline:
                    self.sandbox.pump_control(0.1)
            except TemplateFailed:
                pass
            status = self.sandbox.exited.get(child.job)
        self._drop_child()
        if status is not None:
            if status.get("signal"):
                try:
                    name = signal.Signals(status["signal"]).name
                except ValueError:
                    name = f"signal {status['signal']}"
                hint = {"SIGKILL": " (killed: memory or process limit?)", "SIGXCPU": " (CPU time limit)",
                        "SIGSEGV": " (segmentation fault)", "SIGXFSZ": " (file size limit)"}.get(name, "")
                why = f"{why}: killed by {name}{hint}"
            else:
                why = f"{why}: exit code {status.get('code')}"
        # The student's last output, with the kit's and the Python install's folders cut off (a
        # library's warning or a traceback the submission printed would name them).
        tail = self.sandbox.scrub(self._out.text()[-1500:]).strip()
        if tail:
            why += f"\nLast output:\n{tail}"
        return _ChildGone(kind, why)

    def _next_message(self, child: _Child, deadline: _Deadline) -> tuple[dict, dict]:
        """The child's next valid frame, or _ChildGone (timeout, exit, EOF, protocol violation)."""
        while True:
            left = deadline.left()
            if left <= 0 and deadline.forgive_queueing():
                continue
            if left <= 0:
                raise self._gone(child, "timeout", f"no answer within {self.timeout_s:g} s")
            try:
                readable, _, _ = select.select([child.chan, self.sandbox.control_fileno()], [], [],
                                               left if give_way.timer_waiting is None else min(left, give_way.POLL_S))
            except (OSError, ValueError, TypeError):
                readable = []
            if not readable and give_way.timer_waiting is not None and give_way.timer_waiting():
                deadline.extend(self._pause_for_timer(child))
                continue
            if child.chan in readable:
                try:
                    msg, tensors = child.chan.recv(timeout=max(left, 0.5))
                except TimeoutError:
                    raise self._gone(child, "timeout", f"no complete answer within {self.timeout_s:g} s") from None
                except (EOFError, OSError):
                    raise self._gone(child, "crash", "the submission's process died", died=True) from None
                except rpc.ProtocolError as exc:
                    raise self._gone(child, "crash", f"the submission's process broke the protocol ({exc})") from None
                if msg.get("n") != child.nonce:
                    raise self._gone(child, "crash", "the submission's process sent a message it should not have")
                return msg, tensors
            if self.sandbox.control_fileno() in readable or not readable:
                try:
                    self.sandbox.pump_control(0.0)
                except TemplateFailed as exc:
                    # The template died while this child exists. The submission can kill it (same
                    # uid inside the sandbox: see the red-team samples kill_template and
                    # stop_template), so while a call or an import runs that is the submission's
                    # crash. Before the child's first import no student code runs, and
                    # _ensure_child turns this into a SandboxError.
                    self.sandbox.restart(str(exc))
                    raise _ChildGone("crash", "the sandboxed server died (restarted)") from None
            if child.job in self.sandbox.exited:
                # A last reply may be in flight (sys.exit after replying): read what is already there.
                if select.select([child.chan], [], [], 0.05)[0]:
                    continue
                raise self._gone(child, "crash", "the submission's process died")

    def _pause_for_timer(self, child: _Child) -> float:
        """Stop the child's processes until the waiting timer is done; the seconds that took."""
        started = time.monotonic()
        try:
            self.sandbox.pause_job(child.job, True)
        except (TemplateFailed, OSError):
            return time.monotonic() - started  # the wait loop finds out what happened to the template
        try:
            give_way.give_way()
        finally:
            try:
                self.sandbox.pause_job(child.job, False)
            except (TemplateFailed, OSError):
                pass
        return time.monotonic() - started

    # ---- requests
    def stash(self, value, replaces: tuple = ()) -> "Stashed":
        """Send plain data (tensors, arrays, numbers, containers of them) to the submission's process
        once. Pass the returned ``Stashed`` as an argument of later calls: each call gets a fresh
        copy made there, so the data does not travel again (the performance task times calls
        without the transfer of their inputs). The values stashed as ``replaces`` (``Stashed``) are
        dropped there first, in the same message: the performance task stashes new inputs for every
        timed call, and without the drop the process would keep the inputs of all 66 calls."""
        child = self._ensure_child()
        encoder = rpc.Encoder()  # plain data only: no handles, callbacks or models
        rid = next(self._requests)
        header = {"op": "stash", "id": rid, "n": child.nonce, "value": encoder.encode(value)}
        drop = [old.sid for old in replaces if old.generation == self.generation]
        if drop:  # (a stash from before a restart is gone with its process already)
            header["drop"] = drop
        sid = self._exchange(child, header, encoder.tensors, "sending inputs to the submission")
        if type(sid) is not int:
            raise self._gone(child, "crash", "protocol violation: bad stash id")
        return Stashed(sid, self.generation, input_kind(value))

    def request(self, remote: Remote, mode: str, args: tuple = (), kwargs: Optional[dict] = None,
                watch: bool = True):
        """One call (``mode`` "call") or attribute fetch ("get") in the submission's process.
        ``watch=False`` skips the copy-back of in-place argument changes (for stashed arguments)."""
        root = remote._bl_root
        what = ".".join(map(str, ((root[1] if root[0] in ("module", "probe") else "<handle>"),) + remote._bl_path))
        if root[0] == "handle" and (root[2] != self.generation or not self._alive()):
            raise SubmissionCrashed("this object belonged to an earlier run of the submission's process "
                                    "(it was restarted after a timeout or crash)")
        # The same call with the same kind of inputs as one that timed out would time out again
        # (a hang does not depend on sizes): it fails at once, with the first one's message, instead
        # of costing the whole limit once more.
        hung_key = (callee(remote), mode, input_kind(list(args)), input_kind(dict(kwargs or {})))
        if hung_key in self.hung:
            raise SubmissionTimeout(self.hung[hung_key])
        if self.no_retry_of_hung and hung_key[:2] in self.failed_hard:
            raise self.failed_hard[hung_key[:2]].with_traceback(None)
        child = self._ensure_child()
        if root[0] == "module" and root[1] in self.skip:  # (starting the child may have just found out)
            info = self.skip[root[1]]
            raise (SubmissionTimeout if info["kind"] == "timeout" else SubmissionCrashed)(info["message"])
        encoder = rpc.Encoder(fallback=self._encode_extra)
        rid = next(self._requests)
        header = {"op": "call", "id": rid, "n": child.nonce, "mode": mode, "path": list(remote._bl_path),
                  "target": {root[0]: root[1]},  # {"module": name}, {"probe": name} or {"handle": id}
                  "args": encoder.encode(list(args)), "kwargs": encoder.encode(dict(kwargs or {})),
                  "release": self._take_releases(), "watch": bool(watch)}
        try:
            return self._exchange(child, header, encoder.tensors, what, inputs=(args, kwargs or {}))
        except SubmissionTimeout as timeout:
            self.hung[hung_key] = str(timeout)
            self.failed_hard.setdefault(hung_key[:2], timeout)
            raise
        except SubmissionCrashed as crash:
            self.failed_hard.setdefault(hung_key[:2], crash)
            raise

    def _take_releases(self) -> list[int]:
        ids = [hid for hid, gen in self._releases if gen == self.generation]
        self._releases.clear()
        return ids

    def _exchange(self, child: _Child, header: dict, tensors: dict, what: str, inputs=((), {})):
        try:
            try:
                child.chan.send(header, tensors, timeout=self.timeout_s)
            except rpc.EncodeError as exc:
                raise TypeError(f"cannot send the arguments of {what} to the sandbox: {exc}") from None
            except OSError:  # (its exit status, when the template reports it in time, says how it died)
                raise self._gone(child, "crash", f"the submission's process died before {what}", died=True) from None
            deadline = _Deadline(self.timeout_s, self._queued_clock())
            while True:
                msg, blob = self._next_message(child, deadline)
                op = msg.get("op")
                if op == "reply" and msg.get("id") == header["id"]:
                    result = self._result(msg, blob, what)
                    self._copy_back(msg, blob, inputs)
                    return result
                if op == "reply" and type(msg.get("id")) is int and msg["id"] < header["id"]:
                    continue  # the late answer to a request we gave up on (interrupted): drop it
                if op == "callback":
                    started = time.monotonic()
                    self._serve_callback(child, msg, blob)
                    deadline.extend(time.monotonic() - started)  # time spent here is not the submission's
                elif op != "importing":
                    raise self._gone(child, "crash", f"protocol violation: unexpected {op!r}")
        except _ChildGone as gone:
            if gone.kind == "timeout":
                last_output = str(gone).partition("\n")[2]  # after "no answer within ... s"
                raise SubmissionTimeout(f"{what} did not return within the {self.timeout_s:g} s limit: your code "
                                        "did not return. Look for an endless loop or a wait that never ends; "
                                        "it is not called again with inputs of this kind in this grading."
                                        + (f"\n{last_output}" if last_output else "")) from None
            raise SubmissionCrashed(f"{what}: {gone}") from None

    def _copy_back(self, msg: dict, blob: dict, inputs) -> None:
        """Arguments cross as copies; where the student's code changed a tensor or array argument in
        place, or one that is a direct element of a list or tuple argument (cka_matrix's reps), the
        server sends its new value and we write it into the caller's object, so the call behaves as it
        would in process (and a test can see that its inputs were modified). Keys: "a:<i>" or
        "k:<name>", with ".<j>" for element j (child.py, _snapshot_arrays)."""
        mutated = msg.get("mutated")
        if not msg.get("ok") or not isinstance(mutated, dict):
            return

        def digits(text: str) -> bool:
            return text.isascii() and text.isdigit()

        args, kwargs = inputs
        decoder = rpc.Decoder(blob, self._decode_extra)
        for key, encoded in mutated.items():
            kind, _, rest = str(key).partition(":")
            name, dot, element = rest.partition(".")
            if kind == "a" and digits(name) and int(name) < len(args):
                original = args[int(name)]
            elif kind == "k" and name in kwargs:
                original = kwargs[name]
            else:
                continue
            if dot:  # an element of a list or tuple argument, one level deep
                if not isinstance(original, (list, tuple)) or not digits(element) or int(element) >= len(original):
                    continue
                original = original[int(element)]
            try:
                new = decoder.decode(encoded)
                if isinstance(original, torch.Tensor) and isinstance(new, torch.Tensor):
                    with torch.no_grad():
                        if original.shape == new.shape:
                            original.copy_(new.to(original.dtype))
                        else:
                            original.data = new.to(original.dtype)
                elif isinstance(original, np.ndarray) and isinstance(new, np.ndarray) and original.shape == new.shape:
                    np.copyto(original, new, casting="unsafe")
            except Exception:  # noqa: BLE001 - a garbled copy-back is ignored, never trusted further
                continue

    def _result(self, msg: dict, blob: dict, what: str):
        if msg.get("ok"):
            try:
                return rpc.Decoder(blob, self._decode_extra).decode(msg.get("value"))
            except Exception as exc:  # whatever the bytes were, they are not a result
                raise self._gone(self.child, "crash", f"undecodable result ({exc})") from None
        info = msg.get("error") if isinstance(msg.get("error"), dict) else {}
        if info.get("fatal") and info.get("import"):  # sys.exit() at import: only that module fails
            raise SubmissionCrashed(str(info.get("message")), type_name=str(info.get("type")))
        if info.get("fatal"):
            gone = self._gone(self.child, "crash", f"the submission raised {info.get('type')}, "
                                                   "which ends its process")
            raise SubmissionCrashed(f"{what}: {gone}", type_name=str(info.get("type")))
        raise student_exception(info)

    def _serve_callback(self, child: _Child, msg: dict, blob: dict) -> None:
        fn = self.callbacks.get(msg.get("cb"))
        if fn is None:
            raise self._gone(child, "crash", "protocol violation: unknown callback")
        try:
            decoder = rpc.Decoder(blob, self._decode_extra)
            args, kwargs = decoder.decode(msg.get("args")), decoder.decode(msg.get("kwargs"))
            if not isinstance(args, list) or not isinstance(kwargs, dict):
                raise rpc.ProtocolError("bad callback arguments")
        except Exception as exc:
            raise self._gone(child, "crash", f"protocol violation in a callback ({exc})") from None
        reply = {"op": "cbreply", "id": msg.get("id"), "n": child.nonce}
        encoder = rpc.Encoder(fallback=self._encode_extra)
        try:
            reply.update(ok=True, value=encoder.encode(fn(*args, **kwargs)))
        except StudentError:
            raise  # a nested call into the submission failed: that ends this call too
        except Exception as exc:  # the trusted callable refused the student's arguments
            encoder = rpc.Encoder()
            builtin = next((c.__name__ for c in type(exc).__mro__ if c.__name__ in
                            ("ValueError", "TypeError", "IndexError", "KeyError", "RuntimeError")
                            and c.__module__ == "builtins"), None)
            reply.update(ok=False, error={"type": type(exc).__name__, "builtin": builtin,
                                          "message": str(exc)[:300]})
        try:
            child.chan.send(reply, encoder.tensors, timeout=self.timeout_s)
        except (OSError, rpc.EncodeError):
            raise self._gone(child, "crash", "the submission's process died during a callback") from None

    # ---- values crossing the boundary
    def _encode_extra(self, obj) -> dict:
        """Arguments the wire format has no tag for: proxies, stashed values, named models, callables."""
        if isinstance(obj, Stashed):
            if obj.generation != self.generation:
                raise rpc.EncodeError("a value stashed in an earlier run of the submission's process "
                                      "(it was restarted after a timeout or crash)")
            return {"$t": "stash", "id": obj.sid}
        if isinstance(obj, Remote):
            if obj._bl_session is not self:
                raise rpc.EncodeError("an object from another submission's session")
            root = obj._bl_root
            if root[0] == "handle":
                if root[2] != self.generation:
                    raise rpc.EncodeError("an object from an earlier run of the submission's process")
                target = {"handle": root[1]}
            else:
                target = {root[0]: root[1]}  # {"module": name} or {"probe": name}
            return {"$t": "ref", "root": target, "path": list(obj._bl_path)}
        name = getattr(obj, "_bertlab_model_name", None)
        if isinstance(name, str):
            # Number each model object; keeping it alive keeps its number from being reused.
            entry = self._models.setdefault(id(obj), (obj, len(self._models) + 1))
            return {"$t": "model", "name": name, "key": entry[1]}

        if isinstance(obj, torch.nn.Module):
            raise rpc.EncodeError("only named models (bertlab.models.named_model) can be passed to a submission")
        if callable(obj) and not isinstance(obj, type):
            key = id(obj)
            if key not in self._callback_ids or self.callbacks.get(self._callback_ids[key]) is not obj:
                cid = len(self.callbacks) + 1
                self.callbacks[cid] = obj
                self._callback_ids[key] = cid
            return {"$t": "callback", "id": self._callback_ids[key]}
        raise rpc.EncodeError(f"cannot send a {type(obj).__module__}.{type(obj).__qualname__} to the sandbox")

    def _decode_extra(self, tag: dict):
        kind = tag["$t"]
        if kind == "handle" and type(tag.get("id")) is int:
            type_name = tag.get("type") if isinstance(tag.get("type"), str) else None
            ref = HandleRef(self, tag["id"], self.generation)
            return Remote(self, ("handle", tag["id"], self.generation), (), type_name, ref)
        if kind == "callback" and type(tag.get("id")) is int and tag["id"] in self.callbacks:
            return self.callbacks[tag["id"]]
        raise rpc.ProtocolError(f"unexpected {kind!r} from the submission")


