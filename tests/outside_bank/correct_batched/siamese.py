"""Task siamese, both sides in ONE encoder call (outside bank: correct, "batched" style).

Side a and side b are padded to a common length and encoded as one batch of 2B sentences: the weights
are shared by construction, and padding never reaches a sentence vector (the mask keeps it out of
attention and out of the mean).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .pooling import masked_mean_pool


def _pad_to(t: torch.Tensor, length: int) -> torch.Tensor:
    return F.pad(t, (0, length - t.shape[1]), value=0)


class SiameseBert(torch.nn.Module):
    def __init__(self, encoder: torch.nn.Module):
        super().__init__()
        self.model = encoder

    def encode(self, input_ids, attention_mask):
        """[B, T] -> [B, D]."""
        states = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return masked_mean_pool(states, attention_mask)

    def forward(self, input_ids_a, attention_mask_a, input_ids_b, attention_mask_b):
        """[B] cosine similarities, computed by hand."""
        B = input_ids_a.shape[0]
        T = max(input_ids_a.shape[1], input_ids_b.shape[1])
        ids = torch.cat([_pad_to(input_ids_a, T), _pad_to(input_ids_b, T)])
        mask = torch.cat([_pad_to(attention_mask_a, T), _pad_to(attention_mask_b, T)])
        vectors = self.encode(ids, mask)
        u, v = vectors[:B], vectors[B:]
        return (u * v).sum(-1) / (u.norm(dim=-1) * v.norm(dim=-1)).clamp(min=1e-8)


def create_sbert(bert_model: torch.nn.Module) -> SiameseBert:
    return SiameseBert(encoder=bert_model)
