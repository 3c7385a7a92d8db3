"""The recipe of the mutant bank: every entry, as a change to the reference solutions
(solutions/; ``bertlab_grader.mutants.load_bank`` builds them).

Each entry starts from solutions/*.py with the nbgrader fence lines removed and changes ONE file:
a mutant by one or two exact text swaps (one realistic mistake), a variant by replacing whole
functions with a different, correct implementation. Every swap must match exactly once, so a change
in solutions/ that breaks a recipe fails loudly when the bank is loaded (tests/test_audit.py
loads every entry).

To add a mutant: add its mistake (id = the mutant's name, with the hint a student gets) to the table
in bertlab/mistakes.py, add a ``Mutant(...)`` below (name, task, file, description, swaps), then run
``bertlab audit --only <name>`` (see docs/hidden-suites.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bertlab.mistakes import mistake


from bertlab_grader.core.locations import reference_sources  # noqa: E402


@dataclass(frozen=True)
class Mutant:
    name: str
    task: str
    file: str
    description: str
    swaps: tuple[tuple[str, str], ...]

    @property
    def hint(self) -> str:
        """What grader/grading/hints.py tells a student whose code behaves like this mutant: the
        record of the table of known mistakes (bertlab/mistakes.py) with the mutant's name."""
        return mistake(self.name).hint


@dataclass(frozen=True)
class Variant:
    name: str
    task: str
    file: str
    description: str
    functions: dict = field(default_factory=dict)  # qualified name ("f" or "Class.method") -> new source
    swaps: tuple[tuple[str, str], ...] = ()


# =============================================================================================
# Mutants: one realistic mistake each
# =============================================================================================

