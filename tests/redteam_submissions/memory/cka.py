"""Allocates without bound, in Python objects and in tensors."""
import torch


def linear_cka(X, Y):
    hoard = []
    while True:
        hoard.append(bytearray(256 * 1024 * 1024))


def cka_matrix(reps):
    return torch.ones(1 << 20, 1 << 20)
