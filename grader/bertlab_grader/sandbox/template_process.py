"""A sandbox's template process until a Sandbox talks to it: the command line that starts it (under
bubblewrap, with its mounts), its environment, its start, and its hand-off to another process.

    command = TemplateCommand(kit_root, hide=[course], isolated=True, uid=61001, preload=DEFAULT_PRELOAD)
    started = command.start()            # spawned now; it warms up (torch, MiniLM) in the background
    handoff = started.hand_off()         # to a grader worker (course/pool.py), which adopts it:
    Sandbox(..., template=handoff)       # (sandbox/launcher.py) and talks to it from then on

This module imports no torch, and nothing that does: a cohort run's main process starts its workers'
templates itself while the workers' fork server imports torch (course/pool.py, ``start_template``), and
it never imports torch, pytest or the sandbox's client (sandbox/launcher.py).
"""

from __future__ import annotations

import contextlib
import ctypes
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

from bertlab_grader.core.locations import package_folder
from bertlab_grader.sandbox.bubblewrap import find_bwrap, namespace_args, sandbox_python
from bertlab_grader.sandbox.malloc_pin import STEADY_MALLOC_ENV
from bertlab_grader.sandbox.mounts import (
    ALWAYS_HIDDEN, SECRET_PACKAGES, mode_allows_others, mount_plan, package_dir, path_exists, python_dirs,
    site_dirs, is_under, world_traversable)

#: The only kit code the sandbox shows: this room's package ``inside`` (grader/bertlab_grader/sandbox/inside/).
SANDBOX_INSIDE_DIR = package_folder("bertlab_grader.sandbox.inside")
#: The sandboxed server, as the sandbox imports it: the folder sandbox/inside/ (SANDBOX_INSIDE_DIR) is
#: shown alone, under this package name, in a folder of the sandbox's own (``TemplateCommand.inside_root``).
INSIDE_PACKAGE = "bertlab_sandbox"
SERVER_MODULE = f"{INSIDE_PACKAGE}.server"
SERVER_FILE = SANDBOX_INSIDE_DIR / "server.py"
NOBODY = 65534
# Named models the template builds once, so that each submission's process starts with them: MiniLM
# (shared, copy-on-write) and the small random BERTs the hidden siamese suite passes (each session
# gets a copy: building one costs about 40 ms, copying it a few). tests/test_sandbox.py checks
# that every named model used in the hidden suites (tests/hidden/) is listed here.
DEFAULT_PRELOAD = ("minilm", "tiny-bert-seed1", "tiny-bert-seed2", "tiny-bert-seed31", "tiny-bert-seed41")


