"""Hidden suite, task retrieval: semantic_search and SemanticIndex.

semantic_search is compared with the reference (a brute-force check at sizes where one exists) on
seeded inputs that cross common block sizes (1000, 1024, 4096, 10000 rows; and, on a corpus of
1,050,000 rows, the first boundary of every power of two from 2**12 to 2**20 and of 100,000, 500,000
and 1,000,000, with true hits and exact ties on both sides). Ties are built from
vectors whose cosines are exact in floating point (entries 0 and +-1, four non-zeros: every cosine is
a multiple of 1/4), so every correct implementation sees the same ties, however it sums; there the
indices must equal the reference's exactly. On Gaussian data two hits whose true cosines differ only
by round-off may come back in either order (normalise-then-matmul, matmul-then-divide, float32 or
float64, blocks or one product, topk or sort all round differently): an index is right there when its
true (float64) cosine is the expected score at its rank, to the tolerance the scores are checked with.

Every point needs a right answer: the tests of form (bad input rejected, inputs left alone, one query
string, len) also compare a search on valid input with the reference.

SemanticIndex gets ``encode``, a callable that lives in this (trusted) process: through the sandbox,
the worker calls back into it, so the count of encoded texts is measured where the submission cannot
touch it.
"""

from __future__ import annotations

import contextlib
import functools
import zlib

import pytest
import torch
import torch.nn.functional as F

from bertlab.assertions import call_on_valid_input as shared_call_on_valid_input
from bertlab.assertions import (check_close, check_tensor, describe_change, did_not_finish, expect_value_error,
                                fail, generator,
                                index_problem, name_mistake, short, true_cosines)
from bertlab.mistakes import hint as mistake_hint
from bertlab.probes import substituted
from bertlab.teaching.retrieval import input_fingerprint, seeded_rows

pytestmark = pytest.mark.retrieval



# ---------------------------------------------------------------------------------------------
# semantic_search
# ---------------------------------------------------------------------------------------------

def gaussian(seed: int, n: int, D: int) -> torch.Tensor:
    """Seeded vectors with unequal norms and a shared offset (cosine differs from the dot product)."""
    g = generator(seed)
    return (torch.randn(n, D, generator=g) + 0.5) * (0.2 + 3 * torch.rand(n, 1, generator=g))


def signed_patterns(seed: int, n: int, D: int = 16, nonzero: int = 4) -> torch.Tensor:
    """n vectors with exactly ``nonzero`` entries in {-1, +1}: all norms are 2, all cosines exact."""
    return _signed_patterns(seed, n, D, nonzero).clone()


@functools.lru_cache(maxsize=None)
def _signed_patterns(seed: int, n: int, D: int, nonzero: int) -> torch.Tensor:
    g = generator(seed)
    out = torch.zeros(n, D)
    for i in range(n):
        where = torch.randperm(D, generator=g)[:nonzero]
        out[i, where] = torch.randint(0, 2, (nonzero,), generator=g).float() * 2 - 1
    return out


def diagnose_search(scores: torch.Tensor, indices: torch.Tensor, queries, corpus, top_k) -> str:
    """Name the classic mistakes (bertlab/mistakes.py) whose formula the result matches: order,
    normalisation, ties; '' when it matches none of them."""
    q = queries if queries.dim() == 2 else queries[None]
    k = min(top_k, corpus.shape[0])
    cosine = true_cosines(q, corpus)
    ascending = torch.sort(cosine, dim=1, stable=True).values[:, :k]
    corpus_raw = F.normalize(q.double(), dim=1) @ corpus.double().T
    query_raw = q.double() @ F.normalize(corpus.double(), dim=1).T
    by_score = name_mistake(scores, {
        "ret_ascending": ascending,
        "ret_corpus_not_normalised": torch.sort(corpus_raw, dim=1, descending=True).values[:, :k],
        "ret_query_not_normalised": torch.sort(query_raw, dim=1, descending=True).values[:, :k],
    }, tol=1e-4)
    if by_score:
        return by_score
    # Ties by descending index: only where the data have ties that change the answer (without ties the
    # formula is the right answer, and a result failing for another reason must not be told about ties).
    flipped = torch.sort(cosine.flip(1), dim=1, descending=True, stable=True).indices[:, :k]
    ties_descending = corpus.shape[0] - 1 - flipped
    ties_ascending = torch.sort(cosine, dim=1, descending=True, stable=True).indices[:, :k]
    if indices.shape == ties_descending.shape and not torch.equal(ties_descending, ties_ascending) and \
            torch.equal(indices.long(), ties_descending):
        return mistake_hint("ret_ties_descending")
    return ""


def call_on_valid_input(call, what: str):
    """``call()``; a ValueError here fails with a message that says the input was valid."""
    return shared_call_on_valid_input(call, what, "this input is valid", "Raise only for the bad inputs the "
                                      "docstring lists (different D, inputs that are not 1-D/2-D, top_k < 1).")


def check_search(impl, reference, queries, corpus, top_k, what: str, *, atol: float = 1e-5,
                 exact_ties: bool = False):
    """semantic_search on copies of the inputs, checked against the reference (see check_search_result)."""
    result = call_on_valid_input(lambda: impl.retrieval.semantic_search(queries.clone(), corpus.clone(), top_k=top_k),
                                 what)
    return check_search_result(result, reference, queries, corpus, top_k, what, atol=atol, exact_ties=exact_ties)


