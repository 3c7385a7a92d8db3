"""The memory promise of semantic_search ("at most about MAX_BLOCK_SCORES scores are held at once,
whatever N is"), in figures: what several searches hold beyond their inputs at the two corpus sizes of
the hidden test `test_search_memory_stays_bounded`, their growth, and the test's bar.

    python benchmarks/search_memory.py            # in this process, one search after another (about 5 min)

Each search runs in this process through the probe the grader runs in the sandbox
(bertlab.teaching.retrieval.search_memory, the measure of bertlab/peak_memory.py), on the hidden
test's own inputs and constants, once at each size (the test measures a second time a growth over
the bar). The candidates: the reference; sentence-transformers' util.semantic_search
(its own chunks of 100 queries x 500,000 rows) wrapped to the kit's signature; three searches that score
the whole [Q, N] matrix (with top-k, with a full stable argsort, as SimCSE's search does, and in NumPy
as txtai's search does); the bank's
correct retrieval variants and its mutant ret_no_blocking; the outside bank's correct entries. Every
search is measured, however long it takes (as the test does: no point depends on speed); the seconds
of its call on the larger corpus are printed beside its figures, against the test's per-call limit
MEMORY_CALL_LIMIT_S.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

KIT = Path(__file__).resolve().parents[1]


def sentence_transformers_search(queries, corpus, top_k: int = 10):
    """sentence_transformers.util.semantic_search with its default chunking, as (scores, indices)."""
    from sentence_transformers import util

    hits = util.semantic_search(queries, corpus, top_k=top_k)
    k = min(top_k, len(corpus))
    return (torch.tensor([[h["score"] for h in row] for row in hits], dtype=queries.dtype).reshape(-1, k),
            torch.tensor([[h["corpus_id"] for h in row] for row in hits]).reshape(-1, k))


def brute_force_argsort(queries, corpus, top_k: int = 10):
    """Every cosine at once, then a stable argsort of each [N] row."""
    scores = F.normalize(queries, dim=1) @ F.normalize(corpus, dim=1).T
    order = torch.argsort(scores, dim=1, descending=True, stable=True)[:, :top_k]
    return scores.gather(1, order), order


def whole_matrix_topk(queries, corpus, top_k: int = 10):
    """Every cosine at once, then torch.topk."""
    scores = F.normalize(queries, dim=1) @ F.normalize(corpus, dim=1).T
    return torch.topk(scores, top_k, dim=1)


def txtai_numpy_search(queries, corpus, top_k: int = 10):
    """As txtai's NumPy search does: the whole [Q, N] matrix in NumPy, then an argsort of every row."""
    import numpy as np

    scores = F.normalize(queries, dim=1).numpy() @ F.normalize(corpus, dim=1).numpy().T
    order = np.argsort(-scores, axis=1, kind="stable")[:, :top_k]
    return torch.from_numpy(np.take_along_axis(scores, order, axis=1)), torch.from_numpy(order)


def candidates():
    from bertlab.implementations import load_directory, load_implementation
    from bertlab_grader.mutants.bank import load_bank

    found = [("reference", load_implementation("reference").retrieval.semantic_search),
             ("sentence-transformers util", sentence_transformers_search),
             ("whole matrix + topk", whole_matrix_topk), ("whole matrix + argsort", brute_force_argsort),
             ("txtai's NumPy search", txtai_numpy_search)]
    for entry in load_bank():
        if entry.task == "retrieval" and (entry.kind == "variant" or entry.name == "ret_no_blocking"):
            found.append((f"{entry.kind} {entry.name}", load_directory(entry.path).retrieval.semantic_search))
    for folder in sorted((KIT / "tests" / "outside_bank").glob("correct_*")):
        found.append((f"outside {folder.name}", load_directory(folder).retrieval.semantic_search))
    return found


def main() -> int:
    from bertlab.teaching.retrieval import search_memory

    from bertlab_grader.hidden import test_hidden_retrieval as hidden

    torch.set_num_threads(1)  # as the grader's sandbox runs a submission
    Q, (small, large), score_bytes = hidden.MEMORY_QUERIES, hidden.MEMORY_SIZES, hidden.SCORE_BYTES
    bar = hidden.MEMORY_GROWTH_FRACTION * Q * (large - small) * score_bytes
    print(f"Q = {Q} float32 queries, D = {hidden.MEMORY_D}, N = {small:,} and {large:,}; a [Q, N] matrix grows "
          f"{Q * score_bytes} bytes a corpus row; the bar: {bar / (large - small):.0f} bytes a row "
          f"({bar / 2**20:.0f} MiB over the {large - small:,} added rows)")
    print(f"{'search':40}{'N2 s':>9}{'extra N1':>11}{'extra N2':>11}{'growth/row':>12}  verdict")
    small_q, small_c = hidden.memory_inputs(hidden.MEMORY_SMALL_N)  # the warm-up call's
    queries, corpus = hidden.memory_inputs(large)
    for name, search in candidates():
        search(small_q[:2], small_c[:100], top_k=3)
        extra, seconds = [], 0.0
        for n in (small, large):
            started = time.perf_counter()
            extra.append(search_memory(search, queries, corpus[:n], 10)["extra_bytes"])
            seconds = time.perf_counter() - started
        growth = (extra[1] - extra[0]) / (large - small)
        verdict = "keeps the points" if extra[1] - extra[0] <= bar else "LOSES the points"
        if seconds > hidden.MEMORY_CALL_LIMIT_S:
            verdict = f"LOSES the points (over the {hidden.MEMORY_CALL_LIMIT_S:g} s limit of a call)"
        print(f"{name:40}{seconds:9.1f}{extra[0] / 2**20:9.0f}Mi{extra[1] / 2**20:9.0f}Mi{growth:12.0f}  {verdict}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
