"""Starting the sandbox and talking to it: ``Sandbox`` (the warm template) and its per-submission sessions.

    sb = Sandbox(kit_root=..., hide=[course_dir])     # starts the warm template once
    with sb.session(sources, call_timeout_s=20.0) as impl:
        impl.cka.linear_cka(X, Y)
    sb.close()

The template (inside/server.py) runs under bubblewrap: its own pid, network, IPC and UTS namespaces, a
read-only view of the system with the kit, the course, /tmp, /root, /home and /run hidden (only the
Python install, ``bertlab`` and the worker's own files are shown back, wherever they live), a private
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

from bertlab_grader.sandbox.inside import rpc
from bertlab_grader.core.failures import GraderFailure
from bertlab_grader.core.locations import KIT_ROOT, SANDBOX_INSIDE_DIR
from bertlab_grader.sandbox.malloc_pin import STEADY_MALLOC_ENV
from bertlab_grader.sandbox.remote import (Remote, RemoteImplementation, StudentError, SubmissionCrashed, SubmissionTimeout,
                           _HandleRef, student_exception)

#: The sandboxed server, as the sandbox imports it: the folder sandbox/inside/ (SANDBOX_INSIDE_DIR) is
#: shown alone, under this package name, in a folder of the sandbox's own (``_inside_root``).
INSIDE_PACKAGE = "bertlab_sandbox"
SERVER_MODULE = f"{INSIDE_PACKAGE}.server"
WORKER = SANDBOX_INSIDE_DIR / "server.py"
FALLBACK_WARNING = ("WARNING: bubblewrap not available: student code runs with rlimits only, NOT isolated "
                    "from the filesystem or network (--unsafe-no-sandbox). Install it: apt-get install bubblewrap")
NOBODY = 65534
# Named models the template builds once, so that each submission's process starts with them: MiniLM
# (shared, copy-on-write) and the small random BERTs the hidden siamese suite passes (each session
# gets a copy: building one costs about 40 ms, copying it a few). tests/test_sandbox.py checks
# that every named model used in the hidden suites (tests/hidden/) is listed here.
DEFAULT_PRELOAD = ("minilm", "tiny-bert-seed1", "tiny-bert-seed2", "tiny-bert-seed31", "tiny-bert-seed41")
OUTPUT_HEAD = 16 * 1024
OUTPUT_TAIL = 4 * 1024
# Where bwrap is looked for when it is not on PATH: a grader started from a virtualenv that is not
# activated, from cron or from systemd may have a PATH without /usr/bin. A module-level tuple so that
# tests can make bubblewrap "missing" on a machine that has it.
BWRAP_CANDIDATES = ("/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap")
# Folders that are hidden whatever the caller asks (and /tmp, which gets a private empty one).
ALWAYS_HIDDEN = ("/root", "/home", "/run")
# Top-level packages of the kit that must never be importable by student code, wherever installed:
# the instructor package (its reference solutions, hidden suites, mutant bank, demo cohort). Only its
# __init__.py, rpc.py and sandbox/ are shown back, for the worker (``Sandbox._kit_parts``).
SECRET_PACKAGES = ("bertlab_grader",)
INSTALL_HINT = ("Install it (Debian/Ubuntu: apt-get install bubblewrap), or, only if you accept running "
                "student code unisolated, pass --unsafe-no-sandbox.")
NAMESPACE_HINT = ("Allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; in a "
                  "container, run it with the privileges bwrap needs, e.g. docker --privileged or "
                  "--security-opt seccomp=unconfined), or, only if you accept running student code "
                  "unisolated, pass --unsafe-no-sandbox.")
_warned = False
# Probe results, keyed by the bwrap binary's identity (path, inode, mtime, size), our euid and the
# exact command: a changed PATH, a replaced binary or a different set of mounts is probed again.
_bwrap_checked: dict[tuple, tuple[bool, str]] = {}


class SandboxError(GraderFailure):
    """The sandbox itself failed (could not start, or died while no student code ran): the grader's
    failure, never the submission's. A ``GraderFailure``, hence also a ``RuntimeError``."""


