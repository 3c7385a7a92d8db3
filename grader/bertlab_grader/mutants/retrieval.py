"""The mutant bank's entries for task retrieval: semantic search (semantic_search, SemanticIndex).

Mutants (one realistic mistake each: the mistake of the same name in bertlab/teaching/retrieval.py holds
the hint a student gets) and variants (correct, but not the reference's way). To add a mutant: add its
mistake there, a ``Mutant(...)`` here, then run ``bertlab audit --only <name>``.
"""

from __future__ import annotations

import zlib

import torch

from bertlab_grader.mutants.fingerprint import Record, gen, normalise, outcome
from bertlab_grader.mutants.recipe import SCALE_FREE_KEY, Mutant, Variant

MUTANTS = (
    Mutant("ret_ascending", "retrieval", "retrieval.py",
           "sorts the hits by ascending score",
           (("            order = torch.sort(merged, dim=1, descending=True, stable=True).indices[:, :k]",
             "            order = torch.sort(merged, dim=1, descending=False, stable=True).indices[:, :k]"),)),
    Mutant("ret_off_by_one", "retrieval", "retrieval.py",
           "returns top_k - 1 hits",
           (("    k = min(top_k, n_corpus)\n", "    k = min(top_k - 1, n_corpus)\n"),)),
    Mutant("ret_corpus_not_normalised", "retrieval", "retrieval.py",
           "scores by the dot product with the raw corpus vectors",
           (("            scores = (queries[q0 : q0 + query_block] @ block.T).mul_(inverse_norms)",
             "            scores = queries[q0 : q0 + query_block] @ block.T"),)),
    Mutant("ret_query_not_normalised", "retrieval", "retrieval.py",
           "the queries are not normalised",
           (("    queries = F.normalize(queries.to(dtype), dim=1)", "    queries = queries.to(dtype)"),)),
    Mutant("ret_ties_descending", "retrieval", "retrieval.py",
           "equal scores come out by descending corpus index",
           (("    corpus = torch.as_tensor(corpus_embeddings)\n", "    corpus = torch.as_tensor(corpus_embeddings).flip(0)\n"),
            ("        best_scores, best_indices = torch.cat(merged_scores), torch.cat(merged_indices)\n    return best_scores, best_indices",
             "        best_scores, best_indices = torch.cat(merged_scores), torch.cat(merged_indices)\n    return best_scores, n_corpus - 1 - best_indices"))),
    Mutant("ret_top_k_over_n_crash", "retrieval", "retrieval.py",
           "top_k larger than the corpus crashes torch.topk",
           (("    k = min(top_k, n_corpus)\n", "    k = top_k\n"),
            ("    width = min(k + 1, scores.shape[1])", "    width = k + 1"))),
    Mutant("ret_1d_query_shape", "retrieval", "retrieval.py",
           "a 1-D query returns [k] tensors instead of [1, k]",
           (("    if queries.dim() == 1:\n        queries = queries.unsqueeze(0)\n",
             "    single = queries.dim() == 1\n    if single:\n        queries = queries.unsqueeze(0)\n"),
            ("        best_scores, best_indices = torch.cat(merged_scores), torch.cat(merged_indices)\n    return best_scores, best_indices",
             "        best_scores, best_indices = torch.cat(merged_scores), torch.cat(merged_indices)\n"
             "    return (best_scores[0], best_indices[0]) if single else (best_scores, best_indices)"))),
    Mutant("ret_index_reencodes", "retrieval", "retrieval.py",
           "SemanticIndex.add re-encodes the whole index every time",
           (("        self._texts.extend(texts)\n        self._blocks.append(embeddings)",
             "        self._texts.extend(texts)\n        self._blocks = [torch.as_tensor(self._encode(self._texts)).detach()]"),)),
    Mutant("ret_index_ids_restart", "retrieval", "retrieval.py",
           "corpus ids restart at 0 with every add() call",
           (("        self._texts.extend(texts)\n        self._blocks.append(embeddings)",
             "        self._texts.extend(texts)\n        self._blocks.append(embeddings)\n"
             "        self._ids = getattr(self, '_ids', []) + list(range(len(texts)))"),
            ("            [Hit(int(i), float(s), self._texts[int(i)]) for s, i in zip(row_scores, row_indices)]",
             "            [Hit(self._ids[int(i)], float(s), self._texts[int(i)]) for s, i in zip(row_scores, row_indices)]"))),
    Mutant("ret_block_offset", "retrieval", "retrieval.py",
           "blocks of 1000 corpus rows, block-local indices never shifted by the block start",
           (("    corpus_block = _balanced(n_corpus, max(k, MAX_BLOCK_SCORES // max(n_queries, 1), 4096))",
             "    corpus_block = max(k, 1000)"),
            ("            indices = torch.cat([best_indices[kept], block_indices + c0], dim=1)",
             "            indices = torch.cat([best_indices[kept], block_indices], dim=1)"))),
    Mutant("ret_block_local_indices", "retrieval", "retrieval.py",
           "blocks of MAX_BLOCK_SCORES // Q rows as the docstring asks, block-local indices never shifted",
           (("    corpus_block = _balanced(n_corpus, max(k, MAX_BLOCK_SCORES // max(n_queries, 1), 4096))",
             "    corpus_block = max(k, MAX_BLOCK_SCORES // max(n_queries, 1))"),
            ("            indices = torch.cat([best_indices[kept], block_indices + c0], dim=1)",
             "            indices = torch.cat([best_indices[kept], block_indices], dim=1)"))),
    Mutant("ret_merge_block_first", "retrieval", "retrieval.py",
           "the running top-k is merged as cat([block, running]): a tie across a block boundary goes to the "
           "later block's larger index",
           (("            merged = torch.cat([best_scores[kept], block_scores], dim=1)\n"
             "            indices = torch.cat([best_indices[kept], block_indices + c0], dim=1)",
             "            merged = torch.cat([block_scores, best_scores[kept]], dim=1)\n"
             "            indices = torch.cat([block_indices + c0, best_indices[kept]], dim=1)"),)),
    Mutant("ret_no_blocking", "retrieval", "retrieval.py",
           "scores every query against the whole corpus at once: a [Q, N] matrix, whatever N is",
           (("    corpus_block = _balanced(n_corpus, max(k, MAX_BLOCK_SCORES // max(n_queries, 1), 4096))\n"
             "    query_block = _balanced(n_queries, max(1, MAX_BLOCK_SCORES // max(corpus_block, 1)))",
             "    corpus_block, query_block = max(n_corpus, 1), max(n_queries, 1)  # everything at once"),)),
    Mutant("ret_top_k_zero_accepted", "retrieval", "retrieval.py",
           "top_k < 1 is not rejected",
           (("    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:\n",
             "    if isinstance(top_k, bool) or not isinstance(top_k, int):\n"),)),
    Mutant("ret_dim_mismatch_runtime", "retrieval", "retrieval.py",
           "different embedding sizes fail in matmul (RuntimeError), not with a ValueError",
           (("    if queries.shape[1] != corpus.shape[1]:\n", "    if False:\n"),)),
    Mutant("ret_single_query_flat", "retrieval", "retrieval.py",
           "search('one string') returns a flat list of hits",
           (("        queries = [queries] if isinstance(queries, str) else list(queries)\n        if not queries:\n            return []",
             "        flat = isinstance(queries, str)\n        queries = [queries] if flat else list(queries)\n"
             "        if not queries:\n            return []"),
            ("        return [\n            [Hit(",
             "        return (lambda rows: rows[0] if flat else rows)([\n            [Hit("),
            ("            for row_scores, row_indices in zip(scores.tolist(), indices.tolist())\n        ]",
             "            for row_scores, row_indices in zip(scores.tolist(), indices.tolist())\n        ])"))),
    Mutant("ret_hit_numpy_ids", "retrieval", "retrieval.py",
           "SemanticIndex.search builds its hits from ids.numpy(): corpus_id is a numpy.int64, not a Python int",
           (("            [Hit(int(i), float(s), self._texts[int(i)]) for s, i in zip(row_scores, row_indices)]\n"
             "            for row_scores, row_indices in zip(scores.tolist(), indices.tolist())",
             "            [Hit(i, float(s), self._texts[i]) for s, i in zip(row_scores, row_indices)]\n"
             "            for row_scores, row_indices in zip(scores.tolist(), indices.numpy())"),)),
    Mutant("ret_normalise_in_place", "retrieval", "retrieval.py",
           "normalises the caller's query tensor in place",
           (("    queries = F.normalize(queries.to(dtype), dim=1)",
             "    queries = queries.to(dtype)\n    queries /= torch.linalg.vector_norm(queries, dim=1, keepdim=True).clamp(min=1e-12)"),)),
    Mutant("ret_corpus_normalised_in_place", "retrieval", "retrieval.py",
           "normalises each corpus block in place: a block of the caller's corpus in its own dtype is a view",
           (("        inverse_norms = torch.linalg.vector_norm(block, dim=1).clamp(min=1e-12).reciprocal()",
             "        block /= torch.linalg.vector_norm(block, dim=1, keepdim=True).clamp(min=1e-12)\n"
             "        inverse_norms = torch.ones(block.shape[0], dtype=dtype)"),)),
    # Hostile: form without substance. Both must earn 0 in retrieval (every form point needs a right answer).
    Mutant("ret_constant", "retrieval", "retrieval.py",
           "semantic_search validates its input, then returns the first k rows with score 0 (well-shaped, wrong)",
           (("    best_scores = torch.empty(n_queries, 0, dtype=dtype)\n",
             "    return torch.zeros(n_queries, k, dtype=dtype), torch.arange(k).repeat(n_queries, 1)\n"
             "    best_scores = torch.empty(n_queries, 0, dtype=dtype)\n"),)),
    Mutant("ret_always_value_error", "retrieval", "retrieval.py",
           "semantic_search raises ValueError for every input, valid or not",
           (("    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:\n", "    if True:\n"),)),
)


