"""The memory promise of semantic_search ("at most about MAX_BLOCK_SCORES scores are held at once,
whatever N is"), in figures: what several searches hold beyond their inputs at two corpus sizes, how
that grows with N, and the bar a graded test would set. Nothing grades the promise yet
(docs/hidden-suites.md, "Limits": measured in the sandbox, correct code grew past the bar).

    python benchmarks/search_memory.py            # in this process, one search after another (about 1 min)

Each search runs in this process through bertlab.teaching.retrieval.search_memory (the measure of
bertlab/peak_memory.py). The candidates: the reference; sentence-transformers' util.semantic_search
(its own chunks of 100 queries x 500,000 rows) wrapped to the kit's signature; two searches that score
the whole [Q, N] matrix (with top-k, and with a full argsort, as SimCSE's search does); the bank's
correct retrieval variants; the outside bank's correct entries. A search slower than FAST_S on the
small input would take minutes at these sizes and is left out.
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


# Q float32 queries of D features; two sizes past every common blocking (the docstring's
# MAX_BLOCK_SCORES // Q = 524,288 rows, sentence-transformers' 500,000, twice: code that keeps the last
# block alive while it scores the next peaks at two blocks); the bar: 3/4 of a [Q, N] matrix's growth.
Q, D, SIZES, SMALL_N, FAST_S, GROWTH_FRACTION, SCORE_BYTES = 32, 4, (1_100_000, 1_650_000), 52_400, 0.2, 0.75, 4


def candidates():
    from bertlab.implementations import load_directory, load_implementation
    from bertlab_grader.mutants import load_bank

    found = [("reference", load_implementation("reference").retrieval.semantic_search),
             ("sentence-transformers util", sentence_transformers_search),
             ("whole matrix + topk", whole_matrix_topk), ("whole matrix + argsort", brute_force_argsort)]
    for entry in load_bank():
        if entry.task == "retrieval" and entry.kind == "variant":
            found.append((f"{entry.kind} {entry.name}", load_directory(entry.path).retrieval.semantic_search))
    for folder in sorted((KIT / "tests" / "outside_bank").glob("correct_*")):
        found.append((f"outside {folder.name}", load_directory(folder).retrieval.semantic_search))
    return found


def main() -> int:
    from bertlab.teaching.retrieval import search_memory

    torch.set_num_threads(1)  # as the grader's sandbox runs a submission
    (small, large) = SIZES
    bar = GROWTH_FRACTION * Q * (large - small) * SCORE_BYTES
    g = torch.Generator().manual_seed(270)
    queries, corpus = torch.randn(Q, D, generator=g), torch.randn(large, D, generator=g)
    small_c = torch.randn(SMALL_N, D, generator=g)
    print(f"Q = {Q} float32 queries, D = {D}, N = {small:,} and {large:,}; a [Q, N] matrix grows "
          f"{Q * SCORE_BYTES} bytes a corpus row; the bar: {bar / (large - small):.0f} bytes a row "
          f"({bar / 2**20:.0f} MiB over the {large - small:,} added rows)")
    print(f"{'search':40}{'small s':>9}{'extra N1':>11}{'extra N2':>11}{'growth/row':>12}  verdict")
    for name, search in candidates():
        search(queries[:2], small_c[:100], top_k=3)
        started = time.perf_counter()
        search(queries.clone(), small_c.clone(), top_k=10)
        seconds = time.perf_counter() - started
        if seconds > FAST_S:
            print(f"{name:40}{seconds:9.3f}{'':>11}{'':>11}{'':>12}  too slow to measure here")
            continue
        extra = [search_memory(search, queries, corpus[:n], 10)["extra_bytes"] for n in SIZES]
        growth = (extra[1] - extra[0]) / (large - small)
        verdict = "under the bar" if extra[1] - extra[0] <= bar else "OVER the bar"
        print(f"{name:40}{seconds:9.3f}{extra[0] / 2**20:9.0f}Mi{extra[1] / 2**20:9.0f}Mi{growth:12.0f}  {verdict}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
