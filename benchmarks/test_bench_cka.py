"""linear_cka against a plain NumPy transcription of the formula, at n >> d and n << d; cka_matrix
over 13 layers against 169 calls of linear_cka.

Every variant gets the same float32 data (as a tensor for ours, as the same array for NumPy); both
compute in float64, so the conversion is part of every timing.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from benchrecord import OURS
from bertlab_grader.solutions.cka import cka_matrix, linear_cka


def numpy_cka(X: np.ndarray, Y: np.ndarray) -> float:
    """The task's formula, transcribed: ||Yc^T Xc||_F^2 / (||Xc^T Xc||_F * ||Yc^T Yc||_F), in float64."""
    X = X.astype(np.float64)
    Y = Y.astype(np.float64)
    Xc = X - X.mean(axis=0, keepdims=True)
    Yc = Y - Y.mean(axis=0, keepdims=True)
    return float(np.linalg.norm(Yc.T @ Xc) ** 2 / (np.linalg.norm(Xc.T @ Xc) * np.linalg.norm(Yc.T @ Yc)))


def pair(n: int, d: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded float32 X [n, d] and a noisy linear image Y [n, d]."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g)
    Y = X @ torch.randn(d, d, generator=g) / math.sqrt(d) + 0.5 * torch.randn(n, d, generator=g)
    return X, Y


@pytest.mark.parametrize("n, d", [(10_000, 64), (64, 4_096)], ids=["n>>d", "n<<d"])
@pytest.mark.parametrize("variant", [OURS, "numpy transcription"])
def test_linear_cka(timed, n, d, variant):
    X, Y = pair(n, d, seed=n + d)
    group = f"linear_cka n={n:,} d={d:,}"
    if variant == OURS:
        value = timed(group, OURS, lambda: linear_cka(X, Y))
    else:
        Xn, Yn = X.numpy(), Y.numpy()
        value = timed(group, variant, lambda: numpy_cka(Xn, Yn), rounds=3 if n < d else 5)
    assert abs(value - numpy_cka(X.numpy(), Y.numpy())) < 1e-9


LAYERS, N_LAYER, D_LAYER = 13, 256, 768


@pytest.fixture(scope="module")
def layers() -> list[torch.Tensor]:
    """13 float32 [256, 768] 'layers' that drift apart, like BERT-base's embedding output + 12 layers."""
    g = torch.Generator().manual_seed(13)
    current = torch.randn(N_LAYER, D_LAYER, generator=g)
    reps = []
    for _ in range(LAYERS):
        current = torch.tanh(current @ torch.randn(D_LAYER, D_LAYER, generator=g) / math.sqrt(D_LAYER))
        current = current + 0.2 * torch.randn(N_LAYER, D_LAYER, generator=g)
        reps.append(current)
    return reps


def pairwise(layers: list[torch.Tensor]) -> torch.Tensor:
    """The baseline: one linear_cka call per pair, L * L calls."""
    return torch.tensor([[linear_cka(a, b) for b in layers] for a in layers], dtype=torch.float64)


@pytest.mark.parametrize("variant", [OURS, f"{LAYERS * LAYERS} x linear_cka"])
def test_cka_matrix(timed, layers, variant):
    group = f"cka_matrix {LAYERS} layers n={N_LAYER} d={D_LAYER}"
    fn = (lambda: cka_matrix(layers)) if variant == OURS else (lambda: pairwise(layers))
    M = timed(group, variant, fn, rounds=3)
    if variant == OURS:
        torch.testing.assert_close(M, pairwise(layers), atol=1e-9, rtol=0)