class SandboxUnavailable(SandboxError):
    """Bubblewrap is missing or cannot create its namespaces, and running student code unisolated
    was not asked for (``unsafe_no_sandbox``). ``str(exc)``: what is wrong, then how to fix it."""


class _TemplateFailed(Exception):
    """The template died, stopped answering or broke the control protocol."""


# ============================================================================ bubblewrap itself

def _find_bwrap() -> Optional[str]:
    """The bwrap binary: on PATH, else at one of BWRAP_CANDIDATES; None when there is none."""
    found = shutil.which("bwrap")
    if found:
        return os.path.abspath(found)
    for candidate in BWRAP_CANDIDATES:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _binary_key(path: str) -> tuple:
    try:
        st = os.stat(path)
        return (path, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size, os.geteuid())
    except OSError:
        return (path, None, os.geteuid())


def _namespace_args() -> list[str]:
    """The namespaces the sandbox asks bwrap for."""
    if os.geteuid() == 0:
        # Not --unshare-all: as root that adds a user namespace mapping root to root, and the
        # worker could then not switch to an unprivileged uid (see Sandbox._drop_uid).
        return ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    return ["--unshare-all"]


def _sandbox_python() -> str:
    """The interpreter path to run inside the sandbox: sys.executable with its folder resolved (the
    sandbox shows real paths) but its own name kept, so that a virtualenv's ``bin/python`` symlink
    still finds its ``pyvenv.cfg`` (resolving it would start the base Python without the venv)."""
    exe = sys.executable or "/usr/bin/python3"
    return os.path.join(os.path.realpath(os.path.dirname(exe)), os.path.basename(exe))


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def _probe(command: list[str], env: Optional[dict] = None, timeout: float = 60.0) -> tuple[bool, str]:
    """Run ``command``; (exited 0, its stderr or why it could not run)."""
    try:
        done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout,
                              cwd="/")
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout:g} s"
    except OSError as exc:
        return False, f"{type(exc).__name__}: {exc}"
    err = done.stderr.decode("utf-8", "replace")
    if done.returncode != 0:
        return False, err.strip() or f"exit code {done.returncode}"
    return True, err


def bubblewrap_status() -> tuple[bool, str]:
    """Can bubblewrap sandbox student code here? (works, one line saying why or why not).

    Starts a real bwrap with the namespaces the sandbox uses and a trivial Python inside (a few tens
    of ms): finding the binary is not enough, since a container may forbid the namespaces. Used by
    ``Sandbox`` (which refuses to run without isolation unless told to) and ``bertlab doctor``.
    Cached per bwrap binary and euid.
    """
    bwrap = _find_bwrap()
    if bwrap is None:
        return False, "bubblewrap (bwrap) is not installed: not on PATH nor in " + ", ".join(BWRAP_CANDIDATES)
    key = ("status", *_binary_key(bwrap))
    if key not in _bwrap_checked:
        command = [bwrap, *_namespace_args(), "--die-with-parent", "--new-session", "--ro-bind", "/", "/",
                   "--proc", "/proc", "--dev", "/dev", _sandbox_python(), "-s", "-S", "-c", "pass"]
        ok, err = _probe(command, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, timeout=30.0)
        if ok:
            try:
                name = _first_line(subprocess.run([bwrap, "--version"], capture_output=True, timeout=10,
                                                  stdin=subprocess.DEVNULL).stdout.decode("utf-8", "replace"))
            except (OSError, subprocess.SubprocessError):
                name = ""
            name = name if name.startswith("bubblewrap") else "bubblewrap"
            _bwrap_checked[key] = (True, f"{name} at {bwrap} creates its namespaces")
        else:
            _bwrap_checked[key] = (False, f"bubblewrap at {bwrap} cannot create its sandbox: {_first_line(err)}")
    return _bwrap_checked[key]


def _unavailable(reason: str) -> SandboxUnavailable:
    hint = INSTALL_HINT if "not installed" in reason else NAMESPACE_HINT
    return SandboxUnavailable(f"{reason}; student code cannot be isolated.\n{hint}")