MUTANTS = (
    # ---------------------------------------------------------------- cka
    Mutant("cka_no_centering", "cka", "cka.py",
           "the columns are never centered (uncentered CKA)",
           (("    return M - M.mean(dim=0, keepdim=True)", "    return M"),)),
    Mutant("cka_center_rows", "cka", "cka.py",
           "centers each row (example) instead of each column (feature)",
           (("    return M - M.mean(dim=0, keepdim=True)", "    return M - M.mean(dim=1, keepdim=True)"),)),
    Mutant("cka_no_square", "cka", "cka.py",
           "the numerator ||Yc^T Xc||_F is not squared",
           (("cross, self_x, self_y = (Kx * Ky).sum(), torch.linalg.norm(Kx), torch.linalg.norm(Ky)",
             "cross, self_x, self_y = (Kx * Ky).sum().sqrt(), torch.linalg.norm(Kx), torch.linalg.norm(Ky)"),
            ("        cross = torch.linalg.norm(Yc.T @ Xc) ** 2", "        cross = torch.linalg.norm(Yc.T @ Xc)"))),
    Mutant("cka_wrong_normaliser", "cka", "cka.py",
           "divides by ||Xc||_F^2 ||Yc||_F^2 instead of ||Xc^T Xc||_F ||Yc^T Yc||_F",
           (("cross, self_x, self_y = (Kx * Ky).sum(), torch.linalg.norm(Kx), torch.linalg.norm(Ky)",
             "cross, self_x, self_y = (Kx * Ky).sum(), Kx.trace(), Ky.trace()"),
            ("        self_x, self_y = torch.linalg.norm(Xc.T @ Xc), torch.linalg.norm(Yc.T @ Yc)",
             "        self_x, self_y = torch.linalg.norm(Xc) ** 2, torch.linalg.norm(Yc) ** 2"))),
    Mutant("cka_no_float64", "cka", "cka.py",
           "computes in the input dtype instead of float64",
           (("    M = M.detach().to(torch.float64)\n", "    M = M.detach()\n"),)),
    Mutant("cka_returns_tensor", "cka", "cka.py",
           "linear_cka returns a 0-d tensor instead of a Python float",
           (("    cka = (cross / (self_x * self_y)).item()", "    cka = cross / (self_x * self_y)"),
            ("    return min(max(cka, 0.0), 1.0)", "    return cka.clamp(0.0, 1.0)"))),
    Mutant("cka_no_row_check", "cka", "cka.py",
           "X and Y with different n fail inside matmul (RuntimeError) instead of a ValueError",
           (("    if Xc.shape[0] != Yc.shape[0]:\n        raise ValueError(",
             "    if False:\n        raise ValueError("),)),
    Mutant("cka_numpy_unsupported", "cka", "cka.py",
           "NumPy inputs crash (the code calls tensor methods on an ndarray)",
           (("    M = torch.as_tensor(M)\n    if M.dim() != 2:", "    if M.dim() != 2:"),)),
    Mutant("cka_no_constant_check", "cka", "cka.py",
           "no zero-variance check: constant inputs give 0 (or round-off) instead of nan",
           (("    if _is_constant(Xc, X) or _is_constant(Yc, Y):\n        return float(\"nan\")\n", ""),)),
    Mutant("cka_matrix_upper_only", "cka", "cka.py",
           "cka_matrix fills only the upper triangle",
           (("    result = (result + result.T) / 2  # exactly symmetric despite round-off",
             "    result = torch.triu(result)"),)),
    Mutant("cka_matrix_float32", "cka", "cka.py",
           "cka_matrix returns float32 (e.g. built with torch.zeros(L, L))",
           (("    result[:, undefined] = float(\"nan\")\n    return result",
             "    result[:, undefined] = float(\"nan\")\n    return result.float()"),)),
    Mutant("cka_in_place_centering", "cka", "cka.py",
           "centers the caller's float64 input in place (X -= X.mean(0))",
           (("    M = M.detach().to(torch.float64)\n    return M - M.mean(dim=0, keepdim=True)",
             "    M = M.detach().to(torch.float64)\n    M -= M.mean(dim=0, keepdim=True)\n    return M"),)),
    Mutant("cka_matrix_empty", "cka", "cka.py",
           "cka_matrix([]) fails with IndexError instead of ValueError",
           (("    if len(reps) == 0:\n        raise ValueError(", "    if False:\n        raise ValueError("),)),
    # Hostile entries: form without substance. They must earn nothing in cka.
    Mutant("cka_constant_float", "cka", "cka.py",
           "linear_cka validates its inputs (and returns nan for zero variance) but returns 0.5 otherwise",
           (("    cka = (cross / (self_x * self_y)).item()", "    cka = 0.5"),)),
    Mutant("cka_always_value_error", "cka", "cka.py",
           "linear_cka raises ValueError for every input",
           (("    Xc = _centered_float64(X, \"X\")\n",
             "    raise ValueError(\"X and Y must be 2-D [n, d] matrices with the same n >= 2\")\n"),)),

    # ---------------------------------------------------------------- pooling
    Mutant("pool_divide_by_length", "pooling", "pooling.py",
           "divides the masked sum by the padded length T",
           (("    counts = weights.sum(dim=1, keepdim=True).clamp(min=1.0)",
             "    counts = torch.full_like(weights[:, :1], weights.shape[1])"),)),
    Mutant("pool_mask_ignored", "pooling", "pooling.py",
           "ignores the mask: plain mean over all T positions",
           (("    weights = (attention_mask != 0).to(compute_dtype)",
             "    weights = torch.ones(attention_mask.shape, dtype=compute_dtype)"),)),
    Mutant("pool_cls", "pooling", "pooling.py",
           "returns the first ([CLS]) position instead of the mean",
           (("    return (summed / counts).to(hidden_states.dtype)", "    return hidden_states[:, 0].clone()"),)),
    Mutant("pool_nan_all_padding", "pooling", "pooling.py",
           "an all-padding row gives 0/0 = NaN",
           (("    counts = weights.sum(dim=1, keepdim=True).clamp(min=1.0)", "    counts = weights.sum(dim=1, keepdim=True)"),)),
    Mutant("pool_float32_out", "pooling", "pooling.py",
           "half-precision input comes back as float32 (no cast back)",
           (("    return (summed / counts).to(hidden_states.dtype)", "    return summed / counts"),)),
    Mutant("pool_in_place", "pooling", "pooling.py",
           "zeroes the padding of the caller's hidden_states in place (mul_)",
           (("    summed = torch.bmm(weights.unsqueeze(1), hidden_states.to(compute_dtype)).squeeze(1)  # [B, D]",
             "    hidden_states.mul_(weights.unsqueeze(-1).to(hidden_states.dtype))  # zero the padding\n"
             "    summed = hidden_states.to(compute_dtype).sum(dim=1)"),)),
    Mutant("pool_bool_mask_crash", "pooling", "pooling.py",
           "uses 1 - mask, which fails for a bool mask",
           (("    weights = (attention_mask != 0).to(compute_dtype)",
             "    weights = 1 - (1 - attention_mask).to(compute_dtype)"),)),
    Mutant("pool_keepdim", "pooling", "pooling.py",
           "returns [B, 1, D] (sum with keepdim=True)",
           (("    summed = torch.bmm(weights.unsqueeze(1), hidden_states.to(compute_dtype)).squeeze(1)  # [B, D]\n"
             "    counts = weights.sum(dim=1, keepdim=True).clamp(min=1.0)",
             "    summed = (hidden_states.to(compute_dtype) * weights.unsqueeze(-1)).sum(dim=1, keepdim=True)\n"
             "    counts = weights.sum(dim=1, keepdim=True).clamp(min=1.0).unsqueeze(-1)"),)),
    Mutant("pool_no_validation", "pooling", "pooling.py",
           "no shape checks: mismatched inputs fail inside torch (RuntimeError), not with a ValueError",
           (("    if hidden_states.dim() != 3:\n", "    if False:\n"),
            ("    if attention_mask.dim() != 2 or attention_mask.shape != hidden_states.shape[:2]:\n",
             "    if False:\n"))),
    Mutant("pool_sum", "pooling", "pooling.py",
           "returns the masked sum, never divides",
           (("    return (summed / counts).to(hidden_states.dtype)", "    return summed.to(hidden_states.dtype)"),)),
    Mutant("pool_last_token", "pooling", "pooling.py",
           "returns each row's last real token (decoder-style pooling) instead of the mean",
           (("    return (summed / counts).to(hidden_states.dtype)",
             "    last = (attention_mask != 0).sum(dim=1) - 1  # each row's last real token (right padding)\n"
             "    return hidden_states[torch.arange(hidden_states.shape[0]), last].clone()"),)),
    Mutant("pool_constant", "pooling", "pooling.py",
           "hostile: checks the shapes, then returns zeros of the right shape and dtype (a constant)",
           (("    return (summed / counts).to(hidden_states.dtype)",
             "    return torch.zeros(hidden_states.shape[0], hidden_states.shape[2], dtype=hidden_states.dtype)"),)),
    Mutant("pool_no_gradient", "pooling", "pooling.py",
           "averages hidden_states.detach(): right values, no gradient to the encoder",
           (("    summed = torch.bmm(weights.unsqueeze(1), hidden_states.to(compute_dtype)).squeeze(1)",
             "    summed = torch.bmm(weights.unsqueeze(1), hidden_states.detach().to(compute_dtype)).squeeze(1)"),)),
    Mutant("pool_always_value_error", "pooling", "pooling.py",
           "hostile: raises ValueError for every input, valid or not",
           (("    if hidden_states.dim() != 3:\n", "    if True:  # reject everything\n"),)),

    # ---------------------------------------------------------------- siamese
    Mutant("sbert_dot_product", "siamese", "siamese.py",
           "forward returns the dot product instead of the cosine",
           (("        return F.cosine_similarity(emb_a, emb_b, dim=-1)", "        return (emb_a * emb_b).sum(dim=-1)"),)),
    Mutant("sbert_not_shared", "siamese", "siamese.py",
           "side b runs a deep copy of the encoder (weights not shared)",
           (("import torch\n", "import copy\n\nimport torch\n"),
            ("        self.encoder = encoder  # one module, used for both sides: the weights are shared",
             "        self.encoder = encoder\n        self.encoder_b = copy.deepcopy(encoder)  # a tower for side b"),
            ("        emb_b = self.encode(input_ids_b, attention_mask_b)",
             "        output_b = self.encoder_b(input_ids=input_ids_b, attention_mask=attention_mask_b)\n"
             "        emb_b = masked_mean_pool(output_b.last_hidden_state, attention_mask_b)"))),
    Mutant("sbert_cls_encode", "siamese", "siamese.py",
           "encode returns the [CLS] vector instead of the masked mean",
           (("        return masked_mean_pool(output.last_hidden_state, attention_mask)",
             "        return output.last_hidden_state[:, 0]"),)),
    Mutant("sbert_pooler_output", "siamese", "siamese.py",
           "encode returns pooler_output",
           (("        return masked_mean_pool(output.last_hidden_state, attention_mask)",
             "        return output.pooler_output"),)),
    Mutant("sbert_all_pairs", "siamese", "siamese.py",
           "forward returns the [B, B] matrix of all pairs",
           (("        return F.cosine_similarity(emb_a, emb_b, dim=-1)",
             "        return F.normalize(emb_a, dim=-1) @ F.normalize(emb_b, dim=-1).T"),)),
    Mutant("sbert_unmasked_mean", "siamese", "siamese.py",
           "encode averages all positions (its own mean, padding included)",
           (("        return masked_mean_pool(output.last_hidden_state, attention_mask)",
             "        return output.last_hidden_state.mean(dim=1)"),)),
    Mutant("sbert_no_encoder_mask", "siamese", "siamese.py",
           "calls the encoder without attention_mask (real tokens attend to padding)",
           (("        output = self.encoder(input_ids=input_ids, attention_mask=attention_mask)",
             "        output = self.encoder(input_ids=input_ids)"),)),
    Mutant("sbert_cosine_distance", "siamese", "siamese.py",
           "forward returns 1 - cosine (a distance)",
           (("        return F.cosine_similarity(emb_a, emb_b, dim=-1)",
             "        return 1 - F.cosine_similarity(emb_a, emb_b, dim=-1)"),)),
    Mutant("sbert_encode_no_grad", "siamese", "siamese.py",
           "encode runs the encoder under torch.no_grad() (right values, nothing to train)",
           (("        output = self.encoder(input_ids=input_ids, attention_mask=attention_mask)\n",
             "        with torch.no_grad():\n"
             "            output = self.encoder(input_ids=input_ids, attention_mask=attention_mask)\n"),)),
    Mutant("sbert_detach_branch_b", "siamese", "siamese.py",
           "forward detaches side b's embedding (only branch a trains the encoder)",
           (("        emb_b = self.encode(input_ids_b, attention_mask_b)",
             "        emb_b = self.encode(input_ids_b, attention_mask_b).detach()"),)),
    Mutant("sbert_wraps_a_copy", "siamese", "siamese.py",
           "create_sbert wraps a deep copy of the model it is given",
           (("import torch\n", "import copy\n\nimport torch\n"),
            ("    return SiameseBert(bert_model)", "    return SiameseBert(copy.deepcopy(bert_model))"))),
    Mutant("sbert_cosine_wrong_dim", "siamese", "siamese.py",
           "takes the cosine over the batch dimension (dim=0)",
           (("        return F.cosine_similarity(emb_a, emb_b, dim=-1)",
             "        return F.cosine_similarity(emb_a, emb_b, dim=0)"),)),

    # ---------------------------------------------------------------- retrieval
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
    Mutant("ret_normalise_in_place", "retrieval", "retrieval.py",
           "normalises the caller's query tensor in place",
           (("    queries = F.normalize(queries.to(dtype), dim=1)",
             "    queries = queries.to(dtype)\n    queries /= torch.linalg.vector_norm(queries, dim=1, keepdim=True).clamp(min=1e-12)"),)),
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


# =============================================================================================
# Variants: correct, but not the reference's way
# =============================================================================================

_CKA_GRAM = '''def linear_cka(X: Matrix, Y: Matrix) -> float:
    """Linear CKA in its Gram (n x n) form: <Kx, Ky> / (||Kx|| ||Ky||), Kx = Xc Xc^T."""
    X = torch.as_tensor(X).detach().to(torch.float64)
    Y = torch.as_tensor(Y).detach().to(torch.float64)
    if X.dim() != 2 or Y.dim() != 2:
        raise ValueError(f"X and Y must be 2-D; got {tuple(X.shape)} and {tuple(Y.shape)}")
    if X.shape[0] != Y.shape[0] or X.shape[0] < 2:
        raise ValueError(f"X and Y need the same n >= 2 rows; got {X.shape[0]} and {Y.shape[0]}")
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    if torch.linalg.norm(Xc) <= 1e-10 * torch.linalg.norm(X) or torch.linalg.norm(Yc) <= 1e-10 * torch.linalg.norm(Y):
        return float("nan")
    Kx, Ky = Xc @ Xc.T, Yc @ Yc.T
    value = float((Kx * Ky).sum() / (torch.linalg.norm(Kx) * torch.linalg.norm(Ky)))
    return min(max(value, 0.0), 1.0)
'''

_CKA_NUMPY = '''def linear_cka(X: Matrix, Y: Matrix) -> float:
    """Linear CKA computed with NumPy in float64; returns a Python float."""
    x = torch.as_tensor(X).detach().to(torch.float64).numpy()
    y = torch.as_tensor(Y).detach().to(torch.float64).numpy()
    if x.ndim != 2 or y.ndim != 2:
        raise ValueError("X and Y must be 2-D [n, d] matrices")
    if x.shape[0] != y.shape[0]:
        raise ValueError("X and Y must have the same number of rows")
    if x.shape[0] < 2:
        raise ValueError("CKA needs at least 2 examples")
    xc = x - x.mean(axis=0, keepdims=True)
    yc = y - y.mean(axis=0, keepdims=True)
    if np.linalg.norm(xc) <= 1e-10 * np.linalg.norm(x) or np.linalg.norm(yc) <= 1e-10 * np.linalg.norm(y):
        return float("nan")
    cross = np.linalg.norm(yc.T @ xc, "fro") ** 2
    value = cross / (np.linalg.norm(xc.T @ xc, "fro") * np.linalg.norm(yc.T @ yc, "fro"))
    return float(np.clip(value, 0.0, 1.0))
'''

_CKA_MATRIX_LOOP = '''def cka_matrix(reps: Sequence[Matrix]) -> Float[Tensor, "L L"]:
    """Pairwise linear_cka, one pair at a time (symmetric: each pair computed once)."""
    if len(reps) == 0:
        raise ValueError("cka_matrix needs at least one representation")
    rows = {int(torch.as_tensor(r).shape[0]) for r in reps}
    if len(rows) != 1:
        raise ValueError(f"all representations need the same number of rows; got {sorted(rows)}")
    L = len(reps)
    result = torch.zeros(L, L, dtype=torch.float64)
    for i in range(L):
        for j in range(i, L):
            value = 1.0 if i == j else linear_cka(reps[i], reps[j])
            result[i, j] = result[j, i] = value
    for i in range(L):
        if math.isnan(linear_cka(reps[i], reps[i])):
            result[i, :] = float("nan")
            result[:, i] = float("nan")
    return result
'''

_CKA_HSIC = '''def linear_cka(X: Matrix, Y: Matrix) -> float:
    """Linear CKA as normalised HSIC with the centering matrix H = I - 11^T / n."""
    X = torch.as_tensor(X).detach().double()
    Y = torch.as_tensor(Y).detach().double()
    if X.ndim != 2 or Y.ndim != 2 or X.shape[0] != Y.shape[0] or X.shape[0] < 2:
        raise ValueError(f"expected X [n, d1] and Y [n, d2] with the same n >= 2; got {tuple(X.shape)}, {tuple(Y.shape)}")
    n = X.shape[0]
    H = torch.eye(n, dtype=torch.float64) - 1.0 / n
    Kx, Ky = H @ (X @ X.T) @ H, H @ (Y @ Y.T) @ H

    def hsic(A, B):
        return (A * B).sum()

    # trace(H K H) = ||Xc||_F^2; centering the Gram matrix leaves round-off of about 1e-16 * trace(K),
    # so "no variance" is judged on the square roots with a correspondingly looser threshold.
    if Kx.trace().clamp(min=0).sqrt() <= 1e-6 * torch.linalg.norm(X) or \
            Ky.trace().clamp(min=0).sqrt() <= 1e-6 * torch.linalg.norm(Y):
        return float("nan")
    return float((hsic(Kx, Ky) / torch.sqrt(hsic(Kx, Kx) * hsic(Ky, Ky))).clamp(0.0, 1.0))
'''

# The lesson's formula as a student may type it: float64, d x d products, no clamp (so a perfect
# match may come out as 1.0000000000000002), and zero variance tested as "every row equals the first".
_CKA_LITERAL = '''def linear_cka(X: Matrix, Y: Matrix) -> float:
    """The docstring's formula written literally in float64: d x d products, no clamp, no Gram form.

    X [n, d1], Y [n, d2] -> a Python float (round-off may leave it a few ulps outside [0, 1]).
    """
    X = torch.as_tensor(X).detach().to(torch.float64)
    Y = torch.as_tensor(Y).detach().to(torch.float64)
    if X.dim() != 2 or Y.dim() != 2:
        raise ValueError(f"X and Y must be 2-D [n, d] matrices; got {tuple(X.shape)} and {tuple(Y.shape)}")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but Y has {Y.shape[0]}")
    if X.shape[0] < 2:
        raise ValueError("CKA needs at least 2 examples")
    # Zero variance means every row is the same vector: test that directly (exact, no tolerance).
    if bool((X == X[0]).all()) or bool((Y == Y[0]).all()):
        return float("nan")
    Xc = X - X.mean(dim=0, keepdim=True)
    Yc = Y - Y.mean(dim=0, keepdim=True)
    numerator = torch.linalg.norm(Yc.T @ Xc, "fro") ** 2
    denominator = torch.linalg.norm(Xc.T @ Xc, "fro") * torch.linalg.norm(Yc.T @ Yc, "fro")
    return (numerator / denominator).item()
'''

_CKA_MATRIX_LITERAL = '''def cka_matrix(reps: Sequence[Matrix]) -> Float[Tensor, "L L"]:
    """M[i, j] = linear_cka(reps[i], reps[j]) for every i and j, literally: [L, L] float64."""
    if len(reps) == 0:
        raise ValueError("cka_matrix needs at least one representation")
    L = len(reps)
    result = torch.empty(L, L, dtype=torch.float64)
    for i in range(L):
        for j in range(L):
            result[i, j] = linear_cka(reps[i], reps[j])
    return result
'''

_POOL_EINSUM = '''def masked_mean_pool(
    hidden_states: Float[Tensor, "B T D"],
    attention_mask: Num[Tensor, "B T"],
) -> Float[Tensor, "B D"]:
    """Masked mean with einsum."""
    if hidden_states.ndim != 3 or attention_mask.ndim != 2 or attention_mask.shape != hidden_states.shape[:2]:
        raise ValueError(f"expected hidden [B, T, D] and mask [B, T]; got {tuple(hidden_states.shape)} "
                         f"and {tuple(attention_mask.shape)}")
    work = torch.float64 if hidden_states.dtype == torch.float64 else torch.float32
    mask = attention_mask.ne(0).to(work)
    total = torch.einsum("btd,bt->bd", hidden_states.to(work), mask)
    count = mask.sum(dim=1).clamp(min=1.0)
    return (total / count[:, None]).to(hidden_states.dtype)
'''

_POOL_LOOP = '''def masked_mean_pool(
    hidden_states: Float[Tensor, "B T D"],
    attention_mask: Num[Tensor, "B T"],
) -> Float[Tensor, "B D"]:
    """Masked mean, one sentence at a time."""
    if hidden_states.dim() != 3:
        raise ValueError("hidden_states must be [B, T, D]")
    if attention_mask.dim() != 2 or tuple(attention_mask.shape) != tuple(hidden_states.shape[:2]):
        raise ValueError("attention_mask must be [B, T] like hidden_states")
    rows = []
    for b in range(hidden_states.shape[0]):
        keep = attention_mask[b] != 0
        if keep.any():
            rows.append(hidden_states[b][keep].float().mean(dim=0) if hidden_states.dtype != torch.float64
                        else hidden_states[b][keep].mean(dim=0))
        else:
            rows.append(torch.zeros(hidden_states.shape[2], dtype=torch.float64 if hidden_states.dtype == torch.float64
                                    else torch.float32))
    return torch.stack(rows).to(hidden_states.dtype)
'''

# The sentence-transformers recipe: the raw mask expanded and cast with .float(), everything in float32
# (float64 input too), a count clamped at 1e-9, cast back at the end.
_POOL_ST_RECIPE = '''def masked_mean_pool(
    hidden_states: Float[Tensor, "B T D"],
    attention_mask: Num[Tensor, "B T"],
) -> Float[Tensor, "B D"]:
    """Masked mean as in sentence-transformers, in float32."""
    if hidden_states.dim() != 3 or attention_mask.dim() != 2 or attention_mask.shape != hidden_states.shape[:2]:
        raise ValueError("expected hidden_states [B, T, D] and attention_mask [B, T]")
    input_mask_expanded = attention_mask.unsqueeze(-1).expand(hidden_states.size()).float()
    sum_embeddings = torch.sum(hidden_states.float() * input_mask_expanded, 1)
    sum_mask = torch.clamp(input_mask_expanded.sum(1), min=1e-9)
    return (sum_embeddings / sum_mask).to(hidden_states.dtype)
'''

# A running mean token by token in the input dtype: half precision rounds at every token.
_POOL_RUNNING_MEAN = '''def masked_mean_pool(
    hidden_states: Float[Tensor, "B T D"],
    attention_mask: Num[Tensor, "B T"],
) -> Float[Tensor, "B D"]:
    """Running mean of the real tokens, in the input dtype."""
    if hidden_states.dim() != 3 or attention_mask.dim() != 2 or attention_mask.shape != hidden_states.shape[:2]:
        raise ValueError("expected hidden_states [B, T, D] and attention_mask [B, T]")
    B, T, D = hidden_states.shape
    out = torch.zeros(B, D, dtype=hidden_states.dtype)
    for b in range(B):
        mean, n = torch.zeros(D, dtype=hidden_states.dtype), 0
        for t in range(T):
            if attention_mask[b, t] != 0:
                n += 1
                mean = mean + (hidden_states[b, t] - mean) / n
        out[b] = mean
    return out
'''

_SBERT_NORMALISE = '''    def forward(
        self,
        input_ids_a: Int[Tensor, "B Ta"],
        attention_mask_a: Int[Tensor, "B Ta"],
        input_ids_b: Int[Tensor, "B Tb"],
        attention_mask_b: Int[Tensor, "B Tb"],
    ) -> Float[Tensor, "B"]:
        """Cosine as the dot product of unit vectors."""
        a = F.normalize(self.encode(input_ids_a, attention_mask_a), dim=-1)
        b = F.normalize(self.encode(input_ids_b, attention_mask_b), dim=-1)
        return (a * b).sum(dim=-1)
'''

_SBERT_INLINE_POOL = '''    def encode(
        self, input_ids: Int[Tensor, "B T"], attention_mask: Int[Tensor, "B T"]
    ) -> Float[Tensor, "B D"]:
        """Mean of the real tokens' last hidden states, computed inline."""
        states = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        weights = attention_mask.unsqueeze(-1).to(states.dtype)
        return (states * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
'''

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
        all_scores.append(ranked.values[:k])
        all_indices.append(ranked.indices[:k])
    if not all_scores:
        return torch.empty(0, k, dtype=dtype), torch.empty(0, k, dtype=torch.long)
    return torch.stack(all_scores), torch.stack(all_indices)
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
        scores.append(ranked.values[:, :k].to(out_dtype))
        indices.append(ranked.indices[:, :k])
    return torch.cat(scores), torch.cat(indices)
'''

VARIANTS = (
    Variant("var_cka_gram", "cka", "cka.py", "linear_cka always in the n x n Gram form",
            {"linear_cka": _CKA_GRAM}),
    Variant("var_cka_numpy", "cka", "cka.py",
            "linear_cka in NumPy (returns a Python float via numpy); cka_matrix loops over linear_cka",
            {"linear_cka": _CKA_NUMPY, "cka_matrix": _CKA_MATRIX_LOOP}, (("import numpy as np\n", "import math\n\nimport numpy as np\n"),)),
    Variant("var_cka_hsic", "cka", "cka.py", "linear_cka as normalised HSIC with the centering matrix H",
            {"linear_cka": _CKA_HSIC}),
    Variant("var_cka_literal", "cka", "cka.py",
            "linear_cka and cka_matrix exactly as their docstrings say: the formula in float64, no clamp, "
            "every [i, j] of the matrix computed separately",
            {"linear_cka": _CKA_LITERAL, "cka_matrix": _CKA_MATRIX_LITERAL}),
    Variant("var_pool_einsum", "pooling", "pooling.py", "masked mean with einsum",
            {"masked_mean_pool": _POOL_EINSUM}),
    Variant("var_pool_loop", "pooling", "pooling.py", "masked mean with a Python loop over the batch",
            {"masked_mean_pool": _POOL_LOOP}),
    Variant("var_pool_st_recipe", "pooling", "pooling.py",
            "the sentence-transformers recipe: float32 for every input dtype, count clamped at 1e-9, cast back",
            {"masked_mean_pool": _POOL_ST_RECIPE}),
    Variant("var_pool_running_mean", "pooling", "pooling.py",
            "a running mean token by token in the input dtype (half precision rounds at every token)",
            {"masked_mean_pool": _POOL_RUNNING_MEAN}),
    Variant("var_sbert_normalize_dot", "siamese", "siamese.py", "forward = dot product of F.normalize'd embeddings",
            {"SiameseBert.forward": _SBERT_NORMALISE}),
    Variant("var_sbert_inline_pool", "siamese", "siamese.py", "encode computes the masked mean inline",
            {"SiameseBert.encode": _SBERT_INLINE_POOL}),
    Variant("var_ret_loop", "retrieval", "retrieval.py", "one query at a time with a full stable sort (slow but correct)",
            {"semantic_search": _RET_LOOP}),
    Variant("var_ret_chunked", "retrieval", "retrieval.py", "fixed corpus chunks of 1024 rows merged by stable sorts",
            {"semantic_search": _RET_CHUNKED}),
    Variant("var_index_concat", "retrieval", "retrieval.py", "SemanticIndex concatenates the embeddings on every add",
            {"SemanticIndex.add": _INDEX_CAT_ADD}),
    Variant("var_ret_float64", "retrieval", "retrieval.py",
            "scores in float64 (matmul, then divide by both norms), stable sort, cast back: rounds unlike the reference",
            {"semantic_search": _RET_FLOAT64}),
)


# =============================================================================================
# Building
# =============================================================================================

def stripped_solutions() -> dict[str, str]:
    """file name -> solutions/<file> without its fence lines."""
    return reference_sources()


def swap(source: str, old: str, new: str, where: str) -> str:
    count = source.count(old)
    if count != 1:
        raise ValueError(f"{where}: the text to replace occurs {count} times (expected once):\n{old}")
    return source.replace(old, new)


_DEF_LINE = re.compile(r"^(\s*)def\s+(\w+)\s*\(")


def replace_function(source: str, qualname: str, new_source: str, where: str) -> str:
    """Replace the def of ``qualname`` ("f" or "Class.method") with ``new_source``."""
    lines = source.splitlines(keepends=True)
    parts = qualname.split(".")
    start = indent = None
    for i, line in enumerate(lines):
        match = _DEF_LINE.match(line)
        if match and match.group(2) == parts[-1] and len(match.group(1)) == 4 * (len(parts) - 1):
            start, indent = i, len(match.group(1))
            break
    if start is None:
        raise ValueError(f"{where}: no def {qualname}")
    end = start + 1
    while end < len(lines):
        line = lines[end]
        if line.strip() and len(line) - len(line.lstrip()) <= indent and not line.lstrip().startswith(")"):
            break
        end += 1
    while end > start + 1 and not lines[end - 1].strip():  # keep the blank lines that separate defs
        end -= 1
    return "".join(lines[:start]) + new_source.rstrip("\n") + "\n" + "".join(lines[end:])


def entry_files(entry) -> dict[str, str]:
    """file name -> text of the four files of a Mutant or Variant: its change applied to the solutions."""
    files = stripped_solutions()
    text = files[entry.file]
    for old, new in entry.swaps:
        text = swap(text, old, new, entry.name)
    for qualname, new_source in getattr(entry, "functions", {}).items():
        text = replace_function(text, qualname, new_source, entry.name)
    files[entry.file] = text
    return files
