"""The lesson's figures: CKA heatmaps, loss curves, a 2-D PCA scatter.

Every function builds a ``matplotlib.figure.Figure`` directly (no pyplot state), so it works with any
backend, Agg included (tests, CI, servers), and nothing leaks between calls. In a notebook, ``display(fig)``
shows it (after ``%matplotlib inline``); elsewhere ``fig.savefig(path)``.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np
import torch
from jaxtyping import Float
from matplotlib.axes import Axes
from matplotlib.figure import Figure
import matplotlib

_UNDEFINED_COLOUR = "#bdbdbd"  # grey cells: CKA undefined (nan), e.g. a zero-variance layer-0 [CLS]


def _as_numpy(matrix) -> np.ndarray:
    if isinstance(matrix, torch.Tensor):
        return matrix.detach().cpu().double().numpy()
    return np.asarray(matrix, dtype=float)


def cka_heatmap(ax: Axes, matrix: Float[torch.Tensor, "L L"], title: str = "",
                labels: Optional[Sequence[str]] = None, annotate: bool = True, vmin: float = 0.0) -> Axes:
    """Draw one [L, L] CKA matrix on ``ax``: colour scale vmin..1, nan cells grey and marked "nan"."""
    values = _as_numpy(matrix)
    if values.ndim != 2 or values.shape[0] != values.shape[1]:
        raise ValueError(f"a CKA matrix must be square [L, L]; got shape {values.shape}.")

    colours = matplotlib.colormaps["viridis"].copy()
    colours.set_bad(_UNDEFINED_COLOUR)
    image = ax.imshow(np.ma.masked_invalid(values), cmap=colours, vmin=vmin, vmax=1.0)
    size = values.shape[0]
    labels = list(labels) if labels is not None else [str(i) for i in range(size)]
    ax.set_xticks(range(size), labels)
    ax.set_yticks(range(size), labels)
    ax.set_xlabel("layer")
    ax.set_ylabel("layer")
    if title:
        ax.set_title(title)
    if annotate and size <= 13:
        for i in range(size):
            for j in range(size):
                value = values[i, j]
                text = "nan" if np.isnan(value) else f"{value:.2f}"
                # Dark text on the bright end of viridis, light text on the dark end.
                bright = not np.isnan(value) and value > vmin + 0.6 * (1 - vmin)
                ax.text(j, i, text, ha="center", va="center", fontsize=7 if size > 8 else 8,
                        color="black" if bright or np.isnan(value) else "white")
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


def cka_heatmaps(matrices: Mapping[str, Float[torch.Tensor, "L L"]], labels: Optional[Mapping[str, Sequence[str]]] = None,
                 vmin: float = 0.0) -> Figure:
    """Side-by-side CKA heatmaps, one per (title, matrix); a shared colour scale makes them comparable."""
    if not matrices:
        raise ValueError("cka_heatmaps needs at least one matrix.")
    figure = Figure(figsize=(5.2 * len(matrices), 4.4), layout="constrained")
    axes = figure.subplots(1, len(matrices), squeeze=False)[0]
    for ax, (title, matrix) in zip(axes, matrices.items()):
        cka_heatmap(ax, matrix, title, labels=(labels or {}).get(title), vmin=vmin)
    return figure


def loss_curve(curves: Mapping[str, Sequence[Sequence[float]]], title: str = "Training loss",
               ylabel: str = "cross-entropy") -> Figure:
    """Training loss against step, one line per run: curves = {name: [[step, loss], ...]}."""
    figure = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = figure.subplots()
    for name, points in curves.items():
        points = np.asarray(points, dtype=float)
        if points.size:
            ax.plot(points[:, 0], points[:, 1], marker="o", markersize=3, label=name)
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.axhline(np.log(2), color="grey", linestyle=":", linewidth=1, label="chance (ln 2)")
    ax.legend()
    return figure


def pca_2d(embeddings: Float[torch.Tensor, "n D"]) -> np.ndarray:
    """[n, 2] coordinates on the first two principal components (signs fixed, so runs agree)."""
    X = _as_numpy(embeddings)
    if X.ndim != 2 or X.shape[0] < 2:
        raise ValueError(f"PCA needs an [n, D] matrix with n >= 2; got shape {X.shape}.")
    X = X - X.mean(axis=0, keepdims=True)
    _, _, vt = np.linalg.svd(X, full_matrices=False)
    components = vt[:2]
    # An SVD's singular vectors are defined up to sign; make the largest loading positive.
    signs = np.sign(components[np.arange(len(components)), np.abs(components).argmax(axis=1)])
    coords = X @ (components * signs[:, None]).T
    if coords.shape[1] < 2:  # D == 1: pad so callers always get two columns
        coords = np.hstack([coords, np.zeros((coords.shape[0], 1))])
    return coords


def pca_scatter(embeddings: Mapping[str, Float[torch.Tensor, "n D"]], labels: Sequence[int],
                label_names: Sequence[str] = ("negative", "positive"), texts: Optional[Sequence[str]] = None) -> Figure:
    """One 2-D PCA panel per encoder ({name: [n, D]}), points coloured by label (0/1)."""
    if not embeddings:
        raise ValueError("pca_scatter needs at least one embedding matrix.")
    labels = np.asarray(labels)
    figure = Figure(figsize=(5.0 * len(embeddings), 4.2), layout="constrained")
    axes = figure.subplots(1, len(embeddings), squeeze=False)[0]
    for ax, (name, matrix) in zip(axes, embeddings.items()):
        coords = pca_2d(matrix)
        if coords.shape[0] != len(labels):
            raise ValueError(f"{name}: {coords.shape[0]} embeddings but {len(labels)} labels.")
        for value, colour, marker in ((0, "tab:red", "x"), (1, "tab:blue", "o")):
            chosen = labels == value
            ax.scatter(coords[chosen, 0], coords[chosen, 1], c=colour, marker=marker, s=60, label=label_names[value])
        if texts is not None:
            for (x, y), text in zip(coords, texts):
                ax.annotate(text[:18] + ("..." if len(text) > 18 else ""), (x, y), fontsize=6,
                            xytext=(3, 3), textcoords="offset points")
        ax.set_title(name)
        ax.set_xlabel("PC 1")
        ax.set_ylabel("PC 2")
        ax.legend(loc="best", fontsize=8)
    return figure


def separation(embeddings: Float[torch.Tensor, "n D"], labels: Sequence[int]) -> float:
    """Distance between the two class means on the PCA plane, over the mean spread within a class.

    A single number for "how cleanly do the clusters separate" (bigger = cleaner); scale-free, so
    encoders of different widths can be compared.
    """
    coords, labels = pca_2d(embeddings), np.asarray(labels)
    a, b = coords[labels == 0], coords[labels == 1]
    between = np.linalg.norm(a.mean(axis=0) - b.mean(axis=0))
    within = np.mean([np.linalg.norm(a - a.mean(axis=0), axis=1).mean(), np.linalg.norm(b - b.mean(axis=0), axis=1).mean()])
    return float(between / max(within, 1e-12))