# ---------------------------------------------------------------------------------------------
# Variants: correct, but not the reference's way
# ---------------------------------------------------------------------------------------------

_RET_LOOP = '''def semantic_search(
    query_embeddings: Union[Float[Tensor, "Q D"], Float[Tensor, "D"]],
    corpus_embeddings: Float[Tensor, "N D"],
    top_k: int = 10,
) -> tuple[Float[Tensor, "Q k"], Int[Tensor, "Q k"]]:
    """One query at a time: a full stable sort of its N cosines (one [N] row in memory at a time)."""
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
        raise ValueError("top_k must be a positive integer")
    queries = torch.as_tensor(query_embeddings)
    corpus = torch.as_tensor(corpus_embeddings)
    if queries.dim() == 1:
        queries = queries[None, :]
    if queries.dim() != 2 or corpus.dim() != 2 or queries.shape[1] != corpus.shape[1]:
        raise ValueError(f"shapes do not match: {tuple(queries.shape)} vs {tuple(corpus.shape)}")
    dtype = torch.float64 if torch.float64 in (queries.dtype, corpus.dtype) else torch.float32
    unit_corpus = F.normalize(corpus.to(dtype), dim=1)
    k = min(top_k, corpus.shape[0])
    all_scores, all_indices = [], []
    for q in F.normalize(queries.to(dtype), dim=1):
        cosines = unit_corpus @ q
        ranked = torch.sort(cosines, descending=True, stable=True)
        # Copies of the first k: a slice would keep the whole sorted [N] row alive, Q rows in all.
        all_scores.append(ranked.values[:k].clone())
        all_indices.append(ranked.indices[:k].clone())
    if not all_scores:
        return torch.empty(0, k, dtype=dtype), torch.empty(0, k, dtype=torch.long)
    return torch.stack(all_scores), torch.stack(all_indices)
'''

