"""Encoding texts and scoring sentence pairs: Spearman and mean absolute error against references."""

from __future__ import annotations

from typing import Callable, Sequence
import hashlib

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from .datasets import ScoredPair

EncodeIds = Callable[[Int[Tensor, "B T"], Int[Tensor, "B T"]], Float[Tensor, "B D"]]


@torch.no_grad()
def encode_texts(encode: EncodeIds, tokenizer, texts: Sequence[str], batch_size: int = 64,
                 add_special_tokens: bool = True, max_length: int = 256) -> Float[Tensor, "n D"]:
    """Tokenise ``texts`` and run ``encode(input_ids, attention_mask)`` batch by batch.

    Texts are batched by length (less padding, faster) and the rows are returned in input order.
    """
    texts = list(texts)
    if not texts:
        raise ValueError("encode_texts got no texts.")
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    rows: list[Tensor] = [None] * len(texts)  # type: ignore[list-item]
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        tokens = tokenizer([texts[i] for i in batch], padding=True, truncation=True, max_length=max_length,
                           add_special_tokens=add_special_tokens, return_tensors="pt")
        embeddings = torch.as_tensor(encode(tokens["input_ids"], tokens["attention_mask"])).float()
        for position, index in enumerate(batch):
            rows[index] = embeddings[position]
    return torch.stack(rows)


def pair_cosines(embed: Callable[[list[str]], Tensor], pairs: Sequence[ScoredPair]) -> Float[Tensor, "P"]:
    """Cosine similarity of each pair, embedding every sentence with ``embed(list[str]) -> [n, D]``."""
    a = embed([p.a for p in pairs])
    b = embed([p.b for p in pairs])
    return F.cosine_similarity(torch.as_tensor(a).float(), torch.as_tensor(b).float(), dim=-1)


def pairs_digest(pairs: Sequence[ScoredPair]) -> str:
    """sha256 of the pairs (both sentences and the score of each, in order): what a kept result was scored on."""
    digest = hashlib.sha256()
    for pair in pairs:
        digest.update(f"{pair.a}\t{pair.b}\t{pair.score!r}\n".encode())
    return digest.hexdigest()


def spearman(predicted: Sequence[float], reference: Sequence[float]) -> float:
    """Spearman rank correlation (scipy.stats.spearmanr)."""
    from scipy.stats import spearmanr

    return float(spearmanr(list(map(float, predicted)), list(map(float, reference))).statistic)


def mae(predicted: Sequence[float], reference: Sequence[float]) -> float:
    """Mean absolute error between predicted and reference scores."""
    p, r = torch.as_tensor(list(map(float, predicted))), torch.as_tensor(list(map(float, reference)))
    return float((p - r).abs().mean())


def evaluate_pairs(embed: Callable[[list[str]], Tensor], pairs: Sequence[ScoredPair]) -> dict:
    """{"cosines": [...], "spearman": float, "mae": float} of an embedding function on scored pairs."""
    cosines = pair_cosines(embed, pairs).tolist()
    reference = [p.score for p in pairs]
    return {"cosines": cosines, "spearman": spearman(cosines, reference), "mae": mae(cosines, reference)}
