"""Task siamese with unit vectors and a dot product (outside bank: correct, "Gram" style).

The encoder is stored as ``self.bert``: the task never names the attribute.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .pooling import masked_mean_pool


class SiameseBert(torch.nn.Module):
    def __init__(self, encoder: torch.nn.Module):
        super().__init__()
        self.bert = encoder

    def encode(self, input_ids, attention_mask):
        """[B, T] -> [B, D] mean of the real tokens' last hidden states."""
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return masked_mean_pool(hidden, attention_mask)

    def forward(self, input_ids_a, attention_mask_a, input_ids_b, attention_mask_b):
        """[B] cosines, as the dot product of the two unit vectors of each pair."""
        a = F.normalize(self.encode(input_ids_a, attention_mask_a), p=2, dim=1)
        b = F.normalize(self.encode(input_ids_b, attention_mask_b), p=2, dim=1)
        return torch.einsum("bd,bd->b", a, b)


def create_sbert(bert_model: torch.nn.Module) -> SiameseBert:
    model = SiameseBert(bert_model)
    return model
