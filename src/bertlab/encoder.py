"""The stacked encoder of the lesson: TinyBERT, built from our own Transformer blocks.

Pre-norm blocks, bidirectional attention (no causal mask), padding masked out of the keys:

    x = x + Attention(LayerNorm(x))
    x = x + MLP(LayerNorm(x))

The residual additions are why an *untrained* stack looks flat under CKA: each block adds a small
random update to a stream that still carries the embedding signal, so every layer stays close to the
first. Positions are either rotary (RoPE, applied to queries and keys inside attention) or fixed
sinusoidal absolute positions added to the embeddings.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn


class RotaryEmbedding(nn.Module):
    """Rotary position embedding: rotates pairs of query/key features by a position-dependent angle,
    so the attention score of two tokens depends on their relative offset."""

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary embeddings need an even head dimension; got {head_dim}.")
        inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: Float[Tensor, "B H T Dh"]) -> Float[Tensor, "B H T Dh"]:
        T = x.shape[-2]
        angles = torch.outer(torch.arange(T, dtype=torch.float32, device=x.device), self.inv_freq)  # [T, Dh/2]
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        rotated = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
        return rotated.flatten(-2)


class MultiHeadAttention(nn.Module):
    """Bidirectional multi-head self-attention with a key-padding mask (and optional RoPE)."""

    def __init__(self, d_model: int, num_heads: int, use_rope: bool = False, is_causal: bool = False):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}.")
        self.num_heads, self.head_dim, self.is_causal = num_heads, d_model // num_heads, is_causal
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.rope = RotaryEmbedding(self.head_dim) if use_rope else None

    def forward(
        self, x: Float[Tensor, "B T D"], attention_mask: Optional[Int[Tensor, "B T"]] = None
    ) -> Float[Tensor, "B T D"]:
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        if self.rope is not None:
            q, k = self.rope(q), self.rope(k)
        attn_mask = None
        if attention_mask is not None:
            keep = attention_mask.bool()
            # A row with no real token would attend to nothing (softmax of all -inf = NaN); let it
            # attend everywhere instead: its output is ignored by masked pooling anyway.
            keep = keep | ~keep.any(dim=1, keepdim=True)
            attn_mask = keep[:, None, None, :]  # [B, 1, 1, T]: broadcast over heads and queries
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=self.is_causal and attn_mask is None)
        return self.out(context.transpose(1, 2).reshape(B, T, D))


class TransformerBlock(nn.Module):
    """One pre-norm encoder block: attention and MLP, each added back onto the residual stream."""

    def __init__(self, d_model: int, num_heads: int, mlp_hidden_dim: int, dropout: float = 0.1, use_rope: bool = False):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attention = MultiHeadAttention(d_model, num_heads, use_rope=use_rope)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, mlp_hidden_dim), nn.GELU(), nn.Linear(mlp_hidden_dim, d_model))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Float[Tensor, "B T D"], attention_mask: Optional[Int[Tensor, "B T"]] = None) -> Float[Tensor, "B T D"]:
        x = x + self.dropout(self.attention(self.norm1(x), attention_mask))
        return x + self.dropout(self.mlp(self.norm2(x)))


def sinusoidal_positions(max_len: int, d_model: int) -> Float[Tensor, "max_len D"]:
    """The fixed sin/cos absolute position table of "Attention Is All You Need"."""
    position = torch.arange(max_len, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(position * freq)
    table[:, 1::2] = torch.cos(position * freq[: d_model // 2])
    return table


class TinyBERT(nn.Module):
    """Token embedding (+ optional absolute positions) -> dropout -> a stack of TransformerBlocks.

    Attributes used by the lesson: ``embedding`` (token ids -> [B, T, D], positions included),
    ``dropout``, ``blocks`` (each called as ``block(x=..., attention_mask=...)``).
    """

    def __init__(self, token_embedding: nn.Embedding, blocks: list[TransformerBlock], dropout: float,
                 use_absolute_positions: bool, max_len: int = 512):
        super().__init__()
        self.embedding = _PositionedEmbedding(token_embedding, use_absolute_positions, max_len)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(blocks)
        self.d_model = token_embedding.embedding_dim

    def forward(self, input_ids: Int[Tensor, "B T"], attention_mask: Optional[Int[Tensor, "B T"]] = None,
                output_hidden_states: bool = False):
        """Final hidden states [B, T, D]; with output_hidden_states, the tuple
        (embeddings, block 1, ..., block L) like Hugging Face's ``hidden_states``."""
        x = self.dropout(self.embedding(input_ids))
        states = [x]
        for block in self.blocks:
            x = block(x=x, attention_mask=attention_mask)
            states.append(x)
        return tuple(states) if output_hidden_states else x


class _PositionedEmbedding(nn.Module):
    """Token embedding lookup plus, optionally, fixed sinusoidal absolute positions."""

    def __init__(self, token_embedding: nn.Embedding, use_absolute_positions: bool, max_len: int):
        super().__init__()
        self.token = token_embedding
        table = sinusoidal_positions(max_len, token_embedding.embedding_dim) if use_absolute_positions else None
        self.register_buffer("positions", table, persistent=False)

    def forward(self, input_ids: Int[Tensor, "B T"]) -> Float[Tensor, "B T D"]:
        x = self.token(input_ids)
        if self.positions is not None:
            x = x + self.positions[: input_ids.shape[1]].to(x.dtype)
        return x


def create_bert(vocab_size: int, d_model: int, num_heads: int, mlp_hidden_dim: int, num_layers: int,
                pad_id: int, use_rope: bool = True, use_absolute_positions: bool = False,
                pretrained_embedding_weight: Optional[Tensor] = None, dropout: float = 0.1,
                freeze_embedding: bool = True) -> TinyBERT:
    """Build the lesson's TinyBERT.

    With ``pretrained_embedding_weight`` ([vocab_size, d_model]) the token table is copied from it and,
    by default, frozen, like the lesson's carried-over embedding table.
    """
    if use_rope and use_absolute_positions:
        raise ValueError("choose one position scheme: use_rope or use_absolute_positions, not both.")
    embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
    if pretrained_embedding_weight is not None:
        if tuple(pretrained_embedding_weight.shape) != (vocab_size, d_model):
            raise ValueError(
                f"pretrained_embedding_weight has shape {tuple(pretrained_embedding_weight.shape)}; "
                f"expected [vocab_size, d_model] = [{vocab_size}, {d_model}]."
            )
        with torch.no_grad():
            embedding.weight.copy_(pretrained_embedding_weight)
        embedding.weight.requires_grad_(not freeze_embedding)
    blocks = [TransformerBlock(d_model, num_heads, mlp_hidden_dim, dropout, use_rope) for _ in range(num_layers)]
    return TinyBERT(embedding, blocks, dropout, use_absolute_positions)
