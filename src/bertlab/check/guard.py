"""Guarded children: every process a check starts dies with the check (Linux).

A check runs in two processes of its own. The *guard*, forked from the checker, runs no student code:
it makes itself the leader of a new session, becomes a child subreaper (so everything the check
starts stays its descendant, even a process that double-forks or calls setsid), and forks the
*payload* (the pytest run). It waits for whichever comes first:

- the payload ends: the guard kills every descendant left behind (a student's ``sleep 3600``), then
  reports the payload's exit status to the checker over a pipe and exits;
- the checker goes away (ended, killed with SIGTERM or SIGKILL: the write end of the guard's
  *lifeline* pipe closes, so the pipe reads EOF; PR_SET_PDEATHSIG is a second alarm) or asks the
  check to stop (it closes the lifeline on purpose, for a time-out or a cancelled check): the guard
  kills the payload and every descendant, then exits.

The payload also carries PR_SET_PDEATHSIG=SIGKILL: if the guard itself is killed, the payload goes too.

The checker's side is ``GuardedChild`` (``poll``, ``stop``, ``fileno``), which run.py follows like a
subprocess. Nothing here prints: the guard's stdout and stderr are the check's output file.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import time
from pathlib import Path
from typing import Callable, Optional

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_GUARD_FAILED = 70  # the guard's own exit code when it could not run the payload at all

try:  # loaded now, in the checker: a forked guard never has to load a library
    _LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
    _PRCTL = _LIBC.prctl if _LIBC is not None else None
except (OSError, AttributeError):
    _LIBC = _PRCTL = None


def supported() -> bool:
    """Whether checks can be guarded here: Linux, with fork and prctl."""
    return _PRCTL is not None and hasattr(os, "fork")


def _prctl(option: int, value: int) -> bool:
    try:
        return _PRCTL(option, ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0),
                      ctypes.c_ulong(0)) == 0
    except Exception:  # noqa: BLE001 - a guard that cannot ask for a signal still has its lifeline
        return False


class GuardedChild:
    """The checker's handle on a guarded check: ``pid`` is the guard's (its session and process group)."""

    def __init__(self, pid: int, lifeline: int, status: int):
        self.pid = pid
        self.returncode: Optional[int] = None
        self._lifeline: Optional[int] = lifeline  # write end; closing it tells the guard to stop
        self._status = status                       # read end; the guard writes the payload's status

    def fileno(self) -> int:
        """Readable once the guard has reported (or died): select on it instead of sleeping."""
        return self._status

    def poll(self) -> Optional[int]:
        """The payload's exit code (negative: the signal that killed it) once the check is over, else None."""
        if self.returncode is not None:
            return self.returncode
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped by someone else: trust what the guard wrote, if anything
            pid, status = self.pid, None
        if pid == 0:
            return None
        reported = b""
        try:
            os.set_blocking(self._status, False)
            reported = os.read(self._status, 64)
        except OSError:
            pass
        try:
            self.returncode = int(reported.split()[0])
        except (ValueError, IndexError):  # the guard died before it could report: its own status
            self.returncode = os.waitstatus_to_exitcode(status) if status is not None else -signal.SIGKILL
        self._close()
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        """Wait for the check to end, at most ``timeout`` seconds (None: for ever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            try:
                select.select([self._status], [], [], min(left, 0.05) if left is not None else 0.05)
            except (OSError, ValueError):
                time.sleep(0.01)
        return self.returncode

    def stop(self, grace: float = 5.0) -> None:
        """End the check now: the guard kills the payload and everything it started. A guard that does
        not answer within ``grace`` seconds is killed with its whole process group."""
        if self.poll() is not None:
            return
        if self._lifeline is not None:
            os.close(self._lifeline)
            self._lifeline = None
        if self.wait(grace) is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except OSError:
                    pass
            self.wait()

    def _close(self) -> None:
        for fd in (self._lifeline, self._status):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._lifeline = None


def start(payload: Callable[[], int], output: Path) -> GuardedChild:
    """Fork a guard that runs ``payload()`` in a child of its own, stdout and stderr appended to
    ``output``, stdin /dev/null; the payload's return value is its exit code (it may also exec).
    Call from the main thread (PR_SET_PDEATHSIG follows the thread that forked)."""
    lifeline_r, lifeline_w = os.pipe()
    status_r, status_w = os.pipe()
    checker = os.getpid()
    pid = os.fork()
    if pid == 0:  # the guard
        code = _GUARD_FAILED
        try:
            os.close(lifeline_w)
            os.close(status_r)
            code = _Guard(checker, lifeline_r, status_w).run(payload, str(output))
        except BaseException:  # noqa: BLE001 - the guard never returns into the checker's code
            pass
        finally:
            os._exit(code)
    os.close(lifeline_r)
    os.close(status_w)
    return GuardedChild(pid, lifeline_w, status_r)


class _Guard:
    """The guard process (see the module's docstring)."""

    def __init__(self, checker: int, lifeline: int, status: int):
        self.checker, self.lifeline, self.status = checker, lifeline, status
        self.payload_pid = 0
        self.payload_status: Optional[int] = None
        self.subreaper = False

    def run(self, payload: Callable[[], int], output: str) -> int:
        os.setsid()  # a session (and process group) of its own: no terminal signals, one group to kill
        # A signal asking the guard to stop (SIGTERM, SIGHUP, SIGINT, or SIGTERM as the checker's death
        # alarm) only wakes its wait, through the wake-up pipe: a handler that raised could interrupt the
        # clean-up itself, and leave the check's processes alive.
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, lambda signum, frame: None)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        self.subreaper = _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        try:
            if os.getppid() != self.checker:  # the checker died before the alarm was set
                return 0
            self._stdio(output)
            guard_pid = os.getpid()
            self.payload_pid = os.fork()
            if self.payload_pid == 0:
                self._payload(payload, guard_pid, (self.wake_r, wake_w))
            self._wait_for_payload_or_checker()
        finally:
            self._kill_descendants()
            code = self.payload_status if self.payload_status is not None else -signal.SIGKILL
            os.write(self.status, f"{code}\n".encode())
        return 0

    @staticmethod
    def _stdio(output: str) -> None:
        devnull = os.open(os.devnull, os.O_RDONLY)
        out = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(devnull, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(devnull)
        os.close(out)

    def _payload(self, payload: Callable[[], int], guard_pid: int, wake: tuple[int, int]) -> None:
        """In the payload's process: never returns."""
        code = _GUARD_FAILED
        try:
            signal.set_wakeup_fd(-1)
            for fd in (self.lifeline, self.status, *wake):
                os.close(fd)
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a fresh Python
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != guard_pid:  # the guard died before the alarm was set
                os._exit(code)
            code = payload()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException as exc:  # noqa: BLE001 - one line: the kit's own frames mean nothing to a student
            try:
                os.write(2, f"the check could not start: {type(exc).__name__}: {exc}\n".encode())
            except OSError:
                pass
        finally:
            os._exit(code if isinstance(code, int) else _GUARD_FAILED)

    def _wait_for_payload_or_checker(self) -> None:
        try:
            pidfd = os.pidfd_open(self.payload_pid)  # readable when the payload exits (Linux 5.3+)
        except (AttributeError, OSError):
            pidfd = None
        watched = [self.lifeline, self.wake_r] + ([pidfd] if pidfd is not None else [])
        while True:
            ready, _, _ = select.select(watched, [], [], None if pidfd is not None else 0.02)
            self._reap()
            if self.payload_status is not None:
                return
            if self.lifeline in ready or self.wake_r in ready:  # EOF: the checker is gone or asks to stop
                return

    def _reap(self) -> None:
        """Collect every child that ended (orphans the subreaper inherited too), noting the payload's status."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.payload_pid:
                self.payload_status = os.waitstatus_to_exitcode(status)

    @staticmethod
    def _has_children() -> bool:
        try:
            os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)  # None: children, none ended
        except ChildProcessError:
            return False
        return True

    def _kill_descendants(self, rounds: int = 500) -> None:
        """SIGKILL every descendant and every member of this session until none is left."""
        me = os.getpid()
        for _ in range(rounds):
            self._reap()
            if self.subreaper and not self._has_children():
                return  # a subreaper with no child has no descendant at all: nothing to scan
            victims = [pid for pid in _descendants_and_session(me) if pid != me]
            if not victims:
                return
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.002)
        self._reap()


def _descendants_and_session(root: int) -> set[int]:
    """Live (not zombie) processes below ``root`` in the process tree, or in the session ``root`` leads."""
    table: dict[int, tuple[int, int, str]] = {}  # pid -> (ppid, session, state)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        table[int(entry)] = (int(fields[1]), int(fields[3]), fields[0])
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, stack = set(), list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack.extend(children.get(pid, ()))
    found |= {pid for pid, (_, session, _) in table.items() if session == root}
    return {pid for pid in found if table.get(pid, (0, 0, "Z"))[2] != "Z"}
