"""What the benchmarks measured in this run, and the Markdown table made of it.

Shared by conftest.py (which records timings and prints the table) and the benchmark modules
(which record memory figures).
"""

from __future__ import annotations

import os
import platform
from collections import defaultdict
from dataclasses import dataclass

import torch

OURS = "ours"
# Other processes on a shared machine slow every variant unevenly; the load says how much to trust medians.
START_LOAD = ", ".join(f"{x:.1f}" for x in os.getloadavg())


@dataclass
class Timing:
    group: str
    name: str
    median_s: float
    min_s: float
    rounds: int


@dataclass
class Memory:
    case: str
    name: str
    peak_extra_mib: float
    note: str


TIMINGS: dict[str, list[Timing]] = defaultdict(list)
MEMORY: list[Memory] = []


def _format_seconds(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def summary_markdown() -> str:
    """The ratio table (and memory table) as Markdown."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads, {os.cpu_count()} CPUs, "
        f"{platform.processor() or platform.machine()}; load average at the end (1, 5, 15 min): {load}; "
        f"at the start: {START_LOAD}",
        "",
        "| benchmark | variant | median (min), rounds | ours / variant: medians (mins) |",
        "| --- | --- | --- | --- |",
    ]
    for group, timings in TIMINGS.items():
        ours = next((t for t in timings if t.name == OURS), None)
        for t in timings:
            ratio = ("" if ours is None or t is ours else
                     f"{ours.median_s / t.median_s:.3g}x ({ours.min_s / t.min_s:.3g}x)")
            lines.append(f"| {group} | {t.name} | {_format_seconds(t.median_s)} ({_format_seconds(t.min_s)}), "
                         f"{t.rounds} | {ratio} |")
    if MEMORY:
        lines += ["", "| memory case | variant | peak extra RSS | note |", "| --- | --- | --- | --- |"]
        lines += [f"| {m.case} | {m.name} | {m.peak_extra_mib:.0f} MiB | {m.note} |" for m in MEMORY]
    lines += ["", "ours / variant < 1: ours is faster; > 1: ours is slower by that factor. Contention from other "
              "processes only ever adds time, so on a shared machine the mins are the steadier comparison."]
    return "\n".join(lines)
