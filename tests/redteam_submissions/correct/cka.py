"""Honest linear CKA (float64, column-centred)."""
import torch


def linear_cka(X, Y):
    X = torch.as_tensor(X).to(torch.float64)
    Y = torch.as_tensor(Y).to(torch.float64)
    if X.ndim != 2 or Y.ndim != 2 or X.shape[0] != Y.shape[0] or X.shape[0] < 2:
        raise ValueError(f"linear_cka needs two 2-D inputs with the same n >= 2, got {tuple(X.shape)} and {tuple(Y.shape)}")
    X = X - X.mean(0)
    Y = Y - Y.mean(0)
    return float((Y.T @ X).norm() ** 2 / ((X.T @ X).norm() * (Y.T @ Y).norm()))