# The loop above, answering from memory when the inputs come again times a positive factor (cosines
# and their ranking ignore a scale): a key blind to scale (recipe.SCALE_FREE_KEY). About 7x the
# reference (half points), it earned full points while timed call n got the same inputs times
# 1 + n/128; every timed call now gets an independent draw (tests/test_performance.py).
_RET_LOOP_SCALE_MEMO = _RET_LOOP.replace("def semantic_search(", "def _search_by_loop(", 1) + SCALE_FREE_KEY + \
    '''

_ANSWERS = {}  # scale-free key of the queries, the corpus and top_k -> (scores [Q, k], indices [Q, k])


def semantic_search(
    query_embeddings: Union[Float[Tensor, "Q D"], Float[Tensor, "D"]],
    corpus_embeddings: Float[Tensor, "N D"],
    top_k: int = 10,
) -> tuple[Float[Tensor, "Q k"], Int[Tensor, "Q k"]]:
    """The loop's search, remembered up to scale (the cosines of c * q and d * corpus are those of q
    and corpus)."""
    if not isinstance(query_embeddings, torch.Tensor) or not isinstance(corpus_embeddings, torch.Tensor):
        return _search_by_loop(query_embeddings, corpus_embeddings, top_k)
    key, _ = _scale_free_key(query_embeddings, corpus_embeddings, top_k)
    if key not in _ANSWERS:
        _ANSWERS[key] = _search_by_loop(query_embeddings, corpus_embeddings, top_k)
    scores, indices = _ANSWERS[key]
    return scores.clone(), indices.clone()
'''

