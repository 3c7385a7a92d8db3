"""How much memory one call holds at its peak, beyond what the process held before it (Linux).

The measure is the process's resident memory, read from the kernel, not what Python or torch say
they allocated: every allocator (torch's, NumPy's, Python's own) shows up in it alike.

1. Freed memory the C allocator still keeps is given back first (``malloc_trim``): otherwise a call
   could reuse it without the resident size moving, and look smaller than it is. During the call,
   every block of ``MMAP_THRESHOLD`` bytes or more gets pages of its own, given back when it is freed
   (glibc's mallopt): otherwise whether a freed 17 MB buffer is reused or the heap grows past it
   depends on what the process did before (measured: one query's sorted row at a time, 80 bytes a
   corpus row in a fresh process, 568 after other tests had raised glibc's moving threshold), and
   the peak would measure the allocator's history, not the call.
2. The kernel's peak ("high water mark", VmHWM) is reset to the current resident size by writing 5 to
   /proc/self/clear_refs (Linux 4.0 and later), and the resident size (VmRSS) is read.
3. The call runs; the peak minus the size before it is the extra memory it held at its worst moment.

The grader runs this where the code under test runs (bertlab.probes, in the sandbox). The file
functions are bound when this module is imported, before any submitted code is, so a submission
that replaces ``open`` or ``os.read`` does not change what is read here.
"""

from __future__ import annotations

import ctypes
import gc
import os
from typing import Any, Callable

_open, _read, _write, _close = os.open, os.read, os.write, os.close
_PR_GET_DUMPABLE, _PR_SET_DUMPABLE = 3, 4
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
MMAP_THRESHOLD = 256 * 2**10
# What the threshold is put back to after a measured call: the grader pins it (MALLOC_MMAP_THRESHOLD_
# in the sandbox's environment, bertlab_grader/sandbox/malloc_pin.py) so that timings allocate alike;
# elsewhere glibc's largest moving threshold, 32 MiB, which that pin uses too.
_RESTORED_THRESHOLD = int(os.environ.get("MALLOC_MMAP_THRESHOLD_", 32 * 2**20))


class MemoryUnmeasurable(RuntimeError):
    """This process cannot measure its peak memory (not Linux, or /proc/self/clear_refs refused)."""


def _status_kib(field: str) -> int:
    fd = _open("/proc/self/status", os.O_RDONLY)
    try:
        text = b""
        while chunk := _read(fd, 65536):
            text += chunk
    finally:
        _close(fd)
    for line in text.decode().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise MemoryUnmeasurable(f"/proc/self/status has no {field}")


def _libc():
    try:
        return ctypes.CDLL(None)
    except OSError:  # pragma: no cover - not a glibc/musl process
        return None


_LIBC = _libc()


def _give_back_freed_memory() -> None:
    gc.collect()
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)


def _reset_peak() -> None:
    """VmHWM := VmRSS. A process that made itself non-dumpable (the sandbox's does) has its /proc
    files owned by root, so it is made dumpable for the one write and put back."""
    prctl = getattr(_LIBC, "prctl", None)
    was = prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0) if prctl is not None else 1
    try:
        if was != 1 and prctl is not None:
            prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
        fd = _open("/proc/self/clear_refs", os.O_WRONLY)
        try:
            _write(fd, b"5")
        finally:
            _close(fd)
    except OSError as exc:
        raise MemoryUnmeasurable(f"cannot reset the peak resident size: {exc}") from None
    finally:
        if was != 1 and prctl is not None:
            prctl(_PR_SET_DUMPABLE, was, 0, 0, 0)


def extra_memory(call: Callable[[], Any]) -> tuple[int, Any]:
    """(bytes, result): ``call()``'s result and the most resident memory it added while it ran.

    Raises MemoryUnmeasurable where the kernel does not offer the measure (the caller decides what a
    missing figure means); exceptions of ``call`` propagate.
    """
    mallopt = getattr(_LIBC, "mallopt", None)
    _give_back_freed_memory()
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    try:
        _reset_peak()
        before = _status_kib("VmRSS")
        result = call()
        peak = _status_kib("VmHWM")
    finally:
        if mallopt is not None:
            mallopt(_M_MMAP_THRESHOLD, _RESTORED_THRESHOLD)
    return max(0, peak - before) * 1024, result
