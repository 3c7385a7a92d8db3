"""The mutant bank's entries for task pooling: masked mean pooling (masked_mean_pool).

Mutants (one realistic mistake each: the mistake of the same name in bertlab/teaching/pooling.py holds
the hint a student gets) and variants (correct, but not the reference's way). To add a mutant: add its
mistake there, a ``Mutant(...)`` here, then run ``bertlab audit --only <name>``.
"""

from __future__ import annotations

import torch

from bertlab_grader.mutants.fingerprint import Record, gen, normalise, outcome
from bertlab_grader.mutants.recipe import SCALE_FREE_KEY, Mutant, Variant

MUTANTS = (
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
    Mutant("pool_mask_in_place", "pooling", "pooling.py",
           "turns the mask into weights that sum to 1 with an in-place division: a float mask of the compute "
           "dtype is the caller's own tensor, and is divided",
           (("    weights = (attention_mask != 0).to(compute_dtype)  # [B, T]; nonzero counts as \"real token\"",
             "    weights = attention_mask.to(compute_dtype)  # the caller's mask itself when it is float already\n"
             "    weights /= weights.sum(dim=1, keepdim=True).clamp(min=1.0)"),
            ("    counts = weights.sum(dim=1, keepdim=True).clamp(min=1.0)  # [B, 1]; all-padding rows -> 0 / 1",
             "    counts = torch.ones_like(weights[:, :1])  # the weights are divided already"))),
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
    Mutant("pool_right_padding_assumed", "pooling", "pooling.py",
           "averages each row's first mask.sum() positions: right only when all the padding is on the right",
           (("    weights = (attention_mask != 0).to(compute_dtype)  # [B, T]; nonzero counts as \"real token\"",
             "    counts_ = (attention_mask != 0).sum(dim=1, keepdim=True)  # [B, 1]\n"
             "    weights = (torch.arange(attention_mask.shape[1])[None, :] < counts_).to(compute_dtype)"),)),
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
)


# ---------------------------------------------------------------------------------------------
# Variants: correct, but not the reference's way
# ---------------------------------------------------------------------------------------------

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

# The Python loop above, answering from memory when the exact same inputs come again (their bytes):
# correct, and as fast as the loop on inputs it has not seen. Timed calls never repeat their inputs
# (grader/bertlab_grader/performance/timing.py), so the memory earns no speed points (tests/test_performance.py).
_POOL_LOOP_MEMO = _POOL_LOOP.replace("def masked_mean_pool(", "def _pool_by_loop(", 1) + \
    '''

_ANSWERS = {}  # sha1 of the inputs' dtypes, shapes and bytes -> the answer computed for them


def _fingerprint(tensor) -> bytes:
    flat = tensor.detach().contiguous().reshape(-1)
    return f"{tensor.dtype}{tuple(tensor.shape)}".encode() + flat.view(torch.uint8).numpy().tobytes()


def masked_mean_pool(
    hidden_states: Float[Tensor, "B T D"],
    attention_mask: Num[Tensor, "B T"],
) -> Float[Tensor, "B D"]:
    """The loop's masked mean, remembered by the bytes of the inputs (not when a gradient is due)."""
    if hidden_states.requires_grad or not isinstance(attention_mask, torch.Tensor):
        return _pool_by_loop(hidden_states, attention_mask)
    import hashlib

    key = hashlib.sha1(_fingerprint(hidden_states) + _fingerprint(attention_mask)).hexdigest()
    if key not in _ANSWERS:
        _ANSWERS[key] = _pool_by_loop(hidden_states, attention_mask)
    return _ANSWERS[key].clone()
'''

