"""bertlab.mlm: fill-in and next-sentence plumbing on tiny models built here, and the cached small masked-LM."""

from __future__ import annotations

import pytest
import torch

from bertlab import mlm
from bertlab.models import MissingModelError, load_tokenizer, named_model, tiny_bert_config

NOT_CACHED = "bertlab-tests/no-such-model-anywhere"


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("minilm")


def _seeded(cls, seed: int = 0):
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return cls(tiny_bert_config()).eval()


@pytest.fixture(scope="module")
def pretraining_model():
    from transformers import BertForPreTraining

    return _seeded(BertForPreTraining)


def test_fill_mask_returns_top_k_sorted_probabilities(pretraining_model, tokenizer):
    predictions = mlm.fill_mask(pretraining_model, tokenizer, "The film was absolutely [MASK], I loved it.", top_k=5)
    assert len(predictions) == 5
    scores = [p.score for p in predictions]
    assert scores == sorted(scores, reverse=True)
    assert all(0.0 <= s <= 1.0 for s in scores) and sum(scores) <= 1.0 + 1e-6
    for p in predictions:
        assert isinstance(p.token, str) and p.token
        assert "[MASK]" not in p.sequence and p.sequence.startswith("the film was absolutely")


def test_fill_mask_scores_are_the_softmax_at_the_masked_position(pretraining_model, tokenizer):
    sentence = "A [MASK] movie."
    encoded = tokenizer(sentence, return_tensors="pt")
    position = int((encoded["input_ids"][0] == tokenizer.mask_token_id).nonzero())
    with torch.no_grad():
        probabilities = pretraining_model(**encoded).prediction_logits[0, position].softmax(-1)
    expected = probabilities.topk(3)
    predictions = mlm.fill_mask(pretraining_model, tokenizer, sentence, top_k=3)
    assert [p.score for p in predictions] == pytest.approx(expected.values.tolist(), abs=1e-6)
    assert [p.token for p in predictions] == tokenizer.convert_ids_to_tokens(expected.indices.tolist())


def test_fill_mask_works_with_a_masked_lm_head_and_keeps_training_mode(tokenizer):
    from transformers import BertForMaskedLM

    model = _seeded(BertForMaskedLM).train()
    predictions = mlm.fill_mask(model, tokenizer, "[MASK] is a film.", top_k=2)
    assert len(predictions) == 2
    assert model.training, "fill_mask must put the model back in training mode"


@pytest.mark.parametrize("sentence, found", [("No blank here.", 0), ("Two [MASK] blanks [MASK].", 2)])
def test_fill_mask_needs_exactly_one_mask(pretraining_model, tokenizer, sentence, found):
    with pytest.raises(ValueError, match=rf"exactly one \[MASK\].*found {found}"):
        mlm.fill_mask(pretraining_model, tokenizer, sentence)


@pytest.mark.parametrize("top_k", [0, -1, 1.5, True])
def test_fill_mask_rejects_bad_top_k(pretraining_model, tokenizer, top_k):
    with pytest.raises(ValueError, match="top_k"):
        mlm.fill_mask(pretraining_model, tokenizer, "A [MASK] film.", top_k=top_k)


def test_fill_mask_explains_a_model_without_the_head(tokenizer):
    with pytest.raises(ValueError, match="no masked-LM head"):
        mlm.fill_mask(named_model("tiny-bert-seed0"), tokenizer, "A [MASK] film.")


def test_fill_mask_needs_the_tokenizer_of_a_model_object(pretraining_model):
    with pytest.raises(ValueError, match="tokenizer"):
        mlm.fill_mask(pretraining_model, None, "A [MASK] film.")


def test_next_sentence_is_the_probability_of_is_next(pretraining_model, tokenizer):
    a, b = "The plot was thin.", "The acting could not save it."
    p = mlm.next_sentence(pretraining_model, tokenizer, a, b)
    assert isinstance(p, float) and 0.0 <= p <= 1.0
    with torch.no_grad():
        logits = pretraining_model(**tokenizer(a, b, return_tensors="pt")).seq_relationship_logits
    assert p == pytest.approx(float(logits.softmax(-1)[0, 0]), abs=1e-6)


def test_next_sentence_with_a_next_sentence_model(tokenizer):
    from transformers import BertForNextSentencePrediction

    p = mlm.next_sentence(_seeded(BertForNextSentencePrediction), tokenizer, "One.", "Two.")
    assert 0.0 <= p <= 1.0


def test_next_sentence_explains_a_model_without_the_head(tokenizer):
    from transformers import BertForMaskedLM

    with pytest.raises(ValueError, match="no next-sentence head"):
        mlm.next_sentence(_seeded(BertForMaskedLM), tokenizer, "One.", "Two.")


