"""What the kit teaches about task siamese: the Siamese wrapper (exercises/siamese.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bertlab.teaching.records import Mistake

if TYPE_CHECKING:  # (annotations only: torch is imported where it runs)
    import torch

#: What a wrong value most often means: the idea to reread (``bertlab check``'s hint).
IDEA = ("Both sentences go through the same encoder, each on its own; each side is mean-pooled with its "
        "own attention mask (your masked_mean_pool), and the score is the cosine of the two vectors.")

MISTAKES: tuple[Mistake, ...] = (
    Mistake("sbert_dot_product", "siamese", "dot product instead of cosine",
            "Your forward returns dot products: SBERT scores a pair by the COSINE of the two embeddings "
            "(normalise both, or use F.cosine_similarity over the feature dimension)."),
    Mistake("sbert_not_shared", "siamese", "two encoders instead of one",
            "Your SiameseBert has two encoders: side b uses a copy, so training one side leaves the other "
            "behind. Keep one encoder and call it for both sentences."),
    Mistake("sbert_cls_encode", "siamese", "the [CLS] vector instead of the mean",
            "Your encode returns the [CLS] vector: SBERT mean-pools the real tokens of last_hidden_state "
            "with masked_mean_pool."),
    Mistake("sbert_pooler_output", "siamese", "pooler_output instead of the mean",
            "Your encode returns pooler_output (BERT's [CLS] head): SBERT mean-pools last_hidden_state."),
    Mistake("sbert_all_pairs", "siamese", "all pairs instead of a[i] with b[i]",
            "Your forward returns a [B, B] matrix: SBERT scores a[i] with b[i] only, giving [B]."),
    Mistake("sbert_unmasked_mean", "siamese", "padding averaged in",
            "Your encode averages the padding too: use masked_mean_pool(last_hidden_state, "
            "attention_mask)."),
    Mistake("sbert_no_encoder_mask", "siamese", "the encoder never sees the mask",
            "Your encode calls the encoder without attention_mask, so real tokens attend to [PAD]: pass "
            "attention_mask=attention_mask to the encoder as well as to the pooling."),
    Mistake("sbert_cosine_distance", "siamese", "cosine distance instead of similarity",
            "Your forward returns 1 - cosine (a distance): return the cosine similarity itself."),
    Mistake("sbert_cosine_wrong_dim", "siamese", "cosine over the batch dimension",
            "Your forward takes the cosine over the batch dimension: use dim=-1 (over the D features)."),
    Mistake("sbert_encode_no_grad", "siamese", "encoded under torch.no_grad()",
            "A loss on your scores cannot train the encoder: do not wrap the encoder call in "
            "torch.no_grad(), do not .detach() its output, and do not freeze its parameters. Whoever calls "
            "encode decides about gradients (the tests use torch.no_grad() themselves)."),
    Mistake("sbert_detach_branch_b", "siamese", "one branch cut from training",
            "Only one side of your Siamese network trains the encoder: both sentences must go through the "
            "same self.encoder with gradients on (no .detach(), no torch.no_grad(), no second copy), so that "
            "a loss on the score updates the one shared encoder from both branches."),
    Mistake("sbert_wraps_a_copy", "siamese", "a copy of the given encoder wrapped",
            "Training your SiameseBert never updates the model given to create_sbert: wrap that model "
            "itself (self.encoder = bert_model), not copy.deepcopy(bert_model), so fine-tuning the wrapper "
            "fine-tunes the model the caller holds."),
    Mistake("sbert_no_mask_anywhere", "siamese", "no mask for the encoder nor the mean",
            "Your encode calls the encoder without attention_mask and averages the padding too: pass "
            "attention_mask to the encoder and pool with masked_mean_pool(last_hidden_state, "
            "attention_mask)."),
)


# ---- probes: measured where the code under test runs (bertlab.probes runs them by name)

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
    import torch  # here, not at the top: bertlab check's own process never needs it

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


def _exclusive_tokens(ids: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """The token ids in ``ids`` that never occur in ``other`` (1-D, sorted)."""
    import torch  # here, not at the top: bertlab check's own process never needs it

    mine, theirs = torch.unique(ids), torch.unique(other)
    return mine[~torch.isin(mine, theirs)]


def disjoint_pair_batch(seed: int, batch: int = 4, vocab: int = 30522):
    """Two padded sides whose real tokens never overlap (input for ``siamese_gradients``).

    Side a draws its words from the lower half of the vocabulary, side b from the upper half; both
    start with [CLS] (101), end with [SEP] (102) and are padded with [PAD] (0) to different lengths.
    Returns ((ids_a [batch, Ta], mask_a), (ids_b [batch, Tb], mask_b)), int64.
    """
    import torch  # here, not at the top: bertlab check's own process never needs it

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


#: The probes this task's tests run where the code under test runs (bertlab.probes gathers them by name).
PROBES = {"siamese_gradients": siamese_gradients}
