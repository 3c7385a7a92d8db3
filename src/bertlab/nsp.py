"""The kit's next-sentence predictor: MiniLM's frozen sentence vectors of both segments and a small trained head.

BERT learned next-sentence prediction (NSP) from pairs ``[CLS] A [SEP] B [SEP]`` where B was the real
continuation of A half of the time and a segment from a random other document otherwise. Such random
negatives are usually given away by their *topic*, and topic is exactly what a sentence encoder's
vectors measure. So the kit's predictor reads no pair at all: it encodes A and B separately with the
packaged all-MiniLM-L6-v2 (frozen, mean-pooled, unit length) and feeds their element-wise product
``u * v``, with the two segments' lengths, to one trained linear layer (``NextSentenceHead``: 386 x 2
weights). The cosine of u and v is the sum of those products, so the head starts as, and stays close
to, "similar topic means it follows"; the lengths move the bar (two long segments on one film share
more than two short sentences do).

BERT's "sentences" are spans of text, up to 512 tokens for the pair. ``segment_pairs`` builds pairs of
spans of k consecutive sentences from the review data; ``bertlab.mlm.heads_figures()`` holds the
held-out accuracy for each k (one sentence each is much harder than four: less topic to go on).
"""

from __future__ import annotations

import random
from typing import Sequence

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn

from .datasets import split_sentences
from .models import EvalMode


# The segment length (sentences per side) of the headline held-out figure: six review sentences a side
# (about 100-150 word pieces each) is still far less text than BERT's pairs, which filled 512 tokens.
HEADLINE_SENTENCES = 6
# Tokens per segment when encoding: all-MiniLM-L6-v2 was trained on at most 256 word pieces.
MAX_SEGMENT_TOKENS = 256


def segment_pairs(texts: Sequence[str], sentences_per_segment: int = 1, seed: int = 0) -> list[tuple[str, str, int]]:
    """BERT-style next-sentence pairs ``(a, b, label)`` of spans of ``sentences_per_segment`` sentences.

    One pair per review that has at least 2k usable sentences (``bertlab.datasets.split_sentences``): a is the
    k sentences before a random cut; b is the k sentences after it (label 0, "b follows a") or, half of
    the time, k consecutive sentences of another review (label 1). Deterministic in ``seed``.
    """
    k = sentences_per_segment
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"sentences_per_segment must be a positive integer; got {k!r}.")
    rng = random.Random(seed)
    reviews = [sentences for sentences in (split_sentences(t) for t in texts) if len(sentences) >= 2 * k]
    if len(reviews) < 2:
        raise ValueError(f"need at least two reviews with {2 * k} usable sentences each to build segment pairs "
                         f"of {k} sentence(s); got {len(reviews)}.")
    pairs = []
    for index, sentences in enumerate(reviews):
        cut = rng.randrange(k, len(sentences) - k + 1)
        a = " ".join(sentences[cut - k : cut])
        if rng.random() < 0.5:
            pairs.append((a, " ".join(sentences[cut : cut + k]), 0))
        else:
            other = rng.randrange(len(reviews) - 1)
            other += other >= index  # any review but this one
            start = rng.randrange(len(reviews[other]) - k + 1)
            pairs.append((a, " ".join(reviews[other][start : start + k]), 1))
    return pairs


def mean_pooled(encoder: nn.Module, input_ids: Int[Tensor, "B T"],
                attention_mask: Int[Tensor, "B T"]) -> Float[Tensor, "B H"]:
    """Unit-length mean of the encoder's last hidden states over the real tokens (MiniLM's sentence vector)."""
    hidden = encoder(input_ids=input_ids, attention_mask=attention_mask,
                     token_type_ids=torch.zeros_like(input_ids)).last_hidden_state  # [B, T, H]
    weights = attention_mask.unsqueeze(-1).to(hidden.dtype)  # [B, T, 1]
    return F.normalize((hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9), dim=-1)