def test_a_missing_checkpoint_says_what_to_do():
    with pytest.raises(MissingModelError, match="offline.*download"):
        mlm.fill_mask(NOT_CACHED, None, "A [MASK] film.")
    with pytest.raises(MissingModelError, match=NOT_CACHED):
        mlm.next_sentence(NOT_CACHED, None, "One.", "Two.")


def test_split_sentences_and_pairs():
    text = ("The opening is slow but rewarding. Then the middle act drags on forever! "
            "Ok. Does the ending work at all? I think it mostly does.")
    assert mlm.split_sentences(text) == [
        "The opening is slow but rewarding.", "Then the middle act drags on forever!",
        "Does the ending work at all?", "I think it mostly does."]
    reviews = [f"Review {r} sentence one is here. Review {r} sentence two is here. Review {r} sentence three is here."
               for r in range(6)]
    pairs = mlm.sentence_pairs(reviews, seed=0)
    assert pairs == mlm.sentence_pairs(reviews, seed=0), "pairs must be deterministic in the seed"
    assert {label for _, _, label in pairs} == {0, 1}
    for a, b, label in pairs:
        same_review = a.split()[1] == b.split()[1]
        if label == 0:  # the true next sentence
            assert same_review and reviews[int(a.split()[1])].index(b) > reviews[int(a.split()[1])].index(a)
        else:
            assert not same_review
    with pytest.raises(ValueError, match="two reviews"):
        mlm.sentence_pairs(["Just one review. With two sentences here."])


TINY_RECIPE = mlm.SmallMLMRecipe(n_reviews=40, max_length=24, num_layers=1, steps=2, batch_size=4,
                                 warmup_steps=1, n_held_out=8)


def test_recipe_key_tracks_every_setting():
    assert TINY_RECIPE.key() == mlm.SmallMLMRecipe(**{**TINY_RECIPE.__dict__}).key()
    assert TINY_RECIPE.key() != mlm.SmallMLMRecipe(**{**TINY_RECIPE.__dict__, "steps": 3}).key()
    assert mlm.LESSON_RECIPE.key() != mlm.FAST_RECIPE.key()


def test_minilm_layers_need_minilm_heads():
    with pytest.raises(ValueError, match="num_heads=12"):
        mlm.train_small_mlm(mlm.SmallMLMRecipe(num_heads=6), verbose=False)


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("BERTLAB_CACHE_DIR", str(tmp_path / "c"))
    assert mlm.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("BERTLAB_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert mlm.cache_dir() == tmp_path / "xdg" / "bertlab"


def test_small_mlm_trains_once_then_loads_from_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("BERTLAB_CACHE_DIR", str(tmp_path))
    first = mlm.small_mlm(TINY_RECIPE, verbose=False)
    assert not first.from_cache and (first.path / "info.json").is_file()
    assert first.path.parent == tmp_path and first.path.name.endswith(TINY_RECIPE.key())
    info = first.info
    assert info["losses"] and info["losses"][-1][0] == TINY_RECIPE.steps
    assert 0.0 <= info["held_out_masked_token_accuracy"] <= 1.0 and 0.0 <= info["held_out_nsp_accuracy"] <= 1.0
    assert info["n_train_pairs"] == TINY_RECIPE.steps * TINY_RECIPE.batch_size
    # The word table (input and tied output) is MiniLM's, unchanged by training.
    minilm_words = named_model("minilm").get_input_embeddings().weight
    assert torch.equal(first.model.get_input_embeddings().weight, minilm_words)
    assert first.model.cls.predictions.decoder.weight.data_ptr() == first.model.get_input_embeddings().weight.data_ptr()

    second = mlm.small_mlm(TINY_RECIPE, verbose=False)
    assert second.from_cache and second.info == info
    for (name, a), (_, b) in zip(first.model.state_dict().items(), second.model.state_dict().items()):
        assert torch.equal(a, b), name
    predictions = mlm.fill_mask(second.model, second.tokenizer, "The film was [MASK].", top_k=3)
    assert len(predictions) == 3
    assert not list(tmp_path.glob("*.*")), "no staging directory may be left behind"


def test_lesson_masked_lm_falls_back_to_the_small_model(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("BERTLAB_CACHE_DIR", str(tmp_path))
    model, tokenizer, description = mlm.lesson_masked_lm(prefer=NOT_CACHED, recipe=TINY_RECIPE, verbose=True)
    assert "not in the local Hugging Face cache" in capsys.readouterr().out
    assert "small masked-LM" in description and "trained just now" in description
    assert mlm.next_sentence(model, tokenizer, "One film.", "Another film.") <= 1.0
