"""Starting the sandbox and talking to it: ``Sandbox`` (the warm template) and its per-submission sessions.

    sb = Sandbox(kit_root=..., hide=[course_dir])     # starts the warm template once
    with sb.session(sources, call_timeout_s=20.0) as impl:
        impl.cka.linear_cka(X, Y)
    sb.close()

The template (worker.py) runs under bubblewrap when ``bwrap`` works: its own pid, network, IPC and UTS
namespaces, a read-only view of the system with the kit, the course, /tmp, /root and /home hidden
(only the Python install, ``bertlab`` and the worker's own files are shown back), a private /tmp, and
an unprivileged uid when we are root. Without bubblewrap it runs with rlimits only, and says so loudly.

Each session forks a fresh child from the template; the child gets a socket of its own (passed over the
template's control socket with SCM_RIGHTS) and a pipe for its stdout/stderr. A call that times out,
a child that dies, or a child that breaks the protocol is killed and reported; the next call starts a
new child. A template that dies or stops answering is restarted.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import itertools
import os
import secrets
import select
import shutil
import signal
import site
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Iterable, Optional

from grader import rpc
from grader.remote import (Remote, RemoteImplementation, StudentError, SubmissionCrashed, SubmissionTimeout,
                           _HandleRef, student_exception)

WORKER = Path(__file__).resolve().parent / "worker.py"
GRADER_DIR = Path(__file__).resolve().parents[1]
FALLBACK_WARNING = ("WARNING: bubblewrap not available: student code runs with rlimits only, NOT isolated "
                    "from the filesystem or network. Install it: apt-get install bubblewrap")
NOBODY = 65534
# Named models the template builds once, so that each submission's process starts with them: MiniLM
# (shared, copy-on-write) and the small random BERTs the hidden siamese suite passes (each session
# gets a copy: building one costs about 40 ms, copying it a few). tests/kit/test_sandbox.py checks
# that every named model used in tests/hidden is listed here.
DEFAULT_PRELOAD = ("minilm", "tiny-bert-seed1", "tiny-bert-seed2", "tiny-bert-seed31")
OUTPUT_HEAD = 16 * 1024
OUTPUT_TAIL = 4 * 1024
_warned = False
_bwrap_checked: dict[tuple, bool] = {}


class SandboxError(RuntimeError):
    """The sandbox itself could not be started (not the submission's fault)."""


class _TemplateFailed(Exception):
    """The template died, stopped answering or broke the control protocol."""


# ============================================================================ command line

def _exists(path) -> bool:
    return os.path.lexists(path)


def _under(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def _python_dirs() -> list[Path]:
    """Directories the worker's Python needs: its prefixes and the site directories on sys.path."""
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                  str(Path(os.path.realpath(sys.executable)).parent.parent)}
    candidates.update(site.getsitepackages())
    candidates.update(p for p in sys.path if p and os.path.isdir(p) and "site-packages" in p)
    return sorted({Path(os.path.realpath(p)) for p in candidates if p and os.path.isdir(p)})


def _package_dir(name: str) -> Optional[Path]:
    """Where an importable top-level package lives, without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(os.path.realpath(list(spec.submodule_search_locations)[0]))


def _outermost(paths: Iterable[Path]) -> list[Path]:
    result: list[Path] = []
    for p in sorted(set(paths), key=lambda p: len(p.parts)):
        if not any(_under(p, q) for q in result):
            result.append(p)
    return result


def _world_traversable(path: Path) -> bool:
    """Can an unprivileged uid reach ``path``? (every ancestor needs o+x)"""
    for p in [path, *path.parents]:
        try:
            if not os.stat(p).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    return True


# ================================================================================ output

class _Output:
    """The submission's stdout/stderr: the first OUTPUT_HEAD and last OUTPUT_TAIL bytes are kept."""

    def __init__(self):
        self.lock = threading.Lock()
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0
        self.pipes: list[int] = []

    def add(self, data: bytes) -> None:
        room = OUTPUT_HEAD - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > OUTPUT_TAIL:
                self.dropped += len(self.tail) - OUTPUT_TAIL
                del self.tail[:len(self.tail) - OUTPUT_TAIL]

    def attach(self, fd: int) -> None:
        os.set_blocking(fd, False)
        with self.lock:
            self.pipes.append(fd)
        threading.Thread(target=self._pump, args=(fd,), daemon=True, name="sandbox-output").start()

    def _read(self, fd: int) -> bool:
        """Read what is there now (caller holds the lock); False at end of file."""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not chunk:
                return False
            self.add(chunk)

    def _pump(self, fd: int) -> None:
        # Drain continuously: a submission that floods stdout must not block on a full pipe.
        while True:
            with self.lock:
                if fd not in self.pipes:
                    return
            try:
                select.select([fd], [], [], 0.2)
            except (OSError, ValueError):
                return
            with self.lock:
                if fd not in self.pipes:
                    return
                if not self._read(fd):
                    self.pipes.remove(fd)
                    os.close(fd)
                    return

    def text(self) -> str:
        with self.lock:
            for fd in list(self.pipes):
                self._read(fd)
            text = self.head.decode("utf-8", "replace")
            if self.dropped:
                text += f"\n[... {self.dropped} bytes of output omitted ...]\n"
            return text + self.tail.decode("utf-8", "replace")

    def close(self) -> None:
        with self.lock:
            for fd in self.pipes:
                self._read(fd)
                os.close(fd)
            self.pipes.clear()


# ============================================================================= the sandbox

class Sandbox:
    """A warm worker template (under bubblewrap when available) that runs submissions.

    ``kit_root``: the kit checkout (hidden from student code except ``bertlab`` and the worker's own
    files); ``hide``: more paths to hide (the course directory, the gradebook). ``timeout_s`` is the
    default per-call limit, ``memory_mb`` the address space a child may add to what it inherits.
    ``use_bwrap``: None = when it works, False = never (rlimits only), True = required.
    Paths in ``hide`` must exist when the template starts (directories get an empty tmpfs, files
    /dev/null); a path created later is not hidden until the next restart.

    The template warms up in the background; the first session (or ``wait_ready()``) waits for it.
    Use a Sandbox from one thread at a time, and keep that thread alive as long as the Sandbox: the
    template is tied to it (bwrap --die-with-parent / PR_SET_PDEATHSIG follow the creating thread).
    """

    def __init__(self, kit_root=None, hide: Iterable = (), timeout_s: float = 20.0, memory_mb: int = 3072,
                 use_bwrap: Optional[bool] = None, *, preload: Iterable[str] = DEFAULT_PRELOAD,
                 cpu_s: int = 600, nproc: int = 256, fsize_mb: int = 16, uid: int = NOBODY,
                 start_timeout_s: float = 300.0, control_timeout_s: float = 30.0):
        self.kit_root = Path(os.path.realpath(kit_root or GRADER_DIR.parent))
        self.hide = [Path(os.path.realpath(p)) for p in hide]
        self.timeout_s = float(timeout_s)
        self.limits = {"memory_mb": int(memory_mb), "cpu_s": int(cpu_s), "nproc": int(nproc),
                       "fsize_mb": int(fsize_mb)}
        self.preload = list(preload)
        self.uid = uid
        self.start_timeout_s = start_timeout_s
        self.control_timeout_s = control_timeout_s  # a template silent this long is replaced
        self.closed = False
        self.isolated = False if use_bwrap is False else self._bwrap_usable()
        if use_bwrap and not self.isolated:
            raise SandboxError("bubblewrap was required (use_bwrap=True) but does not work here")
        self.drop_to: Optional[int] = self._drop_uid()
        if not self.isolated:
            _warn_once(as_root=self.drop_to is None and os.geteuid() == 0)
        self._proc: Optional[subprocess.Popen] = None
        self._ctrl: Optional[rpc.Channel] = None
        self._log = None
        self._jobs = itertools.count(1)
        self.exited: dict[int, dict] = {}   # job -> exit status reported by the template
        self.generation = 0                  # bumps at every template (re)start
        self.startup_s = 0.0                 # wall time of the last template start (spawn to ready)
        self._info: Optional[dict] = None    # the template's "ready" message
        self._procs: dict[str, subprocess.Popen] = {}
        weakref.finalize(self, _kill_popen, self._procs)  # no template outlives its Sandbox
        self._start_template()

    # ---- construction of the command
    def _kit_parts(self) -> tuple[list[Path], list[str]]:
        """What the worker needs from the kit (shown read-only) and its sys.path roots."""
        bertlab = _package_dir("bertlab") or self.kit_root / "bertlab"
        parts = [bertlab, GRADER_DIR / "__init__.py", GRADER_DIR / "rpc.py", GRADER_DIR / "sandbox"]
        roots = sorted({str(bertlab.parent), str(GRADER_DIR.parent)})
        return [p for p in parts if p.exists()], roots

    def _bwrap_args(self) -> list[str]:
        bwrap = shutil.which("bwrap") or "/usr/bin/bwrap"
        if os.geteuid() == 0:
            # Not --unshare-all: as root that adds a user namespace mapping root to root, and the
            # worker could then not switch to an unprivileged uid (see _drop_uid).
            args = [bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
                    "--unshare-cgroup-try"]
        else:
            args = [bwrap, "--unshare-all"]
        args += ["--die-with-parent", "--new-session", "--ro-bind", "/", "/", "--proc", "/proc",
                 "--dev", "/dev"]
        kit = self.kit_root
        hide_dirs = [p for p in self.hide if p.is_dir()]
        hide_files = [p for p in self.hide if _exists(p) and not p.is_dir()]
        tmpfs = _outermost([Path(p) for p in ("/root", "/home", "/run") if os.path.isdir(p)]
                           + [kit] + hide_dirs)
        for d in tmpfs:
            args += ["--tmpfs", str(d)]
        args += ["--perms", "1777", "--tmpfs", "/tmp"]
        tmpfs.append(Path("/tmp"))
        made: set[Path] = set()

        def show(path: Path) -> None:
            # bwrap would create the missing parents inside a tmpfs as 0700, which the worker's
            # unprivileged uid cannot traverse: create them 0755 first (below the innermost tmpfs).
            top = max((t for t in tmpfs if _under(path, t)), key=lambda t: len(t.parts))
            for parent in reversed(path.parents):
                if _under(parent, top) and parent != top and parent not in made:
                    made.add(parent)
                    args.extend(["--perms", "0755", "--dir", str(parent)])
            args.extend(["--ro-bind", str(path), str(path)])

        # The Python install (and any venv, even one inside the kit) is shown again, read-only.
        rebound = _outermost(p for p in _python_dirs()
                             if any(_under(p, t) for t in tmpfs) and p != kit
                             and not any(_under(p, h) for h in self.hide))
        for p in rebound:
            show(p)
        # A non-editable install puts solutions/ and grader/ in site-packages: hide those too.
        for name in ("solutions", "tests", "grader", "exercises"):
            d = _package_dir(name)
            if d is not None and (any(_under(d, r) for r in rebound) or not any(_under(d, t) for t in tmpfs)):
                args += ["--tmpfs", str(d)]
                tmpfs.append(d)
        for p in self._kit_parts()[0]:
            if any(_under(p, t) for t in tmpfs):
                show(p)
        for f in hide_files:
            args += ["--ro-bind", "/dev/null", str(f)]
        return args + ["--chdir", "/tmp", "--"]

    def _worker_command(self, ctrl_fd: int) -> list[str]:
        _, roots = self._kit_parts()
        cmd = [sys.executable, "-s", "-B", str(WORKER), "--control-fd", str(ctrl_fd)]
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
                "MPLCONFIGDIR": "/tmp/.matplotlib"}

    def _bwrap_usable(self) -> bool:
        """Does bubblewrap start our Python with this very set of mounts? (checked once per process)"""
        if not (shutil.which("bwrap") or os.path.exists("/usr/bin/bwrap")):
            return False
        args = tuple(self._bwrap_args())
        if args not in _bwrap_checked:
            try:
                done = subprocess.run([*args, sys.executable, "-s", "-c", "import sys"], env=self._environment(),
                                      stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
                _bwrap_checked[args] = done.returncode == 0
            except (OSError, subprocess.SubprocessError):
                _bwrap_checked[args] = False
        return _bwrap_checked[args]

    def _drop_uid(self) -> Optional[int]:
        """The uid the worker switches to: ``uid`` when we are root and it can still reach Python."""
        if os.geteuid() != 0:
            return None
        if self.isolated:
            return self.uid  # the sandbox shows the Python install through world-readable mounts
        needed = [Path(os.path.realpath(sys.executable)), WORKER, *self._kit_parts()[0]]
        return self.uid if all(_world_traversable(p.parent) for p in needed) else None

    # ---- the template process
    def _start_template(self) -> None:
        """Spawn the template; its warm-up runs in the background until wait_ready()."""
        self._spawned_at = time.monotonic()
        parent, child = socket.socketpair()
        self._log = tempfile.TemporaryFile()
        preexec = None if self.isolated else _die_with_parent
        try:
            self._proc = subprocess.Popen(
                self._worker_command(child.fileno()), pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL,
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
            except _TemplateFailed as exc:
                log = self._log_tail()
                self._kill_template()
                raise SandboxError(f"the sandbox worker did not start ({exc}); its output:\n{log}") from None
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
            print(f"sandbox: restarting the worker template: {reason}", file=sys.stderr)
        self._kill_template()
        self._start_template()
        self.wait_ready()

    def close(self) -> None:
        """Stop the template and everything in the sandbox."""
        self.closed = True
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
            raise _TemplateFailed("no template")
        try:
            readable, _, _ = select.select([self._ctrl], [], [], max(0.0, timeout))
            if not readable:
                if self._proc.poll() is not None:
                    raise _TemplateFailed(f"the template exited ({self._proc.returncode})")
                return None
            msg, _ = self._ctrl.recv(timeout=self.control_timeout_s)
        except (OSError, EOFError, rpc.ProtocolError) as exc:
            raise _TemplateFailed(f"{type(exc).__name__}: {exc}") from None
        if msg.get("op") == "exited":
            self.exited[msg.get("job")] = msg
        return msg

    def _control_wait(self, predicate, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _TemplateFailed("no answer from the template")
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
                self._control_wait(lambda m: m.get("op") == "started" and m.get("job") == job,
                                   self.control_timeout_s)
                return job
            except (_TemplateFailed, OSError) as exc:
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
        except (_TemplateFailed, OSError, AttributeError) as exc:
            self.restart(f"while ending a job: {type(exc).__name__}: {exc}")
        self.exited.pop(job, None)

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


# ============================================================================= a session

class _Child:
    """One forked process serving a session."""

    def __init__(self, job: int, chan: rpc.Channel, nonce: str, template_generation: int):
        self.job, self.chan, self.nonce = job, chan, nonce
        self.template_generation = template_generation


class _ChildGone(Exception):
    """The child is gone (and killed): ``kind`` is "timeout" or "crash"; ``module`` the import blamed."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.module: Optional[str] = None


class Stashed:
    """A value kept in the submission's process by ``Session.stash``; as an argument, a fresh copy."""

    __slots__ = ("sid", "generation")

    def __init__(self, sid: int, generation: int):
        self.sid, self.generation = sid, generation

    def __repr__(self) -> str:
        return f"<value #{self.sid} stashed in the sandbox>"


class Session:
    """The trusted side of one submission: starts children, sends requests, serves callbacks."""

    def __init__(self, sandbox: Sandbox, sources: dict[str, str], call_timeout_s: float):
        self.sandbox = sandbox
        self.sources = sources
        self.timeout_s = float(call_timeout_s)
        self.child: Optional[_Child] = None
        self.generation = 0              # bumps with every child: handles of an older one are stale
        self.skip: dict[str, dict] = {}  # module -> why it is no longer imported (timeout/crash)
        self.module_errors: dict[str, Optional[dict]] = {}
        self.callbacks: dict[int, object] = {}
        self._models: dict[int, tuple] = {}
        self._callback_ids: dict[int, int] = {}
        self._releases: list[tuple[int, int]] = []
        self._requests = itertools.count(1)
        self._out = _Output()
        self._closed = False

    # ---- public helpers used by RemoteImplementation
    def output(self) -> str:
        return self._out.text()

    def import_errors(self) -> dict[str, str]:
        self._ensure_child()
        errors = {m: info["message"] for m, info in self.module_errors.items() if info}
        errors.update({m: info["message"] for m, info in self.skip.items()})
        return errors

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
                    raise (SubmissionTimeout if gone.kind == "timeout" else SubmissionCrashed)(str(gone)) from None
                self.skip[gone.module] = {"kind": gone.kind, "message": str(gone)}
        raise SubmissionCrashed("the submission's process could not be started")

    def _spawn(self) -> _Child:
        if self.generation:
            self._out.add(b"\n[the submission's process was restarted]\n")
        nonce = secrets.token_hex(16)
        mine, theirs = socket.socketpair()
        out_r, out_w = os.pipe()
        try:
            job = self.sandbox.start_job({"nonce": nonce, "sources": self.sources, "skip": self.skip,
                                          "limits": self.sandbox.limits}, [theirs.fileno(), out_w])
        except BaseException:
            mine.close()
            os.close(out_r)
            raise
        finally:
            theirs.close()
            os.close(out_w)
        self._out.attach(out_r)
        self.generation += 1
        self.child = _Child(job, rpc.Channel(mine), nonce, self.sandbox.generation)
        return self.child

    def _await_ready(self, child: _Child) -> None:
        """Wait for the child's imports; a module that hangs or kills the process is blamed."""
        current = None
        deadline = time.monotonic() + self.timeout_s + 10.0  # the fork itself, under load
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
                deadline = time.monotonic() + self.timeout_s
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

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._drop_child()
            self._out.close()

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
            except _TemplateFailed:
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
        tail = self._out.text()[-1500:].strip()
        if tail:
            why += f"\nLast output:\n{tail}"
        return _ChildGone(kind, why)

    def _next_message(self, child: _Child, deadline: float) -> tuple[dict, dict]:
        """The child's next valid frame, or _ChildGone (timeout, exit, EOF, protocol violation)."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._gone(child, "timeout", f"no answer within {self.timeout_s:g} s")
            try:
                readable, _, _ = select.select([child.chan, self.sandbox.control_fileno()], [], [], left)
            except (OSError, ValueError, TypeError):
                readable = []
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
                except _TemplateFailed as exc:
                    self.sandbox.restart(str(exc))
                    raise _ChildGone("crash", "the sandbox worker died (restarted)") from None
            if child.job in self.sandbox.exited:
                # A last reply may be in flight (sys.exit after replying): read what is already there.
                if select.select([child.chan], [], [], 0.05)[0]:
                    continue
                raise self._gone(child, "crash", "the submission's process died")

    # ---- requests
    def stash(self, value) -> "Stashed":
        """Send plain data (tensors, arrays, numbers, containers of them) to the submission's process
        once. Pass the returned ``Stashed`` as an argument of later calls: each call gets a fresh
        copy made there, so the data does not travel again (the performance task times calls
        without the transfer of their inputs)."""
        child = self._ensure_child()
        encoder = rpc.Encoder()  # plain data only: no handles, callbacks or models
        rid = next(self._requests)
        header = {"op": "stash", "id": rid, "n": child.nonce, "value": encoder.encode(value)}
        sid = self._exchange(child, header, encoder.tensors, "sending inputs to the submission")
        if type(sid) is not int:
            raise self._gone(child, "crash", "protocol violation: bad stash id")
        return Stashed(sid, self.generation)

    def request(self, remote: Remote, mode: str, args: tuple = (), kwargs: Optional[dict] = None,
                watch: bool = True):
        """One call (``mode`` "call") or attribute fetch ("get") in the submission's process.
        ``watch=False`` skips the copy-back of in-place argument changes (for stashed arguments)."""
        root = remote._bl_root
        what = ".".join(map(str, ((root[1] if root[0] == "module" else "<handle>"),) + remote._bl_path))
        if root[0] == "handle" and (root[2] != self.generation or not self._alive()):
            raise SubmissionCrashed("this object belonged to an earlier run of the submission's process "
                                    "(it was restarted after a timeout or crash)")
        child = self._ensure_child()
        if root[0] == "module" and root[1] in self.skip:  # (starting the child may have just found out)
            info = self.skip[root[1]]
            raise (SubmissionTimeout if info["kind"] == "timeout" else SubmissionCrashed)(info["message"])
        encoder = rpc.Encoder(fallback=self._encode_extra)
        rid = next(self._requests)
        header = {"op": "call", "id": rid, "n": child.nonce, "mode": mode, "path": list(remote._bl_path),
                  "target": {"module": root[1]} if root[0] == "module" else {"handle": root[1]},
                  "args": encoder.encode(list(args)), "kwargs": encoder.encode(dict(kwargs or {})),
                  "release": self._take_releases(), "watch": bool(watch)}
        return self._exchange(child, header, encoder.tensors, what, inputs=(args, kwargs or {}))

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
            except OSError:
                raise self._gone(child, "crash", f"the submission's process died before {what}") from None
            deadline = time.monotonic() + self.timeout_s
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
                    deadline += time.monotonic() - started  # time spent here is not the submission's
                elif op != "importing":
                    raise self._gone(child, "crash", f"protocol violation: unexpected {op!r}")
        except _ChildGone as gone:
            if gone.kind == "timeout":
                raise SubmissionTimeout(f"{what}: {gone}") from None
            raise SubmissionCrashed(f"{what}: {gone}") from None

    def _copy_back(self, msg: dict, blob: dict, inputs) -> None:
        """Arguments cross as copies; where the student's code changed a tensor or array argument in
        place, the worker sends its new value and we write it into the caller's object, so the call
        behaves as it would in process (and a test can see that its inputs were modified)."""
        mutated = msg.get("mutated")
        if not msg.get("ok") or not isinstance(mutated, dict):
            return
        import numpy as np
        import torch

        args, kwargs = inputs
        decoder = rpc.Decoder(blob, self._decode_extra)
        for key, encoded in mutated.items():
            kind, _, name = str(key).partition(":")
            if kind == "a" and name.isdigit() and int(name) < len(args):
                original = args[int(name)]
            elif kind == "k" and name in kwargs:
                original = kwargs[name]
            else:
                continue
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
                target = {"module": root[1]}
            return {"$t": "ref", "root": target, "path": list(obj._bl_path)}
        name = getattr(obj, "_bertlab_model_name", None)
        if isinstance(name, str):
            # Number each model object; keeping it alive keeps its number from being reused.
            entry = self._models.setdefault(id(obj), (obj, len(self._models) + 1))
            return {"$t": "model", "name": name, "key": entry[1]}
        import torch

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
            ref = _HandleRef(self, tag["id"], self.generation)
            return Remote(self, ("handle", tag["id"], self.generation), (), type_name, ref)
        if kind == "callback" and type(tag.get("id")) is int and tag["id"] in self.callbacks:
            return self.callbacks[tag["id"]]
        raise rpc.ProtocolError(f"unexpected {kind!r} from the submission")


__all__ = ["Sandbox", "SandboxError", "Session", "Stashed", "FALLBACK_WARNING"]
