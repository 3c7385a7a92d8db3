"""The template side: the warm process that forks one child per job, then kills what the job left
and wipes the scratch space, so nothing one student leaves behind reaches the next."""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import time
from typing import Optional

from .confine import libc
from .reports import short_traceback
from .child import child_main



class Template:
    """The warm parent: forks a child per job and cleans up after it."""

    def __init__(self, ctrl_sock: socket.socket, isolated: bool, scratch: str):
        from .rpc import Channel

        self.ctrl = Channel(ctrl_sock)
        self.isolated = isolated
        self.scratch = scratch
        self.job = None          # (job id, child pid, job dir)
        self.reported: set[int] = set()
        self._wake_r, wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self._template_fds = {self._wake_r, wake_w, ctrl_sock.fileno()}

    def serve(self, ready: dict) -> None:
        self.ctrl.send(ready)
        while True:
            readable, _, _ = select.select([self.ctrl, self._wake_r], [], [], 1.0)
            if self._wake_r in readable:
                try:
                    while os.read(self._wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass
            self.reap()
            if self.ctrl in readable:
                try:
                    msg, _ = self.ctrl.recv()
                except Exception:
                    self.end_job()
                    return  # the trusted side is gone or confused: exit, it will start a fresh one
                op = msg.get("op")
                if op == "start":
                    self.start_job(msg)
                elif op == "end":
                    self.end_job()
                    self.ctrl.send({"op": "ended", "job": msg.get("job")})
                elif op in ("pause", "resume"):
                    self.pause_job(msg.get("job"), op == "pause")
                    self.ctrl.send({"op": op + "d", "job": msg.get("job")})
                elif op == "ping":
                    self.ctrl.send({"op": "pong"})
                elif op == "census":
                    self.ctrl.send({"op": "census", **self.census()})
                elif op == "exit":
                    self.end_job()
                    return

    def start_job(self, msg: dict) -> None:
        _, fds, _, _ = socket.recv_fds(self.ctrl.sock, 1, 2)
        self.end_job()
        job_dir = self._new_job_dir()
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                child_main(msg, fds[0], fds[1], job_dir)
                code = 0
            except BaseException as exc:
                try:  # fd 2 is the student's output by now: file names only
                    sys.stderr.write(short_traceback(exc))
                    sys.stderr.flush()
                except BaseException:
                    pass
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        self.job = (msg.get("job"), pid, job_dir)
        self.ctrl.send({"op": "started", "job": msg.get("job"), "pid": pid})

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.job and pid == self.job[1] and self.job[0] not in self.reported:
                self.reported.add(self.job[0])
                self.ctrl.send({"op": "exited", "job": self.job[0],
                                "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                                "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None})

    def census(self) -> dict:
        """What the trusted side needs to trust the CPU clock of the job's child (the performance task,
        grader/bertlab_grader/performance/timing.py): the last pid the sandbox's pid namespace handed out
        (it moves whenever anything in the sandbox starts a process or a thread) and the processes other
        than the job's child. Empty outside our own namespace, where neither can be told."""
        if not self.isolated:
            return {}
        try:
            with open("/proc/sys/kernel/ns_last_pid") as f:
                last_pid = int(f.read())
        except (OSError, ValueError):
            return {}
        child = self.job[1] if self.job else None
        return {"last_pid": last_pid, "others": sorted(_others(_proc_table(), True) - {child})}

    def pause_job(self, job, pause: bool) -> None:
        """Stop (SIGSTOP) or continue (SIGCONT) the job's child and everything it started, while
        another grader worker times (the trusted side does not count that time as the job's)."""
        if self.job is None or self.job[0] != job:
            return
        if not pause:
            _signal_others(self.isolated, signal.SIGCONT)
            return
        for _ in range(20):  # a process forked while we signalled escapes one round, not twenty
            table = _proc_table()
            if all(table[p][1] in ("T", "t", "Z") for p in _others(table, self.isolated) if p in table):
                return
            _signal_others(self.isolated, signal.SIGSTOP, table)
            time.sleep(0.001)

    def end_job(self) -> None:
        """Kill the child and everything it started; wipe the scratch space."""
        if self.job is None:
            return
        _, pid, job_dir = self.job
        try:
            os.killpg(pid, signal.SIGKILL)  # the child's session (it made itself a leader)
        except OSError:
            pass
        kill_everything_else(self.isolated)
        self.reap()
        self.job = None
        if self.isolated:
            wipe_directory(self.scratch)
            _remove_sysv_ipc()
        else:
            shutil.rmtree(job_dir, ignore_errors=True)

    def _new_job_dir(self) -> str:
        if self.isolated:
            path = os.path.join(self.scratch, "job")
            os.makedirs(path, mode=0o700, exist_ok=True)
            return path
        return tempfile.mkdtemp(prefix="bertlab-job-", dir=self.scratch)


_PF_EXITING = 0x4  # the kernel's flag for a process inside exit(): it runs no code of its own again


def _proc_table() -> dict[int, tuple[int, str, int]]:
    """pid -> (ppid, state, kernel flags) for every process visible in /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        table[int(entry)] = (int(fields[1]), fields[0], int(fields[6]))
    return table


def _ended(entry: tuple[int, str, int]) -> bool:
    """A zombie, or a process already inside exit(): ending one that holds the template's memory
    takes the kernel about 10 ms of freeing it (measured), and nothing of it runs again meanwhile."""
    return entry[1] == "Z" or bool(entry[2] & _PF_EXITING)


def kill_everything_else(isolated: bool, rounds: int = 200) -> None:
    """SIGKILL every process but ourselves (and the namespace's init), until none is left that is
    not a zombie or already inside exit() (``_ended``).

    In the sandbox's own pid namespace that is everything we can signal: ``kill(-1)`` reaches them in
    one call, so a fork bomb cannot outrun it. Without a namespace we are a child subreaper, so every
    process a job started is still our descendant: kill that tree.
    """
    for round_ in range(rounds):
        _reap_all()
        table = _proc_table()
        if all(_ended(table[p]) for p in _others(table, isolated)):
            return
        _signal_others(isolated, signal.SIGKILL, table)
        time.sleep(min(0.005, 0.0002 * 2 ** round_))  # a killed process enters exit() within microseconds


def _signal_others(isolated: bool, sig: int, table: Optional[dict] = None) -> None:
    """Send ``sig`` to every process a job may have started (``_others``): in our own pid namespace
    with one ``kill(-1)``, which reaches them all at once, so a fork bomb cannot outrun it."""
    if isolated:
        _signal(-1, sig)
        return
    for pid in _others(_proc_table() if table is None else table, isolated):
        _signal(pid, sig)


def _others(table: dict[int, tuple[int, str]], isolated: bool) -> set[int]:
    """Every process of ``table`` a job may have started: in the sandbox's own pid namespace, all but
    ourselves and the namespace's init; without one, our descendants (we are a child subreaper)."""
    me = os.getpid()
    if isolated:
        return {p for p in table if p not in (1, me)}
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, stack = set(), list(children.get(me, ()))
    while stack:
        pid = stack.pop()
        found.add(pid)
        stack.extend(children.get(pid, ()))
    return found


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def _reap_all() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _remove_sysv_ipc() -> None:
    """Delete the System V shared memory, queues and semaphores a job left in our IPC namespace
    (a channel between two students otherwise: it outlives the processes that made it)."""
    _IPC_RMID = 0
    for kind, remove in (("shm", lambda i: libc.shmctl(i, _IPC_RMID, None)),
                         ("msg", lambda i: libc.msgctl(i, _IPC_RMID, None)),
                         ("sem", lambda i: libc.semctl(i, 0, _IPC_RMID))):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                ids = [int(line.split()[1]) for line in f.readlines()[1:] if line.split()]
        except (OSError, ValueError, IndexError):
            continue
        for ipc_id in ids:
            remove(ipc_id)


def _mount_points() -> set[str]:
    """Every mount point of this mount namespace (/proc/self/mountinfo, field 5)."""
    try:
        with open("/proc/self/mountinfo") as f:
            return {line.split()[4].replace("\\040", " ") for line in f if len(line.split()) > 4}
    except OSError:
        return set()


def wipe_directory(directory: str) -> None:
    """Empty ``directory`` (the sandbox's private /tmp), whatever modes the job left behind.

    What the sandbox itself mounts there (the kit's folder, and a Python or virtualenv that lives
    under /tmp) is read-only and stays: it is neither entered nor removed. Walking into it only to
    fail on every file cost 0.4 s per submission with a virtualenv under /tmp (measured)."""
    mounts = _mount_points()

    def fix_and_retry(func, path, _exc):
        try:
            os.chmod(os.path.dirname(path) or path, 0o700)
            os.chmod(path, 0o700)
            func(path)
        except OSError:
            pass

    for entry in os.listdir(directory):
        path = os.path.join(directory, entry)
        if path in mounts:
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            if any(m.startswith(path + "/") for m in mounts):
                wipe_directory(path)  # the folders bwrap made to hold a mount: empty them around it
                continue
            shutil.rmtree(path, onerror=fix_and_retry)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass