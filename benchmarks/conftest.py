"""Benchmark plumbing: every timing is recorded in a group next to its baselines from the same run,
and the session ends with a table of median times and ratios (never a timed assert).

Run: python -m pytest benchmarks   (pytest-benchmark comes with the kit's [bench] extra)
With --benchmark-disable each function runs once, as a smoke test, and no table is printed.
"""

from __future__ import annotations

import os
from typing import Callable

import pytest

from benchrecord import MEMORY, TIMINGS, Timing, summary_markdown

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def timed(benchmark):
    """timed(group, name, fn, rounds, warmup): benchmark fn() and record its median and min under group.

    name == benchrecord.OURS marks the kit's implementation; every other name in the group is a baseline that the
    summary divides by. Returns fn's result (from the last round), for correctness checks.
    """

    def run(group: str, name: str, fn: Callable[[], object], rounds: int = 5, warmup: int = 1):
        benchmark.group = group
        result = benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=warmup)
        stats = getattr(benchmark, "stats", None)
        if stats is not None:  # None when benchmarks are disabled (smoke run)
            TIMINGS[group].append(Timing(group, name, stats.stats.median, stats.stats.min, stats.stats.rounds))
        return result

    return run


def pytest_terminal_summary(terminalreporter):
    if not TIMINGS and not MEMORY:
        return
    terminalreporter.section("bertlab benchmarks: medians and ratios (same run)")
    terminalreporter.write_line(summary_markdown())