class TemplateCommand:
    """How a template is started: ``server_command`` under ``environment``. ``kit_root``, ``hide``,
    ``uid`` and ``preload`` as for ``Sandbox``; ``isolated``: under bubblewrap (else rlimits only).
    Two commands that ``key()`` alike start the same template."""

    def __init__(self, kit_root: Path, hide: Iterable[Path], isolated: bool, uid: int,
                 preload: Iterable[str] = DEFAULT_PRELOAD):
        self.kit_root = Path(os.path.realpath(kit_root))
        self.hide = [Path(os.path.realpath(p)) for p in hide]
        self.isolated = isolated
        self.preload = list(preload)
        self._unisolated_root: Optional[Path] = None  # see inside_root
        self.drop_to = self.drop_uid(uid)

    def kit_parts(self) -> tuple[list[Path], list[str]]:
        """What the server needs from the kit (shown read-only) and its sys.path roots."""
        bertlab = package_dir("bertlab") or next(
            (p for p in (self.kit_root / "src" / "bertlab", self.kit_root / "bertlab") if p.is_dir()),
            self.kit_root / "src" / "bertlab")
        # The student package at its own path (its folder is named as it imports); the server's folder
        # under a name of its own (see inside_root), so it is the one folder of the grader shown.
        return [p for p in (bertlab,) if p.exists()], sorted({str(bertlab.parent), str(self.inside_root())})

    def inside_root(self) -> Path:
        """The folder whose ``bertlab_sandbox/`` is sandbox/inside/: inside bubblewrap a read-only bind
        mount in the sandbox's private /tmp (created by ``bwrap_args``); without isolation a private
        folder of this process holding a symlink to it."""
        if self.isolated:
            return Path(os.path.realpath("/tmp")) / ".bertlab-kit"
        if self._unisolated_root is None:
            root = Path(tempfile.mkdtemp(prefix="bertlab-kit-"))
            os.chmod(root, 0o755)  # the server may run as another uid (see drop_uid)
            (root / INSIDE_PACKAGE).symlink_to(SANDBOX_INSIDE_DIR, target_is_directory=True)
            weakref.finalize(self, shutil.rmtree, str(root), True)
            self._unisolated_root = root
        return self._unisolated_root

    def bwrap_args(self) -> list[str]:
        """The bwrap command line up to the server's own command (see ``mount_plan``).

        Hidden: /root, /home, /run, /tmp (a private, empty one), the kit, the ``hide`` paths, and
        installed copies of the kit's secret packages. Shown back read-only: the Python install
        (even inside a hidden folder: it is not secret, and a venv often lives inside the kit or
        beside the submissions) and what the server needs of the kit (``kit_parts``).
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
        show = python + self.kit_parts()[0]
        if os.geteuid() == 0:
            # The server runs as an unprivileged uid: a visible folder on the way to something it needs
            # that others cannot traverse (a checkout in a 0700 home, pytest's tmp folders) would stop
            # it. Such a folder is already unreadable to that uid, so an empty 0755 tmpfs over it
            # hides nothing more, and the paths below it are shown back.
            hide_dirs += [a for p in show for a in p.parents
                          if a != Path("/") and not mode_allows_others(a)]
        inside = self.inside_root()
        return (args + mount_plan(hide_dirs, hide_files, show, tmp)
                + ["--perms", "0755", "--dir", str(inside),
                   "--ro-bind", str(SANDBOX_INSIDE_DIR), str(inside / INSIDE_PACKAGE)]
                + ["--chdir", "/tmp", "--"])

    def server_command(self, ctrl_fd: Optional[int], check_mounts: bool = False) -> list[str]:
        _, roots = self.kit_parts()
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
        return (self.bwrap_args() if self.isolated else []) + cmd

    def environment(self) -> dict[str, str]:
        _, roots = self.kit_parts()
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

    def drop_uid(self, uid: int) -> Optional[int]:
        """The uid the server switches to: ``uid`` when we are root and it can still reach Python."""
        if os.geteuid() != 0:
            return None
        if self.isolated:
            return uid  # the sandbox shows the Python install through world-readable mounts
        needed = [Path(os.path.realpath(sys.executable)), SERVER_FILE, *self.kit_parts()[0]]
        return uid if all(world_traversable(p.parent) for p in needed) else None

    def key(self) -> tuple:
        """What makes two templates the same: the command (all but its control fd) and environment."""
        return (*self.server_command(0), *sorted(self.environment().items()))

    def start(self) -> "StartedTemplate":
        """Spawn the template now; it warms up in the background (its "ready" message comes later)."""
        spawned_at = time.monotonic()
        parent, child = socket.socketpair()
        log = tempfile.TemporaryFile()
        preexec = None if self.isolated else _die_with_parent
        try:
            proc = subprocess.Popen(
                self.server_command(child.fileno()), pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL,
                stdout=log, stderr=log, env=self.environment(), cwd="/",
                start_new_session=True, preexec_fn=preexec)
        except BaseException:
            parent.close()
            log.close()
            raise
        finally:
            child.close()
        return StartedTemplate(self, proc, parent, log, spawned_at)


class StartedTemplate:
    """A template just spawned: its process, its control socket (the server's end is its
    ``--control-fd``), its log (the server's stdout and stderr) and when it was spawned."""

    def __init__(self, command: TemplateCommand, proc: subprocess.Popen, control: socket.socket, log,
                 spawned_at: float):
        self.command, self.proc, self.control, self.log, self.spawned_at = command, proc, control, log, spawned_at

    def hand_off(self) -> "TemplateHandoff":
        """The template, for another process to adopt (``Sandbox(..., template=handoff)``); this object
        keeps only its process, to reap it: ``end()`` it once the other process is done with it."""
        handoff = TemplateHandoff(self.control, self.log, self.proc.pid, self.command.key(), self.spawned_at)
        self.control = self.log = None  # (the handoff holds them until it is sent, then closes them)
        return handoff

    def end(self) -> None:
        """Kill the template, if it still runs, and reap it."""
        for closing in (self.control, self.log):
            if closing is not None:
                closing.close()
        self.control = self.log = None
        kill_template({"template": self.proc})


class TemplateHandoff:
    """A running template on its way from the process that started it to the one that will use it:
    its control socket, its log file, its pid and a pidfd of its process, its ``key`` and when it was
    spawned. The pidfd lets the adopter wait for and kill a process that is not its child, without any
    risk of signalling another process that reused the pid: the sender, its parent, reaps it. How it
    crosses to the other process is the sender's business (course/pool.py: as a worker's argument, its
    file descriptors duplicated by multiprocessing); the sender ``close()``s its copies afterwards."""

    def __init__(self, control: socket.socket, log, pid: int, key: tuple, spawned_at: float,
                 pidfd: Optional[int] = None):
        self.control, self.log, self.pid, self.key, self.spawned_at = control, log, pid, key, spawned_at
        self.pidfd = os.pidfd_open(pid) if pidfd is None else pidfd

    def take_control(self) -> socket.socket:
        control, self.control = self.control, None
        return control

    def take_log(self):
        log, self.log = self.log, None
        return log

    def take_pidfd(self) -> int:
        pidfd, self.pidfd = self.pidfd, None
        return pidfd

    def close(self) -> None:
        """Close this process's copies (after sending; the template lives on in the adopter's hands)."""
        for closing in (self.control, self.log):
            if closing is not None:
                closing.close()
        if self.pidfd is not None:
            os.close(self.pidfd)
        self.control = self.log = self.pidfd = None

    def discard(self) -> None:
        """Kill the template (it will not be adopted) and close what is left of the handoff."""
        if self.pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        self.close()


class AdoptedProcess:
    """The part of ``subprocess.Popen`` a Sandbox uses (pid, poll, wait, kill, returncode), for a template
    this process adopted (``TemplateHandoff``): it is not our child, so it is watched through its pidfd,
    which becomes readable when it exits. Its exit status goes to its parent, which reaps it: here
    ``returncode`` is -1 once it is gone."""

    def __init__(self, pid: int, pidfd: int):
        self.pid, self.returncode = pid, None
        self._pidfd = pidfd
        weakref.finalize(self, os.close, pidfd)

    def poll(self) -> Optional[int]:
        return self.wait(0) if self.returncode is None and self._gone(0) else self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        if self.returncode is None:
            if not self._gone(timeout):
                raise subprocess.TimeoutExpired("the adopted template", timeout)
            self.returncode = -1
        return self.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def _gone(self, timeout: Optional[float]) -> bool:
        return bool(select.select([self._pidfd], [], [], timeout)[0])


def can_hand_off() -> bool:
    """Whether templates can be handed off here (``TemplateHandoff`` needs pidfds: Linux 5.3, Python 3.9)."""
    if not hasattr(os, "pidfd_open") or not hasattr(signal, "pidfd_send_signal"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return False
    return True


def kill_template(procs: dict) -> None:
    """Kill and reap ``procs["template"]`` (removed from ``procs``), if it still runs."""
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
