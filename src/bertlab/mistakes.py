"""The table of known mistakes: one record per mistake, the one place its teaching text is written.

Read by every place that names a likely mistake to a student:

- the public tests and the hidden suites, through ``bertlab.checks.name_mistake`` (their ``diagnose``
  helpers compute what each mistake would have returned and name the one the result matches);
- the grader's hints (``grader/grading/hints.py``): a submission whose probe outputs match a mutant of
  the bank gets the hint of the mistake with the mutant's name (every mutant is one of these mistakes,
  so its id is the mutant's name);
- ``bertlab check``'s hints for the kinds of failure any task can show (``task`` None: a missing
  ValueError, a wrong type, shape or dtype, a NaN, a TypeError).

A hint says what to change and why, never the solution: these texts ship to students on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Mistake:
    """One known mistake."""

    id: str              # unique; for a mistake the mutant bank makes, the mutant's name
    task: Optional[str]  # the task it belongs to; None for a kind of failure of any task
    name: str            # a short name of the mistake
    hint: str            # the teaching text shown to the student


MISTAKES: tuple[Mistake, ...] = (
    # ------------------------------------------------------------------------------------------ cka
    Mistake("cka_no_centering", "cka", "uncentered CKA",
            "Your CKA matches the formula WITHOUT centering: did you subtract each column's mean (X - "
            "X.mean(dim=0)) from X and Y before the products?"),
    Mistake("cka_center_rows", "cka", "rows centered instead of columns",
            "Your CKA matches centering the ROWS: center each column (feature) over the examples, i.e. X - "
            "X.mean(dim=0, keepdim=True)."),
    Mistake("cka_no_square", "cka", "unsquared numerator",
            "Your CKA matches the formula with an unsquared numerator: it is ||Yc^T Xc||_F ** 2 over "
            "||Xc^T Xc||_F * ||Yc^T Yc||_F."),
    Mistake("cka_wrong_normaliser", "cka", "wrong denominator",
            "Your CKA's denominator looks like ||Xc||_F^2 * ||Yc||_F^2: it should be the norms of the d x "
            "d products, ||Xc^T Xc||_F * ||Yc^T Yc||_F."),
    Mistake("cka_no_float64", "cka", "not computed in float64",
            "Your CKA loses precision on half-precision or large-offset inputs: convert X and Y to float64 "
            "(X.to(torch.float64)) before centering."),
    Mistake("cka_returns_tensor", "cka", "a tensor instead of a Python float",
            "Your linear_cka returns a tensor: convert the result with .item() (or float(...)) so callers "
            "get a Python float."),
    Mistake("cka_no_row_check", "cka", "no check that X and Y have the same n",
            "Your linear_cka does not check that X and Y have the same number of rows: raise a ValueError "
            "that says so before any matrix product."),
    Mistake("cka_numpy_unsupported", "cka", "NumPy inputs not converted",
            "Your CKA fails on NumPy arrays: convert inputs first with torch.as_tensor(X)."),
    Mistake("cka_no_constant_check", "cka", "no nan for zero variance",
            "Your CKA returns a number (about 0) for a representation whose rows are all equal: CKA is "
            "undefined there (0/0), and the docstring says nan. Detect it (the centered norm is tiny next "
            "to the raw norm) and return float('nan')."),
    Mistake("cka_matrix_upper_only", "cka", "only the upper triangle filled",
            "Your cka_matrix is not symmetric: fill M[j, i] as well as M[i, j]."),
    Mistake("cka_matrix_float32", "cka", "a float32 CKA matrix",
            "Your cka_matrix returns float32: create it with dtype=torch.float64 to keep the float64 "
            "values."),
    Mistake("cka_in_place_centering", "cka", "inputs centered in place",
            "Your CKA changes its inputs: `X -= X.mean(0)` on a float64 tensor (or an array seen through "
            "torch.as_tensor) writes into the caller's data. Center a copy."),
    Mistake("cka_matrix_empty", "cka", "an empty list not rejected",
            "Your cka_matrix crashes on an empty list: raise a ValueError that says there is nothing to "
            "compare."),
    Mistake("cka_transposed", "cka", "transposed matrices compared",
            "Your CKA compares the transposed matrices: rows are examples, columns are features."),
    Mistake("cka_constant_float", "cka", "the same number for every input",
            "Your linear_cka returns the same number whatever X and Y are: compute the formula from the "
            "centered inputs (and return that value as a Python float)."),
    Mistake("cka_always_value_error", "cka", "ValueError for valid input",
            "Your linear_cka raises ValueError for valid input too: raise it only for the cases the docstring "
            "lists (X or Y not 2-D, different numbers of rows, n < 2), and otherwise return the CKA."),
    # ------------------------------------------------------------------------------------------ pooling
    Mistake("pool_divide_by_length", "pooling", "divided by the padded length",
            "Your pooling divides by the padded length T: divide by the number of real tokens, "
            "attention_mask.sum(dim=1)."),
    Mistake("pool_mask_ignored", "pooling", "padding averaged in",
            "Your pooling averages every position, padding included: weight each position by the mask."),
    Mistake("pool_cls", "pooling", "the [CLS] position instead of the mean",
            "Your pooling returns the vector at position 0 ([CLS]): average the real tokens instead."),
    Mistake("pool_nan_all_padding", "pooling", "NaN for an all-padding row",
            "Your pooling gives NaN for a row with no real token: clamp the token count at 1 (or 1e-9) "
            "before dividing."),
    Mistake("pool_float32_out", "pooling", "dtype not kept",
            "Your pooling returns float32 for float16/bfloat16 input: cast the result back with "
            ".to(hidden_states.dtype)."),
    Mistake("pool_in_place", "pooling", "hidden_states changed in place",
            "Your pooling changes its input: an in-place op (mul_, masked_fill_, *=) on hidden_states "
            "overwrites the caller's tensor. Build new tensors."),
    Mistake("pool_bool_mask_crash", "pooling", "a bool mask not supported",
            "Your pooling fails on a bool mask (1 - mask is not defined for bool): convert the mask to the "
            "compute dtype first, or test mask != 0."),
    Mistake("pool_keepdim", "pooling", "the token dimension kept",
            "Your pooling returns [B, 1, D]: reduce the token dimension away (no keepdim), giving [B, D]."),
    Mistake("pool_no_validation", "pooling", "shapes not checked",
            "Your pooling does not check its inputs: raise a ValueError when hidden_states is not [B, T, "
            "D] or the mask is not [B, T] with the same B and T."),
    Mistake("pool_sum", "pooling", "the masked sum instead of the mean",
            "Your pooling returns the masked SUM: divide by the number of real tokens."),
    Mistake("pool_inverted_mask", "pooling", "the mask inverted",
            "Your pooling averages with the mask inverted (the padding positions, not the real tokens): "
            "average the positions whose mask is 1."),
    Mistake("pool_last_token", "pooling", "the last real token instead of the mean",
            "Your pooling returns the vector of each sentence's LAST real token (the pooling of GPT-style "
            "decoders): SBERT averages ALL the real tokens, so sum them (weight mask[b, t]) and divide by "
            "their count."),
    Mistake("pool_constant", "pooling", "the same result whatever the input",
            "Your pooling returns the same values (e.g. zeros) whatever the hidden states are: the right "
            "shape and dtype earn nothing without the mean of the real tokens."),
    Mistake("pool_no_gradient", "pooling", "no gradient through the pooling",
            "Your pooled values are right, but no gradient flows back to hidden_states (NumPy, .detach(), "
            ".item() or torch.no_grad() inside): SBERT is fine-tuned through this function, so compute it "
            "with torch operations on the tensors themselves."),
    Mistake("pool_always_value_error", "pooling", "ValueError for valid inputs",
            "Your pooling raises ValueError for valid inputs too: raise it only when hidden_states is not "
            "3-D, the mask is not 2-D, or their B and T differ; otherwise return the masked mean."),
    # ------------------------------------------------------------------------------------------ siamese
    Mistake("sbert_dot_product", "siamese", "dot product instead of cosine",
            "Your forward returns dot products: SBERT scores a pair by the COSINE of the two embeddings "
            "(normalise both, or use F.cosine_similarity over the feature dimension)."),
    Mistake("sbert_not_shared", "siamese", "two encoders instead of one",
            "Your SiameseBert has two encoders: side b uses a copy, so training one side leaves the other "
            "behind. Keep one encoder and call it for both sentences."),
    Mistake("sbert_cls_encode", "siamese", "the [CLS] vector instead of the mean",
            "Your encode returns the [CLS] vector: SBERT mean-pools the real tokens of last_hidden_state "
            "with masked_mean_pool."),
    Mistake("sbert_pooler_output", "siamese", "pooler_output instead of the mean",
            "Your encode returns pooler_output (BERT's [CLS] head): SBERT mean-pools last_hidden_state."),
    Mistake("sbert_all_pairs", "siamese", "all pairs instead of a[i] with b[i]",
            "Your forward returns a [B, B] matrix: SBERT scores a[i] with b[i] only, giving [B]."),
    Mistake("sbert_unmasked_mean", "siamese", "padding averaged in",
            "Your encode averages the padding too: use masked_mean_pool(last_hidden_state, "
            "attention_mask)."),
    Mistake("sbert_no_encoder_mask", "siamese", "the encoder never sees the mask",
            "Your encode calls the encoder without attention_mask, so real tokens attend to [PAD]: pass "
            "attention_mask=attention_mask to the encoder as well as to the pooling."),
    Mistake("sbert_cosine_distance", "siamese", "cosine distance instead of similarity",
            "Your forward returns 1 - cosine (a distance): return the cosine similarity itself."),
    Mistake("sbert_cosine_wrong_dim", "siamese", "cosine over the batch dimension",
            "Your forward takes the cosine over the batch dimension: use dim=-1 (over the D features)."),
    Mistake("sbert_encode_no_grad", "siamese", "encoded under torch.no_grad()",
            "A loss on your scores cannot train the encoder: do not wrap the encoder call in "
            "torch.no_grad(), do not .detach() its output, and do not freeze its parameters. Whoever calls "
            "encode decides about gradients (the tests use torch.no_grad() themselves)."),
    Mistake("sbert_detach_branch_b", "siamese", "one branch cut from training",
            "Only one side of your Siamese network trains the encoder: both sentences must go through the "
            "same self.encoder with gradients on (no .detach(), no torch.no_grad(), no second copy), so that "
            "a loss on the score updates the one shared encoder from both branches."),
    Mistake("sbert_wraps_a_copy", "siamese", "a copy of the given encoder wrapped",
            "Training your SiameseBert never updates the model given to create_sbert: wrap that model "
            "itself (self.encoder = bert_model), not copy.deepcopy(bert_model), so fine-tuning the wrapper "
            "fine-tunes the model the caller holds."),
    Mistake("sbert_no_mask_anywhere", "siamese", "no mask for the encoder nor the mean",
            "Your encode calls the encoder without attention_mask and averages the padding too: pass "
            "attention_mask to the encoder and pool with masked_mean_pool(last_hidden_state, "
            "attention_mask)."),
    # ------------------------------------------------------------------------------------------ retrieval
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
    Mistake("ret_top_k_zero_accepted", "retrieval", "top_k < 1 accepted",
            "Your search accepts top_k = 0 or negative: raise a ValueError for top_k < 1."),
    Mistake("ret_dim_mismatch_runtime", "retrieval", "different D not rejected",
            "Your search does not check that queries and corpus have the same D: raise a ValueError that "
            "says so."),
    Mistake("ret_single_query_flat", "retrieval", "a flat list for one query string",
            "Your SemanticIndex.search returns a flat list for a single query string: always return one "
            "list of hits per query, [[hit, ...]]."),
    Mistake("ret_normalise_in_place", "retrieval", "inputs normalised in place",
            "Your search changes its inputs: an in-place division (/=) normalises the caller's embeddings. "
            "Use F.normalize, which returns a new tensor."),
    Mistake("ret_not_normalised", "retrieval", "raw dot products",
            "Your scores are raw dot products, not cosines: normalise the query and the corpus vectors "
            "(divide by their norms)."),
    Mistake("ret_constant", "retrieval", "the same hits for every input",
            "Your search returns the same hits whatever the embeddings (the first k corpus rows, score 0): "
            "score every corpus row by its cosine with the query and keep the k best."),
    Mistake("ret_always_value_error", "retrieval", "ValueError for every input",
            "Your search raises ValueError for valid input too: raise only for what the docstring's Raises: "
            "lists (different D, inputs that are not 1-D/2-D, top_k < 1) and answer everything else."),
    # ------------------------------------------------------------------------------------------ any task
    Mistake("no_value_error", None, "a bad input not rejected",
            "Reread the Raises: section of the docstring: check the inputs at the top of the function and "
            "`raise ValueError(...)` with a message saying what was wrong."),
    Mistake("wrong_type", None, "a result of the wrong type",
            "Check the return type against the Returns: section of the docstring."),
    Mistake("wrong_shape", None, "a result of the wrong shape",
            "Shapes first: the Returns: line of the docstring gives the shape. Check which dimension you "
            "reduced over (dim=...) and whether a dimension was kept (keepdim) or squeezed away."),
    Mistake("wrong_dtype", None, "a result of the wrong dtype",
            "The Returns: line of the docstring says which dtype to return: compute in a wide type if you "
            "like, then cast back at the end."),
    Mistake("nan_result", None, "NaN in a result",
            "A NaN is almost always 0/0: a count, a norm or a variance that can be zero. The docstring says "
            "what such an input should give."),
    Mistake("input_type_not_handled", None, "an allowed input type not handled",
            "A TypeError usually means an input the docstring allows but your code does not handle yet: NumPy "
            "arrays as well as tensors, int, bool or float masks, a single query as well as a batch."),
)

_BY_ID: dict[str, Mistake] = {m.id: m for m in MISTAKES}
assert len(_BY_ID) == len(MISTAKES), "two mistakes share an id"


def mistake(mistake_id: str) -> Mistake:
    """The mistake called ``mistake_id``; KeyError otherwise."""
    try:
        return _BY_ID[mistake_id]
    except KeyError:
        raise KeyError(f"no known mistake {mistake_id!r}") from None


def find(mistake_id: str) -> Optional[Mistake]:
    """The mistake called ``mistake_id``, or None."""
    return _BY_ID.get(mistake_id)


def hint(mistake_id: str) -> str:
    """The teaching text of the mistake called ``mistake_id``."""
    return mistake(mistake_id).hint


def of_task(task: Optional[str]) -> tuple[Mistake, ...]:
    """The mistakes of ``task`` (None: those any task can show), in table order."""
    return tuple(m for m in MISTAKES if m.task == task)
