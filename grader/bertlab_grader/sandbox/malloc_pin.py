"""glibc's malloc on a steady footing, the same in the sandbox and in the grader: one definition.

The sandbox starts with ``STEADY_MALLOC_ENV`` in its environment (launcher.py), and the grader pins
its own process with ``steady_allocator()`` before it times (performance/timing.py), so both sides of
a timing allocate by the same rule.
"""

from __future__ import annotations

import ctypes
import functools
import sys

# glibc malloc, pinned on both sides of a timing (steady_allocator; the sandbox gets STEADY_MALLOC_ENV).
# By default malloc serves a block over a threshold with fresh pages and moves that threshold as the
# process frees blocks, so whether a call of the timed code page-faults through its buffers depends on
# what the process did before. Pinned: blocks up to 32 MiB (glibc's largest threshold; the timed calls'
# buffers are at most 8 MiB) come from the heap, and up to 256 MiB of freed heap is kept for reuse.
MMAP_THRESHOLD = 32 * 2**20
TRIM_THRESHOLD = 256 * 2**20
STEADY_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD), "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD)}
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)


@functools.cache  # once per process: the settings stay until the process ends
def steady_allocator() -> bool:
    """Pin this process's malloc thresholds (see MMAP_THRESHOLD). Returns whether it could: only glibc
    has mallopt; elsewhere timings keep malloc's own behaviour."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
