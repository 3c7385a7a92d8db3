"""Task retrieval, vectorised over the queries (outside bank: correct, "literal" style).

The corpus is walked in blocks; a running top-k per query is merged with each block's scores by a
stable descending sort, so equal scores keep ascending corpus order (earlier blocks come first).
"""

from __future__ import annotations

from typing import Callable, List, NamedTuple, Sequence, Union

import torch
import torch.nn.functional as F

MAX_BLOCK_SCORES = 2**24


def semantic_search(query_embeddings, corpus_embeddings, top_k: int = 10):
    """([Q, k] scores, [Q, k] int64 indices), best first, ties by ascending corpus index."""
    queries = torch.as_tensor(query_embeddings)
    corpus = torch.as_tensor(corpus_embeddings)
    if queries.dim() == 1:
        queries = queries.unsqueeze(0)
    if queries.dim() != 2 or corpus.dim() != 2:
        raise ValueError("queries must be [Q, D] or [D] and the corpus [N, D]")
    if queries.shape[1] != corpus.shape[1]:
        raise ValueError(f"embedding sizes differ: {queries.shape[1]} vs {corpus.shape[1]}")
    if top_k < 1:
        raise ValueError("top_k must be at least 1")
    dtype = torch.float64 if torch.float64 in (queries.dtype, corpus.dtype) else torch.float32
    q = F.normalize(queries.to(dtype), dim=1)
    n_queries, n_corpus = q.shape[0], corpus.shape[0]
    k = min(top_k, n_corpus)
    best_scores = torch.empty(n_queries, 0, dtype=dtype)
    best_indices = torch.empty(n_queries, 0, dtype=torch.int64)
    block = max(1, MAX_BLOCK_SCORES // max(1, n_queries))
    for start in range(0, n_corpus, block):
        c = F.normalize(corpus[start:start + block].to(dtype), dim=1)
        scores = q @ c.T
        indices = torch.arange(start, start + c.shape[0]).expand(n_queries, -1)
        scores = torch.cat([best_scores, scores], dim=1)
        indices = torch.cat([best_indices, indices], dim=1)
        order = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k]
        best_scores = torch.gather(scores, 1, order)
        best_indices = torch.gather(indices, 1, order)
    return best_scores, best_indices


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
