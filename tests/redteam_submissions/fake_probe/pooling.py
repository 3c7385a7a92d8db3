"""An honest masked mean (the fake_probe siamese.py needs one)."""


def masked_mean_pool(hidden_states, attention_mask):
    weights = attention_mask.unsqueeze(-1).to(hidden_states.dtype)
    return (hidden_states * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1)
