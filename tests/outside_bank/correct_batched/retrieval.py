"""Task retrieval with per-block top-k and a NumPy lexsort merge (outside bank: correct, "batched" style)."""

from __future__ import annotations

from typing import Callable, List, NamedTuple, Sequence, Union

import numpy as np
import torch

MAX_BLOCK_SCORES = 2**24


def _rank(scores: np.ndarray, indices: np.ndarray, k: int):
    """Per row: the k best (score desc, index asc) of the candidate columns."""
    keep_s, keep_i = [], []
    for s, i in zip(scores, indices):
        order = np.lexsort((i, -s))[:k]   # last key is primary: -score, then index
        keep_s.append(s[order])
        keep_i.append(i[order])
    return np.stack(keep_s), np.stack(keep_i)


def semantic_search(query_embeddings, corpus_embeddings, top_k: int = 10):
    """Top-k by cosine similarity: ([Q, k] scores, [Q, k] int64 indices)."""
    q = torch.as_tensor(query_embeddings)
    c = torch.as_tensor(corpus_embeddings)
    if not 1 <= q.ndim <= 2 or c.ndim != 2:
        raise ValueError("expected queries [Q, D] or [D] and corpus [N, D]")
    if q.shape[-1] != c.shape[-1]:
        raise ValueError("queries and corpus differ in embedding size")
    if top_k < 1:
        raise ValueError("top_k < 1")
    q = q.reshape(-1, q.shape[-1])
    out_dtype = torch.float64 if (q.dtype == torch.float64 or c.dtype == torch.float64) else torch.float32
    qn = q.to(out_dtype)
    qn = qn / qn.norm(dim=1, keepdim=True).clamp_min(1e-12)
    Q, N = qn.shape[0], c.shape[0]
    k = min(top_k, N)
    np_dtype = np.float64 if out_dtype == torch.float64 else np.float32
    best_s = np.empty((Q, 0), dtype=np_dtype)
    best_i = np.empty((Q, 0), dtype=np.int64)
    rows_per_block = max(k, MAX_BLOCK_SCORES // max(Q, 1))
    for start in range(0, N, rows_per_block):
        block = c[start:start + rows_per_block].to(out_dtype)
        block = block / block.norm(dim=1, keepdim=True).clamp_min(1e-12)
        s = (qn @ block.T).numpy()
        i = np.broadcast_to(np.arange(start, start + block.shape[0]), s.shape)
        best_s, best_i = _rank(np.concatenate([best_s, s], axis=1), np.concatenate([best_i, i], axis=1), k)
    return torch.from_numpy(np.ascontiguousarray(best_s)), torch.from_numpy(np.ascontiguousarray(best_i))


class Hit(NamedTuple):
    """One search result: the corpus position, its cosine score and its text."""

    corpus_id: int
    score: float
    text: str


class SemanticIndex:
    def __init__(self, encode: Callable[[List[str]], torch.Tensor]):
        self.encode_fn = encode
        self.corpus: list[str] = []
        self.chunks: list[torch.Tensor] = []

    def add(self, texts: Sequence[str]) -> None:
        texts = list(texts)
        if texts:
            self.chunks.append(torch.as_tensor(self.encode_fn(texts)).detach().clone())
            self.corpus.extend(texts)

    def search(self, queries: Union[str, Sequence[str]], top_k: int = 10) -> list[list[Hit]]:
        batch = [queries] if isinstance(queries, str) else list(queries)
        if not batch:
            return []
        if not self.corpus:
            return [[] for _ in batch]
        scores, ids = semantic_search(torch.as_tensor(self.encode_fn(batch)).detach(), torch.cat(self.chunks), top_k)
        hits = []
        for q in range(len(batch)):
            hits.append([Hit(int(ids[q, r]), float(scores[q, r]), self.corpus[int(ids[q, r])])
                         for r in range(ids.shape[1])])
        return hits

    def __len__(self) -> int:
        return len(self.corpus)