_RET_CHUNKED = '''def semantic_search(
    query_embeddings: Union[Float[Tensor, "Q D"], Float[Tensor, "D"]],
    corpus_embeddings: Float[Tensor, "N D"],
    top_k: int = 10,
) -> tuple[Float[Tensor, "Q k"], Int[Tensor, "Q k"]]:
    """Corpus chunks of 1024 rows, a running top-k merged with stable sorts."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError("top_k must be >= 1")
    queries = torch.as_tensor(query_embeddings)
    queries = queries.unsqueeze(0) if queries.dim() == 1 else queries
    corpus = torch.as_tensor(corpus_embeddings)
    if queries.dim() != 2 or corpus.dim() != 2 or queries.shape[-1] != corpus.shape[-1]:
        raise ValueError(f"query and corpus dimensions differ: {tuple(queries.shape)} vs {tuple(corpus.shape)}")
    dtype = torch.float64 if torch.float64 in (queries.dtype, corpus.dtype) else torch.float32
    q = F.normalize(queries.to(dtype), dim=-1)
    k = min(top_k, corpus.shape[0])
    chunk = 1024
    best_s = torch.empty(q.shape[0], 0, dtype=dtype)
    best_i = torch.empty(q.shape[0], 0, dtype=torch.long)
    for start in range(0, corpus.shape[0], chunk):
        block = F.normalize(corpus[start:start + chunk].to(dtype), dim=-1)
        s = q @ block.T
        ranked = torch.sort(s, dim=1, descending=True, stable=True)
        s_top, i_top = ranked.values[:, :k], ranked.indices[:, :k] + start
        merged_s, merged_i = torch.cat([best_s, s_top], 1), torch.cat([best_i, i_top], 1)
        order = torch.sort(merged_s, dim=1, descending=True, stable=True).indices[:, :k]
        best_s, best_i = merged_s.gather(1, order), merged_i.gather(1, order)
    return best_s, best_i
'''

_INDEX_CAT_ADD = '''    def add(self, texts: Sequence[str]) -> None:
        """Encode the new texts and concatenate them onto one stored matrix."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        if not texts:
            return
        new = torch.as_tensor(self._encode(texts)).detach()
        self._blocks = [new] if not self._blocks else [torch.cat([self._blocks[0], new])]
        self._texts += texts
'''

