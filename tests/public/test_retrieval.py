"""Public tests of task retrieval: semantic_search and SemanticIndex.

Oracle: the full [Q, N] cosine matrix in float64 and a stable descending sort, which is the
definition of the answer (best first, equal scores by ascending corpus index). semantic_search must
get the same answer without holding the whole matrix, so the corpus sizes here sit on both sides of
the block sizes people pick (1, 2, k-1, k, k+1, 1001, 4099, ...), and one case needs several query
blocks of the reference (Q * N > 2**24 scores).

Two kinds of data:
- small-integer vectors with axis-aligned queries: every cosine is c_j / |c|, computed exactly enough
  that equal cosines are bit-identical in any implementation, so indices can be compared exactly,
  ties included;
- Gaussian vectors and letter counts: scores compared with a tolerance, indices checked for consistency
  (each returned index has the expected score at its rank), since hits whose cosines differ only by
  round-off (or are equal in exact arithmetic but computed through different numbers) may come back in
  either order from a correct search: normalise-then-matmul, matmul-then-divide, float32 or float64,
  blocks or one product round differently.

Every test that checks a form (the default top_k, ValueError on bad input, one query string, top_k
above the index size) also checks the answer on valid input.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from bertlab.assertions import (call_on_valid_input, check_close, check_tensor, close, describe_change, expect_value_error,
                               name_mistake, property_settings)

pytestmark = pytest.mark.retrieval


# ---------------------------------------------------------------------------------------------
# Oracle and data
# ---------------------------------------------------------------------------------------------

def cosine_matrix(queries: torch.Tensor, corpus: torch.Tensor) -> torch.Tensor:
    """[Q, N] float64 cosines; a zero vector scores 0 against everything."""
    q = F.normalize(torch.atleast_2d(queries).to(torch.float64), dim=1)
    c = F.normalize(corpus.to(torch.float64), dim=1)
    return q @ c.T


def brute_force(queries: torch.Tensor, corpus: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The definition: sort every row of the full cosine matrix, descending, stable (ties by index)."""
    full = torch.sort(cosine_matrix(queries, corpus), dim=1, descending=True, stable=True)
    return full.values[:, :k], full.indices[:, :k]


def integer_corpus(seed: int, N: int, D: int = 8, n_prototypes: int = 600) -> torch.Tensor:
    """[N, D] float32 rows drawn (with repeats: exact ties) from integer prototypes with entries in -3..3.

    Against an axis query e_j every cosine is c_j / |c|. Prototypes are kept only if no other prototype
    reaches the same cosine through different numbers (1/sqrt(2) = 3/sqrt(18) would round differently),
    so any two scores are either bit-identical in every implementation or clearly apart.
    No prototype is zero or parallel to an axis (a cosine of exactly 1 is kept for planted rows).
    """
    rng = np.random.default_rng(seed)
    prototypes, cosine_owner = [], {}
    while len(prototypes) < n_prototypes:
        row = rng.integers(-3, 4, size=D).tolist()  # (Python ints: a check builds dozens of corpora)
        if len(row) - row.count(0) < 2:
            continue
        squared_norm = sum(c * c for c in row)
        # cosine_j = c_j / sqrt(s): identify it exactly by the reduced fraction sign(c_j) c_j^2 / s,
        # as a pair of integers. A zero coordinate gives a cosine of exactly 0 everywhere.
        claims = {(_reduced(c * abs(c), squared_norm), j): (c, squared_norm) for j, c in enumerate(row) if c}
        if any(cosine_owner.get(key, owner) != owner for key, owner in claims.items()):
            continue
        cosine_owner.update(claims)
        prototypes.append(row)
    corpus = np.array(prototypes)[rng.integers(0, n_prototypes, size=N)]
    return torch.tensor(corpus, dtype=torch.float32)


def _reduced(numerator: int, denominator: int) -> tuple[int, int]:
    """numerator / denominator in lowest terms (denominator > 0), as Fraction keeps it."""
    common = math.gcd(numerator, denominator)
    return numerator // common, denominator // common


