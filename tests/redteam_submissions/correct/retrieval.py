"""Honest (unchunked) retrieval; enough for the sandbox tests."""
from typing import NamedTuple

import torch
import torch.nn.functional as F


class Hit(NamedTuple):
    corpus_id: int
    score: float
    text: str


def semantic_search(query_embeddings, corpus_embeddings, top_k=10):
    q = query_embeddings.unsqueeze(0) if query_embeddings.ndim == 1 else query_embeddings
    if q.shape[-1] != corpus_embeddings.shape[-1] or top_k < 1:
        raise ValueError("dimension mismatch or top_k < 1")
    scores = F.normalize(q, dim=-1) @ F.normalize(corpus_embeddings, dim=-1).T
    k = min(top_k, corpus_embeddings.shape[0])
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k]
    return torch.gather(scores, 1, order), order


class SemanticIndex:
    def __init__(self, encode):
        self.encode = encode
        self.texts = []
        self.embeddings = None

    def add(self, texts):
        texts = list(texts)
        emb = self.encode(texts)
        self.embeddings = emb if self.embeddings is None else torch.cat([self.embeddings, emb])
        self.texts += texts

    def search(self, queries, top_k=10):
        queries = [queries] if isinstance(queries, str) else list(queries)
        scores, idx = semantic_search(self.encode(queries), self.embeddings, top_k)
        return [[Hit(int(i), float(s), self.texts[int(i)]) for s, i in zip(row_s, row_i)]
                for row_s, row_i in zip(scores, idx)]

    def __len__(self):
        return len(self.texts)
