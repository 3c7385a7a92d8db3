"""Task retrieval, one query at a time (outside bank: correct, "loop" style).

For each query the corpus is walked in blocks of at most MAX_BLOCK_SCORES rows; the running best k
(score, index) pairs are kept in a plain Python list and re-sorted by (-score, index) after each block.
"""

from __future__ import annotations

from typing import Callable, List, NamedTuple, Sequence, Union

import torch

MAX_BLOCK_SCORES = 2**24


def _unit_rows(M: torch.Tensor) -> torch.Tensor:
    norms = M.norm(dim=-1, keepdim=True)
    return M / torch.clamp(norms, min=1e-12)


def semantic_search(query_embeddings, corpus_embeddings, top_k: int = 10):
    """([Q, k] scores, [Q, k] indices) by cosine similarity, best first, ties by ascending index."""
    if not isinstance(query_embeddings, torch.Tensor):
        query_embeddings = torch.tensor(query_embeddings)
    if not isinstance(corpus_embeddings, torch.Tensor):
        corpus_embeddings = torch.tensor(corpus_embeddings)
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    if query_embeddings.ndim not in (1, 2) or corpus_embeddings.ndim != 2:
        raise ValueError("query_embeddings must be 1-D or 2-D and corpus_embeddings 2-D")
    if query_embeddings.shape[-1] != corpus_embeddings.shape[-1]:
        raise ValueError("query and corpus embeddings have different sizes")
    queries = query_embeddings.reshape(-1, query_embeddings.shape[-1])
    both64 = query_embeddings.dtype == torch.float64 or corpus_embeddings.dtype == torch.float64
    dtype = torch.float64 if both64 else torch.float32
    n = corpus_embeddings.shape[0]
    k = min(top_k, n)
    all_scores, all_indices = [], []
    for query in queries:
        q = _unit_rows(query.to(dtype))
        best: list[tuple[float, int]] = []
        for start in range(0, n, MAX_BLOCK_SCORES):
            block = _unit_rows(corpus_embeddings[start:start + MAX_BLOCK_SCORES].to(dtype))
            scores = block @ q
            for offset, score in enumerate(scores.tolist()):
                best.append((score, start + offset))
            best.sort(key=lambda pair: (-pair[0], pair[1]))
            del best[k:]
        all_scores.append([s for s, _ in best])
        all_indices.append([i for _, i in best])
    return (torch.tensor(all_scores, dtype=dtype).reshape(len(queries), k),
            torch.tensor(all_indices, dtype=torch.int64).reshape(len(queries), k))


class Hit(NamedTuple):
    """One search result: the corpus position, its cosine score and its text."""

    corpus_id: int
    score: float
    text: str


class SemanticIndex:
    def __init__(self, encode: Callable[[List[str]], torch.Tensor]):
        self._encode = encode
        self._texts: list[str] = []
        self._vectors = None

    def add(self, texts: Sequence[str]) -> None:
        texts = list(texts)
        if len(texts) == 0:
            return
        new = self._encode(texts)
        new = new.detach() if isinstance(new, torch.Tensor) else torch.tensor(new)
        self._vectors = new if self._vectors is None else torch.cat([self._vectors, new])
        self._texts += texts

    def search(self, queries: Union[str, Sequence[str]], top_k: int = 10) -> list[list[Hit]]:
        if isinstance(queries, str):
            queries = [queries]
        results = []
        if self._vectors is None:
            return [[] for _ in queries]
        query_vectors = self._encode(list(queries))
        if isinstance(query_vectors, torch.Tensor):
            query_vectors = query_vectors.detach()
        scores, indices = semantic_search(query_vectors, self._vectors, top_k=top_k)
        for q in range(scores.shape[0]):
            results.append([Hit(corpus_id=int(indices[q, r]), score=float(scores[q, r]),
                                text=self._texts[int(indices[q, r])]) for r in range(scores.shape[1])])
        return results

    def __len__(self) -> int:
        return len(self._texts)
