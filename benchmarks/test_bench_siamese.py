"""SiameseBert.encode (solutions, on the packaged MiniLM) against SentenceTransformer.encode on
2,000 STS-benchmark sentences.

Same model weights, batch size 32 (sentence-transformers' default), max length 256 (MiniLM's
max_seq_length) and length-sorted batches on both sides: sentence-transformers sorts by length
itself, ours goes through bertlab.sts.encode_texts, which does the same.
"""

from __future__ import annotations

import pytest
import torch

from bertlab.datasets import load_sts_benchmark
from bertlab.models import load_tokenizer, minilm_path, named_model
from bertlab.sts import encode_texts
from benchrecord import OURS
from bertlab_grader.solutions.siamese import create_sbert

N_SENTENCES, BATCH = 2_000, 32
GROUP = f"encode {N_SENTENCES:,} STS sentences, MiniLM, batch {BATCH}"


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    return [s for pair in load_sts_benchmark("test") for s in (pair.a, pair.b)][:N_SENTENCES]


@pytest.fixture(scope="module")
def ours_embeddings():
    return {}


def test_ours(timed, sentences, ours_embeddings):
    sbert = create_sbert(named_model("minilm"))
    tokenizer = load_tokenizer("minilm")
    ours_embeddings["ours"] = timed(
        GROUP, OURS, lambda: encode_texts(sbert.encode, tokenizer, sentences, batch_size=BATCH, max_length=256),
        rounds=3, warmup=0)  # 2,000 sentences take tens of seconds: a warm-up round would add nothing


def test_sentence_transformers(timed, sentences, ours_embeddings):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(minilm_path()), device="cpu")
    theirs = timed(GROUP, "SentenceTransformer.encode",
                   lambda: model.encode(sentences, batch_size=BATCH, convert_to_tensor=True, show_progress_bar=False),
                   rounds=3, warmup=0)
    if "ours" in ours_embeddings:
        # Same weights, same pooling; the packaged model's pipeline ends with a Normalize module.
        ours = torch.nn.functional.normalize(ours_embeddings["ours"], dim=1)
        torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