@torch.no_grad()
def encode_segments(encoder: nn.Module, tokenizer, texts: Sequence[str],
                    batch_size: int = 32) -> tuple[Float[Tensor, "N H"], Int[Tensor, "N"]]:
    """``(vectors [N, H], lengths [N])``: each text's unit-length mean-pooled vector (encoded alone, at most
    256 tokens) and its number of word pieces ([CLS] and [SEP] not counted), in order."""
    with EvalMode(encoder):
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # similar lengths share a batch: less padding
        vectors = torch.zeros(len(texts), encoder.config.hidden_size)
        lengths = torch.zeros(len(texts), dtype=torch.long)
        for start in range(0, len(order), batch_size):
            chunk = torch.tensor(order[start : start + batch_size])
            batch = tokenizer([texts[i] for i in chunk], padding=True, truncation=True,
                              max_length=MAX_SEGMENT_TOKENS, return_tensors="pt")
            vectors[chunk] = mean_pooled(encoder, batch["input_ids"], batch["attention_mask"])
            lengths[chunk] = batch["attention_mask"].sum(-1) - 2
        return vectors, lengths


class NextSentenceHead(nn.Module):
    """Two logits [B, 2] (index 0 = "b follows a", BERT's convention) from the unit vectors u, v [B, H] of
    the two segments and their lengths in word pieces [B].

    One linear layer on ``u * v`` and ``log(1 + length)`` of each segment: with equal weights on ``u * v``
    and none on the lengths, its score is the cosine of u and v.
    """

    def __init__(self, hidden_size: int = 384):
        super().__init__()
        self.linear = nn.Linear(hidden_size + 2, 2)

    def forward(self, u: Float[Tensor, "B H"], v: Float[Tensor, "B H"], length_a: Int[Tensor, "B"],
                length_b: Int[Tensor, "B"]) -> Float[Tensor, "B 2"]:
        lengths = torch.stack([length_a, length_b], dim=-1).to(u.dtype).log1p()  # [B, 2]
        return self.linear(torch.cat([u * v, lengths], dim=-1))


def split_pair_batch(input_ids: Int[Tensor, "B T"], attention_mask: Int[Tensor, "B T"], token_type_ids: Int[Tensor, "B T"],
                     cls_token_id: int, pad_token_id: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``[CLS] a [SEP] b [SEP]`` pair encodings -> ``(a_ids, a_mask, b_ids, b_mask)``, each ``[CLS] x [SEP]``
    padded: what the tokenizer gives for a and for b alone."""
    firsts, seconds = [], []
    for ids, mask, types in zip(input_ids, attention_mask, token_type_ids):
        real = mask.bool()
        firsts.append(ids[real & (types == 0)])  # [CLS] a [SEP]
        seconds.append(torch.cat([ids.new_tensor([cls_token_id]), ids[real & (types == 1)]]))  # [CLS] b [SEP]

    def pad(rows):
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), pad_token_id, dtype=input_ids.dtype)
        mask = torch.zeros((len(rows), width), dtype=attention_mask.dtype)
        for i, row in enumerate(rows):
            ids[i, : len(row)], mask[i, : len(row)] = row, 1
        return ids, mask

    return (*pad(firsts), *pad(seconds))


@torch.no_grad()
def next_sentence_accuracy(encoder: nn.Module, tokenizer, head: NextSentenceHead,
                           pairs: Sequence[tuple[str, str, int]]) -> float:
    """Fraction of ``(a, b, label)`` pairs whose label the head gets right (argmax of its two logits)."""
    if not pairs:
        raise ValueError("next_sentence_accuracy needs at least one pair.")
    u, length_a = encode_segments(encoder, tokenizer, [a for a, _, _ in pairs])
    v, length_b = encode_segments(encoder, tokenizer, [b for _, b, _ in pairs])
    labels = torch.tensor([label for _, _, label in pairs])
    return float((head(u, v, length_a, length_b).argmax(-1) == labels).float().mean())
