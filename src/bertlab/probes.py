"""Measurements that must run where the code under test runs, and return only plain numbers.

Some properties cannot be read off a returned value. Whether a loss on the Siamese wrapper's output
trains the encoder it wraps is one: the autograd graph lives next to the student's objects. While
grading, those objects stay in the sandbox (bertlab_grader/sandbox), so the measurement runs there
too and only a small dict of numbers and flags comes back. In `bertlab check` (the student's own
code, in process) the same function runs in process.

Tests call a probe with ``run_probe(impl, name, *args)``; ``impl`` decides where it runs. The worker
looks probes up in ``PROBES`` (captured when the worker starts, before any submitted code is
imported), so a submission cannot swap the function the grader asked for.
"""

from __future__ import annotations

from typing import Callable

import torch


def siamese_gradients(sbert, encoder, ids_a, mask_a, ids_b, mask_b) -> dict:
    """One backward step through ``sbert(ids_a, mask_a, ids_b, mask_b)``: where do its gradients go?

    ``encoder`` is the model that was given to ``create_sbert``. Side a and side b use disjoint
    vocabulary (apart from [CLS], [SEP] and [PAD]), so the rows of the word-embedding matrix of the
    tokens only side a uses can get a gradient through branch a only, and likewise for b: one
    backward pass measures both branches, on the very parameters of the one shared encoder.

    Inputs:
        ids_a, mask_a: [B, Ta] token ids and attention mask of side a; ids_b, mask_b: [B, Tb].
    Returns (plain data only):
        {"output": "tensor" | a type name, "scores": [B] detached scores (when a tensor),
         "has_graph": the output carries autograd history,
         "branch_a", "branch_b": gradient norms on the word-embedding rows only side a / b uses,
         "reached", "trainable": how many of the encoder's trainable parameter tensors got a non-zero
                                 gradient, out of how many there are}
    """
    parameters = [p for p in encoder.parameters() if p.requires_grad]
    embeddings = encoder.get_input_embeddings().weight
    report = {"output": "", "scores": None, "has_graph": False, "branch_a": 0.0, "branch_b": 0.0,
              "reached": 0, "trainable": len(parameters)}
    encoder.zero_grad(set_to_none=True)
    try:
        with torch.enable_grad():
            scores = sbert(ids_a, mask_a, ids_b, mask_b)
            if not isinstance(scores, torch.Tensor):
                report["output"] = type(scores).__name__
                return report
            report["output"] = "tensor"
            report["scores"] = scores.detach().clone()
            report["has_graph"] = bool(scores.requires_grad)
            if not scores.requires_grad:
                return report
            # The sum of the cosines: its gradient is non-zero whenever the two embeddings of a pair
            # are not parallel, so any path from the output to a weight shows up.
            scores.to(torch.float64).sum().backward()
        grad = embeddings.grad
        if grad is not None:
            only_a, only_b = _exclusive_tokens(ids_a, ids_b), _exclusive_tokens(ids_b, ids_a)
            report["branch_a"] = float(grad[only_a].norm()) if only_a.numel() else 0.0
            report["branch_b"] = float(grad[only_b].norm()) if only_b.numel() else 0.0
        report["reached"] = sum(1 for p in parameters if p.grad is not None and bool(p.grad.abs().sum() > 0))
        return report
    finally:
        encoder.zero_grad(set_to_none=True)  # leave the model as the test gave it


def pooling_gradients(pool, hidden_states, attention_mask) -> dict:
    """One backward step through ``pool(hidden_states, attention_mask)``: which positions does it train?

    ``pool`` is a masked_mean_pool. SBERT is fine-tuned through its pooling, so the gradient of the
    pooled vectors' sum must reach every real token (1 / its row's count of real tokens) and no
    padding position.

    Inputs:
        hidden_states: [B, T, D] float; attention_mask: [B, T].
    Returns (plain data only):
        {"output": "tensor" | a type name, "pooled": [B, D] detached result (when a tensor),
         "has_graph": the output carries autograd history,
         "grad": [B, T, D] gradient of the output's sum with respect to hidden_states (None if none)}
    """
    states = hidden_states.detach().clone().requires_grad_(True)
    report = {"output": "", "pooled": None, "has_graph": False, "grad": None}
    with torch.enable_grad():
        pooled = pool(states, attention_mask)
        if not isinstance(pooled, torch.Tensor):
            report["output"] = type(pooled).__name__
            return report
        report["output"] = "tensor"
        report["pooled"] = pooled.detach().clone()
        report["has_graph"] = bool(pooled.requires_grad)
        if pooled.requires_grad:
            pooled.to(torch.float64).sum().backward()
    if states.grad is not None:
        report["grad"] = states.grad.detach().clone()
    return report


def substitute(module, name: str, replacement, dependents=()):
    """Set ``module.name = replacement`` and re-import each of ``dependents``, so that a name bound
    with ``from .module import name`` sees the replacement too. Returns the previous value.

    The hidden siamese suite uses it to judge a wrapper whose own pooling raises: the student's
    siamese.py runs over a stand-in pooling (the grader's, called back from the sandbox), so the
    pooling mistake is charged in the pooling task only; it puts the student's function back after.
    """
    import importlib

    previous = getattr(module, name)
    setattr(module, name, replacement)
    for dependent in dependents:
        # The sandbox's loader runs each module once; it re-runs one on request instead.
        reexecute = getattr(getattr(dependent, "__loader__", None), "reexecute", None)
        reexecute(dependent) if callable(reexecute) else importlib.reload(dependent)
    return previous


def _exclusive_tokens(ids: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """The token ids in ``ids`` that never occur in ``other`` (1-D, sorted)."""
    mine, theirs = torch.unique(ids), torch.unique(other)
    return mine[~torch.isin(mine, theirs)]


def disjoint_pair_batch(seed: int, batch: int = 4, vocab: int = 30522):
    """Two padded sides whose real tokens never overlap (input for ``siamese_gradients``).

    Side a draws its words from the lower half of the vocabulary, side b from the upper half; both
    start with [CLS] (101), end with [SEP] (102) and are padded with [PAD] (0) to different lengths.
    Returns ((ids_a [batch, Ta], mask_a), (ids_b [batch, Tb], mask_b)), int64.
    """
    g = torch.Generator().manual_seed(seed)
    first, middle = 1000, (1000 + vocab) // 2

    def side(low: int, high: int, longest: int):
        lengths = torch.randint(3, longest + 1, (batch,), generator=g)
        lengths[0] = longest  # the batch is padded to its longest sentence
        ids = torch.zeros(batch, longest + 2, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, n in enumerate(lengths.tolist()):
            words = torch.randint(low, high, (n,), generator=g)
            ids[row, : n + 2] = torch.cat([torch.tensor([101]), words, torch.tensor([102])])
            mask[row, : n + 2] = 1
        return ids, mask

    return side(first, middle, 9), side(middle, vocab, 6)


PROBES: dict[str, Callable[..., dict]] = {
    "siamese_gradients": siamese_gradients,
    "pooling_gradients": pooling_gradients,
    "substitute": substitute,
}


def run_probe(impl, name: str, *args):
    """Run the probe ``name`` where ``impl``'s code runs: through the sandbox for a graded
    submission (its ``probe`` attribute), in this process otherwise."""
    remote = getattr(impl, "probe", None)
    if callable(remote):
        return remote(name)(*args)
    return PROBES[name](*args)
