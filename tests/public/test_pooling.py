"""Public tests of task pooling: masked_mean_pool.

The oracle is a plain loop over the batch in float64: for each row, average the positions whose mask
is nonzero (zeros when there are none). Properties: extra padding changes nothing, mask dtype does not
matter, the output keeps the input's dtype, the inputs are not modified, bad shapes raise ValueError.
Every test also demands the right mean on valid input, and compares within a round-off bound derived
from the working precision (``round_off``): a correct implementation passes however it is written.
"""

from __future__ import annotations


import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from bertlab.assertions import pooling_round_off  # the tolerances both suites share
from bertlab.assertions import call_on_valid_input
from bertlab.assertions import (check_close, check_tensor, describe_change, expect_value_error, fail, name_pooling_mistake,
                            property_settings)
from bertlab.mistakes import hint as mistake_hint

pytestmark = pytest.mark.pooling


def loop_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Oracle, one row at a time in float64: [B, T, D], [B, T] -> [B, D]."""
    B, T, D = hidden.shape
    out = torch.zeros(B, D, dtype=torch.float64)
    for b in range(B):
        real = [t for t in range(T) if mask[b, t] != 0]
        for t in real:
            out[b] += hidden[b, t].to(torch.float64)
        if real:
            out[b] /= len(real)
    return out


def make_batch(seed: int, B: int, T: int, D: int, dtype=torch.float32, p_real: float = 0.7):
    """Seeded hidden states [B, T, D] (offset so a wrong average is visibly wrong) and an int64 0/1 mask [B, T].

    Rows are padded on the right like a tokenizer's output, and every row keeps at least one real token
    (all-padding rows have their own test).
    """
    rng = np.random.default_rng(seed)
    hidden = torch.tensor(rng.normal(size=(B, T, D)) + rng.normal(scale=3.0, size=(1, 1, D)), dtype=dtype)
    lengths = np.maximum(1, rng.binomial(T, p_real, size=B))
    mask = torch.tensor(np.arange(T)[None, :] < lengths[:, None], dtype=torch.int64)
    return hidden, mask


def round_off(hidden: torch.Tensor, mask: torch.Tensor) -> tuple[float, float]:
    """(atol, name_tol) for masked_mean_pool(hidden [B, T, D], mask [B, T]): how far a correct masked mean
    may land from the exact one, and how close a result must be to a mistake's formula to "be" that
    mistake (bertlab.assertions.pooling_round_off explains the bound; the hidden suite uses the same)."""
    longest = int((mask != 0).sum(dim=1).max()) if mask.numel() else 0
    scale = float(loop_mean(hidden.abs(), mask).max()) if hidden.numel() else 0.0
    return pooling_round_off(hidden.dtype, longest, scale)


FORMULA = "Compare with the docstring: pooled[b] = sum_t mask[b, t] * hidden[b, t] / sum_t mask[b, t]."


def check_pool(impl, hidden: torch.Tensor, mask: torch.Tensor, what: str, hint: str = FORMULA) -> torch.Tensor:
    """Run masked_mean_pool and compare with the loop oracle: type, shape, dtype, NaN, values."""
    B, T, D = hidden.shape
    finite_hint = "A row with no real token must give zeros: divide by the count clamped to at least 1."
    if hidden.dtype == torch.float16:
        finite_hint += (" In float16, 1e-9 rounds to 0, so a count clamped at 1e-9 in float16 is still 0: "
                        "count in float32, or clamp at 1.")
    # The oracle and the tolerance see the inputs as given, whatever the code under test does to its copies.
    expected = loop_mean(hidden, mask)
    atol, name_tol = round_off(hidden, mask)
    value = call_on_valid_input(lambda: impl.pooling.masked_mean_pool(hidden.clone(), mask.clone()),
                                f"masked_mean_pool on {what}", f"the shapes are valid: hidden_states "
                                f"{list(hidden.shape)} and attention_mask {list(mask.shape)}",
                                mistake_hint("pool_always_value_error"))
    out = check_tensor(
        value, [B, D], f"masked_mean_pool on {what}", dtype=hidden.dtype,
        shape_hint="One D-vector per sentence: average over the T axis (dim=1) only.",
        finite_hint=finite_hint,
        dtype_hint="Cast the result back to the input's dtype at the end (`.to(hidden_states.dtype)`).",
    )
    check_close(out, expected, f"masked_mean_pool on {what}", atol=atol, hint=hint,
                diagnose=lambda a: name_pooling_mistake(a, hidden, mask, expected, name_tol))
    return out


def test_masked_mean_pool_small_example(impl):
    # Row 0 has 2 real tokens of 3, row 1 has 3 of 3: the hand-made numbers make the mean easy to check.
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]],
                           [[1.0, 1.0], [2.0, 2.0], [6.0, 3.0]]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    check_pool(impl, hidden, mask, "a [2, 3, 2] example")


@property_settings(max_examples=40)
@given(seed=st.integers(0, 2**32 - 1), B=st.integers(1, 6), T=st.integers(1, 12), D=st.integers(1, 10),
       p_real=st.floats(0.0, 1.0))
def test_masked_mean_pool_matches_a_loop(impl, seed, B, T, D, p_real):
    hidden, mask = make_batch(seed, B, T, D, p_real=p_real)
    check_pool(impl, hidden, mask, f"random [B={B}, T={T}, D={D}]")


def test_real_tokens_may_be_anywhere(impl):
    # Some tokenizers pad on the left, and a mask may leave a token out: only the mask says which
    # positions count. Row 0 is padded on the left, row 1 has holes, row 2 is padded on both sides.
    hidden, _ = make_batch(seed=11, B=3, T=8, D=4)
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1], [1, 0, 1, 1, 0, 1, 0, 1], [0, 0, 1, 1, 1, 1, 0, 0]])
    hidden = torch.where(mask[..., None].bool(), hidden, torch.full_like(hidden, 100.0))  # loud padding
    # The rule, not a cause: the right-padding mistake is named only when the result is its formula.
    check_pool(impl, hidden, mask, "a batch padded on the left, with holes, and on both sides",
               hint="Average the positions whose mask is 1, wherever they are in the row (left padding, holes).")


@property_settings(max_examples=25)
@given(seed=st.integers(0, 2**32 - 1), extra=st.integers(1, 9))
def test_extra_padding_changes_nothing(impl, seed, extra):
    hidden, mask = make_batch(seed, B=4, T=7, D=5)
    before = check_pool(impl, hidden, mask, "the unpadded batch")
    # Whatever the encoder leaves at padded positions is garbage: large values, masked out.
    garbage = 1e3 * torch.randn(4, extra, 5, generator=torch.Generator().manual_seed(seed % 2**31))
    padded_hidden = torch.cat([hidden, garbage], dim=1)
    padded_mask = torch.cat([mask, torch.zeros(4, extra, dtype=mask.dtype)], dim=1)
    padding_hint = "Padding must not change a sentence vector: padded positions get weight 0 and are not counted."
    after = check_pool(impl, padded_hidden, padded_mask, f"the same batch with {extra} extra padded positions",
                       hint=padding_hint)
    # Both are within atol of the same exact mean, hence within 2 * atol of each other.
    atol, _ = round_off(hidden, mask)
    check_close(after, before, f"masked_mean_pool after adding {extra} padded positions", atol=2 * atol,
                hint=padding_hint)


def test_mask_dtype_does_not_matter(impl):
    # Every dtype is compared with the exact mean: results that agree with it agree with each other up
    # to round-off (a float64 mask may promote the product to float64 before the cast back: still right).
    hidden, mask = make_batch(seed=1, B=5, T=9, D=6)
    mask[2] = 0  # an empty row too: `1 - mask` or a count in the mask's dtype must still work
    for name, converted in {
        "int64": mask, "bool": mask.bool(), "int32": mask.int(), "float32": mask.float(), "float64": mask.double(),
        "float16": mask.half(),
    }.items():
        check_pool(impl, hidden, converted, f"a {name} mask",
                   hint=f"A 0/1 mask must give the same result whatever its dtype ({name} here): compare it with 0 "
                        "(`mask != 0`) or convert it to the hidden states' float dtype before using it.")


def test_a_row_with_no_real_token_gives_zeros(impl):
    hidden, mask = make_batch(seed=2, B=3, T=4, D=3)
    mask[1] = 0  # an empty sentence: nothing to average
    # check_pool compares every row with the oracle, which gives exact zeros for row 1.
    check_pool(impl, hidden, mask, "a batch whose row 1 is all padding",
               hint="Row 1 has no real token, so its vector should be all zeros: divide by the count clamped "
                    "to at least 1.")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
def test_output_keeps_the_input_dtype(impl, dtype):
    # check_pool demands dtype == hidden_states.dtype; round_off allows the round-off of that dtype
    # (or of float32, for float64 input). Long rows (a sum of many tokens) and an all-padding last row.
    hidden, mask = make_batch(seed=3, B=4, T=64, D=8, dtype=dtype)
    mask[-1] = 0
    check_pool(impl, hidden, mask, f"{dtype} hidden states")


@pytest.mark.parametrize("mask_dtype", [torch.int64, torch.float32])
def test_inputs_are_not_modified(impl, mask_dtype):
    # A float32 mask too: `mask.to(torch.float32)` returns the caller's mask itself then, so an in-place
    # step on the weights after it (`weights /= counts`) reaches the caller's tensor.
    hidden, mask = make_batch(seed=4, B=3, T=6, D=4)
    mask[2, 1:] = 0  # padding to zero out, if the code does it in place
    mask = mask.to(mask_dtype)
    hidden_before, mask_before = hidden.clone(), mask.clone()
    result = impl.pooling.masked_mean_pool(hidden, mask)
    for name, now, before in (("hidden_states", hidden, hidden_before), ("attention_mask", mask, mask_before)):
        changed = describe_change(name, before, now)
        if changed:
            pytest.fail(f"masked_mean_pool changed its input in place: {changed} Use out-of-place operations "
                        "(`h * m`, not `h.mul_(m)` or `h[mask == 0] = 0`; `m / n`, not `m /= n`): the caller "
                        "still needs its tensors.", pytrace=False)
    # Leaving the inputs alone counts only with the right answer: returning nothing useful is not enough.
    out = check_tensor(result, [3, 4], "masked_mean_pool on the batch it must not modify")
    expected = loop_mean(hidden_before, mask_before)
    atol, name_tol = round_off(hidden_before, mask_before)
    check_close(out, expected, "masked_mean_pool on the batch it must not modify", atol=atol, hint=FORMULA,
                diagnose=lambda a: name_pooling_mistake(a, hidden_before, mask_before, expected, name_tol))


@pytest.mark.parametrize("case", ["hidden is 2-D", "mask is 3-D", "T differs", "B differs"])
def test_mismatched_shapes_raise_value_error(impl, case):
    hidden, mask = make_batch(seed=5, B=3, T=6, D=4)
    # Rejecting bad shapes counts only together with pooling good ones (raising for everything is not
    # input checking).
    check_pool(impl, hidden, mask, "valid shapes hidden [3, 6, 4], mask [3, 6]")
    hidden, mask, why = {
        "hidden is 2-D": (hidden[:, 0], mask, "hidden_states must be [B, T, D]"),
        "mask is 3-D": (hidden, mask.unsqueeze(-1), "attention_mask must be [B, T]"),
        "T differs": (hidden, mask[:, :5], "the mask has 5 positions per row but hidden_states has 6"),
        "B differs": (hidden, mask[:2], "the mask has 2 rows but hidden_states has 3 sentences"),
    }[case]
    expect_value_error(lambda: impl.pooling.masked_mean_pool(hidden, mask),
                       f"masked_mean_pool(hidden {list(hidden.shape)}, mask {list(mask.shape)})", why)


def test_gradients_reach_the_real_tokens_only(impl):
    # SBERT is fine-tuned through the pooling: d(sum of pooled)/d(hidden[b, t]) must be
    # mask[b, t] / (row b's count of real tokens), so every real token learns and padding does not.
    from bertlab.probes import run_probe

    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]],
                           [[1.0, 1.0], [2.0, 2.0], [6.0, 3.0]],
                           [[5.0, 5.0], [7.0, 7.0], [9.0, 9.0]]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    report = run_probe(impl, "pooling_gradients", impl.pooling.masked_mean_pool, hidden, mask)
    if report["output"] != "tensor":
        fail(f"masked_mean_pool returned {report['output']}; expected a [3, 2] tensor.")
    check_close(check_tensor(report["pooled"], [3, 2], "masked_mean_pool"), loop_mean(hidden, mask),
                "masked_mean_pool on the gradient example", atol=1e-6, hint=FORMULA)
    if not report["has_graph"] or report["grad"] is None:
        fail("masked_mean_pool: " + mistake_hint("pool_no_gradient"))
    real = (mask != 0).double()
    expected = (real / real.sum(dim=1, keepdim=True).clamp(min=1))[..., None].expand(3, 3, 2)
    check_close(report["grad"], expected, "the gradient of masked_mean_pool(...).sum() with respect to hidden_states",
                atol=1e-6, hint="Each real token of row b gets 1 / (row b's count of real tokens); padding gets 0.")