def check_search_result(result, reference, queries, corpus, top_k, what: str, *, atol: float = 1e-5,
                        exact_ties: bool = False):
    """A pair of [Q, k] tensors (scores within atol + atol*|expected| of the reference's, int64 indices
    right as index_problem defines it), best first; returns (scores, indices)."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        fail(f"{what} should return a pair (scores, indices); got {short(result)}.")
    expected_scores, expected_indices = reference.retrieval.semantic_search(queries.clone(), corpus.clone(),
                                                                            top_k=top_k)
    Q, k = expected_scores.shape
    shape_hint = (f"Expected [Q, k] = [{Q}, {k}] with k = min(top_k, N) = min({top_k}, {corpus.shape[0]}); "
                  "a single 1-D query still gives Q = 1.")
    scores = check_tensor(result[0], (Q, k), f"{what}: scores", shape_hint=shape_hint)
    indices = check_tensor(result[1], (Q, k), f"{what}: indices", shape_hint=shape_hint)
    if indices.dtype != torch.int64:
        fail(f"{what}: indices have dtype {indices.dtype}; expected torch.int64 (what torch.topk returns).")

    def diagnosis(_scores=None) -> str:  # worked out only for a failing result: it costs several sorts
        return diagnose_search(scores, indices, queries, corpus, top_k)

    # 1e-6: a correct search may report scores it computed apart from its ranking (round-off).
    if k > 1 and (scores[:, 1:] > scores[:, :-1] + 1e-6).any():
        fail(f"{what}: the scores of a row are not in descending order (best hit first). {diagnosis()}".strip())
    check_close(scores, expected_scores, f"{what}: scores", atol=atol, rtol=atol, diagnose=diagnosis)
    problem = index_problem(indices, expected_indices, true_cosines(queries, corpus), atol=atol, rtol=atol,
                            exact_ties=exact_ties)
    if problem:
        fail(f"{what}: {problem} {diagnosis() or index_advice(indices, expected_indices, queries, corpus)}")
    return scores, indices


def index_advice(indices: torch.Tensor, expected_indices: torch.Tensor, queries, corpus) -> str:
    """What to recheck for indices [Q, k] that are not a right answer, by what the wrong index shows:
    a row with the same true cosine as the expected one is a tie broken the wrong way; a row with
    another cosine is not the row of its score. Only the case the indices show is advised."""
    differ = (indices.long() != expected_indices).nonzero()
    if len(differ) == 0:
        return ""
    row, col = [int(i) for i in differ[0]]
    got = int(indices[row, col])
    if not 0 <= got < corpus.shape[0]:
        return "Indices are positions in the whole corpus, from 0 to N - 1."
    cosines = true_cosines(queries, corpus)[row]
    if abs(float(cosines[got]) - float(cosines[int(expected_indices[row, col])])) <= 1e-12:
        return ("This row has the same cosine as the expected one: equal scores go to the smaller corpus index, "
                "also at the k-th place (torch.topk promises no order among ties; sort stably).")
    return ("Each index must be the corpus row whose cosine is the score beside it; when you search in blocks, "
            "count indices from the start of the corpus.")


@pytest.mark.points(5)
def test_search_matches_brute_force_across_block_sizes(impl, reference):
    cases = [(7, 1000), (7, 1025), (5, 4097), (3, 10007), (300, 1500)]
    for seed, (Q, N) in enumerate(cases):
        corpus, queries = gaussian(200 + seed, N, 16), gaussian(300 + seed, Q, 16)
        if N == 1025:
            # Near-ties on purpose, at both sides of 1024: two scaled copies of query 0 (cosine 1, but
            # computed through different numbers) and a copy turned by 1.4e-4 rad (cosine 1 - 1e-8, below
            # float32 resolution). How a correct search rounds decides their order, so any order must pass.
            q = queries[0]
            across = F.normalize(corpus[0] - (corpus[0] @ q) / (q @ q) * q, dim=0)  # a unit vector orthogonal to q
            for position, row in ((1022, 0.7 * q), (1023, q + 1.4e-4 * q.norm() * across), (1024, 3.1 * q)):
                corpus[position] = row
        check_search(impl, reference, queries, corpus, 10, f"semantic_search(Q={Q}, N={N}, D=16, top_k=10)")
    # The block path of a search that blocks as the docstring asks, by MAX_BLOCK_SCORES // Q corpus rows:
    # with the submission's MAX_BLOCK_SCORES made small for this one call, so that the path runs on a
    # corpus any correct search answers in about a second, a Python loop over rows included (a corpus
    # past the real MAX_BLOCK_SCORES // Q would be Q * N > 16.7 million scores: a minute for such a loop).
    queries, corpus = block_path_case()
    with substituted(impl, impl.retrieval, "MAX_BLOCK_SCORES", BLOCK_PATH_MAX_BLOCK_SCORES):
        check_search(impl, reference, queries, corpus, 10,
                     f"semantic_search(Q={len(queries)}, N={len(corpus)}, D=16, top_k=10) with MAX_BLOCK_SCORES = "
                     f"{BLOCK_PATH_MAX_BLOCK_SCORES} in your module, so a search that keeps its promise walks the "
                     f"corpus in blocks of {BLOCK_PATH_MAX_BLOCK_SCORES // len(queries)} rows or so")
    # A search that walks blocks of a fixed size of its own (65,536 rows, sentence-transformers'
    # 500,000, ...) whatever MAX_BLOCK_SCORES says: a corpus past every common block size, with each
    # query's true hits planted on both sides of the first boundary of each blocking.
    hit_queries, corpus = boundary_case()
    with longer_call_limit(impl, BOUNDARY_CALL_LIMIT_S):
        check_search(impl, reference, hit_queries[:-1], corpus, BOUNDARY_TOP_K,
                     f"semantic_search(Q={len(hit_queries) - 1}, N={len(corpus):,}, D={BOUNDARY_D}, "
                     f"top_k={BOUNDARY_TOP_K}), true hits on both sides of row {', '.join(map(str, BOUNDARY_ROWS[:4]))}, "
                     "... (the first boundary of every common block size)")


#: The submission's MAX_BLOCK_SCORES for the block-path case: blocks of 128 rows for its 32 queries.
BLOCK_PATH_MAX_BLOCK_SCORES = 4096


def block_path_case(Q: int = 32, N: int = 10_007, D: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """(queries [Q, D], corpus [N, D]). Query q's two best hits are near copies of it (cosines 1 - 1e-4
    and 1 - 2e-4, apart by far more than round-off), one just after a boundary of a common blocking
    (every 1000, 1024, 4096 or 10000 rows, BLOCK_PATH_MAX_BLOCK_SCORES // Q = 128 rows, the reference's
    balanced 3,336, halves) and one among the last Q rows, which no first block holds: a block-local
    index is wrong there whatever the blocking."""
    corpus, queries = gaussian(260, N, D), gaussian(261, Q, D)
    docstring_rows = BLOCK_PATH_MAX_BLOCK_SCORES // Q
    boundaries = sorted({b for step in (docstring_rows, 1000, 1024, 3336, 4096, 10000) for b in range(step, N, step)}
                        | {(N + 1) // 2})
    g = generator(262)
    taken: set[int] = set()
    for q in range(Q):
        unit = F.normalize(queries[q], dim=0)
        across = torch.randn(D, generator=g)
        across = F.normalize(across - (across @ unit) * unit, dim=0)  # a unit vector orthogonal to the query
        # Spread over the boundaries: query q takes every Q-th one, starting at its own.
        after_boundary = boundaries[(q * len(boundaries)) // Q]
        for position, cosine in ((after_boundary, 1 - 1e-4), (N - 1 - q, 1 - 2e-4)):
            if position in taken:  # a boundary among the last rows: the query keeps its other hit
                continue
            taken.add(position)
            angle = torch.tensor(cosine, dtype=torch.float64).acos()
            corpus[position] = ((2 + q % 5) * (angle.cos() * unit + angle.sin() * across)).float()
    return queries, corpus


#: Every common fixed block size (rows): powers of two from 2**12 to 2**20, and 100,000, 500,000 and
#: 1,000,000. The boundary corpus crosses the first boundary of each.
COMMON_BLOCK_ROWS = tuple(2**p for p in range(12, 21)) + (100_000, 500_000, 1_000_000)
BOUNDARY_ROWS = tuple(sorted(COMMON_BLOCK_ROWS))
BOUNDARY_N, BOUNDARY_D, BOUNDARY_TOP_K = 1_050_000, 8, 6
#: The time limit of a search over the boundary corpus (the usual limit of a call is 20 s): a Python
#: loop over every corpus row and query (the outside bank's correct_gram) takes about 7 s for 4 queries.
BOUNDARY_CALL_LIMIT_S = 60.0


@functools.lru_cache(maxsize=1)
def _boundary_case() -> tuple[torch.Tensor, torch.Tensor]:
    g = generator(280)
    D = BOUNDARY_D
    corpus = torch.zeros(BOUNDARY_N, D)
    corpus[:, : D - 1] = torch.randn(BOUNDARY_N, D - 1, generator=g)  # the last dimension stays 0
    hit_queries = 4
    queries = torch.zeros(hit_queries + 1, D)
    queries[:hit_queries, : D - 1] = torch.randn(hit_queries, D - 1, generator=g)
    queries[hit_queries, D - 1] = 1.0  # orthogonal to every corpus row: all its cosines are exactly 0
    for j, boundary in enumerate(BOUNDARY_ROWS):
        q, slot = j % hit_queries, j // hit_queries
        unit = F.normalize(queries[q, : D - 1], dim=0)
        across = torch.randn(D - 1, generator=g)
        across = F.normalize(across - (across @ unit) * unit, dim=0)
        # The last row of the first block and the first of the second, cosines 1e-4 apart (far more
        # than round-off), and no two hits of a query alike.
        for side, position in enumerate((boundary - 1, boundary)):
            angle = torch.tensor(1 - 1e-4 * (1 + 2 * slot + side), dtype=torch.float64).acos()
            corpus[position, : D - 1] = ((1 + slot) * (angle.cos() * unit + angle.sin() * across)).float()
    return queries, corpus


def boundary_case() -> tuple[torch.Tensor, torch.Tensor]:
    """(queries [5, 8], corpus [1,050,000, 8]), seeded. Queries 0 to 3: each has 6 true hits, near copies
    of it (cosines 1 - 1e-4 to 1 - 6e-4), on both sides of the first boundary of three of the common
    block sizes (rows b - 1 and b for b in BOUNDARY_ROWS): a search that forgets to add a block's start
    to its indices, whatever its fixed block size, returns a wrong row. Query 4 is orthogonal to every
    corpus row (the corpus's last dimension is 0): all its cosines are exactly 0 in any implementation,
    so its answer is rows 0 to k - 1, and a search that lets a later block win a tie is caught."""
    queries, corpus = _boundary_case()
    return queries.clone(), corpus.clone()


@contextlib.contextmanager
def longer_call_limit(impl, seconds: float):
    """Through the sandbox, each call in the block may take ``seconds`` (a large input by design); in
    process there is no limit to change."""
    limit = getattr(impl, "call_limit", None)
    with (limit(seconds) if callable(limit) else contextlib.nullcontext()):
        yield


def all_ties_case(N: int = 10_007, D: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """(query [1, D], corpus [N, D]): Gaussian rows whose last entry is 0, and a query orthogonal to them
    all, so every cosine is exactly 0 and the answer is rows 0 to k - 1 in order."""
    corpus = gaussian(290, N, D)
    corpus[:, -1] = 0.0
    query = torch.zeros(1, D)
    query[0, -1] = 2.0
    return query, corpus


@pytest.mark.points(3)
def test_search_ties_by_ascending_index(impl, reference):
    corpus = signed_patterns(210, 2500)
    queries = signed_patterns(211, 6)
    # Exact copies of the first query at positions around common block boundaries.
    for position in (3, 999, 1000, 1023, 1024, 2047, 2048, 2499):
        corpus[position] = queries[0]
    check_search(impl, reference, queries, corpus, 40,
                 "semantic_search with many tied scores (N=2500, top_k=40)", atol=1e-6, exact_ties=True)
    # Ties across block boundaries: a query whose cosine with every corpus row is exactly 0, so the answer
    # is rows 0 to k - 1. A search that merges a new block before its running top-k (so that the later
    # block wins a tie) is caught whatever it blocks by: MAX_BLOCK_SCORES // Q rows (made small here, so
    # that blocks of a few thousand rows cross this corpus), or a fixed size up to a million rows.
    query, corpus = all_ties_case()
    with substituted(impl, impl.retrieval, "MAX_BLOCK_SCORES", BLOCK_PATH_MAX_BLOCK_SCORES):
        check_all_ties(impl, reference, query, corpus, 10,
                       f"semantic_search(Q=1, N={len(corpus):,}, top_k=10) with every cosine exactly 0 and "
                       f"MAX_BLOCK_SCORES = {BLOCK_PATH_MAX_BLOCK_SCORES} in your module")
    queries, corpus = boundary_case()
    with longer_call_limit(impl, BOUNDARY_CALL_LIMIT_S):
        check_all_ties(impl, reference, queries[-1:], corpus, BOUNDARY_TOP_K,
                       f"semantic_search(Q=1, N={len(corpus):,}, top_k={BOUNDARY_TOP_K}) with every cosine exactly 0")


def check_all_ties(impl, reference, query, corpus, top_k: int, what: str) -> None:
    """A search whose every cosine is exactly 0: the answer is rows 0 to k - 1, in order. Where the rows
    returned are k consecutive ones further on, a later block won the tie (checked, then named)."""
    result = call_on_valid_input(lambda: impl.retrieval.semantic_search(query.clone(), corpus.clone(), top_k=top_k),
                                 what)
    try:
        rows = [int(i) for i in result[1].reshape(-1).tolist()]
    except Exception:  # noqa: BLE001 - not a pair of tensors: check_search_result says what it is
        rows = None
    if rows is not None and len(rows) == top_k and rows[0] > 0 and rows == list(range(rows[0], rows[0] + top_k)):
        fail(f"{what}: every score ties, so the hits are corpus rows 0 to {top_k - 1}; you returned rows "
             f"{rows[0]} to {rows[-1]}, the start of a later block. " + mistake_hint("ret_merge_block_first"))
    check_search_result(result, reference, query, corpus, top_k, what, atol=1e-6, exact_ties=True)


@pytest.mark.points(2)
def test_search_top_k_larger_than_corpus(impl, reference):
    queries = gaussian(220, 4, 8)
    for N, top_k in ((5, 10), (1, 3), (6, 6)):
        check_search(impl, reference, queries, gaussian(221 + N, N, 8), top_k,
                     f"semantic_search(Q=4, N={N}, top_k={top_k})")


@pytest.mark.points(2)
def test_search_single_query_vector(impl, reference):
    corpus = gaussian(230, 50, 12)
    query = gaussian(231, 1, 12)[0]  # shape [12]
    check_search(impl, reference, query, corpus, 5, "semantic_search(query of shape [12], corpus [50, 12], top_k=5)")


@pytest.mark.points(2)
def test_search_rejects_bad_input(impl, reference):
    corpus, queries = gaussian(240, 20, 8), gaussian(241, 3, 8)
    # The points are for rejecting bad input while answering good input: raising for everything earns nothing.
    check_search(impl, reference, queries, corpus, 5, "semantic_search(queries [3, 8], corpus [20, 8], top_k=5)")
    expect_value_error(lambda: impl.retrieval.semantic_search(gaussian(242, 3, 6), corpus.clone(), top_k=5),
                       "semantic_search(queries [3, 6], corpus [20, 8])",
                       "the embedding sizes D differ (6 vs 8)")
    for top_k in (0, -2):
        expect_value_error(lambda: impl.retrieval.semantic_search(queries.clone(), corpus.clone(), top_k=top_k),
                           f"semantic_search(..., top_k={top_k})", "top_k must be at least 1")
    # Shapes the docstring rules out: a query that is not 1-D or 2-D, a corpus that is not 2-D.
    for bad_queries, bad_corpus, why in ((queries[None], corpus, "a 3-D query [1, 3, 8]"),
                                         (queries, corpus[None], "a 3-D corpus [1, 20, 8]"),
                                         (queries, corpus[0], "a 1-D corpus [8] (one vector is [1, 8])")):
        expect_value_error(lambda: impl.retrieval.semantic_search(bad_queries.clone(), bad_corpus.clone(), top_k=2),
                           f"semantic_search with {why}", f"{why} is not a valid input")


@pytest.mark.points(1)
def test_search_zero_vectors_score_zero(impl, reference):
    # A zero vector (an empty document's embedding, say) has cosine 0 with everything: normalising with
    # a clamp on the norm gives it, dividing by a zero norm gives nan.
    corpus, queries = gaussian(245, 40, 8), gaussian(246, 3, 8)
    corpus[[3, 17]] = 0.0
    queries[1] = 0.0
    check_search(impl, reference, queries, corpus, 40, "semantic_search with zero vectors (query 1, corpus rows 3 "
                 "and 17), top_k = N = 40")


@pytest.mark.points(1)
def test_search_leaves_inputs_unchanged(impl, reference):
    # float64 queries and corpus too: `.to(torch.float64)` or `.double()` returns the tensor itself
    # when it already has that dtype, so an in-place normalisation after it reaches the caller's
    # embeddings (a float32 input gets a copy and hides the mistake).
    for dtype in (torch.float32, torch.float64):
        corpus, queries = gaussian(250, 30, 8).to(dtype), gaussian(251, 4, 8).to(dtype)
        corpus_before, queries_before = corpus.clone(), queries.clone()
        what = "semantic_search(queries [4, 8], corpus [30, 8], top_k=3)" + ("" if dtype == torch.float32 else
                                                                             f" with {dtype} inputs")
        result = call_on_valid_input(lambda: impl.retrieval.semantic_search(queries, corpus, top_k=3), what)
        changed = [describe_change(name, before, now)
                   for name, now, before in (("queries", queries, queries_before), ("corpus", corpus, corpus_before))]
        changed = [c for c in changed if c]
        if changed:
            fail(f"{what} changed its inputs in place: {' '.join(changed)} A `.to(...)` or `.double()` returns the "
                 "input itself when it has that dtype already, so an in-place step after it still reaches the "
                 "caller's embeddings. Normalise copies (F.normalize returns a new tensor).")
        # The point is for a right answer that also leaves the inputs alone: doing nothing earns nothing.
        check_search_result(result, reference, queries_before, corpus_before, 3, what)


# The memory promise: "at most about MAX_BLOCK_SCORES scores are held at once, whatever N is". What a
# search holds beyond its inputs is measured where it runs (bertlab/peak_memory.py), in float32
# (4 bytes a score), at two corpus sizes, and judged by how it GROWS from one to the other: fixed costs
# (a block of scores, buffers, imports) cancel out, copies of the inputs and one query's row at a time
# stay well under the bar, and a [Q, N] matrix, Q * 4 = 128 bytes a corpus row, does not. Both sizes
# hold two full blocks or more of every common blocking: the docstring's MAX_BLOCK_SCORES // Q =
# 524,288 rows (the sizes are two and four of those) and sentence-transformers' util.semantic_search's
# 500,000 (code that keeps the previous block alive while it scores the next holds two blocks at its
# peak). The sizes are a million rows apart, so a block of scores more or less at one size (64 MiB)
# moves the growth by 64 bytes a row at most; a growth over the bar is measured a second time before
# it costs anything (see the test).
MEMORY_QUERIES, MEMORY_D = 32, 4
MEMORY_SIZES = (1_048_576, 2_097_152)
MEMORY_SMALL_N = 52_400
#: The time limit of each measured call (the usual limit of a call is 20 s). Every search whose
#: answers are right is measured, however long it takes: no point depends on speed. Measured on this
#: kit's machine, one thread, at N = 2,097,152: the reference 0.9 s, sentence-transformers' search
#: 0.3 s, the slowest vectorised correct code of the banks 8 s (one query's float64 row at a time with
#: a full stable sort), the whole matrix with a stable argsort 10 s; beside a CPU burner on every core
#: about twice that, so the limit leaves correct code a margin of 1.9 even there. A Python loop over
#: every corpus row and query (about 40 s for 32 queries over a million rows) runs past it and loses
#: the points; it could not keep them anyway: its (score, index) tuples hold about 240 bytes a corpus
#: row, more than the [Q, N] float32 matrix the promise forbids (128), measured in process at 131,072
#: and 262,144 rows (docs/hidden-checks.md, "The memory test in figures").
MEMORY_CALL_LIMIT_S = 30.0
#: The growth may be at most this fraction of a full [Q, N] score matrix's. What correct code was
#: measured to add is in docs/hidden-checks.md ("The memory test in figures"): at most about a third of
#: a [Q, N] matrix (one query's sorted row at a time); the matrix itself adds more than all of it.
MEMORY_GROWTH_FRACTION = 0.75
SCORE_BYTES = 4  # float32


def mib(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:,.0f} MiB"


def memory_recipes(N: int, rows: int | None = None) -> tuple[dict, dict]:
    """The recipes (``seeded_rows``) of memory_inputs(N), the corpus cut to its first ``rows`` rows: what
    the probe is sent, so that the submission's process builds the tens of MiB of corpus itself."""
    return ({"shape": [MEMORY_QUERIES, MEMORY_D], "seed": 270},
            {"shape": [N, MEMORY_D], "seed": 271 + N // MEMORY_SMALL_N, "rows": N if rows is None else rows})


@functools.lru_cache(maxsize=None)
def memory_inputs(N: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded float32 (queries [32, 4], corpus [N, 4]), the same in every grading of this process."""
    return tuple(seeded_rows(recipe) for recipe in memory_recipes(N))


@functools.lru_cache(maxsize=None)
def memory_expected(N: int, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference's hits for memory_inputs(N) with the corpus cut to its first ``rows`` rows."""
    from bertlab.implementations import load_implementation

    queries, corpus = memory_inputs(N)
    return load_implementation("reference").retrieval.semantic_search(queries, corpus[:rows], top_k=10)


def same_inputs(built, tensors) -> bool:
    """Whether the fingerprints the probe returned (``input_fingerprint``) are those of ``tensors``, exactly."""
    return (isinstance(built, list) and len(built) == len(tensors)
            and all(got == input_fingerprint(tensor) for got, tensor in zip(built, tensors)))


def check_hits_without_full_cosines(result, expected, queries, corpus, what: str) -> None:
    """The right answer for a corpus too large for a [Q, N] float64 cosine matrix in the grader: scores
    within 1e-5 of the reference's ``expected`` (scores [Q, k], indices [Q, k]), k distinct corpus rows
    per query in range, each with the true cosine of its rank (to the same tolerance, so round-off
    may swap near-ties)."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        fail(f"{what} should return a pair (scores, indices); got {short(result)}.")
    expected_scores = expected[0]
    Q, k = expected_scores.shape
    scores = check_tensor(result[0], (Q, k), f"{what}: scores")
    indices = check_tensor(result[1], (Q, k), f"{what}: indices").long()
    check_close(scores, expected_scores, f"{what}: scores", atol=1e-5, rtol=1e-5)
    if ((indices < 0) | (indices >= len(corpus))).any() or any(len(set(row)) != k for row in indices.tolist()):
        fail(f"{what}: every row must name {k} different corpus rows between 0 and {len(corpus) - 1}. When you "
             "search in blocks, count indices from the start of the corpus.")
    cosines = (F.normalize(queries.double(), dim=1)[:, None, :]
               * F.normalize(corpus.double()[indices], dim=2)).sum(dim=2)  # [Q, k]: only the hits' cosines
    off = (cosines - expected_scores.double()).abs() > 1e-5 * (1 + expected_scores.double().abs())
    if off.any():
        row, col = [int(i) for i in off.nonzero()[0]]
        fail(f"{what}: hit [{row}, {col}] is corpus row {int(indices[row, col])}, whose cosine is "
             f"{float(cosines[row, col]):.6g}, not the expected {float(expected_scores[row, col]):.6g}. When you "
             "search in blocks, count indices from the start of the corpus.")


def described(rows: int) -> str:
    return f"semantic_search(queries [{MEMORY_QUERIES}, {MEMORY_D}], corpus [{rows:,}, {MEMORY_D}], top_k=10)"


@pytest.mark.points(2)
def test_search_memory_stays_bounded(impl, reference):
    from bertlab.probes import run_probe
    from bertlab_grader.core.failures import GraderFailure
    from bertlab_grader.sandbox.remote import SubmissionTimeout

    queries, corpus = memory_inputs(MEMORY_SMALL_N)
    # The right answer first, on a corpus any correct search answers in a second: a wrong one is told so
    # here, with the usual checks, before anything large is sent.
    result = call_on_valid_input(lambda: impl.retrieval.semantic_search(queries.clone(), corpus.clone(), top_k=10),
                                 described(MEMORY_SMALL_N))
    check_hits_without_full_cosines(result, memory_expected(MEMORY_SMALL_N, MEMORY_SMALL_N), queries, corpus,
                                    described(MEMORY_SMALL_N))
    (small, large), Q = MEMORY_SIZES, MEMORY_QUERIES
    queries, corpus = memory_inputs(large)

    def extra_at(rows: int) -> int:
        """The extra memory of one search over the corpus's first ``rows`` rows (each call has the whole
        time limit of a call), after checking its answer."""
        try:
            report = run_probe(impl, "search_memory", impl.retrieval.semantic_search, *memory_recipes(large, rows), 10,
                               limit_s=MEMORY_CALL_LIMIT_S)
        except SubmissionTimeout:
            fail(f"{described(rows)} did not return within {MEMORY_CALL_LIMIT_S:g} s, so its memory could not be "
                 "measured: the promise is judged at a million corpus rows and more. A Python loop over corpus "
                 "rows is too slow there (about 40 s a million rows for 32 queries), and a Python list of every row's "
                 "score holds more memory than the [Q, N] matrix the promise forbids: score a block of rows with "
                 "one matrix product and keep a running top-k of tensors.")
        if not report["measured"]:
            raise GraderFailure(f"the memory of a search could not be measured where it ran: {report['why']}")
        if not same_inputs(report.get("built"), [queries, corpus[:rows]]):
            raise GraderFailure(f"the submission's process built other inputs from the recipes of {described(rows)} "
                                f"than the grader's: {report.get('built')}")
        # The points are for a right answer that keeps the promise: a search that holds nothing earns nothing.
        check_hits_without_full_cosines(report["result"], memory_expected(large, rows), queries, corpus[:rows],
                                        described(rows))
        return report["extra_bytes"]

    bar = MEMORY_GROWTH_FRACTION * Q * (large - small) * SCORE_BYTES
    smalls, larges = [extra_at(small)], [extra_at(large)]
    if larges[0] - smalls[0] > bar:
        # Over the bar: measured once more, and judged on the least growth the four figures allow, so
        # that memory something else held for a moment (in a busy grading process) never costs a
        # correct search a point. A [Q, N] matrix is over the bar every time.
        smalls.append(extra_at(small))
        larges.append(extra_at(large))
    growth = min(larges) - max(smalls)
    if growth > bar:
        fail(f"semantic_search held {mib(max(smalls))} beyond its inputs with N = {small:,} corpus rows and "
             f"{mib(min(larges))} with N = {large:,} (Q = {Q} float32 queries; measured twice at each "
             f"size, the least growth the figures allow): {growth / (large - small):.0f} bytes more for every added corpus row, where a full [Q, N] "
             f"score matrix adds {Q * SCORE_BYTES}. " + mistake_hint("ret_no_blocking"))


# ---------------------------------------------------------------------------------------------
# SemanticIndex
# ---------------------------------------------------------------------------------------------

CORPUS = (
    "A gripping thriller with a twist I never saw coming.",
    "The dialogue is wooden and the plot makes no sense.",
    "Beautiful animation, but the story is thin.",
    "An instant classic: funny, moving and smart.",
    "The sequel is worse than the original in every way.",
    "I fell asleep halfway through this boring film.",
    "Stunning photography of the Scottish highlands.",
    "The cast has great chemistry and the jokes land.",
    "Predictable, loud and far too long.",
    "A documentary that changed how I see the ocean.",
    "The villain steals every scene he is in.",
    "Cheap effects ruin an otherwise decent monster movie.",
)
QUERIES = ("A terrible, boring movie.", "A clever and funny film.")
ADD_SPLITS = ((0, 5), (5, 9), (9, 12))


class CountingEncoder:
    """``encode(list[str]) -> Tensor [n, 8]``: a fixed random vector per text (seeded by the text), and
    a record of every text it was asked to encode. Lives in the trusted process."""

    D = 8

    def __init__(self):
        self.texts: list[str] = []

    def __call__(self, texts):
        if isinstance(texts, str):
            raise TypeError("encode takes a list of texts, not one string: wrap it as [text].")
        texts = list(texts)
        if not all(isinstance(t, str) for t in texts):
            raise TypeError("encode takes a list of str.")
        self.texts.extend(texts)
        if not texts:
            return torch.empty(0, self.D)
        return torch.stack([torch.randn(self.D, generator=generator(zlib.crc32(t.encode()))) for t in texts])


def build_index(module, encoder, splits=ADD_SPLITS, corpus=CORPUS):
    index = module.SemanticIndex(encoder)
    for start, stop in splits:
        index.add(list(corpus[start:stop]))
    return index


def hit_fields(hit, what: str) -> tuple[int, float, str]:
    try:
        corpus_id, score, text = hit[0], hit[1], hit[2]
    except Exception:  # noqa: BLE001 - whatever the student returned, say what was expected
        fail(f"{what} should be a Hit (corpus_id, score, text); got {short(hit)}.")
    return corpus_id, score, text


def check_hits(actual, expected, what: str, queries, corpus=CORPUS) -> None:
    """actual: what the submission's SemanticIndex.search returned for ``queries`` (a list of str) over
    ``corpus``; expected: the reference index's hits. Ids must equal the reference's, except between
    hits whose true cosines differ only by round-off (either order is right there: see index_problem)."""
    cosines = true_cosines(CountingEncoder()(queries), CountingEncoder()(list(corpus)))
    if not isinstance(actual, list) or not all(isinstance(row, list) for row in actual):
        fail(f"{what} should return a list with one list of hits per query; got {short(actual)}. "
             "Even a single query (a str) gives [[hit, hit, ...]].")
    if len(actual) != len(expected):
        fail(f"{what} returned {len(actual)} lists of hits; expected {len(expected)} (one per query).")
    for q, (row, expected_row) in enumerate(zip(actual, expected)):
        if len(row) != len(expected_row):
            fail(f"{what}: query {q} has {len(row)} hits; expected {len(expected_row)} "
                 "(min(top_k, number of indexed texts)).")
        ids = []
        for rank, (hit, want) in enumerate(zip(row, expected_row)):
            corpus_id, score, text = hit_fields(hit, f"{what}: hit {rank} of query {q}")
            near_tie = (isinstance(corpus_id, int) and 0 <= corpus_id < len(corpus) and corpus_id not in ids
                        and text == corpus[corpus_id]
                        and abs(float(cosines[q, corpus_id]) - want.score) <= 1e-5 * (1 + abs(want.score)))
            ids.append(corpus_id)
            if (corpus_id != want.corpus_id or text != want.text) and not near_tie:
                why = ("The text is right but not its id: corpus ids count every added text in order, across all "
                       "add() calls." if text == want.text else
                       "Hits come best first (highest cosine), and each hit's text is the text with its id.")
                fail(f"{what}: hit {rank} of query {q} is corpus_id {corpus_id!r} ({text!r}); expected corpus_id "
                     f"{want.corpus_id} ({want.text!r}). {why}")
            if not isinstance(score, float) or abs(score - want.score) > 1e-5:
                fail(f"{what}: hit {rank} of query {q} has score {score!r}; expected the cosine "
                     f"{want.score:.6f} as a Python float.")
            if type(corpus_id) is not int:
                fail(f"{what}: hit {rank} of query {q} has corpus_id {corpus_id!r} of type "
                     f"{type(corpus_id).__name__}; expected a Python int (Hit(int(i), float(s), text)).")


def check_hit_types(impl, index, queries, top_k: int, what: str) -> None:
    """Hit's docstring: corpus_id a Python int, score a Python float, exactly (not a NumPy or torch
    scalar). Read where the index runs (the probe "hit_types", bertlab/teaching/retrieval.py): through
    the sandbox the wire turns a NumPy scalar into a Python number on its way out, so the hits that
    reach this process cannot show it. In process (`bertlab check`) the probe runs here."""
    from bertlab.probes import run_probe

    report = run_probe(impl, "hit_types", index, queries, top_k)
    try:
        why, rows = str(report["why"]), [[(str(a), str(b), c is True, d is True) for a, b, c, d in row]
                                         for row in report["rows"]]
    except Exception:  # noqa: BLE001 - whatever came back, it is not the probe's report
        fail(f"{what}: the types of the hits could not be read where the index runs.")
    if why:
        fail(f"{what}: {why}.")
    for q, row in enumerate(rows):
        for rank, (id_type, score_type, id_is_int, score_is_float) in enumerate(row):
            if not id_is_int:
                fail(f"{what}: hit {rank} of query {q}: corpus_id is {id_type}, not a Python int: use int(i) "
                     f"(json.dumps fails on a {id_type}). {mistake_hint('ret_hit_numpy_ids')}")
            if not score_is_float:
                fail(f"{what}: hit {rank} of query {q}: score is {score_type}, not a Python float: use "
                     f"float(s). {mistake_hint('ret_hit_numpy_ids')}")


@pytest.mark.points(3)
def test_index_search_matches_reference(impl, reference):
    index = build_index(impl.retrieval, CountingEncoder())
    expected = build_index(reference.retrieval, CountingEncoder()).search(list(QUERIES), top_k=4)
    what = "SemanticIndex.search(2 queries, top_k=4) after three add() calls"
    check_hits(index.search(list(QUERIES), top_k=4), expected, what, list(QUERIES))
    # The types exactly as the search made them, where it runs (a right answer first, as above).
    check_hit_types(impl, index, list(QUERIES), 4, what)


@pytest.mark.points(2)
def test_index_encodes_each_text_once(impl, reference):
    encoder = CountingEncoder()
    index = build_index(impl.retrieval, encoder)
    added = list(encoder.texts)
    if sorted(added) != sorted(CORPUS):
        extra = len(added) - len(CORPUS)
        fail(f"Adding {len(CORPUS)} texts in three add() calls encoded {len(added)} texts"
             + (f" ({extra} more than needed): add() must encode only the new texts, not the whole index "
                "again." if extra > 0 else ": every added text must be encoded once, when it is added."))
    hits = index.search(list(QUERIES), top_k=3)
    searched = encoder.texts[len(added):]
    if sorted(searched) != sorted(QUERIES):
        fail(f"One search of {len(QUERIES)} queries encoded {len(searched)} texts; it should encode the "
             "queries only (the corpus embeddings were stored by add()).")
    # The points are for encoding once AND finding the right hits: an index that encodes once but
    # searches wrongly earns nothing here.
    expected = build_index(reference.retrieval, CountingEncoder()).search(list(QUERIES), top_k=3)
    check_hits(hits, expected, "SemanticIndex.search(2 queries, top_k=3) after three add() calls", list(QUERIES))


@pytest.mark.points(2)
def test_index_ids_continue_across_adds(impl, reference):
    index = build_index(impl.retrieval, CountingEncoder())
    # Each text searched for itself: its own row is the best hit (cosine 1; the next best is below 0.7).
    for q, row in enumerate(index.search(list(CORPUS[5:9]) + [CORPUS[11]], top_k=1)):
        if not isinstance(row, list) or len(row) != 1:
            fail(f"search(..., top_k=1) should give one list with one hit per query; got {short(row)}.")
        corpus_id, _, text = hit_fields(row[0], "a hit")
        expected_id = 5 + q if q < 4 else 11
        start_of_its_add = max(start for start, _ in ADD_SPLITS if start <= expected_id)
        if corpus_id != expected_id and text == CORPUS[expected_id]:
            restarted = corpus_id == expected_id - start_of_its_add
            fail(f"Searching for the text added as corpus id {expected_id} (in a later add() call) found it, but "
                 f"as corpus_id {corpus_id!r}. "
                 + (mistake_hint("ret_index_ids_restart") if restarted else
                    "Ids count every added text in order, across all add() calls."))
        if corpus_id != expected_id:
            fail(f"Searching for the text added as corpus id {expected_id} returned corpus_id {corpus_id!r} "
                 f"({short(text)}): a text's best hit is itself (cosine 1).")
        if text != CORPUS[expected_id]:
            fail(f"Hit for corpus id {expected_id} carries the text {short(text)}; each hit's text must be the "
                 "text with that id.")


@pytest.mark.points(2)
def test_index_single_query_and_len(impl, reference):
    index = build_index(impl.retrieval, CountingEncoder())
    size = len(index)
    if size != len(CORPUS):
        fail(f"len(index) is {size!r} after adding {len(CORPUS)} texts; it should count the indexed texts.")
    expected = build_index(reference.retrieval, CountingEncoder()).search(QUERIES[0], top_k=2)
    check_hits(index.search(QUERIES[0], top_k=2), expected, "SemanticIndex.search(one query string, top_k=2)",
               [QUERIES[0]])


@pytest.mark.points(1)
def test_index_top_k_larger_than_index(impl, reference):
    empty = impl.retrieval.SemanticIndex(CountingEncoder()).search(list(QUERIES), top_k=3)
    if empty != [[] for _ in QUERIES]:
        fail(f"SemanticIndex.search of {len(QUERIES)} queries on an empty index returned {short(empty)}; expected "
             f"{[[] for _ in QUERIES]}: min(top_k, len(index)) = 0 hits for each query.")
    splits = ((0, 2), (2, 3))
    index = build_index(impl.retrieval, CountingEncoder(), splits)
    expected = build_index(reference.retrieval, CountingEncoder(), splits).search(list(QUERIES), top_k=10)
    check_hits(index.search(list(QUERIES), top_k=10), expected, "SemanticIndex.search(top_k=10) on 3 texts",
               list(QUERIES), CORPUS[:3])
