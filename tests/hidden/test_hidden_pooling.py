"""Hidden suite, task pooling: masked_mean_pool.

Expected values come from ``reference.pooling.masked_mean_pool`` on the same seeded inputs. Only plain
tensors cross to the code under test.

Every test, whatever property it is about (dtype, mask dtypes, inputs unchanged, ValueError on bad
shapes), also demands the right mean on valid input: a constant result or a function that always
raises earns nothing. Tolerances are round-off bounds derived from the working precision
(``round_off``), so a correct implementation passes however it is written: sum then divide, mean of
the selected rows, einsum, bmm, a Python loop, float32 accumulation or none, a count clamped at 1 or
at 1e-9.
"""

from __future__ import annotations


import pytest
import torch

from bertlab.assertions import pooling_round_off  # the tolerances both suites share
from bertlab.assertions import call_on_valid_input
from bertlab.assertions import (check_close, check_tensor, describe_change, expect_value_error, fail, generator,
                            name_pooling_mistake, tensor_result)
from bertlab.mistakes import hint as mistake_hint

from bertlab_grader.hidden import reference_data as data

pytestmark = pytest.mark.pooling


def make_batch(seed: int, B: int, T: int, D: int, lengths=None, dtype=torch.float32):
    """Seeded hidden states [B, T, D] (padding positions hold large garbage on purpose) and an int64
    mask [B, T] whose row b has ``lengths[b]`` leading ones."""
    g = generator(seed)
    if lengths is None:
        lengths = torch.randint(1, T + 1, (B,), generator=g).tolist()
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()
    hidden = torch.randn(B, T, D, generator=g) + 2.0
    hidden = torch.where(mask[..., None].bool(), hidden, 50.0 * torch.randn(B, T, D, generator=g))
    return hidden.to(dtype), mask


def round_off(reference, hidden: torch.Tensor, mask: torch.Tensor) -> tuple[float, float]:
    """(atol, name_tol) for masked_mean_pool(hidden [B, T, D], mask [B, T]): bertlab.assertions.pooling_round_off."""
    longest = int((mask != 0).sum(dim=1).max()) if mask.numel() else 0
    scale = float(reference.pooling.masked_mean_pool(hidden.abs().double(), mask).max()) if hidden.numel() else 0.0
    return pooling_round_off(hidden.dtype, longest, scale)


