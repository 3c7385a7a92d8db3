"""Hints: name the likely mistake when a submission behaves like a known mutant.

For each task a *probe* calls the task's functions on small fixed inputs and records what comes back
(values, shapes, dtypes, the type of an exception). The same probe runs once per process on every
mutant of the bank (bertlab_grader/mutants, trusted code, in process) and on the reference. When a failing
submission's probe record equals a mutant's, the failing tests of that task get the mutant's hint
("your CKA matches the uncentered formula: did you subtract the column means?").

A hint is written once, in the table of known mistakes (bertlab/mistakes.py), under the name of the
mutant that makes that mistake: it never quotes hidden test source or expected arrays. Probes only
pass plain data, named models and trusted callables, so they work through the sandbox proxy like the
hidden tests do. Probes are deliberately small (milliseconds per task).
"""

from __future__ import annotations

import functools
import math
import zlib
from typing import Any, Callable, Optional

import numpy as np
import torch

from bertlab.checks import did_not_finish
from bertlab.mistakes import find as find_mistake


class _ProbeAborted(Exception):
    """The submission timed out or crashed during a probe: no hint."""


# ---------------------------------------------------------------------------------------------
# Recording outcomes
# ---------------------------------------------------------------------------------------------

def _normalise(value: Any, depth: int = 0) -> Any:
    """A comparable, plain description of a returned value."""
    if depth > 6:
        return ("deep",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float, np.integer, np.floating)):
        return ("number", float(value))
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(np.array(value))
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        return ("tensor", tuple(t.shape), str(t.dtype), t.to(torch.float64) if t.dtype != torch.bool else t)
    if isinstance(value, str):
        return ("str", value)
    if isinstance(value, (list, tuple)):
        return ("seq", type(value) is list, tuple(_normalise(v, depth + 1) for v in value))
    if value is None:
        return ("none",)
    return ("object", type(value).__name__)


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        return _normalise(call())
    except Exception as exc:  # noqa: BLE001 - the type of what the code raised is the record
        name = getattr(exc, "type_name", None) or type(exc).__name__
        if did_not_finish(exc):
            raise _ProbeAborted(str(exc)) from exc
        base = next((c.__name__ for c in type(exc).__mro__ if c.__module__ == "builtins"), name)
        return ("raises", base if base not in ("Exception", "BaseException") else name)


