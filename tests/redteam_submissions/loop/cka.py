"""Loops forever in one function; the other is honest (later calls must still work)."""
import torch


def cka_matrix(reps):
    while True:
        pass


def linear_cka(X, Y):
    X = torch.as_tensor(X).to(torch.float64)
    Y = torch.as_tensor(Y).to(torch.float64)
    X = X - X.mean(0)
    Y = Y - Y.mean(0)
    return float((Y.T @ X).norm() ** 2 / ((X.T @ X).norm() * (Y.T @ Y).norm()))