def exact_mean(reference, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The masked mean [B, D] of the given values, in float64 (the reference on float64 inputs): what
    every implementation approximates, whatever its precision."""
    return reference.pooling.masked_mean_pool(hidden.double(), mask)


def check_pool(impl, reference, hidden, mask, what: str, *, hint: str = "") -> torch.Tensor:
    """Call the code under test on copies of (hidden [B, T, D], mask [B, T]) and check type, shape,
    NaN, dtype and values (within the round-off bound); returns the result [B, D]."""
    B, T, D = hidden.shape
    value = call_on_valid_input(lambda: impl.pooling.masked_mean_pool(hidden.clone(), mask.clone()), what,
                                f"the shapes are valid: hidden_states {list(hidden.shape)} and attention_mask "
                                f"{list(mask.shape)}", mistake_hint("pool_always_value_error"))
    actual = tensor_result(value, what)
    if tuple(actual.shape) == (B, 1, D):
        fail(f"{what} has shape {list(actual.shape)}; expected {[B, D]}. Sum over dim=1 without "
             "keepdim=True (or squeeze the token dimension).")
    finite_hint = "A row with no real token must give zeros: clamp the token count at 1 before dividing."
    if hidden.dtype == torch.float16:
        finite_hint += (" In float16, 1e-9 rounds to 0, so a count clamped at 1e-9 in float16 is still 0: "
                        "count in float32, or clamp at 1.")
    check_tensor(actual, (B, D), what, shape_hint="One D-vector per sentence: reduce over the token dimension T.",
                 finite_hint=finite_hint)
    if actual.dtype != hidden.dtype:
        fail(f"{what} has dtype {actual.dtype}; expected {hidden.dtype} (the dtype of hidden_states). "
             "Accumulate in float32 if you like, then cast back with `.to(hidden_states.dtype)`.")
    # The reference's own answer carries round-off of the output dtype; the exact mean carries none.
    expected = exact_mean(reference, hidden, mask)
    atol, name_tol = round_off(reference, hidden, mask)
    check_close(actual, expected, what, atol=atol, hint=hint,
                diagnose=lambda a: name_pooling_mistake(a, hidden, mask, expected, name_tol))
    return actual


@pytest.mark.points(3)
def test_pool_matches_reference(impl, reference):
    for seed, (B, T, D) in enumerate([(4, 9, 6), (1, 1, 3), (7, 16, 32), (3, 5, 1), (16, 40, 24)]):
        hidden, mask = make_batch(100 + seed, B, T, D)
        check_pool(impl, reference, hidden, mask, f"masked_mean_pool(hidden [{B}, {T}, {D}], mask)")


@pytest.mark.points(3)
def test_pool_on_minilm_states(impl, reference):
    # Real contextual states of a padded batch of the lesson's sentences (padding states are not zero).
    from bertlab.datasets import LESSON_REVIEW_SNIPPETS

    ids, mask = data.padded_batch(LESSON_REVIEW_SNIPPETS)
    with torch.no_grad():
        hidden = data.minilm()(input_ids=ids, attention_mask=mask).last_hidden_state
    check_pool(impl, reference, hidden, mask, "masked_mean_pool of MiniLM's padded batch of 6 reviews")


@pytest.mark.points(2)
def test_pool_all_padding_row_is_zero(impl, reference):
    # check_pool compares every row, row 1 included, with the exact mean (zeros for a row without tokens).
    hidden, mask = make_batch(110, 3, 6, 5, lengths=[4, 0, 6])
    check_pool(impl, reference, hidden, mask, "masked_mean_pool with an all-padding row 1",
               hint="Row 1 has no real token: its pooled vector must be all zeros (0 / max(count, 1)).")


def any_pattern_batch(seed: int, B: int, T: int, D: int) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden [B, T, D] and an int64 mask [B, T] whose real tokens are anywhere: row 0 padded on the
    left (a left-padding tokenizer's batch), row 1 with holes, row 2 real tokens in the middle, the
    other rows random 0/1 patterns with at least one real token. Padding positions hold large garbage."""
    g = generator(seed)
    mask = (torch.rand(B, T, generator=g) < 0.55).long()
    mask[:, 0] = torch.where(mask.sum(dim=1) == 0, 1, mask[:, 0])
    mask[0] = (torch.arange(T) >= T // 3).long()            # left padding
    mask[1] = (torch.arange(T) % 3 != 1).long()             # holes
    mask[2] = ((torch.arange(T) >= 2) & (torch.arange(T) < T - 2)).long()  # padding on both sides
    hidden = torch.randn(B, T, D, generator=g) + 2.0
    hidden = torch.where(mask[..., None].bool(), hidden, 50.0 * torch.randn(B, T, D, generator=g))
    return hidden, mask


@pytest.mark.points(2)
def test_pool_masks_of_any_pattern(impl, reference):
    # The docstring's rule is "the positions whose mask is 1, wherever they are": tokenizers pad on the
    # left for some models, and a mask may have holes (tokens dropped on purpose).
    # The rule, not a cause: the right-padding mistake is named only when the result is its formula
    # (check_pool's diagnosis, name_pooling_mistake), never pasted on whatever fails here.
    hint = "Average the positions whose mask is 1, wherever they are in the row (left padding, holes)."
    for seed, (B, T, D) in enumerate([(6, 12, 8), (9, 30, 16)]):
        hidden, mask = any_pattern_batch(150 + seed, B, T, D)
        for dtype in (torch.int64, torch.bool):
            check_pool(impl, reference, hidden, mask.to(dtype),
                       f"masked_mean_pool(hidden [{B}, {T}, {D}], {dtype} mask with left padding and holes)",
                       hint=hint)


@pytest.mark.points(2)
def test_pool_mask_dtypes_agree(impl, reference):
    hidden, mask = make_batch(120, 5, 8, 4, lengths=[8, 3, 1, 0, 5])
    for dtype in (torch.bool, torch.int32, torch.int64, torch.float32, torch.float16):
        check_pool(impl, reference, hidden, mask.to(dtype), f"masked_mean_pool with a {dtype} mask",
                   hint=f"A 0/1 mask must give the same mean whatever its dtype ({dtype} here): compare it with 0 "
                        "(`mask != 0`) or convert it to the hidden states' float dtype before using it.")


@pytest.mark.points(2)
def test_pool_keeps_dtype(impl, reference):
    # Half-precision hidden states (mixed-precision inference) must come back in half precision, and a
    # sum over many tokens must not lose the mean: long rows of values near 2, and an all-padding row.
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        hidden, mask = make_batch(130, 4, 300, 8, lengths=[300, 150, 1, 0], dtype=dtype)
        check_pool(impl, reference, hidden, mask, f"masked_mean_pool of {dtype} hidden states")


@pytest.mark.points(2)
def test_pool_ignores_extra_padding(impl, reference):
    hidden, mask = make_batch(140, 4, 7, 5, lengths=[7, 2, 5, 1])
    g = generator(141)
    padded_hidden = torch.cat([hidden, 100 * torch.randn(4, 6, 5, generator=g)], dim=1)
    padded_mask = torch.cat([mask, torch.zeros(4, 6, dtype=mask.dtype)], dim=1)
    short = check_pool(impl, reference, hidden, mask, "masked_mean_pool(hidden [4, 7, 5])")
    long = check_pool(impl, reference, padded_hidden, padded_mask,
                      "masked_mean_pool with 6 more padding positions")
    # Each is within atol of the same exact mean, so they are within 2 * atol of each other.
    atol, _ = round_off(reference, hidden, mask)
    check_close(long, short, "masked_mean_pool after adding padding (vs without it)", atol=2 * atol,
                hint="Extra padding must not change the mean of the real tokens.")


@pytest.mark.points(3)
def test_pool_rejects_mismatched_shapes(impl, reference):
    hidden, mask = make_batch(150, 3, 5, 4)
    # The points are for rejecting bad shapes while pooling good ones: a function that raises
    # ValueError for everything must earn nothing here.
    check_pool(impl, reference, hidden, mask, "masked_mean_pool(hidden [3, 5, 4], mask [3, 5]) (valid shapes)")
    cases = [
        (hidden, torch.ones(3, 6, dtype=torch.long), "hidden [3, 5, 4] with mask [3, 6]", "T differs"),
        (hidden, torch.ones(2, 5, dtype=torch.long), "hidden [3, 5, 4] with mask [2, 5]", "B differs"),
        (hidden, torch.ones(3, 1, dtype=torch.long), "hidden [3, 5, 4] with mask [3, 1]",
         "a [3, 1] mask would silently broadcast over all 5 positions"),
        (hidden[0], mask[0], "hidden [5, 4] with mask [5]", "hidden_states must be 3-D [B, T, D]"),
        (hidden, mask[..., None], "hidden [3, 5, 4] with mask [3, 5, 1]", "the mask must be 2-D [B, T]"),
    ]
    for h, m, what, why in cases:
        expect_value_error(lambda: impl.pooling.masked_mean_pool(h.clone(), m.clone()),
                           f"masked_mean_pool({what})", why)


@pytest.mark.points(1)
def test_pool_leaves_inputs_unchanged(impl, reference):
    # float64 hidden states and a float64 mask too: a conversion such as `.to(torch.float64)` or
    # `.double()` returns the tensor itself when it already has that dtype, so an in-place change made
    # after it reaches the caller's tensor (a float32 input gets a copy and hides the mistake).
    for hidden_dtype, mask_dtype in ((torch.float32, torch.float32), (torch.float32, torch.bool),
                                     (torch.float64, torch.float64), (torch.float64, torch.int64)):
        hidden, mask = make_batch(160, 3, 6, 4, lengths=[6, 2, 0], dtype=hidden_dtype)
        mask = mask.to(mask_dtype)
        hidden_before, mask_before = hidden.clone(), mask.clone()
        states = "" if hidden_dtype == torch.float32 else f"{hidden_dtype} hidden states, "
        what = f"masked_mean_pool ({states}{mask_dtype} mask)"
        result = impl.pooling.masked_mean_pool(hidden, mask)
        changed = [describe_change(f"{name} ({now.dtype})", before, now)
                   for name, now, before in (("hidden states", hidden, hidden_before), ("mask", mask, mask_before))]
        changed = [c for c in changed if c]
        if changed:
            fail(f"{what} changed its inputs in place: {' '.join(changed)} A `.to(...)` or `.double()` returns the "
                 "input itself when it has that dtype already, so an in-place step after it still reaches the "
                 "caller's tensor. Build new tensors instead (`h * m`, not `h *= m`; `m / n`, not `m /= n`).")
        # The point is for a right answer that also leaves the inputs alone: doing nothing earns nothing.
        actual = check_tensor(result, (3, 4), what, shape_hint="One D-vector per sentence.")
        expected = exact_mean(reference, hidden_before, mask_before)
        atol, name_tol = round_off(reference, hidden_before, mask_before)
        check_close(actual, expected, what, atol=atol,
                    diagnose=lambda a: name_pooling_mistake(a, hidden_before, mask_before, expected, name_tol))


@pytest.mark.points(2)
def test_pool_passes_gradients_to_real_tokens_only(impl, reference):
    # SBERT is fine-tuned THROUGH the pooling: the gradient of the pooled vectors must reach every
    # real token (1 / the row's count of real tokens) and no padding position. A pooling computed in
    # NumPy, on .detach()ed states or under torch.no_grad() gives the right values and trains nothing.
    # The backward step runs where the code under test runs (bertlab/probes.py); the expected
    # gradient is the reference's, from the same probe in this process.
    from bertlab.probes import PROBES, run_probe

    hidden, mask = make_batch(160, 4, 7, 5)
    mask[3] = 0  # an all-padding row: no gradient anywhere in it
    what = "masked_mean_pool(hidden [4, 7, 5], mask)"
    report = run_probe(impl, "pooling_gradients", impl.pooling.masked_mean_pool, hidden.clone(), mask.clone())
    if report["output"] != "tensor":
        fail(f"{what} returned {report['output']}; expected a [4, 5] tensor.")
    # A right answer first: the gradient points go only with the right pooled values.
    expected = exact_mean(reference, hidden, mask)
    atol, name_tol = round_off(reference, hidden, mask)
    check_close(check_tensor(report["pooled"], (4, 5), what), expected, what, atol=atol,
                diagnose=lambda a: name_pooling_mistake(a, hidden, mask, expected, name_tol))
    want = PROBES["pooling_gradients"](reference.pooling.masked_mean_pool, hidden, mask)["grad"]
    if not report["has_graph"] or report["grad"] is None:
        fail(f"{what}: {mistake_hint('pool_no_gradient')}")
    check_close(tensor_result(report["grad"], "the gradient"), want,
                f"the gradient of {what}.sum() with respect to hidden_states", atol=1e-6, rtol=1e-5,
                hint="Each real token of row b must get 1 / (its row's count of real tokens); padding gets 0.")
