"""The hidden suites' reference data kept on disk between grading processes
(grader/bertlab_grader/core/kept_reference.py): read back exactly as computed, never computed on
another thread count, never trusted when unreadable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import NamedTuple

import pytest
import torch

from bertlab_grader.core import kept_reference
from bertlab_grader.performance.timing import one_torch_thread


class Pair(NamedTuple):
    ids: tuple[int, ...]
    states: torch.Tensor


@pytest.fixture
def fresh_store(tmp_path, monkeypatch):
    """An empty cache folder, and the module's in-process state as a new process has it."""
    monkeypatch.setenv("BERTLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(kept_reference, "_store", None)
    monkeypatch.setattr(kept_reference, "_new", set())
    return tmp_path / "cache"


def _toy(calls: list):
    @kept_reference.kept
    def states(texts: tuple[str, ...], scale: float = 1.0):
        calls.append(texts)
        generator = torch.Generator().manual_seed(len(texts))
        return (Pair(tuple(range(len(texts))), torch.randn(len(texts), 3, generator=generator).t() * scale),
                {"mask": torch.ones(len(texts), dtype=torch.long)})

    return states


def test_a_value_is_read_back_exactly_as_it_was_computed_and_computed_once(fresh_store):
    calls: list = []
    states = _toy(calls)
    with one_torch_thread():
        first = states(("a", "b"))
        assert states(("a", "b"), scale=1.0) is first, "a call by keyword and by position are one entry"
        kept_reference.save()
        assert calls == [("a", "b")]
        kept_reference._store = None  # as a new process finds it: the file only
        later_calls: list = []
        again = _toy(later_calls)(("a", "b"))
    assert later_calls == [], "the value was computed again instead of read back"
    assert type(again[0]) is Pair and again[0].ids == (0, 1)
    assert torch.equal(again[0].states, first[0].states) and again[0].states.dtype == first[0].states.dtype
    # The first process grades with the tensors a later one reads: contiguous copies, not the originals.
    assert first[0].states.is_contiguous() and again[0].states.is_contiguous()
    assert torch.equal(again[1]["mask"], first[1]["mask"])


def test_only_values_computed_on_one_thread_are_kept(fresh_store):
    calls: list = []
    states = _toy(calls)
    old = torch.get_num_threads()
    torch.set_num_threads(2)  # (the one place a test needs a thread count other than one)
    try:
        states(("a",))
    finally:
        torch.set_num_threads(old)
    kept_reference.save()
    assert not kept_reference.kept_file().exists(), "a value computed on two threads was kept"


def test_an_unreadable_file_is_computed_again_and_replaced(fresh_store):
    path = kept_reference.kept_file()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a safetensors file")
    calls: list = []
    with one_torch_thread():
        _toy(calls)(("a", "b", "c"))
    assert calls == [("a", "b", "c")]
    kept_reference.save()
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        assert len(json.loads(handle.metadata()["entries"])) == 1


def test_a_file_that_names_something_other_than_a_namedtuple_is_not_obeyed(fresh_store, tmp_path):
    """The file describes its values' structure; a structure naming a callable (os.system) is refused:
    the file is ignored and the values computed again, nothing called."""
    from safetensors.torch import save_file

    calls: list = []
    states = _toy(calls)
    witness = tmp_path / "called"
    key = kept_reference._key(states.__wrapped__, (("a",), 1.0))
    entries = {key: {"namedtuple": "system", "module": "os", "items": [{"value": f"touch {witness}"}]}}
    path = kept_reference.kept_file()
    path.parent.mkdir(parents=True)
    save_file({"t.0": torch.zeros(1)}, str(path), metadata={"entries": json.dumps(entries)})
    with one_torch_thread():
        value = states(("a",))
    assert calls == [("a",)] and type(value[0]) is Pair
    assert not witness.exists()


def test_another_kit_writes_another_file_and_removes_the_older_one(fresh_store, monkeypatch):
    older = kept_reference.kept_file()
    older.parent.mkdir(parents=True)
    older.write_bytes(b"an older kit's data")
    unrelated = older.parent / "finetune-0123456789ab.json"
    unrelated.write_text("{}")
    kept_reference.kit_fingerprint.cache_clear()
    monkeypatch.setattr(torch, "__version__", torch.__version__ + "+other")
    try:
        assert kept_reference.kept_file().name != older.name
        with one_torch_thread():
            _toy([])(("a",))
        kept_reference.save()
        assert kept_reference.kept_file().is_file() and not older.exists() and unrelated.exists()
    finally:
        kept_reference.kit_fingerprint.cache_clear()


def test_a_process_that_writes_keeps_what_another_wrote_since_it_read(fresh_store):
    """Two workers of a run learn different hints and each writes the file: the second keeps the
    first's entries beside its own, instead of writing back what it read at its start."""
    first_calls: list = []
    with one_torch_thread():
        kept_reference._load()  # the second worker read the (empty) file at its start ...
        kept_reference._store, second_store = None, kept_reference._store
        _toy(first_calls)(("a",))  # ... then the first computed a value and wrote the file
        kept_reference.save()
        kept_reference._store, kept_reference._new = second_store, set()
        _toy([])(("b", "c"))  # the second computes another and writes
        kept_reference.save()
        kept_reference._store = None  # a third process finds both
        later_calls: list = []
        states = _toy(later_calls)
        states(("a",)), states(("b", "c"))
    assert later_calls == [], f"computed again: {later_calls}"


def test_the_hints_read_back_the_bank_s_fingerprints_and_failures_as_computed(fresh_store):
    """The hints' side of the bank (grading/hints.py) is kept like the reference data: every known
    mistake's fingerprint, and which tests a mutant fails, read back in a new process equal to what
    was computed, so a submission gets the same hint from a first grading process as from a later one."""
    from bertlab_grader.grading import hints
    from bertlab_grader.grading.scoring import mutant_failing_tests
    from bertlab_grader.mutants.bank import FINGERPRINTS
    from bertlab_grader.mutants.fingerprint import same

    def bank_side() -> tuple[dict, dict]:
        # As a new process starts: nothing held in memory (an earlier test may have computed these on
        # two threads, values this process holds but never keeps).
        for fn in (hints.known_mistakes, hints.reference_record, hints.mistake_record, mutant_failing_tests):
            fn.cache_clear()
        records = {(entry.name, task): record for task in FINGERPRINTS
                   for entry, record in hints.known_mistakes(task)}
        records.update({("reference", task): hints.reference_record(task) for task in FINGERPRINTS})
        failures = {name: mutant_failing_tests(name, task)
                    for name, task in (("cka_always_value_error", "cka"), ("pool_always_value_error", "pooling"))}
        return records, failures

    with one_torch_thread():
        computed = bank_side()
        kept_reference.save()
        kept_reference._store = None  # as a new process finds it: the file only
        read = bank_side()
    assert kept_reference._new == set(), "a value was computed again instead of read back"
    kept_keys = {kept_reference._key(fn.__wrapped__, key) for fn, keys in (
        (hints.mistake_record, [k for k in computed[0] if k[0] != "reference"]),
        (hints.reference_record, [(task,) for name, task in computed[0] if name == "reference"]),
        (mutant_failing_tests, [(name, task) for name, task in (("cka_always_value_error", "cka"),
                                                                ("pool_always_value_error", "pooling"))]))
        for key in keys}
    assert kept_keys <= kept_reference._store.keys(), "a value of the bank's side could not be kept"
    assert read[0].keys() == computed[0].keys() and len(computed[0]) > len(FINGERPRINTS)
    for key, record in computed[0].items():
        assert same(read[0][key], record) and same(record, read[0][key]), f"{key}: the fingerprint read back differs"
    assert read[1] == computed[1] and all(computed[1].values())


_DIGEST_OF_WARM_DATA = """
import hashlib, sys, torch
torch.set_num_threads(1)
from bertlab_grader.hidden import reference_data as data
from bertlab_grader.core import kept_reference
from bertlab_grader.performance.timing import one_torch_thread
from bertlab import datasets
data.warm()
def tensors(v):
    if isinstance(v, torch.Tensor): return [v]
    if isinstance(v, (tuple, list)): return [x for e in v for x in tensors(e)]
    if hasattr(v, "values"): return [x for e in v.values() for x in tensors(e)]
    return []
texts = tuple(dict.fromkeys(t for p in data.sts_sample() for t in (p.a, p.b)))
values = [data.trained_reps(), data.untrained_reps(0), data.untrained_reps(1), data.cka_probe_batch(),
          data.unpadded_groups(texts, True), data.unpadded_groups(texts, contextual=False),
          data.length_buckets(texts), data.padded_states(tuple(p.a for p in datasets.LESSON_STS_PAIRS))]
digest = hashlib.sha256()
for t in (t for v in values for t in tensors(v)):
    digest.update(f"{t.dtype}{tuple(t.shape)}".encode()); digest.update(t.contiguous().numpy().tobytes())
print(digest.hexdigest())
"""


@pytest.mark.slow  # (three processes that load MiniLM: about 15 s)
def test_the_grader_reads_back_the_very_reference_data_it_computes(tmp_path):
    """A first process computes the reference data and keeps it; a second reads every value back,
    computing nothing, and grades with the same bytes; with no file at all a third computes the same."""
    env = {**os.environ, "BERTLAB_CACHE_DIR": str(tmp_path / "cache")}

    def run() -> str:
        out = subprocess.run([sys.executable, "-c", _DIGEST_OF_WARM_DATA], env=env, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        return out.stdout.strip()

    computed = run()
    files = list((tmp_path / "cache").glob("reference-data-*.safetensors"))
    assert len(files) == 1
    stamp = files[0].stat().st_mtime_ns
    read = run()
    assert files[0].stat().st_mtime_ns == stamp, "the second process computed the data again and rewrote the file"
    assert read == computed, "the reference data read back differs from the data computed"
    files[0].unlink()
    assert run() == computed, "computing the reference data again gave other bytes"