# ============================================================================ command line

def _exists(path) -> bool:
    return os.path.lexists(path)


def _under(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def _site_dirs() -> list[Path]:
    """The site directories the worker's Python imports from (torch, numpy, transformers, ...)."""
    candidates = set(site.getsitepackages())
    candidates.update(p for p in sys.path if p and os.path.isdir(p)
                      and os.path.basename(p) in ("site-packages", "dist-packages"))
    return sorted({Path(os.path.realpath(p)) for p in candidates if os.path.isdir(p)})


def _python_dirs() -> list[Path]:
    """What the worker's Python needs, to be shown read-only when it lies in a hidden folder.

    The base install (its prefixes) whole; of a virtualenv only ``bin/``, ``lib*/`` and
    ``pyvenv.cfg``, since a venv often sits in a folder with other things (the kit, the course,
    submissions) and nothing else of that folder may be shown; and the site directories on sys.path.
    The Python install is not secret: it is shown even inside a folder the caller asked to hide.
    """
    exe_prefix = Path(os.path.realpath(sys.executable or "/usr/bin/python3")).parent.parent
    bases = {Path(os.path.realpath(p)) for p in (sys.base_prefix, sys.base_exec_prefix) if p} | {exe_prefix}
    paths = {p for p in bases if p.is_dir()}
    for prefix in {Path(os.path.realpath(p)) for p in (sys.prefix, sys.exec_prefix) if p} - bases:
        for name in ("bin", "lib", "lib64", "pyvenv.cfg"):
            if _exists(prefix / name):
                paths.add(prefix / name)
    paths.update(_site_dirs())
    return sorted(paths)


def _package_dir(name: str) -> Optional[Path]:
    """Where an importable top-level package lives, without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(os.path.realpath(list(spec.submodule_search_locations)[0]))


def _mode_allows_others(path: Path) -> bool:
    """Can a uid other than the owner's pass through the folder ``path`` (o+x)?"""
    try:
        return bool(os.stat(path).st_mode & stat.S_IXOTH)
    except OSError:
        return True  # not there: nothing to work around


def _world_traversable(path: Path) -> bool:
    """Can an unprivileged uid reach ``path``? (every ancestor needs o+x)"""
    for p in [path, *path.parents]:
        try:
            if not os.stat(p).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    return True


def _mount_plan(hide_dirs: Iterable[Path], hide_files: Iterable[Path], show: Iterable[Path],
                tmp: Path = Path("/tmp")) -> list[str]:
    """The bwrap options that hide ``hide_dirs`` (empty tmpfs), ``hide_files`` (/dev/null over them)
    and show ``show`` again read-only, on top of ``--ro-bind / /``.

    bwrap applies mounts in order, and a mount covers whatever was mounted below its path before:
    so every mount comes after the mounts of its ancestors (outermost first: sorted by depth; at the
    same path a hide comes before the show that undoes it). A hide inside an already hidden folder is
    dropped (nothing to hide), a show of something already visible too. Showing a path inside a
    tmpfs needs its parent folders there: bwrap would create them 0700, which the sandbox's
    unprivileged uid cannot traverse, so they are created 0755 first. A hidden file is covered only
    where it is still visible.
    """
    ops = ([(p, 0, "dir") for p in hide_dirs] + [(p, 2, "file") for p in hide_files]
           + [(p, 1, "show") for p in show])
    ops.sort(key=lambda op: (len(op[0].parts), op[1], str(op[0])))
    state: dict[Path, str] = {}   # path -> "hidden" / "shown", for the mounts applied so far
    made: set[Path] = set()
    args: list[str] = []

    def covering(path: Path) -> Optional[tuple[Path, str]]:
        for p in (path, *path.parents):
            if p in state:
                return p, state[p]
        return None

    for path, _, kind in ops:
        cover = covering(path)
        visible = cover is None or cover[1] == "shown"
        if kind == "dir":
            if visible:  # (inside a shown folder its parents exist: they are real folders)
                perms = "1777" if path == tmp else "0755"
                args += ["--perms", perms, "--tmpfs", str(path)]
                state[path] = "hidden"
        elif kind == "file":
            if visible:
                args += ["--ro-bind", "/dev/null", str(path)]
        elif not visible:
            _make_parents(path, cover[0], made, args)
            if path.is_symlink():  # a venv's lib64 -> lib: the same link, not a second copy
                args += ["--symlink", os.readlink(path), str(path)]
            else:
                args += ["--ro-bind", str(path), str(path)]
            state[path] = "shown"
    return args


def _make_parents(path: Path, top: Path, made: set, args: list) -> None:
    """``--dir`` (mode 0755) for each folder strictly between ``top`` (a mount) and ``path``."""
    for parent in reversed(path.parents):
        if _under(parent, top) and parent != top and parent not in made:
            made.add(parent)
            args.extend(["--perms", "0755", "--dir", str(parent)])


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
    """A warm worker template (under bubblewrap) that runs submissions.

    ``kit_root``: the kit (``bertlab_grader.core.locations.KIT_ROOT``: the checkout, hidden from student code
    except ``bertlab`` and the worker's own files; installed, the site directory, of which only the
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
            self._check_mounts()
        elif use_bwrap or not unsafe_no_sandbox:
            raise _unavailable(why)
        else:
            self.drop_to = self._drop_uid()
            _warn_once(as_root=self.drop_to is None and os.geteuid() == 0)
        self._jobs = itertools.count(1)
        self.exited: dict[int, dict] = {}   # job -> exit status reported by the template
        self.generation = 0                  # bumps at every template (re)start
        self.startup_s = 0.0                 # wall time of the last template start (spawn to ready)
        self._info: Optional[dict] = None    # the template's "ready" message
        weakref.finalize(self, _kill_popen, self._procs)  # no template outlives its Sandbox
        self._start_template()

    # ---- construction of the command
    def _kit_parts(self) -> tuple[list[Path], list[str]]:
        """What the worker needs from the kit (shown read-only) and its sys.path roots."""
        bertlab = _package_dir("bertlab") or next(
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
            os.chmod(root, 0o755)  # the worker may run as another uid (see _drop_uid)
            (root / INSIDE_PACKAGE).symlink_to(SANDBOX_INSIDE_DIR, target_is_directory=True)
            weakref.finalize(self, shutil.rmtree, str(root), True)
            self._unisolated_root = root
        return self._unisolated_root

    def _bwrap_args(self) -> list[str]:
        """The bwrap command line up to the worker's own command (see ``_mount_plan``).

        Hidden: /root, /home, /run, /tmp (a private, empty one), the kit, the ``hide`` paths, and
        installed copies of the kit's secret packages. Shown back read-only: the Python install
        (even inside a hidden folder: it is not secret, and a venv often lives inside the kit or
        beside the submissions) and what the worker needs of the kit (``_kit_parts``).
        """
        bwrap = _find_bwrap() or "/usr/bin/bwrap"
        args = [bwrap, *_namespace_args(), "--die-with-parent", "--new-session", "--ro-bind", "/", "/",
                "--proc", "/proc", "--dev", "/dev"]
        python = _python_dirs()
        kit = self.kit_root
        tmp = Path(os.path.realpath("/tmp"))
        hide_dirs = [Path(os.path.realpath(p)) for p in ALWAYS_HIDDEN if os.path.isdir(p)] + [tmp]
        # An installed kit has kit_root = site-packages: hiding it would hide torch. Its secret
        # packages are hidden one by one below instead (as they are for every layout).
        if not any(_under(kit, p) for p in _site_dirs()):
            hide_dirs.append(kit)
        hide_dirs += [p for p in self.hide if p.is_dir()]
        hide_files = [p for p in self.hide if _exists(p) and not p.is_dir()]
        for name in SECRET_PACKAGES:
            d = _package_dir(name)
            if d is not None:
                hide_dirs.append(d)
        show = python + self._kit_parts()[0]
        if os.geteuid() == 0:
            # The worker runs as an unprivileged uid: a visible folder on the way to something it needs
            # that others cannot traverse (a checkout in a 0700 home, pytest's tmp folders) would stop
            # it. Such a folder is already unreadable to that uid, so an empty 0755 tmpfs over it
            # hides nothing more, and the paths below it are shown back.
            hide_dirs += [a for p in show for a in p.parents
                          if a != Path("/") and not _mode_allows_others(a)]
        inside = self._inside_root()
        return (args + _mount_plan(hide_dirs, hide_files, show, tmp)
                + ["--perms", "0755", "--dir", str(inside),
                   "--ro-bind", str(SANDBOX_INSIDE_DIR), str(inside / INSIDE_PACKAGE)]
                + ["--chdir", "/tmp", "--"])

    def _worker_command(self, ctrl_fd: Optional[int], probe: bool = False) -> list[str]:
        _, roots = self._kit_parts()
        cmd = [_sandbox_python() if self.isolated else sys.executable, "-s", "-B", "-m", SERVER_MODULE]
        cmd += ["--probe"] if probe else ["--control-fd", str(ctrl_fd)]
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
                # malloc on the same steady footing as the grader's side of a timing (performance.py)
                **STEADY_MALLOC_ENV}

    def scrub(self, text: str) -> str:
        """``text`` (something the submission's process wrote) without the folders of the kit and
        of the Python install: they are the same paths inside the sandbox and out."""
        from bertlab_grader.sandbox.inside import server  # (its helpers only: importing it starts nothing)

        if self._prefixes is None:
            self._prefixes = server.path_prefixes([str(self.kit_root), str(SANDBOX_INSIDE_DIR),
                                                   *self._kit_parts()[1]])
        return server.scrub_paths(text, self._prefixes)

    def _check_mounts(self) -> None:
        """Start the worker with this very set of mounts, as the uid it will run as, and have it find
        (and read) what it imports: a layout the mounts get wrong fails here, with bwrap's or Python's
        own words, instead of as a template that dies during its warm-up. Cached per command line.

        Bubblewrap itself works (``bubblewrap_status``), so a failure here is a SandboxError of the
        mounts, not a missing sandbox: it is never a reason to run without isolation.
        """
        command = self._worker_command(None, probe=True)
        key = ("mounts", *_binary_key(command[0]), tuple(command))
        if key not in _bwrap_checked:
            _bwrap_checked[key] = _probe(command, env=self._environment())
        ok, err = _bwrap_checked[key]
        if not ok:
            raise SandboxError("bubblewrap works, but the sandbox's worker cannot start with its mounts "
                               f"(kit {self.kit_root}, Python {sys.executable}):\n{err[-3000:]}")

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
        """What the submission's process printed (head and tail), without sandbox-side folders."""
        return self.sandbox.scrub(self._out.text())

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
                    # Gone before it announced its first import: no student code had run (every
                    # module announces itself before it executes, and ending the previous child
                    # killed everything it left), so the worker or the template failed, not the
                    # submission. Scoring it would blame the student for the grader.
                    raise SandboxError(f"the submission's process failed before any submitted code ran: "
                                       f"{gone}") from None
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
        # The student's last output, with the kit's and the Python install's folders cut off (a
        # library's warning or a traceback the submission printed would name them).
        tail = self.sandbox.scrub(self._out.text()[-1500:]).strip()
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
                    # The template died while this child exists. The submission can kill it (same
                    # uid inside the sandbox: see the red-team samples kill_template and
                    # stop_template), so while a call or an import runs that is the submission's
                    # crash. Before the child's first import no student code runs, and
                    # _ensure_child turns this into a SandboxError.
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
        what = ".".join(map(str, ((root[1] if root[0] in ("module", "probe") else "<handle>"),) + remote._bl_path))
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
                  "target": {root[0]: root[1]},  # {"module": name}, {"probe": name} or {"handle": id}
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
                target = {root[0]: root[1]}  # {"module": name} or {"probe": name}
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


__all__ = ["Sandbox", "SandboxError", "SandboxUnavailable", "Session", "Stashed", "FALLBACK_WARNING",
           "bubblewrap_status"]