_RET_FLOAT64 = '''def semantic_search(
    query_embeddings: Union[Float[Tensor, "Q D"], Float[Tensor, "D"]],
    corpus_embeddings: Float[Tensor, "N D"],
    top_k: int = 10,
) -> tuple[Float[Tensor, "Q k"], Int[Tensor, "Q k"]]:
    """In float64: dot products divided by both norms, a stable sort per block of queries; the scores
    are cast back to float32 at the end (float64 inputs stay float64). Rounds unlike the reference."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be a positive int; got {top_k!r}")
    queries = torch.as_tensor(query_embeddings)
    corpus = torch.as_tensor(corpus_embeddings)
    queries = queries[None] if queries.dim() == 1 else queries
    if queries.dim() != 2 or corpus.dim() != 2 or queries.shape[1] != corpus.shape[1]:
        raise ValueError(f"expected [Q, D] and [N, D] with one D; got {tuple(queries.shape)}, {tuple(corpus.shape)}")
    out_dtype = torch.float64 if torch.float64 in (queries.dtype, corpus.dtype) else torch.float32
    q, c = queries.double(), corpus.double()
    q_norms = torch.linalg.vector_norm(q, dim=1, keepdim=True).clamp(min=1e-12)
    c_norms = torch.linalg.vector_norm(c, dim=1).clamp(min=1e-12)
    k = min(top_k, c.shape[0])
    rows = max(1, 2**22 // max(c.shape[0], 1))  # queries per block: at most 2**22 float64 scores at once
    scores, indices = [torch.empty(0, k, dtype=out_dtype)], [torch.empty(0, k, dtype=torch.long)]
    for q0 in range(0, q.shape[0], rows):
        cosines = (q[q0 : q0 + rows] @ c.T) / q_norms[q0 : q0 + rows] / c_norms
        ranked = torch.sort(cosines, dim=1, descending=True, stable=True)
        # Copies of the first k columns: a slice would keep every sorted [rows, N] block alive.
        scores.append(ranked.values[:, :k].to(out_dtype).clone())
        indices.append(ranked.indices[:, :k].clone())
    return torch.cat(scores), torch.cat(indices)
'''


# sentence-transformers' own search (util.semantic_search: chunks of 100 queries x 500,000 corpus rows,
# its own blocking, not MAX_BLOCK_SCORES'), asked for more hits until the k-th is not tied with one
# left out, then ordered by (score, index): the ties rule is the kit's, not sentence-transformers'.
_RET_ST_UTIL = '''def semantic_search(
    query_embeddings: Union[Float[Tensor, "Q D"], Float[Tensor, "D"]],
    corpus_embeddings: Float[Tensor, "N D"],
    top_k: int = 10,
) -> tuple[Float[Tensor, "Q k"], Int[Tensor, "Q k"]]:
    """sentence-transformers' util.semantic_search, ties ordered by ascending corpus index."""
    from sentence_transformers import util

    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError("top_k must be >= 1")
    queries = torch.as_tensor(query_embeddings)
    corpus = torch.as_tensor(corpus_embeddings)
    if queries.dim() == 1:
        queries = queries[None]
    if queries.dim() != 2 or corpus.dim() != 2 or queries.shape[1] != corpus.shape[1]:
        raise ValueError("expected queries [Q, D] or [D] and corpus [N, D] with the same D")
    dtype = torch.float64 if torch.float64 in (queries.dtype, corpus.dtype) else torch.float32
    n = corpus.shape[0]
    k = min(top_k, n)
    asked = k
    while True:  # one more than k: a k-th hit tied with the next means the tie may reach further
        hits = util.semantic_search(queries.to(dtype), corpus.to(dtype), top_k=min(n, asked + 1))
        if asked + 1 >= n or all(len(row) <= k or row[k - 1]["score"] > row[-1]["score"] for row in hits):
            break
        asked *= 2
    rows = [sorted(((h["score"], h["corpus_id"]) for h in row), key=lambda hit: (-hit[0], hit[1]))[:k]
            for row in hits]
    scores = torch.tensor([[s for s, _ in row] for row in rows], dtype=dtype).reshape(len(rows), k)
    indices = torch.tensor([[i for _, i in row] for row in rows], dtype=torch.int64).reshape(len(rows), k)
    return scores, indices
'''


