"""Honest masked mean pooling."""
import torch


def masked_mean_pool(hidden_states, attention_mask):
    mask = attention_mask.to(hidden_states.dtype).unsqueeze(-1)
    return (hidden_states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
