"""Honest pairwise cosines."""
import torch


def cosine_matrix(a, b):
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError("a [n, d] and b [m, d] with the same d")
    a, b = a.double(), b.double()
    unit_a = a / a.norm(dim=1, keepdim=True).clamp(min=1e-12)
    unit_b = b / b.norm(dim=1, keepdim=True).clamp(min=1e-12)
    return unit_a @ unit_b.T
