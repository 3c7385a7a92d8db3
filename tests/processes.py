"""The processes a test started, and whether any of them is still there (no process outlives its run).

``Descendants`` follows a process tree from /proc while a command runs (a process killed with SIGKILL
leaves its children to init, so the tree must be read before the kill); ``left_over`` says which of
them still exist after the end, waiting a little for the ones that are on their way out.
``grading_processes`` counts the grader's and the sandbox's processes on the whole machine;
``orphaned_grading_processes`` those of them that nobody's run holds any more.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

# What the grader and its sandbox run as: bubblewrap, the sandboxed server, the worker pool.
MARKERS = ("bwrap", "bertlab_sandbox.server", "multiprocessing.forkserver", "multiprocessing.resource_tracker",
           "bertlab.cli", "bin/bertlab")


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(parent pid, start time in clock ticks, state) of ``pid``, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), int(fields[19]), fields[0]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


class Descendants:
    """Every process seen below ``root`` so far, as (pid, start time): call ``look()`` often."""

    def __init__(self, root: int):
        self.root = root
        self.seen: dict[tuple[int, int], str] = {}

    def look(self) -> None:
        parents: dict[int, list[int]] = {}
        stats = {}
        for pid in _all_pids():
            stat = _stat(pid)
            if stat is not None:
                stats[pid] = stat
                parents.setdefault(stat[0], []).append(pid)
        stack = list(parents.get(self.root, ()))
        while stack:
            pid = stack.pop()
            if pid in stats and stats[pid][2] != "Z":
                self.seen.setdefault((pid, stats[pid][1]), _cmdline(pid)[:160])
            stack.extend(parents.get(pid, ()))

    def left_over(self, grace_s: float = 10.0) -> list[str]:
        """The processes seen that still run (zombies aside) after up to ``grace_s`` seconds."""
        deadline = time.monotonic() + grace_s
        while True:
            alive = [f"pid {pid}: {cmd}" for (pid, start), cmd in self.seen.items()
                     if (stat := _stat(pid)) is not None and stat[1] == start and stat[2] != "Z"]
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.2)


def grading_processes() -> set[tuple[int, int]]:
    """(pid, start time) of every live process on this machine running one of ``MARKERS``."""
    found = set()
    for pid in _all_pids():
        stat = _stat(pid)
        if stat is not None and stat[2] != "Z" and any(m in _cmdline(pid) for m in MARKERS):
            found.add((pid, stat[1]))
    return found


def orphaned_grading_processes() -> set[tuple[int, int]]:
    """The grading processes of the whole machine that no live run holds: climbing from each through
    its grading ancestors, the first process that is not a grader's is init (pid 1), which adopts what
    a killed or finished run left behind. Another run going on at the same time (a second test session,
    an instructor's `bertlab grade`) hangs from its own live parent, so it is not counted."""
    def nearest_outside(pid: int) -> int:
        seen = set()
        while pid not in seen:
            seen.add(pid)
            stat = _stat(pid)
            if stat is None or not any(m in _cmdline(pid) for m in MARKERS):
                return pid
            pid = stat[0]
        return pid

    return {(pid, start) for pid, start in grading_processes() if nearest_outside(pid) in (0, 1)}