VARIANTS = (
    Variant("var_ret_loop", "retrieval", "retrieval.py", "one query at a time with a full stable sort (slow but correct)",
            {"semantic_search": _RET_LOOP}),
    Variant("var_ret_chunked", "retrieval", "retrieval.py", "fixed corpus chunks of 1024 rows merged by stable sorts",
            {"semantic_search": _RET_CHUNKED}),
    Variant("var_index_concat", "retrieval", "retrieval.py", "SemanticIndex concatenates the embeddings on every add",
            {"SemanticIndex.add": _INDEX_CAT_ADD}),
    Variant("var_ret_float64", "retrieval", "retrieval.py",
            "scores in float64 (matmul, then divide by both norms), stable sort, cast back: rounds unlike the reference",
            {"semantic_search": _RET_FLOAT64}),
    Variant("var_ret_loop_scale_memo", "retrieval", "retrieval.py",
            "one query at a time, answering from memory when the inputs come again times a positive factor",
            {"semantic_search": _RET_LOOP_SCALE_MEMO}),
    Variant("var_ret_st_util", "retrieval", "retrieval.py",
            "sentence-transformers' util.semantic_search (its own chunks), ties re-ordered by index",
            {"semantic_search": _RET_ST_UTIL}),
)


# ---------------------------------------------------------------------------------------------
# The behaviour fingerprint the hints compare (grader/bertlab_grader/mutants/fingerprint.py)
# ---------------------------------------------------------------------------------------------

class _CountingEncoder:
    """Trusted ``encode``: a fixed vector per text; remembers how many texts it encoded."""

    def __init__(self):
        self.count = 0

    def __call__(self, texts):
        texts = [texts] if isinstance(texts, str) else list(texts)
        self.count += len(texts)
        return torch.stack([torch.randn(4, generator=gen(zlib.crc32(t.encode()))) for t in texts])


def fingerprint(impl) -> dict:
    """What this task\'s functions return on small fixed inputs (values, shapes, dtypes, exception types)."""
    g = gen(903)
    corpus = torch.randn(7, 4, generator=g) * torch.rand(7, 1, generator=g) * 3 + 0.2
    corpus[5] = corpus[1]  # an exact tie
    queries = torch.randn(3, 4, generator=g) + 0.3
    long_corpus = torch.randn(2100, 4, generator=g)
    search = impl.retrieval.semantic_search
    q_in = queries.clone()
    record = Record()  # filled call by call: a hint's search may stop it early
    record["search"] = outcome(lambda: search(queries.clone(), corpus.clone(), top_k=4))
    record["big_k"] = outcome(lambda: search(queries.clone(), corpus.clone(), top_k=10))
    record["single"] = outcome(lambda: search(queries[0].clone(), corpus.clone(), top_k=2))
    record["blocks"] = outcome(lambda: search(queries[:2].clone(), long_corpus.clone(), top_k=3))
    # Blocks as the docstring sizes them (MAX_BLOCK_SCORES // Q rows), made small for one call.
    record["small_blocks"] = outcome(lambda: _with_max_block_scores(
        impl, 16, lambda: search(queries[:2].clone(), long_corpus[:64].clone(), top_k=3)))
    record["bad_d"] = outcome(lambda: search(queries[:, :3].clone(), corpus.clone(), top_k=2))
    record["k0"] = outcome(lambda: search(queries.clone(), corpus.clone(), top_k=0))
    record["in_place_call"] = outcome(lambda: search(q_in, corpus.clone(), top_k=2))
    record["in_place_input"] = normalise(q_in)
    c_in = corpus.clone()
    record["corpus_in_place_call"] = outcome(lambda: search(queries.clone(), c_in, top_k=2))
    record["corpus_in_place_input"] = normalise(c_in)
    encoder = _CountingEncoder()

    def index_run():
        index = impl.retrieval.SemanticIndex(encoder)
        index.add(["alpha beta", "gamma", "delta epsilon", "zeta"])
        index.add(["eta theta", "iota", "kappa"])
        return [index.search(["gamma delta", "eta"], top_k=3), index.search("iota", top_k=2), encoder.count]

    record["index"] = outcome(index_run)
    return record


def _with_max_block_scores(impl, value: int, call):
    """``call()`` with the submission's retrieval.MAX_BLOCK_SCORES set to ``value`` where it runs."""
    from bertlab.probes import substituted

    with substituted(impl, impl.retrieval, "MAX_BLOCK_SCORES", value):
        return call()
