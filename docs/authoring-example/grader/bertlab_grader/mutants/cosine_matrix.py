"""The mutant bank's entries for task cosine_matrix: two realistic mistakes and one correct variant."""

from __future__ import annotations

import torch

from bertlab_grader.mutants.fingerprint import Record, gen, outcome
from bertlab_grader.mutants.recipe import Mutant, Variant

MUTANTS = (
    Mutant("cosmat_raw_dot", "cosine_matrix", "cosine_matrix.py", "dot products of the raw rows (no normalising)",
           (("    return unit_a @ unit_b.T", "    return a.to(torch.float64) @ b.to(torch.float64).T"),)),
    Mutant("cosmat_one_side", "cosine_matrix", "cosine_matrix.py", "normalises the rows of a only",
           (("    return unit_a @ unit_b.T", "    return unit_a @ b.to(torch.float64).T"),)),
)

VARIANTS = (
    Variant("var_cosmat_divide", "cosine_matrix", "cosine_matrix.py",
            "dot products divided by the outer product of the norms (clamped)",
            {"cosine_matrix": '''def cosine_matrix(a, b):
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError("a and b must be [n, d] and [m, d]")
    a, b = a.double(), b.double()
    norms = a.norm(dim=1)[:, None] * b.norm(dim=1)[None, :]
    return (a @ b.T) / norms.clamp(min=1e-12)
'''}),
)


def fingerprint(impl) -> dict:
    """What cosine_matrix returns on small fixed inputs with rows of very different lengths."""
    a = torch.randn(3, 4, generator=gen(960)) * torch.tensor([[0.5], [3.0], [9.0]])
    b = torch.randn(2, 4, generator=gen(961)) * torch.tensor([[4.0], [0.2]])
    record = Record()  # filled call by call: a hint's search may stop it early
    record["values"] = outcome(lambda: impl.cosine_matrix.cosine_matrix(a.clone(), b.clone()))
    record["bad_d"] = outcome(lambda: impl.cosine_matrix.cosine_matrix(a.clone(), torch.ones(2, 3)))
    return record
