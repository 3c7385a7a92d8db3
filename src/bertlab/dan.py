"""The DAN baseline: a sentence is the masked mean of its tokens' *non-contextual* embeddings.

By default the embedding table is the SBERT model's own input embedding table, so the baseline and
SBERT differ only in context (a controlled comparison): same vocabulary, same vectors, same pooling,
but no Transformer layers between lookup and pooling. Special tokens ([CLS], [SEP]) are left out,
as in a bag-of-words model: they would add the same two vectors to every sentence.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from .sts import encode_texts

PoolFn = Callable[[Tensor, Tensor], Tensor]


class DANEncoder(nn.Module):
    """Deep-averaging baseline without the deep part: embedding lookup, then masked mean pooling."""

    def __init__(self, embedding: nn.Embedding, pool: PoolFn):
        super().__init__()
        self.embedding = embedding
        self.pool = pool

    @classmethod
    def from_model(cls, model: nn.Module, pool: PoolFn) -> "DANEncoder":
        """Use ``model``'s input embedding table (e.g. MiniLM's word embeddings, [30522, 384])."""
        return cls(model.get_input_embeddings(), pool)

    @torch.no_grad()
    def encode(self, input_ids: Int[Tensor, "B T"], attention_mask: Int[Tensor, "B T"]) -> Float[Tensor, "B D"]:
        return self.pool(self.embedding(input_ids), attention_mask)

    def embed_texts(self, tokenizer, texts: Sequence[str], batch_size: int = 256) -> Float[Tensor, "n D"]:
        """[n, D] sentence vectors for raw texts (tokenised without special tokens)."""
        return encode_texts(self.encode, tokenizer, texts, batch_size=batch_size, add_special_tokens=False)
