"""How the sandboxed server confines itself: dropping root, prctl flags, per-child rlimits."""

from __future__ import annotations

import ctypes
import os
import resource




PR_SET_DUMPABLE, _PR_CAPBSET_DROP, PR_SET_CHILD_SUBREAPER, _PR_SET_NO_NEW_PRIVS = 4, 24, 36, 38
libc = ctypes.CDLL(None, use_errno=True)


def call_prctl(option: int, arg: int) -> int:
    return libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


def drop_privileges(uid: int) -> None:
    """From root to ``uid`` for good: no groups, no capabilities, no way back (no_new_privs)."""
    if os.geteuid() != 0:
        return
    for cap in range(64):  # empty the bounding set while we still may
        call_prctl(_PR_CAPBSET_DROP, cap)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    call_prctl(_PR_SET_NO_NEW_PRIVS, 1)
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise SystemExit("sandboxed server: could not drop root privileges")


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def set_limits(limits: dict) -> None:
    """Per-child rlimits. RLIMIT_AS counts from what the fork inherited: the budget is extra."""
    mb = 1024 * 1024
    wanted = {
        resource.RLIMIT_AS: _vm_size() + int(limits.get("memory_mb", 3072)) * mb,
        resource.RLIMIT_CPU: int(limits.get("cpu_s", 600)),
        resource.RLIMIT_FSIZE: int(limits.get("fsize_mb", 16)) * mb,
        resource.RLIMIT_NPROC: int(limits.get("nproc", 256)),
        resource.RLIMIT_CORE: 0,
    }
    for which, soft in wanted.items():
        _, hard = resource.getrlimit(which)
        # The hard CPU limit a bit above the soft one: SIGXCPU first, SIGKILL if it is caught.
        new_hard = soft + 5 if which == resource.RLIMIT_CPU else soft
        if hard != resource.RLIM_INFINITY:
            soft, new_hard = min(soft, hard), min(new_hard, hard)
        try:
            resource.setrlimit(which, (soft, new_hard))
        except (ValueError, OSError):
            pass
