"""masked_mean_pool against sentence-transformers' Pooling module (mean mode) on [64, 128, 384]."""

from __future__ import annotations

import warnings

import torch

from benchrecord import OURS
from bertlab_grader.solutions.pooling import masked_mean_pool

with warnings.catch_warnings():  # the old import path is deprecated in sentence-transformers 6; keep both working
    warnings.simplefilter("ignore", DeprecationWarning)
    try:
        from sentence_transformers.sentence_transformer.modules import Pooling
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import Pooling

B, T, D = 64, 128, 384
GROUP = f"masked_mean_pool [{B}, {T}, {D}]"


def batch():
    """Seeded hidden states [B, T, D] and a right-padded int64 mask with lengths 1..T."""
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(B, T, D, generator=g)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    return hidden, mask


def test_ours(timed):
    hidden, mask = batch()
    out = timed(GROUP, OURS, lambda: masked_mean_pool(hidden, mask), rounds=200)
    expected = Pooling(D, pooling_mode="mean")({"token_embeddings": hidden, "attention_mask": mask})["sentence_embedding"]
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_sentence_transformers_pooling(timed):
    hidden, mask = batch()
    pooling = Pooling(D, pooling_mode="mean")
    # Pooling writes its output into the features dict it gets: give it a fresh dict every round.
    timed(GROUP, "sentence_transformers Pooling(mean)",
          lambda: pooling({"token_embeddings": hidden, "attention_mask": mask})["sentence_embedding"], rounds=200)
