"""Public tests of task pooling: masked_mean_pool.

The oracle is a plain loop over the batch: for each row, average the positions whose mask is nonzero
(zeros when there are none). Properties: extra padding changes nothing, mask dtype does not matter,
the output keeps the input's dtype, the inputs are not modified.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from bertlab.checks import check_close, check_tensor, expect_value_error, name_mistake, property_settings

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


def diagnose(actual: torch.Tensor, hidden: torch.Tensor, mask: torch.Tensor) -> str:
    """Name the usual mistake (bertlab/mistakes.py) whose output equals ``actual``."""
    h = hidden.to(torch.float64)
    m = (mask != 0).to(torch.float64).unsqueeze(-1)  # [B, T, 1]
    masked_sum = (h * m).sum(dim=1)
    known = name_mistake(actual, {
        "pool_mask_ignored": h.mean(dim=1),
        "pool_divide_by_length": masked_sum / hidden.shape[1],
        "pool_sum": masked_sum,
        "pool_cls": h[:, 0],
    }, tol=1e-4)
    return known or "Compare with the docstring: pooled[b] = sum_t mask[b, t] * hidden[b, t] / sum_t mask[b, t]."


def check_pool(impl, hidden: torch.Tensor, mask: torch.Tensor, what: str, atol: float = 1e-5) -> torch.Tensor:
    """Run masked_mean_pool and compare with the loop oracle: type, shape, dtype, NaN, values."""
    B, T, D = hidden.shape
    out = check_tensor(
        impl.pooling.masked_mean_pool(hidden, mask), [B, D], f"masked_mean_pool on {what}", dtype=hidden.dtype,
        shape_hint="One D-vector per sentence: average over the T axis (dim=1) only.",
        finite_hint="A row with no real token must give zeros: divide by the count clamped to at least 1.",
        dtype_hint="Cast the result back to the input's dtype at the end (`.to(hidden_states.dtype)`).",
    )
    check_close(out, loop_mean(hidden, mask), f"masked_mean_pool on {what}", atol=atol, rtol=atol,
                diagnose=lambda a: diagnose(a, hidden, mask))
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


@property_settings(max_examples=25)
@given(seed=st.integers(0, 2**32 - 1), extra=st.integers(1, 9))
def test_extra_padding_changes_nothing(impl, seed, extra):
    hidden, mask = make_batch(seed, B=4, T=7, D=5)
    before = check_pool(impl, hidden, mask, "the unpadded batch")
    # Whatever the encoder leaves at padded positions is garbage: large values, masked out.
    garbage = 1e3 * torch.randn(4, extra, 5, generator=torch.Generator().manual_seed(seed % 2**31))
    padded_hidden = torch.cat([hidden, garbage], dim=1)
    padded_mask = torch.cat([mask, torch.zeros(4, extra, dtype=mask.dtype)], dim=1)
    after = check_pool(impl, padded_hidden, padded_mask, f"the same batch with {extra} extra padded positions")
    check_close(after, before, f"masked_mean_pool after adding {extra} padded positions", atol=1e-5, rtol=1e-5,
                hint="Padding must not change a sentence vector: padded positions get weight 0 and are not counted.")


def test_mask_dtype_does_not_matter(impl):
    hidden, mask = make_batch(seed=1, B=5, T=9, D=6)
    reference = check_pool(impl, hidden, mask, "an int64 mask")
    for name, converted in {
        "bool": mask.bool(), "int32": mask.int(), "float32": mask.float(), "float64": mask.double(),
    }.items():
        out = check_pool(impl, hidden, converted, f"a {name} mask")
        check_close(out, reference, f"masked_mean_pool with a {name} mask", atol=1e-6, rtol=1e-6,
                    hint="A 0/1 mask must give the same result whatever its dtype: convert it to the hidden "
                         "states' float dtype before multiplying.")


def test_a_row_with_no_real_token_gives_zeros(impl):
    hidden, mask = make_batch(seed=2, B=3, T=4, D=3)
    mask[1] = 0  # an empty sentence: nothing to average
    out = check_pool(impl, hidden, mask, "a batch whose row 1 is all padding")
    if not torch.equal(out[1], torch.zeros(3, dtype=out.dtype)):
        pytest.fail(f"row 1 has no real token, so its vector should be all zeros; got {out[1].tolist()}.",
                    pytrace=False)


@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-12), (torch.bfloat16, 3e-2), (torch.float16, 3e-3)])
def test_output_keeps_the_input_dtype(impl, dtype, atol):
    hidden, mask = make_batch(seed=3, B=3, T=16, D=8, dtype=dtype)
    # check_pool demands dtype == hidden_states.dtype; tolerances allow the output's own rounding.
    check_pool(impl, hidden, mask, f"{dtype} hidden states", atol=atol)


def test_inputs_are_not_modified(impl):
    hidden, mask = make_batch(seed=4, B=3, T=6, D=4)
    hidden_before, mask_before = hidden.clone(), mask.clone()
    impl.pooling.masked_mean_pool(hidden, mask)
    for name, now, before in (("hidden_states", hidden, hidden_before), ("attention_mask", mask, mask_before)):
        if not torch.equal(now, before):
            pytest.fail(f"masked_mean_pool changed its input {name} in place. Use out-of-place operations "
                        "(`h * m`, not `h.mul_(m)` or `h[mask == 0] = 0`): the caller still needs its tensors.",
                        pytrace=False)


@pytest.mark.parametrize("case", ["hidden is 2-D", "mask is 3-D", "T differs", "B differs"])
def test_mismatched_shapes_raise_value_error(impl, case):
    hidden, mask = make_batch(seed=5, B=3, T=6, D=4)
    hidden, mask, why = {
        "hidden is 2-D": (hidden[:, 0], mask, "hidden_states must be [B, T, D]"),
        "mask is 3-D": (hidden, mask.unsqueeze(-1), "attention_mask must be [B, T]"),
        "T differs": (hidden, mask[:, :5], "the mask has 5 positions per row but hidden_states has 6"),
        "B differs": (hidden, mask[:2], "the mask has 2 rows but hidden_states has 3 sentences"),
    }[case]
    expect_value_error(lambda: impl.pooling.masked_mean_pool(hidden, mask),
                       f"masked_mean_pool(hidden {list(hidden.shape)}, mask {list(mask.shape)})", why)