# The Python loop again, answering from memory when inputs come again times a positive factor: a key
# blind to scale (recipe.SCALE_FREE_KEY: the first values over the first non-zero one), the answer
# scaled as a mean is. It earned full points while timed call n got the same inputs times 1 + n/128;
# every timed call now gets an independent draw, and it measures as the loop (tests/test_performance.py).
_POOL_LOOP_SCALE_MEMO = _POOL_LOOP.replace("def masked_mean_pool(", "def _pool_by_loop(", 1) + SCALE_FREE_KEY + \
    '''

_ANSWERS = {}  # scale-free key of the inputs -> (the answer [B, D], the scale it was computed at)


def masked_mean_pool(
    hidden_states: Float[Tensor, "B T D"],
    attention_mask: Num[Tensor, "B T"],
) -> Float[Tensor, "B D"]:
    """The loop's masked mean, remembered up to scale: the mean of c * hidden is c times the mean of
    hidden, so a remembered answer is returned scaled (not when a gradient is due)."""
    if not isinstance(hidden_states, torch.Tensor) or not isinstance(attention_mask, torch.Tensor) \
            or hidden_states.requires_grad:
        return _pool_by_loop(hidden_states, attention_mask)
    key, scale = _scale_free_key(hidden_states, attention_mask)
    if key not in _ANSWERS:
        _ANSWERS[key] = (_pool_by_loop(hidden_states, attention_mask), scale)
    answer, at = _ANSWERS[key]
    return answer.clone() if scale == at else answer * (scale / at)
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


VARIANTS = (
    Variant("var_pool_einsum", "pooling", "pooling.py", "masked mean with einsum",
            {"masked_mean_pool": _POOL_EINSUM}),
    Variant("var_pool_loop", "pooling", "pooling.py", "masked mean with a Python loop over the batch",
            {"masked_mean_pool": _POOL_LOOP}),
    Variant("var_pool_loop_memo", "pooling", "pooling.py",
            "the Python loop, answering from memory when the same input bytes come again",
            {"masked_mean_pool": _POOL_LOOP_MEMO}),
    Variant("var_pool_st_recipe", "pooling", "pooling.py",
            "the sentence-transformers recipe: float32 for every input dtype, count clamped at 1e-9, cast back",
            {"masked_mean_pool": _POOL_ST_RECIPE}),
    Variant("var_pool_running_mean", "pooling", "pooling.py",
            "a running mean token by token in the input dtype (half precision rounds at every token)",
            {"masked_mean_pool": _POOL_RUNNING_MEAN}),
    Variant("var_pool_loop_scale_memo", "pooling", "pooling.py",
            "the Python loop, answering from memory (rescaled) when the inputs come again times a positive factor",
            {"masked_mean_pool": _POOL_LOOP_SCALE_MEMO}),
)


# ---------------------------------------------------------------------------------------------
# The behaviour fingerprint the hints compare (grader/bertlab_grader/mutants/fingerprint.py)
# ---------------------------------------------------------------------------------------------

def fingerprint(impl) -> dict:
    """What this task\'s functions return on small fixed inputs (values, shapes, dtypes, exception types)."""
    g = gen(901)
    hidden = torch.randn(3, 5, 4, generator=g) + 1
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [0, 0, 0, 0, 0]])
    hidden = torch.where(mask[..., None].bool(), hidden, 40 * torch.ones_like(hidden))
    pool = impl.pooling.masked_mean_pool
    h_in = hidden.clone()
    record = Record()  # filled call by call: a hint's search may stop it early
    record["int"] = outcome(lambda: pool(hidden.clone(), mask.clone()))
    # The same rows padded on the left (real tokens last): tells the first-positions mean apart.
    record["left_padded"] = outcome(lambda: pool(hidden.flip(1), mask.flip(1)))
    record["bool"] = outcome(lambda: pool(hidden.clone(), mask.bool()))
    record["half"] = outcome(lambda: pool(hidden.half(), mask.clone()))
    record["mismatch"] = outcome(lambda: pool(hidden.clone(), torch.ones(3, 6, dtype=torch.long)))
    record["in_place_call"] = outcome(lambda: pool(h_in, mask.clone()))
    record["in_place_input"] = normalise(h_in)
    m_in = mask.float()  # a float32 mask: `.to(torch.float32)` inside returns this very tensor
    record["mask_in_place_call"] = outcome(lambda: pool(hidden.clone(), m_in))
    record["mask_in_place_input"] = normalise(m_in)
    record["gradient"] = outcome(lambda: _pool_gradient_flags(impl, hidden[:2], mask[:2]))
    return record


def _pool_gradient_flags(impl, hidden, mask) -> tuple:
    """(has a graph, every real token gets a gradient, no padding position does), from one backward
    step run where the submission runs (bertlab/probes.py): flags, so round-off never matters."""
    from bertlab.probes import run_probe

    report = run_probe(impl, "pooling_gradients", impl.pooling.masked_mean_pool, hidden, mask)
    grad = report["grad"]
    if not report["has_graph"] or not isinstance(grad, torch.Tensor) or grad.shape != hidden.shape:
        return (report["has_graph"], False, False)
    reached = grad.abs().sum(-1) > 0
    real = mask != 0
    return (True, bool(reached[real].all()), not bool(reached[~real].any()))
