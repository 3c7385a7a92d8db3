"""Sabotages the server's own machinery at import (isinstance, json): its process cannot answer."""
import builtins
import json

builtins.isinstance = lambda obj, cls: True
json.dumps = lambda *a, **k: '{"op": "reply", "ok": true, "value": 1.0}'


def masked_mean_pool(hidden_states, attention_mask):
    return hidden_states.mean(1)
