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
new child. A template that dies or stops answering is restarted.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Iterable, Optional

from bertlab_grader.core.locations import KIT_ROOT, package_folder
from bertlab_grader.sandbox.bubblewrap import (
    SandboxError, SandboxUnavailable, binary_key, bwrap_checked, find_bwrap, namespace_args, sandbox_python,
    trial_run, unavailable_error, bubblewrap_status)
from bertlab_grader.sandbox import cpu_clock
from bertlab_grader.sandbox.inside import rpc, reports
from bertlab_grader.sandbox.malloc_pin import STEADY_MALLOC_ENV
from bertlab_grader.sandbox.mounts import (
    ALWAYS_HIDDEN, SECRET_PACKAGES, path_exists, mode_allows_others, mount_plan, package_dir, python_dirs,
    site_dirs, is_under, world_traversable)
from bertlab_grader.sandbox.remote import RemoteImplementation
from bertlab_grader.sandbox.session import Session, Stashed, TemplateFailed

#: The only kit code the sandbox shows: this room's package ``inside`` (grader/bertlab_grader/sandbox/inside/).
SANDBOX_INSIDE_DIR = package_folder("bertlab_grader.sandbox.inside")
#: The sandboxed server, as the sandbox imports it: the folder sandbox/inside/ (SANDBOX_INSIDE_DIR) is
#: shown alone, under this package name, in a folder of the sandbox's own (``_inside_root``).
INSIDE_PACKAGE = "bertlab_sandbox"
SERVER_MODULE = f"{INSIDE_PACKAGE}.server"
SERVER_FILE = SANDBOX_INSIDE_DIR / "server.py"
FALLBACK_WARNING = ("WARNING: bubblewrap not available: student code runs with rlimits only, NOT isolated "
                    "from the filesystem or network (--unsafe-no-sandbox). Install it: apt-get install bubblewrap")
