"""What the kit teaches about task pooling: masked mean pooling (exercises/pooling.py)."""

from __future__ import annotations

from bertlab.teaching.records import Mistake

#: What a wrong value most often means: the idea to reread (``bertlab check``'s hint).
IDEA = ("Only positions whose mask is 1 count, in the sum and in the divisor; a row with no real token "
        "divides by a count clamped to 1, which gives zeros.")

MISTAKES: tuple[Mistake, ...] = (
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
    Mistake("pool_mask_in_place", "pooling", "the mask changed in place",
            "Your pooling changes the caller's attention_mask: `mask.to(dtype)` returns the mask itself when "
            "it has that dtype already, so an in-place division (`weights /= weights.sum(...)`) divides the "
            "caller's mask. Divide out of place: `weights = weights / counts`."),
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
    Mistake("pool_right_padding_assumed", "pooling", "the first count positions averaged",
            "Your pooling averages each row's first mask.sum() positions, which is right only when all the "
            "padding is on the right. Tokenizers may pad on the left, and a mask may have holes: weight "
            "every position by its own mask value (sum of mask[b, t] * hidden[b, t]) wherever it is."),
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
)


# ---- probes: measured where the code under test runs (bertlab.probes runs them by name)

def pooling_gradients(pool, hidden_states, attention_mask) -> dict:
    """One backward step through ``pool(hidden_states, attention_mask)``: which positions does it train?

    ``pool`` is a masked_mean_pool. SBERT is fine-tuned through its pooling, so the gradient of the
    pooled vectors' sum must reach every real token (1 / its row's count of real tokens) and no
    padding position.

    Inputs:
        hidden_states: [B, T, D] float; attention_mask: [B, T].
    Returns (plain data only):
        {"output": "tensor" | a type name, "pooled": [B, D] detached result (when a tensor),
         "has_graph": the output carries autograd history,
         "grad": [B, T, D] gradient of the output's sum with respect to hidden_states (None if none)}
    """
    import torch  # here, not at the top: bertlab check's own process never needs it

    states = hidden_states.detach().clone().requires_grad_(True)
    report = {"output": "", "pooled": None, "has_graph": False, "grad": None}
    with torch.enable_grad():
        pooled = pool(states, attention_mask)
        if not isinstance(pooled, torch.Tensor):
            report["output"] = type(pooled).__name__
            return report
        report["output"] = "tensor"
        report["pooled"] = pooled.detach().clone()
        report["has_graph"] = bool(pooled.requires_grad)
        if pooled.requires_grad:
            pooled.to(torch.float64).sum().backward()
    if states.grad is not None:
        report["grad"] = states.grad.detach().clone()
    return report


#: The probes this task's tests run where the code under test runs (bertlab.probes gathers them by name).
PROBES = {"pooling_gradients": pooling_gradients}
