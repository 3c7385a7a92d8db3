"""The provided TinyBERT: shapes, masking, positions, and the lesson's flat untrained CKA."""

import pytest
import torch

from bertlab.encoder import create_bert
from bertlab.representations import layer_representations


def _tiny(**overrides):
    args = dict(vocab_size=50, d_model=16, num_heads=4, mlp_hidden_dim=32, num_layers=3, pad_id=0,
                use_rope=True, use_absolute_positions=False)
    args.update(overrides)
    torch.manual_seed(0)
    return create_bert(**args).eval()


@pytest.mark.parametrize("positions", [dict(use_rope=True), dict(use_rope=False, use_absolute_positions=True)])
def test_shapes_and_hidden_states(positions):
    model = _tiny(**positions)
    ids = torch.randint(1, 50, (2, 7), generator=torch.Generator().manual_seed(1))
    states = model(ids, torch.ones(2, 7), output_hidden_states=True)
    assert len(states) == 4 and all(s.shape == (2, 7, 16) for s in states)
    assert len(model.blocks) == 3
    x = model.dropout(model.embedding(ids))
    for block in model.blocks:
        x = block(x=x, attention_mask=torch.ones(2, 7))
    torch.testing.assert_close(x, states[-1])


def test_padding_does_not_change_real_tokens():
    model = _tiny()
    ids = torch.tensor([[5, 6, 7]])
    padded = torch.tensor([[5, 6, 7, 0, 0]])
    short = model(ids, torch.ones(1, 3))
    long = model(padded, torch.tensor([[1, 1, 1, 0, 0]]))
    torch.testing.assert_close(long[:, :3], short, atol=1e-5, rtol=1e-5)


def test_all_padding_row_is_finite():
    out = _tiny()(torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 4))
    assert torch.isfinite(out).all()


def test_positions_matter():
    for kwargs in (dict(use_rope=True), dict(use_rope=False, use_absolute_positions=True)):
        model = _tiny(**kwargs)
        a = model(torch.tensor([[5, 6, 7]]), torch.ones(1, 3))
        b = model(torch.tensor([[7, 6, 5]]), torch.ones(1, 3))
        assert not torch.allclose(a[:, 0], b[:, 2], atol=1e-4), f"{kwargs}: token order had no effect"


def test_pretrained_embedding_is_copied_and_frozen():
    weight = torch.randn(50, 16, generator=torch.Generator().manual_seed(2))
    model = _tiny(pretrained_embedding_weight=weight)
    torch.testing.assert_close(model.embedding.token.weight, weight)
    assert not model.embedding.token.weight.requires_grad
    with pytest.raises(ValueError, match="shape"):
        _tiny(pretrained_embedding_weight=torch.randn(49, 16))
    with pytest.raises(ValueError, match="choose one"):
        _tiny(use_rope=True, use_absolute_positions=True)


def test_layer_representations_pooling_choices():
    model = _tiny()
    ids, mask = torch.tensor([[5, 6, 0]]).repeat(3, 1), torch.tensor([[1, 1, 0]]).repeat(3, 1)
    reps = layer_representations(model, ids, mask, "cls")
    assert len(reps) == 4 and reps[0].shape == (3, 16)
    reps = layer_representations(model, ids, mask, lambda h, m: h.mean(1), include_embeddings=False)
    assert len(reps) == 3
    with pytest.raises(ValueError, match="pool must be"):
        layer_representations(model, ids, mask, "max")