def axis_queries(Q: int, D: int = 8) -> torch.Tensor:
    """[Q, D] float32: +-2 e_j in turn, so each cosine is c_j / |c| (exact ties stay exact)."""
    queries = torch.zeros(Q, D)
    for i in range(Q):
        queries[i, (i // 2) % D] = 2.0 if i % 2 == 0 else -2.0
    return queries


def gaussian(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def search(impl, queries, corpus, top_k, what: str, *, pass_top_k: bool = True, own_copies: bool = True):
    """Call semantic_search; check the pair of tensors, their exact shapes and dtypes, and finiteness.

    pass_top_k=False leaves top_k out of the call (its default, 10, must give ``top_k`` hits).
    own_copies: the code under test gets copies, so the test's own tensors stay untouched for the
    expected answer whatever the code does to its inputs (only the inputs-unchanged test passes False)."""
    search = impl.retrieval.semantic_search
    if own_copies:
        queries, corpus = queries.clone(), corpus.clone()
    result = call_on_valid_input(
        (lambda: search(queries, corpus, top_k=top_k)) if pass_top_k else (lambda: search(queries, corpus)),
        f"semantic_search on {what}", "this input is valid",
        "Raise only for what the docstring lists (different D, inputs that are not 1-D/2-D, top_k < 1).")
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        pytest.fail(f"semantic_search should return (scores, indices); got {type(result).__name__}.", pytrace=False)
    Q = 1 if queries.dim() == 1 else queries.shape[0]
    k = min(top_k, corpus.shape[0])
    shape_hint = f"Q = {Q} queries, k = min(top_k={top_k}, N={corpus.shape[0]}) = {k}."
    scores = check_tensor(result[0], [Q, k], f"scores for {what}", shape_hint=shape_hint,
                          finite_hint="Cosines are finite: guard the norms of zero vectors (F.normalize does).")
    indices = check_tensor(result[1], [Q, k], f"indices for {what}", shape_hint=shape_hint)
    if indices.dtype != torch.int64:
        pytest.fail(f"indices for {what} have dtype {indices.dtype}; expected torch.int64 (torch.long, what "
                    "torch.topk and torch.sort return): they are positions in the corpus.", pytrace=False)
    if not scores.dtype.is_floating_point:
        pytest.fail(f"scores for {what} have dtype {scores.dtype}; expected floats (cosines).", pytrace=False)
    return scores, indices


def check_sorted(scores: torch.Tensor, what: str, queries: torch.Tensor, corpus: torch.Tensor) -> None:
    """Each row best first. A rise of up to 1e-6 is round-off (a correct search may report scores it
    computed apart from its ranking), not disorder."""
    rises = scores[:, 1:].double() > scores[:, :-1].double() + 1e-6
    if scores.shape[1] > 1 and rises.any():
        row = int(rises.any(dim=1).nonzero()[0])
        ascending = torch.sort(cosine_matrix(queries, corpus), dim=1).values[:, : scores.shape[1]]
        known = name_mistake(scores, {"ret_ascending": ascending}, tol=1e-4)
        pytest.fail(f"scores for {what} are not sorted descending (row {row}: {scores[row, :6].tolist()}...). "
                    f"{known or 'Best hit first; if you search in blocks, re-sort after merging them.'}",
                    pytrace=False)


def explain_index_mismatch(query: torch.Tensor, corpus: torch.Tensor, got: torch.Tensor,
                           expected_scores: torch.Tensor) -> str:
    """Why one row's indices differ from the brute force although its scores matched."""
    if ((got < 0) | (got >= corpus.shape[0])).any():
        return f"Some of these indices are outside the corpus (0 to {corpus.shape[0] - 1})."
    own_scores = cosine_matrix(query, corpus)[0, got.long()]
    if not close(own_scores, expected_scores, tol=1e-5):
        return ("These indices are not the rows with the expected scores: each index must be the corpus row of "
                "its score (if you search in blocks, count indices from the start of the corpus, and score each "
                "query block with its own queries).")
    return ("Right scores, but tied rows in the wrong order or the wrong tied rows kept: equal scores must come in "
            "ascending corpus index, also at the k-th place. torch.topk promises neither, so re-sort stably "
            "(torch.sort(..., stable=True)) where scores tie.")


def check_exact(impl, queries, corpus, top_k: int, what: str, *, pass_top_k: bool = True) -> None:
    """semantic_search equals the brute force exactly in indices (ties included), closely in scores.

    Only for data whose equal cosines are bit-identical in any implementation (integer_corpus with
    axis_queries, duplicated rows). pass_top_k=False calls semantic_search without top_k (its default).
    """
    scores, indices = search(impl, queries, corpus, top_k, what, pass_top_k=pass_top_k)
    expected_scores, expected_indices = brute_force(queries, corpus, min(top_k, corpus.shape[0]))
    dot_products = torch.atleast_2d(queries).double() @ corpus.double().T

    q64, c64 = torch.atleast_2d(queries).double(), corpus.double()
    query_raw = q64 @ F.normalize(c64, dim=1).T    # what a search that normalises only the corpus scores
    corpus_raw = F.normalize(q64, dim=1) @ c64.T   # ... only the queries

    def diagnose(actual):
        k = actual.shape[1]
        known = name_mistake(actual, {  # silent where two of them give the same scores (name_mistake)
            "ret_not_normalised": torch.sort(dot_products, dim=1, descending=True).values[:, :k],
            "ret_query_not_normalised": torch.sort(query_raw, dim=1, descending=True).values[:, :k],
            "ret_corpus_not_normalised": torch.sort(corpus_raw, dim=1, descending=True).values[:, :k],
        }, tol=1e-4)
        return known or "Scores must be cosines of the best k corpus rows."

    check_sorted(scores, what, queries, corpus)
    check_close(scores, expected_scores, f"scores for {what}", atol=1e-5, diagnose=diagnose)
    if not torch.equal(indices.long(), expected_indices):
        row = int((indices.long() != expected_indices).any(dim=1).nonzero()[0])
        got, want = indices[row].tolist(), expected_indices[row].tolist()
        hint = explain_index_mismatch(torch.atleast_2d(queries)[row], corpus, indices[row], expected_scores[row])
        pytest.fail(f"indices for {what}, row {row}: expected {want}, got {got}. {hint}", pytrace=False)


# ---------------------------------------------------------------------------------------------
# semantic_search
# ---------------------------------------------------------------------------------------------

def test_lesson_sized_example(impl):
    corpus = integer_corpus(seed=0, N=6)
    check_exact(impl, axis_queries(2), corpus, 3, "2 queries over 6 corpus rows, top_k=3")


@pytest.mark.parametrize("N", [1, 2, 9, 10, 11, 1001, 4099])
@pytest.mark.parametrize("Q", [1, 7])
def test_matches_brute_force_at_block_friendly_and_odd_sizes(impl, N, Q):
    # k = 10: N = 9, 10, 11 sit around k; 1001 and 4099 cross the block sizes people usually pick.
    check_exact(impl, axis_queries(Q), integer_corpus(seed=N, N=N), 10, f"Q={Q}, N={N}, top_k=10 (integer data)")


@property_settings(max_examples=30)
@given(seed=st.integers(0, 2**32 - 1), N=st.integers(1, 300), Q=st.integers(1, 6), top_k=st.integers(1, 25),
       n_prototypes=st.integers(1, 40))
def test_matches_brute_force_on_random_sizes(impl, seed, N, Q, top_k, n_prototypes):
    # Few prototypes for many rows: ties everywhere, also at the k-th place.
    corpus = integer_corpus(seed, N, n_prototypes=n_prototypes)
    check_exact(impl, axis_queries(Q), corpus, top_k, f"Q={Q}, N={N}, top_k={top_k} ({n_prototypes} distinct rows)")


def test_matches_brute_force_over_several_query_blocks(impl):
    # 2,100 x 8,001 = 16.8 million scores: more than one block of 2**24 for the reference; cheap to
    # build (8 dimensions) and to check (only 16 distinct queries, so the oracle sorts 16 rows).
    Q, N = 2100, 8001
    queries, corpus = axis_queries(Q), integer_corpus(seed=1, N=N)
    scores, indices = search(impl, queries, corpus, 10, f"Q={Q}, N={N}")
    check_sorted(scores, f"Q={Q}, N={N}", queries, corpus)
    distinct = axis_queries(16)
    expected_scores, expected_indices = brute_force(distinct, corpus, 10)
    row_of = torch.arange(Q) % 16  # axis_queries(Q)[i] == distinct[i % 16]
    check_close(scores, expected_scores[row_of], f"scores for Q={Q}, N={N}", atol=1e-5)
    bad = (indices.long() != expected_indices[row_of]).any(dim=1)
    if bad.any():
        row = int(bad.nonzero()[0])
        hint = explain_index_mismatch(queries[row], corpus, indices[row], expected_scores[row_of[row]])
        pytest.fail(f"indices for Q={Q}, N={N}, query row {row}: expected {expected_indices[row_of[row]].tolist()}, "
                    f"got {indices[row].tolist()}. {hint}", pytrace=False)


def test_ties_straddling_block_boundaries_are_ordered_by_index(impl):
    # Rows equal to the query direction (cosine exactly 1) sit in pairs at both sides of many sizes a
    # block could have; all of them tie, so they must come back in ascending index order.
    N = 70_001
    corpus = integer_corpus(seed=2, N=N)  # no row of it is parallel to an axis
    boundaries = [2, 10, 64, 100, 128, 500, 512, 1000, 1024, 4096, 10_000, 16_384, 32_768, 50_000, 65_536, 70_000]
    planted = sorted({i for b in boundaries for i in (b - 1, b)})
    corpus[planted] = torch.tensor([3.0, 0, 0, 0, 0, 0, 0, 0])
    query = torch.tensor([[2.0, 0, 0, 0, 0, 0, 0, 0]])
    check_exact(impl, query, corpus, len(planted) + 3, f"{len(planted)} tied rows across block boundaries, N={N}")


def test_duplicate_corpus_rows_come_back_in_ascending_index_order(impl):
    a, b, c = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0]
    corpus = torch.tensor([c, a, b, a, c, a, b])  # a at 1, 3, 5; c at 0, 4
    # The query matches rows 1, 3, 5 exactly (cosine 1) and rows 0, 4 at cosine 0.707: expected [1, 3, 5, 0, 4].
    # Duplicated rows give bit-identical cosines in any implementation, so the order is exact.
    check_exact(impl, torch.tensor([[3.0, 0.0, 0.0]]), corpus, 5, "a corpus with duplicate rows")


@pytest.mark.parametrize("N, Q, D", [(50, 3, 16), (3000, 20, 32)])
def test_gaussian_vectors_give_the_true_top_k(impl, N, Q, D):
    queries, corpus = gaussian(N, Q, D) * 3.0, gaussian(N + 1, N, D) + 0.5  # unnormalised on purpose
    what = f"Gaussian data Q={Q}, N={N}, D={D}"
    scores, indices = search(impl, queries, corpus, 10, what)
    check_sorted(scores, what, queries, corpus)
    expected_scores, _ = brute_force(queries, corpus, 10)
    check_close(scores, expected_scores, f"scores for {what}", atol=1e-5,
                hint="Scores must be cosines (normalise both sides) of the 10 best rows of the whole corpus.")
    # Near-ties may swap, so check consistency: distinct indices, each with the score returned for it.
    full = cosine_matrix(queries, corpus)
    for row in range(Q):
        if len(set(indices[row].tolist())) != indices.shape[1]:
            pytest.fail(f"{what}: row {row} returns a corpus index twice: {indices[row].tolist()}.", pytrace=False)
    if ((indices < 0) | (indices >= N)).any():
        pytest.fail(f"{what}: an index is outside the corpus (0 to {N - 1}).", pytrace=False)
    check_close(full.gather(1, indices.long()), scores.double(), f"cosine of the returned indices for {what}",
                atol=1e-5, hint="Each index must be the corpus row whose cosine is the score beside it (if you "
                                "search in blocks, count indices from the start of the corpus).")


def test_top_k_larger_than_the_corpus_returns_every_row(impl):
    check_exact(impl, axis_queries(3), integer_corpus(seed=3, N=4), 10, "top_k=10 over 4 corpus rows")


def test_default_top_k_is_10(impl):
    # The right 10 hits, not just 10 of them.
    check_exact(impl, axis_queries(2), integer_corpus(seed=4, N=30), 10,
                "2 queries over 30 corpus rows with the default top_k (10)", pass_top_k=False)


def test_a_1d_query_is_one_query(impl):
    corpus = integer_corpus(seed=5, N=20)
    check_exact(impl, axis_queries(1)[0], corpus, 4, "a single 1-D query [D]")


@pytest.mark.parametrize("case", ["D differs", "top_k is 0", "top_k is -1"])
def test_bad_arguments_raise_value_error(impl, case):
    corpus = integer_corpus(seed=6, N=12)
    queries, top_k, why = {
        "D differs": (torch.ones(2, 7), 3, "queries have D=7 and the corpus D=8"),
        "top_k is 0": (axis_queries(2), 0, "top_k must be at least 1"),
        "top_k is -1": (axis_queries(2), -1, "top_k must be at least 1"),
    }[case]
    expect_value_error(lambda: impl.retrieval.semantic_search(queries, corpus, top_k=top_k),
                       f"semantic_search(queries {list(queries.shape)}, corpus {list(corpus.shape)}, top_k={top_k})",
                       why)
    # Rejecting bad input counts only with right answers on good input: raising for everything is not it.
    check_exact(impl, axis_queries(2), corpus, 3, "2 queries over 12 corpus rows, top_k=3 (valid input)")


def test_zero_vectors_give_finite_scores(impl):
    corpus = integer_corpus(seed=7, N=6)
    corpus[2] = 0.0  # an empty document
    queries = torch.stack([torch.zeros(8), axis_queries(1)[0]])  # an empty query, and a normal one
    # `search` checks finiteness; the brute force defines a zero vector's cosine as 0.
    check_exact(impl, queries, corpus, 6, "a zero query and a zero corpus row")


def test_search_leaves_its_inputs_unchanged(impl):
    # The caller keeps using its embeddings (an index searches the same corpus again and again), so
    # semantic_search must not normalise them in place; and the answer must still be right.
    corpus, queries = integer_corpus(seed=11, N=40), axis_queries(3)
    corpus_before, queries_before = corpus.clone(), queries.clone()
    scores, indices = search(impl, queries, corpus, 5, "queries [3, 8], corpus [40, 8], top_k=5", own_copies=False)
    changed = [describe_change(name, before, now)
               for name, now, before in (("queries", queries, queries_before), ("corpus", corpus, corpus_before))]
    changed = [c for c in changed if c]
    if changed:
        pytest.fail(f"semantic_search changed its inputs in place: {' '.join(changed)} The caller's embeddings are "
                    "not yours to change. Normalise copies (F.normalize returns a new tensor).", pytrace=False)
    check_exact(impl, queries_before, corpus_before, 5, "queries [3, 8], corpus [40, 8], top_k=5")


# ---------------------------------------------------------------------------------------------
# SemanticIndex, with a deterministic encoder that counts what it encodes
# ---------------------------------------------------------------------------------------------

TEXTS = ["good film", "bad plot", "great acting", "slow pacing", "cheap effects", "lovely music", "weak script"]


class LetterCounts:
    """encode(list[str]) -> [n, 26] float32 letter counts (case-insensitive); records every text it sees.

    Called back by SemanticIndex (from the sandbox, when grading); the count lives here, in the test.
    """

    def __init__(self):
        self.seen: Counter[str] = Counter()

    def __call__(self, texts):
        texts = list(texts)
        self.seen.update(texts)
        rows = torch.zeros(len(texts), 26)
        for i, text in enumerate(texts):
            for ch in text.lower():
                if "a" <= ch <= "z":
                    rows[i, ord(ch) - ord("a")] += 1
        return rows


def unpack(hits, what: str):
    """Each hit as (corpus_id, score, text), with types checked."""
    out = []
    for hit in hits:
        try:
            corpus_id, score, text = hit
        except (TypeError, ValueError):
            pytest.fail(f"{what}: a hit should be a Hit(corpus_id, score, text); got {hit!r}.", pytrace=False)
        if not isinstance(corpus_id, int) or not isinstance(score, float) or not isinstance(text, str):
            pytest.fail(f"{what}: Hit fields should be (int, float, str); got ({type(corpus_id).__name__}, "
                        f"{type(score).__name__}, {type(text).__name__}). Convert with int(...) and float(...).",
                        pytrace=False)
        out.append((corpus_id, score, text))
    return out


def check_hits(results, queries: list[str], corpus_texts: list[str], top_k: int, what: str) -> None:
    """SemanticIndex.search(queries, top_k) over ``corpus_texts`` (added in order) gave the best hits.

    The ids at each rank must have the brute force's cosine there, not necessarily its ids: with letter
    counts, two texts can have equal cosines in exact arithmetic that a correct search computes through
    different numbers (e.g. "good film" and "weak script" against "GREAT FILM": dot 5 and norm^2 10 for
    both, but normalise-then-matmul sums different normalised entries, 1/sqrt(10) and 2/sqrt(10), which
    may round differently), so their order is round-off. Hit texts must be the texts of their ids.
    """
    reference = LetterCounts()
    cosines = cosine_matrix(reference(queries), reference(corpus_texts))
    expected_scores, expected_ids = brute_force(reference(queries), reference(corpus_texts), top_k)
    if not isinstance(results, list) or len(results) != len(queries):
        pytest.fail(f"{what}: search with {len(queries)} queries should return a list of {len(queries)} lists of "
                    f"hits; got {results!r:.120}.", pytrace=False)
    for q, hits in enumerate(results):
        got = unpack(hits, f"{what}, query {queries[q]!r}")
        if len(got) != expected_ids.shape[1]:
            pytest.fail(f"{what}, query {queries[q]!r}: expected {expected_ids.shape[1]} hits (min(top_k={top_k}, "
                        f"{len(corpus_texts)} texts)); got {len(got)}.", pytrace=False)
        ids = [h[0] for h in got]
        if any(not 0 <= i < len(corpus_texts) for i in ids) or len(set(ids)) != len(ids):
            pytest.fail(f"{what}, query {queries[q]!r}: corpus ids {ids} should be {len(ids)} different ids between "
                        f"0 and {len(corpus_texts) - 1}.", pytrace=False)
        if ids != expected_ids[q].tolist() and not close(cosines[q, ids], expected_scores[q], tol=1e-5):
            pytest.fail(f"{what}, query {queries[q]!r}: expected corpus ids {expected_ids[q].tolist()} (best first; "
                        f"ids with equal cosines may swap), got {ids}.", pytrace=False)
        scores = torch.tensor([h[1] for h in got], dtype=torch.float64)
        check_close(scores, expected_scores[q], f"{what}: hit scores for {queries[q]!r}", atol=1e-5,
                    hint="A hit's score is the cosine between the query's and the text's embeddings.")
        wrong_text = [(i, t) for i, _, t in got if t != corpus_texts[i]]
        if wrong_text:
            pytest.fail(f"{what}, query {queries[q]!r}: hit text must be the text stored under its corpus id; got "
                        f"{wrong_text}.", pytrace=False)


def build_index(impl, encoder, batches):
    index = impl.retrieval.SemanticIndex(encoder)
    for batch in batches:
        index.add(batch)
    return index


def test_index_length_and_continuous_ids_over_several_adds(impl):
    encoder = LetterCounts()
    index = impl.retrieval.SemanticIndex(encoder)
    if len(index) != 0:
        pytest.fail(f"a new SemanticIndex should have len 0; got {len(index)}.", pytrace=False)
    index.add(TEXTS[:3])
    index.add(TEXTS[3:5])
    index.add(TEXTS[5:])
    if len(index) != len(TEXTS):
        pytest.fail(f"after adding 3 + 2 + 2 texts, len(index) should be {len(TEXTS)}; got {len(index)}.",
                    pytrace=False)
    # Upper-case queries embed exactly like their text (cosine 1) but are different strings.
    results = index.search([t.upper() for t in TEXTS], top_k=1)
    if len(results) != len(TEXTS):
        pytest.fail(f"search with {len(TEXTS)} queries should return {len(TEXTS)} lists of hits; got {len(results)}.",
                    pytrace=False)
    for position, (text, hits) in enumerate(zip(TEXTS, results)):
        if len(hits) != 1:
            pytest.fail(f"search(..., top_k=1) should return exactly one hit per query; got {len(hits)} for "
                        f"{text.upper()!r}.", pytrace=False)
        (corpus_id, score, hit_text), = unpack(hits, f"query {text.upper()!r}")
        if (corpus_id, hit_text, abs(score - 1.0) <= 1e-5) != (position, text, True):
            why = ("Corpus ids continue across add() calls: the first text of a later add gets id len(index)."
                   if hit_text == text and corpus_id != position else
                   "A hit's score is the cosine of the two embeddings (1 for identical ones)."
                   if (corpus_id, hit_text) == (position, text) else
                   "The best hit is the text with the highest cosine, here the text itself.")
            pytest.fail(f"the best hit for {text.upper()!r} should be corpus id {position} ({text!r}, text number "
                        f"{position + 1} added, score 1.0); got id {corpus_id} ({hit_text!r}, score {score}). {why}",
                        pytrace=False)


def test_each_text_is_encoded_once(impl):
    encoder = LetterCounts()
    index = build_index(impl, encoder, [TEXTS[:4], TEXTS[4:]])
    index.search("GOOD FILM", top_k=2)
    index.search(["BAD PLOT", "WEAK SCRIPT"], top_k=3)
    again = {text: count for text, count in encoder.seen.items() if text in TEXTS and count != 1}
    missing = [text for text in TEXTS if encoder.seen[text] == 0]
    if again or missing:
        pytest.fail(f"each corpus text must go through encode exactly once (offline indexing); encoded more than once: "
                    f"{again or 'none'}; never encoded: {missing or 'none'}. Keep the embeddings from add() and reuse "
                    "them in search(); encode only the queries there.", pytrace=False)
    if encoder.seen["GOOD FILM"] < 1:
        pytest.fail("search('GOOD FILM') never passed the string 'GOOD FILM' to encode: encode each query (a single "
                    "str is one query, not a sequence of characters) with the index's encode function.", pytrace=False)


def test_search_takes_one_string_or_a_list(impl):
    encoder = LetterCounts()
    index = build_index(impl, encoder, [TEXTS])
    one = index.search("BAD PLOT", top_k=3)
    listed = index.search(["BAD PLOT"], top_k=3)
    if len(one) != 1:
        pytest.fail(f"search('...') with one string should return a list holding one list of hits; got {len(one)} "
                    "lists. A str is one query, not a sequence of one-letter queries.", pytrace=False)
    if unpack(one[0], "search(str)") != unpack(listed[0], "search([str])"):
        pytest.fail(f"search(str) and search([str]) should give the same hits; got {one[0]} and {listed[0]}.",
                    pytrace=False)
    check_hits(one, ["BAD PLOT"], TEXTS, 3, "search('BAD PLOT', top_k=3)")


def test_search_hits_are_the_best_cosines_with_their_texts(impl):
    encoder = LetterCounts()
    index = build_index(impl, encoder, [TEXTS[:2], TEXTS[2:]])
    queries = ["BAD MOVIE", "GREAT FILM"]
    check_hits(index.search(queries, top_k=4), queries, TEXTS, 4, "search(2 queries, top_k=4)")


def test_top_k_larger_than_the_index_returns_every_text(impl):
    index = build_index(impl, LetterCounts(), [TEXTS[:3]])
    # check_hits wants min(top_k, 3 texts) = 3 hits, and the right ones.
    check_hits(index.search("GOOD", top_k=10), ["GOOD"], TEXTS[:3], 10, "search('GOOD', top_k=10) on 3 texts")
