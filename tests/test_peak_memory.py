"""bertlab/peak_memory.py: the extra memory one call holds at its peak, as the memory test reads it."""

from __future__ import annotations

import sys

import pytest
import torch

from bertlab.peak_memory import MemoryUnmeasurable, extra_memory

MiB = 2**20

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the measure reads Linux's /proc")


def _measure(call):
    try:
        return extra_memory(call)
    except MemoryUnmeasurable as exc:  # pragma: no cover - a kernel without clear_refs
        pytest.fail(f"this Linux cannot measure a call's peak memory: {exc}")


def test_a_buffer_held_during_the_call_is_counted():
    def hold():
        buffer = torch.ones(64 * MiB // 8, dtype=torch.float64)  # 64 MiB, every page written
        return float(buffer.sum())

    extra, result = _measure(hold)
    assert result == 64 * MiB // 8
    assert 60 * MiB <= extra <= 80 * MiB, extra / MiB


def test_the_peak_is_the_most_held_at_once_not_the_sum():
    def one_after_another():
        for _ in range(4):
            buffer = torch.ones(32 * MiB // 8, dtype=torch.float64)
            del buffer

    extra, _ = _measure(one_after_another)
    assert 28 * MiB <= extra <= 48 * MiB, extra / MiB


def test_buffers_freed_inside_the_call_are_not_counted_whatever_the_process_did_before():
    """One [N] row at a time, sorted, its top 10 kept (the bank's var_ret_loop): at most a few rows are
    alive at once. After the process freed a 30 MiB block, glibc serves blocks below that size from
    its heap, and a heap that grows past the small kept copies would count every row: measured 492
    MiB here without pages of their own for large blocks during the call, 95 with them."""
    scratch = torch.ones(30 * MiB // 8, dtype=torch.float64)
    del scratch  # raises glibc's moving mmap threshold to about 30 MiB in this process

    def one_row_at_a_time():
        kept = []
        for _ in range(16):
            ranked = torch.sort(torch.rand(2_000_000, dtype=torch.float64), descending=True, stable=True)
            kept += [ranked.values[:10].clone(), ranked.indices[:10].clone()]  # 16 MB rows, tiny copies
        return kept

    extra, _ = _measure(one_row_at_a_time)
    assert extra <= 160 * MiB, extra / MiB  # a few 16 MB rows and the sort's buffers, not 16 rows of 32 MB


def test_a_call_that_holds_nothing_measures_little():
    extra, result = _measure(lambda: sum(range(1000)))
    assert result == 499500
    assert extra < 8 * MiB, extra / MiB
