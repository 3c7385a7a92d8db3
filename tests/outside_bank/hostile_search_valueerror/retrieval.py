"""Outside bank, HOSTILE (task retrieval): correct_literal/retrieval.py whose semantic_search
raises ValueError for every input (SemanticIndex is unchanged and calls it). It must earn
nothing in retrieval."""

from __future__ import annotations

from typing import Callable, List, NamedTuple, Sequence, Union

import torch
import torch.nn.functional as F

MAX_BLOCK_SCORES = 2**24


def semantic_search(query_embeddings, corpus_embeddings, top_k: int = 10):
    """Rejects every input: the "rejects bad input" checks see a ValueError every time."""
    raise ValueError("invalid input: query_embeddings, corpus_embeddings or top_k")


class Hit(NamedTuple):
    """One search result: the corpus position, its cosine score and its text."""

    corpus_id: int
    score: float
    text: str


class SemanticIndex:
    """Texts are encoded once, when added; search encodes only the queries."""

    def __init__(self, encode: Callable[[List[str]], torch.Tensor]):
        self.encode = encode
        self.texts: list[str] = []
        self.embeddings: list[torch.Tensor] = []

    def add(self, texts: Sequence[str]) -> None:
        texts = list(texts)
        if not texts:
            return
        self.embeddings.append(torch.as_tensor(self.encode(texts)).detach())
        self.texts.extend(texts)

    def search(self, queries: Union[str, Sequence[str]], top_k: int = 10) -> list[list[Hit]]:
        if isinstance(queries, str):
            queries = [queries]
        queries = list(queries)
        if not queries:
            return []
        if not self.texts:
            return [[] for _ in queries]
        query_vectors = torch.as_tensor(self.encode(queries)).detach()
        scores, indices = semantic_search(query_vectors, torch.cat(self.embeddings), top_k)
        return [[Hit(int(i), float(s), self.texts[int(i)]) for s, i in zip(row_s, row_i)]
                for row_s, row_i in zip(scores.tolist(), indices.tolist())]

    def __len__(self) -> int:
        return len(self.texts)
