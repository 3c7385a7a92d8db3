"""Hidden suite, task pooling: masked_mean_pool.

Expected values come from ``reference.pooling.masked_mean_pool`` on the same seeded inputs. Only plain
tensors cross to the code under test.
"""

from __future__ import annotations

import pytest
import torch

from bertlab.checks import (check_close, check_tensor, expect_value_error, fail, generator, name_mistake,
                            tensor_result)

from . import reference_data as data

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


def diagnose_pool(actual: torch.Tensor, hidden: torch.Tensor, mask: torch.Tensor) -> str:
    """Name the classic pooling mistakes (bertlab/mistakes.py) whose output ``actual`` matches."""
    h = hidden.double()
    m = (mask != 0).double()[..., None]
    return name_mistake(actual, {
        "pool_mask_ignored": h.mean(1),
        "pool_divide_by_length": (h * m).sum(1) / hidden.shape[1],
        "pool_cls": h[:, 0],
        "pool_sum": (h * m).sum(1),
        "pool_inverted_mask": (h * (1 - m)).sum(1) / (1 - m).sum(1).clamp(min=1),
    }, tol=1e-3)


def check_pool(impl, reference, hidden, mask, what: str, *, atol: float = 1e-5) -> torch.Tensor:
    B, T, D = hidden.shape
    value = impl.pooling.masked_mean_pool(hidden.clone(), mask.clone())
    actual = tensor_result(value, what)
    if tuple(actual.shape) == (B, 1, D):
        fail(f"{what} has shape {list(actual.shape)}; expected {[B, D]}. Sum over dim=1 without "
             "keepdim=True (or squeeze the token dimension).")
    check_tensor(actual, (B, D), what, shape_hint="One D-vector per sentence: reduce over the token dimension T.",
                 finite_hint="A row with no real token must give zeros: clamp the token count at 1 (or 1e-9) "
                             "before dividing.")
    if actual.dtype != hidden.dtype:
        fail(f"{what} has dtype {actual.dtype}; expected {hidden.dtype} (the dtype of hidden_states). "
             "Accumulate in float32 if you like, then cast back with `.to(hidden_states.dtype)`.")
    expected = reference.pooling.masked_mean_pool(hidden, mask)
    check_close(actual, expected, what, atol=atol, rtol=atol,
                diagnose=lambda a: diagnose_pool(a, hidden, mask))
    return actual


@pytest.mark.points(4)
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
    check_pool(impl, reference, hidden, mask, "masked_mean_pool of MiniLM's padded batch of 6 reviews", atol=1e-5)


@pytest.mark.points(2)
def test_pool_all_padding_row_is_zero(impl, reference):
    hidden, mask = make_batch(110, 3, 6, 5, lengths=[4, 0, 6])
    pooled = check_pool(impl, reference, hidden, mask, "masked_mean_pool with an all-padding row 1")
    if not torch.equal(pooled[1], torch.zeros_like(pooled[1])):
        fail("Row 1 has no real token; its pooled vector must be all zeros.")


@pytest.mark.points(2)
def test_pool_mask_dtypes_agree(impl, reference):
    hidden, mask = make_batch(120, 5, 8, 4, lengths=[8, 3, 1, 0, 5])
    for dtype in (torch.bool, torch.int32, torch.int64, torch.float32, torch.float16):
        check_pool(impl, reference, hidden, mask.to(dtype), f"masked_mean_pool with a {dtype} mask")


@pytest.mark.points(3)
def test_pool_keeps_dtype(impl, reference):
    # Half-precision hidden states (mixed-precision inference) must come back in half precision, and a
    # sum over many tokens must not lose the mean: long rows of values near 1.
    for dtype, atol in ((torch.float16, 2e-3), (torch.bfloat16, 2e-2), (torch.float64, 1e-12)):
        hidden, mask = make_batch(130, 4, 300, 8, lengths=[300, 150, 1, 0], dtype=dtype)
        check_pool(impl, reference, hidden, mask, f"masked_mean_pool of {dtype} hidden states", atol=atol)


@pytest.mark.points(2)
def test_pool_ignores_extra_padding(impl, reference):
    hidden, mask = make_batch(140, 4, 7, 5, lengths=[7, 2, 5, 1])
    g = generator(141)
    padded_hidden = torch.cat([hidden, 100 * torch.randn(4, 6, 5, generator=g)], dim=1)
    padded_mask = torch.cat([mask, torch.zeros(4, 6, dtype=mask.dtype)], dim=1)
    short = check_pool(impl, reference, hidden, mask, "masked_mean_pool(hidden [4, 7, 5])")
    long = check_pool(impl, reference, padded_hidden, padded_mask,
                      "masked_mean_pool with 6 more padding positions")
    check_close(long, short, "masked_mean_pool after adding padding (vs without it)", atol=1e-5,
                hint="Extra padding must not change the mean of the real tokens.")


@pytest.mark.points(3)
def test_pool_rejects_mismatched_shapes(impl, reference):
    hidden, mask = make_batch(150, 3, 5, 4)
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
    for dtype in (torch.float32, torch.bool):
        hidden, mask = make_batch(160, 3, 6, 4, lengths=[6, 2, 0])
        mask = mask.to(dtype)
        hidden_before, mask_before = hidden.clone(), mask.clone()
        result = impl.pooling.masked_mean_pool(hidden, mask)
        if not torch.equal(hidden, hidden_before) or not torch.equal(mask, mask_before):
            fail("masked_mean_pool modified its inputs in place (e.g. `hidden_states *= mask` or "
                 "`masked_fill_`): the caller's hidden states changed. Build new tensors instead.")
        # The point is for a right answer that also leaves the inputs alone: doing nothing earns nothing.
        expected = reference.pooling.masked_mean_pool(hidden_before.clone(), mask_before.clone())
        check_close(tensor_result(result, "masked_mean_pool"), expected, f"masked_mean_pool ({dtype} mask)", atol=1e-5,
                    diagnose=lambda a: diagnose_pool(a, hidden_before, mask_before))
