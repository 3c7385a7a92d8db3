"""What the kit teaches about task retrieval: semantic search (exercises/retrieval.py)."""

from __future__ import annotations

from bertlab.peak_memory import MemoryUnmeasurable, extra_memory  # bound before any submitted code runs
from bertlab.teaching.records import Mistake

#: What a wrong value most often means: the idea to reread (``bertlab check``'s hint).
IDEA = ("Cosine scores are dot products of L2-normalised vectors; each row is sorted by descending "
        "score with ties by ascending corpus index, and the running top-k must survive every block "
        "boundary.")

MISTAKES: tuple[Mistake, ...] = (
    Mistake("ret_ascending", "retrieval", "ascending order",
            "Your search returns the hits in ascending order: sort by descending score (best first)."),
    Mistake("ret_off_by_one", "retrieval", "one hit too few",
            "Your search returns one hit too few: k = min(top_k, N)."),
    Mistake("ret_corpus_not_normalised", "retrieval", "corpus not normalised",
            "Your scores are not cosines: normalise the corpus vectors too (divide by their norms)."),
    Mistake("ret_query_not_normalised", "retrieval", "queries not normalised",
            "Your scores are not cosines: normalise the query vectors too."),
    Mistake("ret_ties_descending", "retrieval", "ties by descending index",
            "Your search orders tied scores by DESCENDING corpus index: equal scores must keep ascending "
            "index order (a stable sort, or torch.topk followed by a stable re-sort)."),
    Mistake("ret_top_k_over_n_crash", "retrieval", "top_k above N not clamped",
            "Your search fails when top_k is larger than the corpus: use k = min(top_k, N)."),
    Mistake("ret_1d_query_shape", "retrieval", "a 1-D query not treated as Q = 1",
            "Your search returns [k] for a single 1-D query: treat it as Q = 1 and return [1, k]."),
    Mistake("ret_index_reencodes", "retrieval", "texts encoded again on every add()",
            "Your SemanticIndex encodes texts again on every add(): encode only the new texts and keep the "
            "stored embeddings."),
    Mistake("ret_index_ids_restart", "retrieval", "corpus ids restart at every add()",
            "Your corpus ids restart at 0 after each add(): ids must continue from len(index)."),
    Mistake("ret_block_offset", "retrieval", "block-local indices not shifted",
            "Your search loses the corpus position in later blocks: add the block's start to the indices "
            "found inside it."),
    Mistake("ret_block_local_indices", "retrieval", "block-local indices with the docstring's blocks",
            "Your search blocks the corpus by MAX_BLOCK_SCORES // Q rows, as the docstring asks, but reports "
            "an index found inside a block as its position in that block: add the block's start (every block "
            "after the first starts past row 0)."),
    Mistake("ret_merge_block_first", "retrieval", "a later block's tie put first",
            "Your search merges each block's best hits IN FRONT of the running top-k (torch.cat([block, "
            "running])): a stable sort then keeps the later block's hit first, so a tie across a block "
            "boundary goes to the larger corpus index. Ties go to the smaller index: put the running top-k "
            "(earlier rows) first, torch.cat([running, block]), then sort stably.",
            fingerprinted=False),
    Mistake("ret_no_blocking", "retrieval", "the whole [Q, N] score matrix at once",
            "Your search scores every query against the whole corpus at once: its memory grows with N, a "
            "[Q, N] matrix of scores. The docstring promises at most about MAX_BLOCK_SCORES scores at once, "
            "whatever N is (a million texts and a few hundred queries would not fit otherwise): walk the "
            "corpus in blocks of MAX_BLOCK_SCORES // Q rows, score one block at a time, and keep a running "
            "top-k (merge each block's best k with the best so far, and add the block's start to its indices).",
            fingerprinted=False),
    Mistake("ret_top_k_zero_accepted", "retrieval", "top_k < 1 accepted",
            "Your search accepts top_k = 0 or negative: raise a ValueError for top_k < 1."),
    Mistake("ret_dim_mismatch_runtime", "retrieval", "different D not rejected",
            "Your search does not check that queries and corpus have the same D: raise a ValueError that "
            "says so."),
    Mistake("ret_single_query_flat", "retrieval", "a flat list for one query string",
            "Your SemanticIndex.search returns a flat list for a single query string: always return one "
            "list of hits per query, [[hit, ...]]."),
    Mistake("ret_hit_numpy_ids", "retrieval", "NumPy scalars in the hits",
            "A Hit's corpus_id must be a Python int and its score a Python float (Hit's docstring), not a "
            "NumPy or torch scalar (an index taken from .numpy() is numpy.int64): build each hit as "
            "Hit(int(i), float(s), text), or iterate over .tolist(). json.dumps fails on a numpy.int64, so a "
            "caller that saves or sends the hits breaks.",
            fingerprinted=False),
    Mistake("ret_normalise_in_place", "retrieval", "inputs normalised in place",
            "Your search changes its inputs: an in-place division (/=) normalises the caller's embeddings. "
            "Use F.normalize, which returns a new tensor."),
    Mistake("ret_corpus_normalised_in_place", "retrieval", "the corpus normalised in place",
            "Your search changes the caller's corpus: `corpus[a:b].to(dtype)` is a view of the caller's tensor "
            "when the dtype already matches, so an in-place division (`block /= block.norm(...)`) normalises "
            "the caller's embeddings. Use F.normalize(block, dim=1), which returns a new tensor."),
    Mistake("ret_not_normalised", "retrieval", "raw dot products",
            "Your scores are raw dot products, not cosines: normalise the query and the corpus vectors "
            "(divide by their norms)."),
    Mistake("ret_constant", "retrieval", "the same hits for every input",
            "Your search returns the same hits whatever the embeddings (the first k corpus rows, score 0): "
            "score every corpus row by its cosine with the query and keep the k best."),
    Mistake("ret_always_value_error", "retrieval", "ValueError for every input",
            "Your search raises ValueError for valid input too: raise only for what the docstring's Raises: "
            "lists (different D, inputs that are not 1-D/2-D, top_k < 1) and answer everything else."),
)


