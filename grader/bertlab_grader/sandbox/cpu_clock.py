"""The CPU time a sandboxed process has used, read from outside it.

The performance task times the submission and the reference by the CPU time their processes used
during a call (grader/bertlab_grader/performance/timing.py): the kernel keeps that clock for every
process, all its threads included (those that ended too), and the trusted side reads it without asking
the process, so code inside the sandbox cannot change what it says. A process that waits for a CPU
on a busy machine uses none meanwhile, so the clock moves with the work a call does, not with the load.

Work a call hands to another process would escape this clock: the timing trusts it only while the
sandbox's census (``Sandbox.census``) shows that no process or thread was started and no other process
was there (see ``timing._compare``).
"""

from __future__ import annotations

import os
import time
from typing import Optional


def cpu_seconds(pid: int) -> Optional[float]:
    """CPU seconds process ``pid`` (all its threads) has used, or None when it is gone. The clock id is
    the kernel's for another process's CPU time (what clock_getcpuclockid returns: CPUCLOCK_SCHED of
    the process, ``(~pid << 3) | 2``); reading it needs no permission on the process."""
    try:
        return time.clock_gettime(((~pid) << 3) | 2)
    except OSError:
        return None


def queued_seconds(pid: int) -> Optional[float]:
    """Seconds process ``pid`` (its main thread) has spent runnable but waiting for a CPU, or None when
    it is gone or the kernel keeps no scheduler statistics (the second field of /proc/PID/schedstat).
    A call's deadline does not count that time (session.py, ``_Deadline``): on a busy machine it
    grows with the load, not with the submission's code."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _status(pid: int) -> dict[str, str]:
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def outer_pid(inner_pid: int, root_pid: int, depth: int = 4) -> Optional[int]:
    """The pid, as seen here, of the process that is ``inner_pid`` in the pid namespace of the sandbox
    started as ``root_pid`` (bubblewrap): the one process whose NSpid ends in ``inner_pid`` and whose
    parents lead to ``root_pid`` within ``depth`` steps. None when there is none."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = _status(int(entry))
        except (OSError, ValueError):
            continue
        nspids = status.get("NSpid", "").split()
        if len(nspids) < 2 or nspids[-1] != str(inner_pid):
            continue
        pid = int(entry)
        try:
            parent = int(status.get("PPid", "0"))
            for _ in range(depth):
                if parent == root_pid:
                    return pid
                if parent <= 1:
                    break
                parent = int(_status(parent).get("PPid", "0"))
        except (OSError, ValueError):
            continue
    return None