NOBODY = 65534
# Named models the template builds once, so that each submission's process starts with them: MiniLM
# (shared, copy-on-write) and the small random BERTs the hidden siamese suite passes (each session
# gets a copy: building one costs about 40 ms, copying it a few). tests/test_sandbox.py checks
# that every named model used in the hidden suites (tests/hidden/) is listed here.
DEFAULT_PRELOAD = ("minilm", "tiny-bert-seed1", "tiny-bert-seed2", "tiny-bert-seed31", "tiny-bert-seed41")
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
    Use a Sandbox from one thread at a time, and keep that thread alive as long as the Sandbox: the
    template is tied to it (bwrap --die-with-parent / PR_SET_PDEATHSIG follow the creating thread).
    """

    def __init__(self, kit_root=None, hide: Iterable = (), timeout_s: float = 20.0, memory_mb: int = 3072,
                 use_bwrap: Optional[bool] = None, *, unsafe_no_sandbox: bool = False,
                 preload: Iterable[str] = DEFAULT_PRELOAD,
                 cpu_s: int = 600, nproc: int = 256, fsize_mb: int = 16, uid: int = NOBODY,
                 start_timeout_s: float = 300.0, control_timeout_s: float = 30.0):
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
        self._unisolated_root: Optional[Path] = None  # see _inside_root
        if use_bwrap is False:
            works, why = False, "use_bwrap=False"  # the older way of asking for no isolation
            unsafe_no_sandbox = True
        else:
            works, why = bubblewrap_status()
        if works:
            self.isolated = True
            self.drop_to: Optional[int] = self._drop_uid()
            # (The mounts are checked only when the template does not come up: a trial start costs
            # seconds of every grader worker's start-up, and the template's own start tries them.)
        elif use_bwrap or not unsafe_no_sandbox:
            raise unavailable_error(why)
        else:
            self.drop_to = self._drop_uid()
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
        weakref.finalize(self, _kill_popen, self._procs)  # no template outlives its Sandbox
        self._start_template()

    # ---- construction of the command
    def _kit_parts(self) -> tuple[list[Path], list[str]]:
        """What the server needs from the kit (shown read-only) and its sys.path roots."""
        bertlab = package_dir("bertlab") or next(
            (p for p in (self.kit_root / "src" / "bertlab", self.kit_root / "bertlab") if p.is_dir()),
            self.kit_root / "src" / "bertlab")
        # The student package at its own path (its folder is named as it imports); the server's folder
        # under a name of its own (see _inside_root), so it is the one folder of the grader shown.
        return [p for p in (bertlab,) if p.exists()], sorted({str(bertlab.parent), str(self._inside_root())})

    def _inside_root(self) -> Path:
        """The folder whose ``bertlab_sandbox/`` is sandbox/inside/: inside bubblewrap a read-only bind
        mount in the sandbox's private /tmp (created by ``_bwrap_args``); without isolation a private
        folder of this process holding a symlink to it."""
        if self.isolated:
            return Path(os.path.realpath("/tmp")) / ".bertlab-kit"
        if self._unisolated_root is None:
            root = Path(tempfile.mkdtemp(prefix="bertlab-kit-"))
            os.chmod(root, 0o755)  # the server may run as another uid (see _drop_uid)
            (root / INSIDE_PACKAGE).symlink_to(SANDBOX_INSIDE_DIR, target_is_directory=True)
            weakref.finalize(self, shutil.rmtree, str(root), True)
            self._unisolated_root = root
        return self._unisolated_root

    def _bwrap_args(self) -> list[str]:
        """The bwrap command line up to the server's own command (see ``mount_plan``).

        Hidden: /root, /home, /run, /tmp (a private, empty one), the kit, the ``hide`` paths, and
        installed copies of the kit's secret packages. Shown back read-only: the Python install
        (even inside a hidden folder: it is not secret, and a venv often lives inside the kit or
        beside the submissions) and what the server needs of the kit (``_kit_parts``).
        """
        bwrap = find_bwrap() or "/usr/bin/bwrap"
        args = [bwrap, *namespace_args(), "--die-with-parent", "--new-session", "--ro-bind", "/", "/",
                "--proc", "/proc", "--dev", "/dev"]
        python = python_dirs()
        kit = self.kit_root
        tmp = Path(os.path.realpath("/tmp"))
        hide_dirs = [Path(os.path.realpath(p)) for p in ALWAYS_HIDDEN if os.path.isdir(p)] + [tmp]
        # An installed kit has kit_root = site-packages: hiding it would hide torch. Its secret
        # packages are hidden one by one below instead (as they are for every layout).
        if not any(is_under(kit, p) for p in site_dirs()):
            hide_dirs.append(kit)
        hide_dirs += [p for p in self.hide if p.is_dir()]
        hide_files = [p for p in self.hide if path_exists(p) and not p.is_dir()]
        for name in SECRET_PACKAGES:
            d = package_dir(name)
            if d is not None:
                hide_dirs.append(d)
        show = python + self._kit_parts()[0]
        if os.geteuid() == 0:
            # The server runs as an unprivileged uid: a visible folder on the way to something it needs
            # that others cannot traverse (a checkout in a 0700 home, pytest's tmp folders) would stop
            # it. Such a folder is already unreadable to that uid, so an empty 0755 tmpfs over it
            # hides nothing more, and the paths below it are shown back.
            hide_dirs += [a for p in show for a in p.parents
                          if a != Path("/") and not mode_allows_others(a)]
        inside = self._inside_root()
        return (args + mount_plan(hide_dirs, hide_files, show, tmp)
                + ["--perms", "0755", "--dir", str(inside),
                   "--ro-bind", str(SANDBOX_INSIDE_DIR), str(inside / INSIDE_PACKAGE)]
                + ["--chdir", "/tmp", "--"])

    def _server_command(self, ctrl_fd: Optional[int], check_mounts: bool = False) -> list[str]:
        _, roots = self._kit_parts()
        cmd = [sandbox_python() if self.isolated else sys.executable, "-s", "-B", "-m", SERVER_MODULE]
        cmd += ["--check-mounts"] if check_mounts else ["--control-fd", str(ctrl_fd)]
        for root in roots:
            cmd += ["--kit-root", root]
        if self.drop_to is not None:
            cmd += ["--uid", str(self.drop_to)]
        if self.isolated:
            cmd.append("--isolated")
        for name in self.preload:
            cmd += ["--preload", name]
        return (self._bwrap_args() if self.isolated else []) + cmd

    def _environment(self) -> dict[str, str]:
        _, roots = self._kit_parts()
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent",
                "LANG": "C.UTF-8", "PYTHONPATH": os.pathsep.join(roots), "PYTHONDONTWRITEBYTECODE": "1",
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
                "TOKENIZERS_PARALLELISM": "false", "XDG_CACHE_HOME": "/tmp/.cache",
                "MPLCONFIGDIR": "/tmp/.matplotlib",
                # One thread for NumPy's BLAS too, as for torch (server.py): the submission runs on one
                # thread like the reference it is timed against, whatever library it computes with, and
                # each is timed by its process's CPU time (performance/timing.py), which would count a
                # second BLAS thread's work and its spinning while it waits.
                "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                # malloc on the same steady footing as the grader's side of a timing (performance.py)
                **STEADY_MALLOC_ENV}

    def scrub(self, text: str) -> str:
        """``text`` (something the submission's process wrote) without the folders of the kit and
        of the Python install: they are the same paths inside the sandbox and out."""
        if self._prefixes is None:
            self._prefixes = reports.path_prefixes([str(self.kit_root), str(SANDBOX_INSIDE_DIR),
                                                   *self._kit_parts()[1]])
        return reports.scrub_paths(text, self._prefixes)

    def _check_mounts(self) -> None:
        """Start the server with this very set of mounts, as the uid it will run as, and have it find
        (and read) what it imports: a layout the mounts get wrong fails here, with bwrap's or Python's
        own words, instead of only as a template that died during its warm-up (``wait_ready`` calls
        it when the template does not come up). Cached per command line.

        Bubblewrap itself works (``bubblewrap_status``), so a failure here is a SandboxError of the
        mounts, not a missing sandbox: it is never a reason to run without isolation.
        """
        command = self._server_command(None, check_mounts=True)
        key = ("mounts", *binary_key(command[0]), tuple(command))
        if key not in bwrap_checked:
            bwrap_checked[key] = trial_run(command, env=self._environment())
        ok, err = bwrap_checked[key]
        if not ok:
            raise SandboxError("bubblewrap works, but the sandboxed server cannot start with its mounts "
                               f"(kit {self.kit_root}, Python {sys.executable}):\n{err[-3000:]}")

    def _drop_uid(self) -> Optional[int]:
        """The uid the server switches to: ``uid`` when we are root and it can still reach Python."""
        if os.geteuid() != 0:
            return None
        if self.isolated:
            return self.uid  # the sandbox shows the Python install through world-readable mounts
        needed = [Path(os.path.realpath(sys.executable)), SERVER_FILE, *self._kit_parts()[0]]
        return self.uid if all(world_traversable(p.parent) for p in needed) else None

    # ---- the template process
    def _start_template(self) -> None:
        """Spawn the template; its warm-up runs in the background until wait_ready()."""
        self._spawned_at = time.monotonic()
        parent, child = socket.socketpair()
        self._log = tempfile.TemporaryFile()
        preexec = None if self.isolated else _die_with_parent
        try:
            self._proc = subprocess.Popen(
                self._server_command(child.fileno()), pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL,
                stdout=self._log, stderr=self._log, env=self._environment(), cwd="/",
                start_new_session=True, preexec_fn=preexec)
        finally:
            child.close()
        self._procs["template"] = self._proc
        self._ctrl = rpc.Channel(parent)
        self.generation += 1
        self._info = None

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
        _kill_popen(self._procs)
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


def _kill_popen(procs: dict) -> None:
    proc = procs.pop("template", None)
    if proc is not None and proc.poll() is None:
        try:  # SIGKILL to bwrap ends its pid namespace, and with it every process inside
            proc.kill()
            proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass


def _die_with_parent() -> None:
    # The fallback's stand-in for bwrap --die-with-parent: SIGKILL when the grader goes away.
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass


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
