"""Per-layer sentence representations, the input to a CKA probe.

Works for the kit's TinyBERT and for any Hugging Face encoder (``output_hidden_states=True``).
Each layer's [B, T, D] token states are pooled into [B, D]: by a mean over real tokens (pass your
``masked_mean_pool``) or by taking the [CLS] position.
"""

from __future__ import annotations

from typing import Callable, Union

import torch
from jaxtyping import Float, Int
from torch import Tensor

from .encoder import TinyBERT

Pool = Union[str, Callable[[Tensor, Tensor], Tensor]]


@torch.no_grad()
def hidden_states(model: torch.nn.Module, input_ids: Int[Tensor, "B T"],
                  attention_mask: Int[Tensor, "B T"]) -> tuple[Float[Tensor, "B T D"], ...]:
    """(embedding output, layer 1, ..., layer L) token states, for TinyBERT or a Hugging Face model."""
    model.eval()  # dropout off: representations must be deterministic
    if isinstance(model, TinyBERT):
        return model(input_ids, attention_mask, output_hidden_states=True)
    return model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states


def pool_states(states: Float[Tensor, "B T D"], attention_mask: Int[Tensor, "B T"], pool: Pool) -> Float[Tensor, "B D"]:
    """Pool one layer: ``pool`` is "cls" (position 0) or a function like masked_mean_pool."""
    if pool == "cls":
        return states[:, 0, :]
    if callable(pool):
        return pool(states, attention_mask)
    raise ValueError(f"pool must be 'cls' or a pooling function such as masked_mean_pool; got {pool!r}.")


def layer_representations(model: torch.nn.Module, input_ids: Int[Tensor, "B T"], attention_mask: Int[Tensor, "B T"],
                          pool: Pool, include_embeddings: bool = True) -> list[Float[Tensor, "B D"]]:
    """One pooled [B, D] float32 matrix per layer, ready for ``cka_matrix``.

    include_embeddings: keep the embedding layer's output as the first entry (Hugging Face's
    hidden_states[0]); False gives the blocks only, as in the lesson's 4x4 TinyBERT matrix.
    """
    return pool_layers(hidden_states(model, input_ids, attention_mask), attention_mask, pool, include_embeddings)


def pool_layers(states: tuple[Float[Tensor, "B T D"], ...], attention_mask: Int[Tensor, "B T"], pool: Pool,
                include_embeddings: bool = True) -> list[Float[Tensor, "B D"]]:
    """``layer_representations`` from hidden states already computed (``hidden_states``): one encoder
    run pooled two ways (mean and [CLS]) costs one forward pass, not two."""
    if not include_embeddings:
        states = states[1:]
    return [pool_states(s, attention_mask, pool).float() for s in states]