def same(a: Any, b: Any) -> bool:
    """Two normalised outcomes agree (tensors: same shape and dtype, values within 1e-4 relative)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype == torch.bool:
            return bool(torch.equal(a, b))
        return bool(torch.allclose(a, b, rtol=1e-4, atol=1e-6, equal_nan=True))
    if isinstance(a, tuple):
        if len(a) != len(b):
            return False
        if a and b and a[0] == "number" and b[0] == "number" and len(a) == 2:
            x, y = a[1], b[1]
            return (math.isnan(x) and math.isnan(y)) or abs(x - y) <= 1e-6 + 1e-4 * abs(y)
        return all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


# ---------------------------------------------------------------------------------------------
# Probes, one per task
# ---------------------------------------------------------------------------------------------

def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def probe_cka(impl) -> dict:
    g = _gen(900)
    X = torch.randn(6, 4, generator=g) * torch.tensor([0.5, 1.0, 2.0, 3.0]) + 3
    Y = X[:, :3] @ torch.randn(3, 3, generator=g) + torch.randn(6, 3, generator=g) + 2
    Xw, Yw = torch.randn(5, 8, generator=g) + 1, torch.randn(5, 7, generator=g) - 1
    big = torch.randn(64, 6, generator=g) * 30 + 5
    constant = torch.randn(5, generator=g, dtype=torch.float64).repeat(7, 1)
    other = torch.randn(7, 3, generator=g, dtype=torch.float64)
    x_in = X.double().clone()
    cka = impl.cka
    record = {
        "tall": _outcome(lambda: cka.linear_cka(X.clone(), Y.clone())),
        "wide": _outcome(lambda: cka.linear_cka(Xw.clone(), Yw.clone())),
        "numpy": _outcome(lambda: cka.linear_cka(X.double().numpy(), Y.double().numpy())),
        "half": _outcome(lambda: cka.linear_cka(big.half(), (big[:, :3] * 2 + 1).half())),
        "constant": _outcome(lambda: cka.linear_cka(constant.clone(), other.clone())),
        "mismatch": _outcome(lambda: cka.linear_cka(X.clone(), Y[:5].clone())),
        "matrix": _outcome(lambda: cka.cka_matrix([X.clone(), Y.clone(), (X[:, :2] * 2 + 1).clone()])),
        "matrix_empty": _outcome(lambda: cka.cka_matrix([])),
        "in_place_call": _outcome(lambda: cka.linear_cka(x_in, Y.double().clone())),
    }
    record["in_place_input"] = _normalise(x_in)
    return record


def probe_pooling(impl) -> dict:
    g = _gen(901)
    hidden = torch.randn(3, 5, 4, generator=g) + 1
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [0, 0, 0, 0, 0]])
    hidden = torch.where(mask[..., None].bool(), hidden, 40 * torch.ones_like(hidden))
    pool = impl.pooling.masked_mean_pool
    h_in = hidden.clone()
    record = {
        "int": _outcome(lambda: pool(hidden.clone(), mask.clone())),
        "bool": _outcome(lambda: pool(hidden.clone(), mask.bool())),
        "half": _outcome(lambda: pool(hidden.half(), mask.clone())),
        "mismatch": _outcome(lambda: pool(hidden.clone(), torch.ones(3, 6, dtype=torch.long))),
        "in_place_call": _outcome(lambda: pool(h_in, mask.clone())),
    }
    record["in_place_input"] = _normalise(h_in)
    record["gradient"] = _outcome(lambda: _pool_gradient_flags(impl, hidden[:2], mask[:2]))
    return record


def _pool_gradient_flags(impl, hidden, mask) -> tuple:
    """(has a graph, every real token gets a gradient, no padding position does), from one backward
    step run where the submission runs (bertlab/probes.py): flags, so round-off never matters."""
    from bertlab.probes import run_probe

    report = run_probe(impl, "pooling_gradients", impl.pooling.masked_mean_pool, hidden, mask)
    grad = report["grad"]
    if not report["has_graph"] or not isinstance(grad, torch.Tensor) or grad.shape != hidden.shape:
        return (report["has_graph"], False, False)
    reached = grad.abs().sum(-1) > 0
    real = mask != 0
    return (True, bool(reached[real].all()), not bool(reached[~real].any()))


_PROBE_TEXTS_A = ("A wonderful film.", "The plot is thin and the acting is wooden throughout.", "Boring.")
_PROBE_TEXTS_B = ("Great movie with a clever script and a fine cast.", "Dull.", "I loved the music.")


def _tokens(texts) -> tuple[torch.Tensor, torch.Tensor]:
    batch = _tokenizer()(list(texts), padding=True, return_tensors="pt")
    return batch["input_ids"], batch["attention_mask"]


@functools.lru_cache(maxsize=1)
def _tokenizer():
    from bertlab.models import load_tokenizer

    return load_tokenizer("minilm")


def probe_siamese(impl) -> dict:
    from bertlab.models import named_model

    ids_a, mask_a = _tokens(_PROBE_TEXTS_A)
    ids_b, mask_b = _tokens(_PROBE_TEXTS_B)
    record: dict[str, Any] = {}
    try:
        sbert = impl.siamese.create_sbert(named_model("tiny-bert-seed5"))
    except Exception as exc:  # noqa: BLE001
        if did_not_finish(exc):
            raise _ProbeAborted(str(exc)) from exc
        return {"create": ("raises", type(exc).__name__)}
    with torch.no_grad():
        record["encode"] = _outcome(lambda: sbert.encode(ids_a.clone(), mask_a.clone()))
        record["forward"] = _outcome(lambda: sbert(ids_a.clone(), mask_a.clone(), ids_b.clone(), mask_b.clone()))
        record["shared"] = _outcome(lambda: _perturbed_self_similarity(impl, ids_a, mask_a))
    record["gradients"] = _outcome(lambda: _gradient_reach(impl))
    return record


def _gradient_reach(impl) -> tuple:
    """(output type, has a graph, branch a reaches the encoder, branch b does) after one backward step
    (bertlab/probes.py, run where the submission runs): flags, not norms, so round-off never matters."""
    from bertlab.models import named_model
    from bertlab.probes import disjoint_pair_batch, run_probe

    model = named_model("tiny-bert-seed7")
    sbert = impl.siamese.create_sbert(model)
    (ids_a, mask_a), (ids_b, mask_b) = disjoint_pair_batch(seed=907)
    report = run_probe(impl, "siamese_gradients", sbert, model, ids_a, mask_a, ids_b, mask_b)
    return (report["output"], report["has_graph"], report["branch_a"] > 0, report["branch_b"] > 0)


def _perturbed_self_similarity(impl, ids, mask):
    """forward(x, x) after changing the weights of the first encoder found in state_dict()."""
    from bertlab.models import named_model

    model = named_model("tiny-bert-seed6")
    sbert = impl.siamese.create_sbert(model)
    state, anchor = sbert.state_dict(), "embeddings.word_embeddings.weight"
    prefixes = sorted(k[: -len(anchor)] for k in state if k.endswith(anchor))
    if not prefixes:
        return "no encoder in state_dict"
    g = _gen(906)
    sbert.load_state_dict({prefixes[0] + k: v + 0.5 * torch.randn(v.shape, generator=g)
                           for k, v in model.state_dict().items() if v.is_floating_point()}, strict=False)
    return sbert(ids.clone(), mask.clone(), ids.clone(), mask.clone())


class _CountingEncoder:
    """Trusted ``encode``: a fixed vector per text; remembers how many texts it encoded."""

    def __init__(self):
        self.count = 0

    def __call__(self, texts):
        texts = [texts] if isinstance(texts, str) else list(texts)
        self.count += len(texts)
        return torch.stack([torch.randn(4, generator=_gen(zlib.crc32(t.encode()))) for t in texts])


def probe_retrieval(impl) -> dict:
    g = _gen(903)
    corpus = torch.randn(7, 4, generator=g) * torch.rand(7, 1, generator=g) * 3 + 0.2
    corpus[5] = corpus[1]  # an exact tie
    queries = torch.randn(3, 4, generator=g) + 0.3
    long_corpus = torch.randn(2100, 4, generator=g)
    search = impl.retrieval.semantic_search
    q_in = queries.clone()
    record = {
        "search": _outcome(lambda: search(queries.clone(), corpus.clone(), top_k=4)),
        "big_k": _outcome(lambda: search(queries.clone(), corpus.clone(), top_k=10)),
        "single": _outcome(lambda: search(queries[0].clone(), corpus.clone(), top_k=2)),
        "blocks": _outcome(lambda: search(queries[:2].clone(), long_corpus.clone(), top_k=3)),
        "bad_d": _outcome(lambda: search(queries[:, :3].clone(), corpus.clone(), top_k=2)),
        "k0": _outcome(lambda: search(queries.clone(), corpus.clone(), top_k=0)),
        "in_place_call": _outcome(lambda: search(q_in, corpus.clone(), top_k=2)),
    }
    record["in_place_input"] = _normalise(q_in)
    encoder = _CountingEncoder()

    def index_run():
        index = impl.retrieval.SemanticIndex(encoder)
        index.add(["alpha beta", "gamma", "delta epsilon", "zeta"])
        index.add(["eta theta", "iota", "kappa"])
        return [index.search(["gamma delta", "eta"], top_k=3), index.search("iota", top_k=2), encoder.count]

    record["index"] = _outcome(index_run)
    return record


PROBES: dict[str, Callable[[Any], dict]] = {
    "cka": probe_cka,
    "pooling": probe_pooling,
    "siamese": probe_siamese,
    "retrieval": probe_retrieval,
}


# ---------------------------------------------------------------------------------------------
# Known mistakes
# ---------------------------------------------------------------------------------------------

def probe(impl, task: str) -> dict:
    """The probe record of ``impl`` for ``task``."""
    return PROBES[task](impl)


@functools.lru_cache(maxsize=None)
def reference_record(task: str) -> dict:
    from bertlab.implementations import load_implementation

    return probe(load_implementation("reference"), task)


@functools.lru_cache(maxsize=None)
def known_mistakes(task: str) -> tuple:
    """((entry, record), ...) for every mutant of ``task`` that is a known mistake, i.e. has a record
    of its name in bertlab/mistakes.py (computed once)."""
    from bertlab.implementations import load_directory
    from bertlab_grader.mutants import load_bank

    found = []
    for entry in load_bank(kinds=("mutant",)):
        if entry.task == task and find_mistake(entry.name) is not None:
            found.append((entry, probe(load_directory(entry.path), task)))
    return tuple(found)


def matching_mistakes(impl, task: str) -> list:
    """The bank entries whose probe record equals ``impl``'s (empty when it behaves like the
    reference, or like nothing we know)."""
    if task not in PROBES:
        return []
    try:
        record = probe(impl, task)
    except _ProbeAborted:
        return []
    if same(record, reference_record(task)):
        return []
    return [entry for entry, known in known_mistakes(task) if same(record, known)]


def diagnose(impl, task: str) -> Optional[str]:
    """The hint for ``impl``'s ``task`` (the known mistake its probe outputs match), or None."""
    matches = matching_mistakes(impl, task)
    return find_mistake(matches[0].name).hint if matches else None
