"""Outside bank, WRONG (task siamese): correct_literal/siamese.py, detaching the encoder output (nothing can be trained)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .pooling import masked_mean_pool


class SiameseBert(torch.nn.Module):
    """One shared encoder; sentence vector = masked mean of its last hidden state; score = cosine."""

    def __init__(self, encoder: torch.nn.Module):
        super().__init__()
        self.encoder = encoder

    def encode(self, input_ids, attention_mask):
        """[B, T] ids and mask -> [B, D] sentence vectors."""
        output = self.encoder(input_ids=input_ids, attention_mask=attention_mask)
        return masked_mean_pool(output.last_hidden_state.detach(), attention_mask)  # MISTAKE: detached

    def forward(self, input_ids_a, attention_mask_a, input_ids_b, attention_mask_b):
        """[B] cosine of sentence a[i] with sentence b[i]."""
        u = self.encode(input_ids_a, attention_mask_a)
        v = self.encode(input_ids_b, attention_mask_b)
        return F.cosine_similarity(u, v, dim=-1)


def create_sbert(bert_model: torch.nn.Module) -> SiameseBert:
    return SiameseBert(bert_model)
