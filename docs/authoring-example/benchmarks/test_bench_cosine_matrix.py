"""cosine_matrix against sentence-transformers' util.cos_sim on [1024, 384] x [1024, 384]."""

from __future__ import annotations

import torch

from benchrecord import OURS
from bertlab_grader.solutions.cosine_matrix import cosine_matrix

N, D = 1024, 384
GROUP = f"cosine_matrix [{N}, {D}] x [{N}, {D}]"


def pair():
    g = torch.Generator().manual_seed(0)
    return torch.randn(N, D, generator=g), torch.randn(N, D, generator=g)


def test_ours(timed):
    a, b = pair()
    out = timed(GROUP, OURS, lambda: cosine_matrix(a, b), rounds=20)
    from sentence_transformers import util

    torch.testing.assert_close(out, util.cos_sim(a.double(), b.double()))


def test_sentence_transformers_cos_sim(timed):
    from sentence_transformers import util

    a, b = pair()
    timed(GROUP, "sentence_transformers util.cos_sim (float64)", lambda: util.cos_sim(a.double(), b.double()), rounds=20)