# ---- probes: where the code under test runs (bertlab.probes)

def seeded_rows(recipe: dict):
    """The tensor a recipe names, built here: ``{"shape": [N, D], "seed": s}`` is ``torch.randn(N, D)``
    drawn from a generator seeded ``s``; with ``"rows": r`` only its first r rows are kept (a copy, so
    the other rows are not held). The grader and the sandbox build the same tensor from the same
    recipe, so a large input need not cross the sandbox's wire (docs/hidden-suites.md, "Large inputs")."""
    import torch

    n, d = (int(x) for x in recipe["shape"])
    key = (n, d, int(recipe["seed"]))
    if key not in _SEEDED:  # drawn once per process (a tenth of a second for 2M x 4); each use gets a copy
        if len(_SEEDED) >= 2:  # a call's queries and its corpus: a third recipe drops the oldest
            del _SEEDED[next(iter(_SEEDED))]
        _SEEDED[key] = torch.randn(n, d, generator=torch.Generator().manual_seed(key[2]))
    return _SEEDED[key][:int(recipe.get("rows", n))].clone()


#: The last two seeded tensors drawn in this process (``seeded_rows``; a probe call builds its queries
#: and its corpus, and the corpus must not be drawn again at every call): never handed out themselves,
#: so code that changes its inputs in place changes its own copy only.
_SEEDED: dict = {}


def search_memory(search, queries, corpus, top_k: int) -> dict:
    """``search(queries, corpus, top_k=top_k)`` once, and the memory it held beyond its inputs.

    The docstring of semantic_search promises "at most about MAX_BLOCK_SCORES scores are held at
    once, whatever N is"; the memory is read in this process (bertlab.peak_memory: its resident peak
    during the call, less its size before), after one small call has loaded whatever the code loads
    once. The grader calls it where the submission runs (the probe "search_memory"), at two corpus
    sizes (docs/hidden-checks.md, "search memory stays bounded").

    Inputs:
        queries: [Q, D]; corpus: [N, D] (the caller's tensors: the search must not need a copy made
        for it, so none is), or either one as the recipe of a seeded tensor (``seeded_rows``), built
        here before anything is measured: the grader sends tens of MiB as a few numbers.
    Returns (plain data only):
        {"measured": whether this process can measure its memory, "why": why not (else ""),
         "extra_bytes": the peak extra resident memory of the call,
         "result": what the search returned (scores [Q, k], indices [Q, k]),
         "built": the inputs' ``input_fingerprint``s, as the search got them}
    """
    queries, corpus = (seeded_rows(x) if isinstance(x, dict) else x for x in (queries, corpus))
    built = [input_fingerprint(queries), input_fingerprint(corpus)]  # before the search sees them
    search(queries[:2], corpus[:1000], top_k=top_k)  # warm: lazy imports and first-call buffers
    try:
        extra, result = extra_memory(lambda: search(queries, corpus, top_k=top_k))
    except MemoryUnmeasurable as exc:
        return {"measured": False, "why": str(exc), "extra_bytes": 0, "result": None, "built": built}
    return {"measured": True, "why": "", "extra_bytes": int(extra), "result": result, "built": built}


def input_fingerprint(tensor) -> list:
    """[shape, 64 rows spread over the tensor as lists]: what the grader compares with its own copy of a
    seeded input, to know that the process it sent the recipe to built the same one (the same
    generator gives the same values, bit for bit). A few milliseconds, where a sum over 2M rows would
    take a fifth of a second."""
    step = max(1, len(tensor) // 64)
    return [list(tensor.shape), tensor[::step][:64].tolist()]


def hit_types(index, queries, top_k: int) -> dict:
    """The types of the corpus_id and score of every hit of ``index.search(queries, top_k=top_k)``.

    Hit's docstring: corpus_id is a Python int and score a Python float (json.dumps of a hit fails on a
    NumPy or torch scalar). Through the sandbox the wire turns a NumPy scalar into a Python number on
    its way out, so the grader reads the types here, where the index lives (the probe "hit_types").

    Returns (plain data only):
        {"rows": one list per query of [corpus_id's type name, score's type name, corpus_id is exactly
         an int, score is exactly a float] per hit (names as "int", "numpy.int64", "torch.Tensor"),
         "why": "" or what kept the hits from being read (not a list of lists of 3-field hits)}
    """
    def name(value) -> str:
        cls = type(value)
        return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"

    result = index.search(queries, top_k=top_k)
    if not isinstance(result, list) or not all(isinstance(row, list) for row in result):
        return {"rows": [], "why": f"search returned a {name(result)}, not a list of lists of hits"}
    rows = []
    for row in result:
        types = []
        for hit in row:
            try:
                corpus_id, score = hit[0], hit[1]
            except Exception:  # noqa: BLE001 - not a hit: the test that reads the values says so
                return {"rows": [], "why": f"a hit is a {name(hit)}, not a Hit (corpus_id, score, text)"}
            types.append([name(corpus_id), name(score), type(corpus_id) is int, type(score) is float])
        rows.append(types)
    return {"rows": rows, "why": ""}


#: The probes this task's tests run where the code under test runs (bertlab.probes gathers them by name).
PROBES = {"search_memory": search_memory, "hit_types": hit_types}
