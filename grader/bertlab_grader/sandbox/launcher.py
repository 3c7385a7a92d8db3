"""Starting the sandbox and talking to it: ``Sandbox`` (the warm template) and its per-submission sessions.

    sb = Sandbox(kit_root=..., hide=[course_dir])     # starts the warm template once
    with sb.session(sources, call_timeout_s=20.0) as impl:
        impl.cka.linear_cka(X, Y)
    sb.close()

The template (inside/server.py) runs under bubblewrap: its own pid, network, IPC and UTS namespaces, a
read-only view of the system with the kit, the course, /tmp, /root, /home and /run hidden (only the
Python install, ``bertlab`` and the server's own files are shown back, wherever they live), a private
/tmp, and an unprivileged uid when we are root. Where bubblewrap is missing or cannot create its
namespaces, ``Sandbox()`` raises ``SandboxUnavailable``: only ``unsafe_no_sandbox=True`` (the
``--unsafe-no-sandbox`` flag) runs student code with rlimits only, and then it says so loudly.
``bubblewrap_status()`` tells whether bubblewrap works here (``bertlab doctor``).

Each session forks a fresh child from the template; the child gets a socket of its own (passed over the
template's control socket with SCM_RIGHTS) and a pipe for its stdout/stderr. A call that times out,
a child that dies, or a child that breaks the protocol is killed and reported; the next call starts a
new child. A template that dies or stops answering is restarted. How a template's process is started (its command
line, its mounts, its environment) and handed from one process to another: sandbox/template_process.py.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import select
import socket
import subprocess
import sys
import time
import weakref
from pathlib import Path
from typing import Iterable, Optional

from bertlab_grader.core.locations import KIT_ROOT
from bertlab_grader.sandbox.bubblewrap import (
    SandboxError, SandboxUnavailable, binary_key, bwrap_checked, trial_run, unavailable_error, bubblewrap_status)
from bertlab_grader.sandbox import cpu_clock
from bertlab_grader.sandbox.inside import rpc, reports
from bertlab_grader.sandbox.remote import RemoteImplementation
from bertlab_grader.sandbox.session import Session, Stashed, TemplateFailed
from bertlab_grader.sandbox.template_process import (
    DEFAULT_PRELOAD, NOBODY, SANDBOX_INSIDE_DIR, AdoptedProcess, TemplateCommand, TemplateHandoff, kill_template)

FALLBACK_WARNING = ("WARNING: bubblewrap not available: student code runs with rlimits only, NOT isolated "
                    "from the filesystem or network (--unsafe-no-sandbox). Install it: apt-get install bubblewrap")

_warned = False


class Sandbox:
    """A warm server's template (under bubblewrap) that runs submissions.

    ``kit_root``: the kit (``bertlab_grader.core.locations.KIT_ROOT``: the checkout, hidden from student code
    except ``bertlab`` and the server's own files; installed, the site directory, of which only the
    instructor package ``bertlab_grader`` is hidden); ``hide``: more paths to hide (the course directory, the gradebook). ``timeout_s`` is the
    default per-call limit, ``memory_mb`` the address space a child may add to what it inherits.
    Paths in ``hide`` must exist when the template starts (directories get an empty tmpfs, files
    /dev/null); a path created later is not hidden until the next restart.

    The sandbox fails closed: when bubblewrap is missing or cannot create its namespaces it raises
    ``SandboxUnavailable`` (what is wrong and how to fix it), unless ``unsafe_no_sandbox=True`` asks
    for running student code with rlimits only (with a loud warning). ``use_bwrap=False`` is the
    older spelling of that request; ``use_bwrap=True`` requires bubblewrap whatever the other flag
    says. ``isolated`` is True when the template runs under bubblewrap.

    The template warms up in the background; the first session (or ``wait_ready()``) waits for it.
    ``template``: a template that another process started with these same arguments and handed over
    (``template_process.TemplateHandoff``: course/pool.py starts each worker's): adopted instead of
    starting one, when its command and environment are this sandbox's; otherwise it is killed and this
    sandbox starts its own.
    Use a Sandbox from one thread at a time, and keep that thread alive as long as the Sandbox: the
    template is tied to it (bwrap --die-with-parent / PR_SET_PDEATHSIG follow the creating thread).
    """

    def __init__(self, kit_root=None, hide: Iterable = (), timeout_s: float = 20.0, memory_mb: int = 3072,
                 use_bwrap: Optional[bool] = None, *, unsafe_no_sandbox: bool = False,
                 preload: Iterable[str] = DEFAULT_PRELOAD,
                 cpu_s: int = 600, nproc: int = 256, fsize_mb: int = 16, uid: int = NOBODY,
                 start_timeout_s: float = 300.0, control_timeout_s: float = 30.0,
                 template: Optional["TemplateHandoff"] = None):
        self.kit_root = Path(os.path.realpath(kit_root or KIT_ROOT))
        self.hide = [Path(os.path.realpath(p)) for p in hide]
        self.timeout_s = float(timeout_s)
        self.limits = {"memory_mb": int(memory_mb), "cpu_s": int(cpu_s), "nproc": int(nproc),
                       "fsize_mb": int(fsize_mb)}
        self.preload = list(preload)
        self.uid = uid
        self.start_timeout_s = start_timeout_s
        self.control_timeout_s = control_timeout_s  # a template silent this long is replaced
        self.closed = False
        self.isolated = False
        self._proc: Optional[subprocess.Popen] = None
        self._ctrl: Optional[rpc.Channel] = None
        self._log = None
        self._procs: dict[str, subprocess.Popen] = {}
        self._prefixes: Optional[list] = None  # for scrub()
        if use_bwrap is False:
            works, why = False, "use_bwrap=False"  # the older way of asking for no isolation
            unsafe_no_sandbox = True
        else:
            works, why = bubblewrap_status()
        if not works and (use_bwrap or not unsafe_no_sandbox):
            raise unavailable_error(why)
        self.isolated = works
        # How the template starts (sandbox/template_process.py). (The mounts are checked only when the
        # template does not come up: a trial start costs seconds of every grader worker's start-up, and
        # the template's own start tries them.)
        self.command = TemplateCommand(self.kit_root, self.hide, self.isolated, uid, self.preload)
        self.drop_to: Optional[int] = self.command.drop_to
        if not works:
            _warn_once(as_root=self.drop_to is None and os.geteuid() == 0)
        self._jobs = itertools.count(1)
        self._job_pids: dict[int, int] = {}  # job -> its child's pid in the sandbox (one job at a time)
        self.exited: dict[int, dict] = {}   # job -> exit status reported by the template
        self.generation = 0                  # bumps at every template (re)start
        self.startup_s = 0.0                 # wall time of the last template start (spawn to ready)
        self._info: Optional[dict] = None    # the template's "ready" message
        # The reference solutions' own sandbox (reference_host), started by the performance task on
        # first use (performance/timing.py, reference_twin): the reference is timed on the submission's path.
        self.reference_sandbox: Optional["Sandbox"] = None
        weakref.finalize(self, kill_template, self._procs)  # no template outlives its Sandbox
        if template is None or not self._adopt(template):
            self._start_template()

    def scrub(self, text: str) -> str:
        """``text`` (something the submission's process wrote) without the folders of the kit and
        of the Python install: they are the same paths inside the sandbox and out."""
        if self._prefixes is None:
            self._prefixes = reports.path_prefixes([str(self.kit_root), str(SANDBOX_INSIDE_DIR),
                                                   *self.command.kit_parts()[1]])
        return reports.scrub_paths(text, self._prefixes)

    def _check_mounts(self) -> None:
        """Start the server with this very set of mounts, as the uid it will run as, and have it find
        (and read) what it imports: a layout the mounts get wrong fails here, with bwrap's or Python's
        own words, instead of only as a template that died during its warm-up (``wait_ready`` calls
        it when the template does not come up). Cached per command line.

        Bubblewrap itself works (``bubblewrap_status``), so a failure here is a SandboxError of the
        mounts, not a missing sandbox: it is never a reason to run without isolation.
        """
        command = self.command.server_command(None, check_mounts=True)
        key = ("mounts", *binary_key(command[0]), tuple(command))
        if key not in bwrap_checked:
            bwrap_checked[key] = trial_run(command, env=self.command.environment())
        ok, err = bwrap_checked[key]
        if not ok:
            raise SandboxError("bubblewrap works, but the sandboxed server cannot start with its mounts "
                               f"(kit {self.kit_root}, Python {sys.executable}):\n{err[-3000:]}")

    # ---- the template process
    def _start_template(self) -> None:
        """Spawn the template; its warm-up runs in the background until wait_ready()."""
        started = self.command.start()
        self._spawned_at, self._proc, self._log = started.spawned_at, started.proc, started.log
        self._procs["template"] = self._proc
        self._ctrl = rpc.Channel(started.control)
        self.generation += 1
        self._info = None

    def _adopt(self, handoff: "TemplateHandoff") -> bool:
        """Take the template another process started for this Sandbox (``hand_off``); False, and the
        handed-off template killed, when it is not the template this Sandbox would start."""
        if not self.isolated or handoff.key != self.command.key():
            handoff.discard()
            print("sandbox: the template started ahead is not this sandbox's; starting one", file=sys.stderr)
            return False
        self._spawned_at = handoff.spawned_at
        self._proc = AdoptedProcess(handoff.pid, handoff.take_pidfd())
        self._procs["template"] = self._proc
        self._ctrl = rpc.Channel(handoff.take_control())
        self._log = handoff.take_log()
        self.generation += 1
        self._info = None
        return True

    def wait_ready(self) -> dict:
        """Block until the template is warm; its "ready" report (set-up seconds, uid, threads)."""
        if self._info is None:
            try:
                self._info = self._control_wait(lambda m: m.get("op") == "ready", self.start_timeout_s)
            except TemplateFailed as exc:
                log = self._log_tail()
                self._kill_template()
                if self.isolated:
                    self._check_mounts()  # a layout the mounts get wrong is named in bwrap's or Python's words
                raise SandboxError(f"the sandboxed server did not start ({exc}); its output:\n{log}") from None
            self.startup_s = time.monotonic() - self._spawned_at
            for warning in self._info.get("warnings", []):
                print(f"sandbox: {warning}", file=sys.stderr)
        return self._info

    info = property(wait_ready)

    def _log_tail(self, n: int = 4000) -> str:
        try:
            self._log.seek(0, os.SEEK_END)
            size = self._log.tell()
            self._log.seek(max(0, size - n))
            return self._log.read().decode("utf-8", "replace")
        except (OSError, ValueError, AttributeError):
            return ""

    def _kill_template(self) -> None:
        kill_template(self._procs)
        if self._ctrl is not None:
            self._ctrl.close()
        if self._log is not None:
            self._log.close()
        self._proc = self._ctrl = self._log = None

    def restart(self, reason: str = "") -> None:
        """Replace the template (its warm set-up is paid again)."""
        if self.closed:
            raise SandboxError("the sandbox is closed")
        if reason:
            print(f"sandbox: restarting the server's template: {reason}", file=sys.stderr)
        self._kill_template()
        self._start_template()
        self.wait_ready()

    def reference_host(self) -> "Sandbox":
        """A second sandbox made like this one (kit, hidden folders, limits, time limit, isolation),
        without preloaded models, for the reference solutions the performance task times against this
        sandbox's submission (the template runs one process at a time, so the reference cannot share
        it). Started on first use, kept for the next submissions, closed with this one."""
        if self.reference_sandbox is None or self.reference_sandbox.closed:
            self.reference_sandbox = Sandbox(
                kit_root=self.kit_root, hide=self.hide, timeout_s=self.timeout_s, preload=(),
                unsafe_no_sandbox=not self.isolated, memory_mb=self.limits["memory_mb"], cpu_s=self.limits["cpu_s"],
                nproc=self.limits["nproc"], fsize_mb=self.limits["fsize_mb"])
        return self.reference_sandbox

    def close(self) -> None:
        """Stop the template and everything in the sandbox (the reference's sandbox too)."""
        self.closed = True
        if self.reference_sandbox is not None:
            self.reference_sandbox.close()
        if self._ctrl is not None:
            try:
                self._ctrl.send({"op": "exit"}, timeout=1.0)
            except (OSError, rpc.EncodeError):
                pass
        self._kill_template()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- control messages
    def control_fileno(self) -> int:
        return self._ctrl.fileno()

    def pump_control(self, timeout: float = 0.0) -> Optional[dict]:
        """Read one control message if one arrives within ``timeout``; exit reports are recorded."""
        if self._ctrl is None:
            raise TemplateFailed("no template")
        try:
            readable, _, _ = select.select([self._ctrl], [], [], max(0.0, timeout))
            if not readable:
                if self._proc.poll() is not None:
                    raise TemplateFailed(f"the template exited ({self._proc.returncode})")
                return None
            msg, _ = self._ctrl.recv(timeout=self.control_timeout_s)
        except (OSError, EOFError, rpc.ProtocolError) as exc:
            raise TemplateFailed(f"{type(exc).__name__}: {exc}") from None
        if msg.get("op") == "exited":
            self.exited[msg.get("job")] = msg
        return msg

    def _control_wait(self, predicate, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TemplateFailed("no answer from the template")
            msg = self.pump_control(min(left, 1.0))
            if msg is not None and predicate(msg):
                return msg

    def start_job(self, job_msg: dict, fds: list[int]) -> int:
        """Fork a child for a job; returns the job id. Restarts the template once if it fails."""
        self.wait_ready()
        for attempt in (1, 2):
            job = next(self._jobs)
            try:
                self._ctrl.send({**job_msg, "op": "start", "job": job}, timeout=self.control_timeout_s)
                socket.send_fds(self._ctrl.sock, [b"F"], fds)
                started = self._control_wait(lambda m: m.get("op") == "started" and m.get("job") == job,
                                             self.control_timeout_s)
                self._job_pids = {job: started.get("pid")}  # one job at a time
                return job
            except (TemplateFailed, OSError) as exc:
                if attempt == 2:
                    raise SandboxError(f"cannot start a submission process: {exc}") from None
                self.restart(f"{type(exc).__name__}: {exc}")
        raise AssertionError("unreachable")

    def end_job(self, job: int) -> None:
        """Kill a job's child and everything it left; restart the template if it does not answer."""
        if self.closed:
            return
        try:
            self._ctrl.send({"op": "end", "job": job}, timeout=self.control_timeout_s)
            self._control_wait(lambda m: m.get("op") == "ended" and m.get("job") == job,
                               self.control_timeout_s)
        except (TemplateFailed, OSError, AttributeError) as exc:
            self.restart(f"while ending a job: {type(exc).__name__}: {exc}")
        self.exited.pop(job, None)

    def job_process(self, job: int) -> Optional[int]:
        """The pid, as this side sees it, of a job's child (``cpu_clock.outer_pid``), or None where it
        cannot be found (the job is gone, or /proc does not say)."""
        inner = self._job_pids.get(job)
        if not isinstance(inner, int) or self._proc is None:
            return None
        if not self.isolated:
            return inner  # no pid namespace: the template's pids are ours
        return cpu_clock.outer_pid(inner, self._proc.pid)

    def census(self) -> Optional[tuple]:
        """(the last pid the sandbox handed out, the pids of processes other than the job's child), from
        the template (``Template.census``); None outside a pid namespace of our own, or when the
        template does not answer. Unchanged across a call: nothing in the sandbox started a process or
        a thread during it, and no helper process was there."""
        if not self.isolated or self._ctrl is None:
            return None
        try:
            self._ctrl.send({"op": "census"}, timeout=self.control_timeout_s)
            msg = self._control_wait(lambda m: m.get("op") == "census", self.control_timeout_s)
        except (TemplateFailed, OSError, rpc.EncodeError):
            return None
        if not isinstance(msg.get("last_pid"), int):
            return None
        return (msg["last_pid"], tuple(msg.get("others") or ()))

    def pause_job(self, job: int, pause: bool = True) -> None:
        """Stop (``pause``) or continue a job's child and everything it started (the template sends
        SIGSTOP or SIGCONT). Raises TemplateFailed or OSError when the template does not answer."""
        op = "pause" if pause else "resume"
        self._ctrl.send({"op": op, "job": job}, timeout=self.control_timeout_s)
        self._control_wait(lambda m: m.get("op") == op + "d" and m.get("job") == job, self.control_timeout_s)

    # ---- sessions
    @contextlib.contextmanager
    def session(self, sources: dict[str, str], call_timeout_s: Optional[float] = None):
        """Run one submission (``{"cka.py": source, ...}``); yields its RemoteImplementation."""
        sources = {name: text for name, text in sources.items() if name.endswith(".py")}
        sess = Session(self, sources, self.timeout_s if call_timeout_s is None else call_timeout_s)
        try:
            yield RemoteImplementation(sess)
        finally:
            sess.close()


def _warn_once(as_root: bool) -> None:
    global _warned
    if not _warned:
        _warned = True
        print(FALLBACK_WARNING, file=sys.stderr, flush=True)
        if as_root:
            print("WARNING: the Python install is not reachable by an unprivileged user, so student code "
                  "also runs as root.", file=sys.stderr, flush=True)


__all__ = ["Sandbox", "SandboxError", "SandboxUnavailable", "Session", "Stashed", "FALLBACK_WARNING",
           "bubblewrap_status"]
