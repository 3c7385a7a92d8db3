"""Honest Siamese wrapper; imports pooling both ways students write it."""
import torch
import torch.nn.functional as F

from .pooling import masked_mean_pool
from pooling import masked_mean_pool as same_function

assert masked_mean_pool is same_function


class SiameseBert(torch.nn.Module):
    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    def encode(self, input_ids, attention_mask):
        out = self.encoder(input_ids=input_ids, attention_mask=attention_mask)
        return masked_mean_pool(out.last_hidden_state, attention_mask)

    def forward(self, input_ids_a, attention_mask_a, input_ids_b, attention_mask_b):
        a = self.encode(input_ids_a, attention_mask_a)
        b = self.encode(input_ids_b, attention_mask_b)
        return F.cosine_similarity(a, b, dim=-1)


def create_sbert(bert_model):
    return SiameseBert(bert_model)
