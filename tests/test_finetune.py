"""bertlab.finetune: presets, the Trainer loop on tiny models and data (seconds), the from-scratch classifier."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest
import torch

from bertlab import datasets, finetune
from bertlab.models import load_tokenizer, tiny_bert_config
from bertlab_grader.solutions.pooling import masked_mean_pool

TINY = finetune.get_settings("fast", n_train=16, n_eval=16, max_length=24, batch_size=8, scratch_d_model=16)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("minilm")


@pytest.fixture(scope="module")
def reviews():
    return datasets.split_train_eval(TINY.n_train, TINY.n_eval, seed=0)


def _tiny_sequence_classifier():
    from transformers import BertForSequenceClassification

    config = tiny_bert_config()
    config.num_labels = 2
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return BertForSequenceClassification(config)


def test_the_lesson_preset_is_the_lesson_run():
    lesson = finetune.PRESETS["lesson"]
    assert (lesson.n_train, lesson.n_eval, lesson.epochs, lesson.learning_rate, lesson.batch_size) == (5000, 1000, 5, 2e-5, 4)
    assert lesson.eval_each_epoch, "the lesson evaluated every epoch and kept the best one"


def test_the_cpu_preset_is_cpu_sized():
    cpu = finetune.PRESETS["cpu"]
    assert 1000 <= cpu.n_train <= 2000 and cpu.n_eval == 500 and cpu.epochs == 1
    assert cpu.max_length == 128 and cpu.batch_size == 16


def test_get_settings_overrides_and_rejects_unknown_presets():
    assert finetune.get_settings("cpu", epochs=2).epochs == 2
    assert finetune.get_settings(TINY) is TINY
    with pytest.raises(ValueError, match="unknown preset 'gpu'"):
        finetune.get_settings("gpu")


def _check_result(result: dict, settings: finetune.FinetuneSettings):
    assert 0.0 <= result["accuracy"] <= 1.0
    assert result["n_train"] == settings.n_train and result["n_eval"] == settings.n_eval
    assert result["steps"] == math.ceil(settings.n_train / settings.batch_size) * settings.epochs
    steps = [step for step, _ in result["losses"]]
    assert steps == sorted(steps) and steps[0] == 1 and len(steps) >= 2
    assert all(math.isfinite(loss) and loss > 0 for _, loss in result["losses"])
    assert result["minutes"] > 0 and result["parameters"] >= result["trainable_parameters"] > 0


def test_finetune_classifier_on_a_tiny_model(tokenizer, reviews):
    train, held_out = reviews
    result = finetune.finetune_classifier(_tiny_sequence_classifier(), train, held_out, preset=TINY,
                                          tokenizer=tokenizer, verbose=False)
    _check_result(result, TINY)
    assert result["epoch_accuracy"] == []  # evaluated once, at the end


def test_finetune_classifier_needs_the_tokenizer_of_a_model_object(reviews):
    with pytest.raises(ValueError, match="tokenizer"):
        finetune.finetune_classifier(_tiny_sequence_classifier(), *reviews, preset=TINY)


def test_finetune_classifier_loads_the_packaged_minilm_by_name(tokenizer, reviews):
    train, held_out = reviews
    settings = finetune.get_settings(TINY, n_train=8, n_eval=8, max_length=16, batch_size=4)
    result = finetune.finetune_classifier("minilm", train[:8], held_out[:8], preset=settings, verbose=False)
    assert result["parameters"] == 22_713_216 + 384 * 2 + 2  # MiniLM plus the new 2-way head
    _check_result(result, settings)


def test_train_from_scratch_is_seeded_and_prints_progress(tokenizer, reviews, capsys):
    train, held_out = reviews
    first = finetune.train_from_scratch(train, held_out, tokenizer, masked_mean_pool, preset=TINY)
    second = finetune.train_from_scratch(train, held_out, tokenizer, masked_mean_pool, preset=TINY, verbose=False)
    _check_result(first, TINY)
    assert first["losses"] == second["losses"] and first["accuracy"] == second["accuracy"]
    out = capsys.readouterr().out
    assert "[from scratch] step 1/2: training loss" in out and "held-out accuracy" in out
    assert re.search(r"step 1/2: training loss \d\.\d{3} \(\d+\.\d min, about \d+ s left\)", out), out


def test_evaluating_every_epoch_keeps_the_per_epoch_accuracy(tokenizer, reviews):
    train, held_out = reviews
    settings = finetune.get_settings(TINY, epochs=2, eval_each_epoch=True)
    result = finetune.train_from_scratch(train, held_out, tokenizer, masked_mean_pool, preset=settings, verbose=False)
    _check_result(result, settings)
    assert [epoch for epoch, _ in result["epoch_accuracy"]] == [1.0, 2.0]
    # load_best_model_at_end: the final accuracy is the best epoch's.
    assert result["accuracy"] == pytest.approx(max(acc for _, acc in result["epoch_accuracy"]))


def test_scratch_classifier_shapes_and_padding_invariance(tokenizer):
    model = finetune.scratch_classifier(len(tokenizer), tokenizer.pad_token_id, masked_mean_pool, d_model=16).eval()
    assert not any(p.requires_grad is False for p in model.parameters()), "everything trains from scratch"
    batch = tokenizer(["a fine film", "dull"], padding=True, return_tensors="pt")
    padded = tokenizer(["a fine film", "dull"], padding="max_length", max_length=12, return_tensors="pt")
    with torch.no_grad():
        out = model(batch["input_ids"], batch["attention_mask"], labels=torch.tensor([1, 0]))
        out_padded = model(padded["input_ids"], padded["attention_mask"])
    assert out.logits.shape == (2, 2) and out.loss.dim() == 0
    torch.testing.assert_close(out.logits, out_padded.logits, atol=1e-5, rtol=1e-5)
    assert out_padded.loss is None


# --------------------------------------------------------------------------- figures kept between runs

def test_finetune_cached_trains_once_then_loads_and_trains_afresh_when_anything_changes(reviews, tmp_path,
                                                                                        monkeypatch, capsys):
    monkeypatch.setenv("BERTLAB_CACHE_DIR", str(tmp_path))
    calls = []

    def fake_finetune(model_name, train, held_out, preset, verbose=True):  # the Trainer run is tested above
        calls.append((model_name, len(train), preset))
        return {"accuracy": 0.5 + len(calls) / 100, "losses": [[1, 0.69]], "epoch_accuracy": [], "minutes": 0.1,
                "steps": 2, "parameters": 10, "trainable_parameters": 10, "n_train": len(train),
                "n_eval": len(held_out), "settings": {}}

    monkeypatch.setattr(finetune, "finetune_classifier", fake_finetune)
    train, held_out = reviews
    first = finetune.finetune_cached("minilm", train, held_out, preset=TINY, expected="usually about 1 s")
    out = capsys.readouterr().out
    assert "usually about 1 s" in out and str(tmp_path) in out and "KB" in out
    again = finetune.finetune_cached("minilm", train, held_out, preset=TINY)
    assert "loaded from the kit's cache" in capsys.readouterr().out
    assert len(calls) == 1 and not first["from_cache"] and again["from_cache"]
    assert again["accuracy"] == first["accuracy"] and again["measured_at"] == first["measured_at"]
    assert again["cache_path"] == first["cache_path"] and Path(first["cache_path"]).parent == tmp_path
    # Another setting, other reviews, another model, or retrain=True: a new run.
    finetune.finetune_cached("minilm", train, held_out, preset=TINY, epochs=2)
    finetune.finetune_cached("minilm", train[:-1], held_out, preset=TINY)
    finetune.finetune_cached("other-model", train, held_out, preset=TINY)
    retrained = finetune.finetune_cached("minilm", train, held_out, preset=TINY, retrain=True)
    assert len(calls) == 5 and not retrained["from_cache"] and retrained["accuracy"] != first["accuracy"]
    assert len(list(tmp_path.glob("finetune-*.json"))) == 4  # the retrained run replaced its entry


def test_full_model_takes_the_lesson_model_only_when_it_is_on_this_machine(tmp_path):
    assert finetune.full_model("no-such-owner/no-such-model") == "minilm"  # offline: nothing is downloaded
    folder = tmp_path / "bert"
    _tiny_sequence_classifier().save_pretrained(folder)
    assert finetune.full_model(str(folder)) == str(folder)
    (folder / "model.safetensors").unlink()
    assert finetune.full_model(str(folder)) == "minilm"  # a config without weights is not a model


# --------------------------------------------------------------------------- figures shipped with the kit

def _fake_trainer(monkeypatch, calls: list):
    def fake_finetune(model_name, train, held_out, preset, verbose=True):
        calls.append(model_name)
        return {"accuracy": 0.6, "losses": [[1, 0.69]], "epoch_accuracy": [], "minutes": 0.1, "steps": 2,
                "parameters": 10, "trainable_parameters": 10, "n_train": len(train), "n_eval": len(held_out),
                "settings": {}}

    monkeypatch.setattr(finetune, "finetune_classifier", fake_finetune)


def test_the_kit_ships_the_figures_of_the_notebooks_default_run():
    # Fails when the preset, the reviews or CACHE_FORMAT change without rebuilding the shipped file.
    settings = finetune.get_settings(finetune.SHIPPED_PRESET)
    train, held_out = datasets.split_train_eval(settings.n_train, settings.n_eval, source="imdb", seed=0)
    key = finetune.finetune_key(finetune.SHIPPED_MODEL, train, held_out, settings)
    shipped = finetune.shipped_finetune(key)
    assert shipped is not None, "the notebook's fine-tuning figures are stale: run python tools/build_lesson_figures.py --threads 2"
    assert Path(shipped["shipped_path"]) == finetune.shipped_finetune_path()
    assert shipped["steps"] == 63 and shipped["n_train"] == 1000 and shipped["n_eval"] == 500
    assert 0.7 <= shipped["accuracy"] <= 0.9, "the CPU preset's fine-tuned MiniLM reaches about 0.81"
    assert shipped["losses"][0][0] == 1 and shipped["losses"][-1][1] < shipped["losses"][0][1]
    assert shipped["settings"] == dataclasses.asdict(settings)
    assert {"at", "command", "threads", "torch"} <= set(shipped["built"])
    assert Path(shipped["shipped_path"]).stat().st_size < 20_000, "a few KB of figures, not weights"


def test_a_first_run_shows_the_shipped_figures_and_retrain_trains_here(reviews, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BERTLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(finetune, "SHIPPED_DIR", tmp_path / "shipped")
    calls: list = []
    _fake_trainer(monkeypatch, calls)
    train, held_out = reviews
    key = finetune.finetune_key("minilm", train, held_out, TINY)
    shipped_result = {"accuracy": 0.81, "losses": [[1, 0.7]], "epoch_accuracy": [], "minutes": 2.0, "steps": 2,
                      "parameters": 10, "trainable_parameters": 10, "n_train": len(train), "n_eval": len(held_out),
                      "settings": {}, "model": "minilm", "measured_at": "2026-12-03T15:00:00+00:00"}
    built = {"at": "2026-12-03 15:00 UTC", "command": "python tools/build_lesson_figures.py", "threads": 2,
             "torch": "2.x"}
    finetune.write_shipped_finetune(finetune.shipped_finetune_path("minilm", TINY), key, shipped_result, built)
    first = finetune.finetune_cached("minilm", train, held_out, preset=TINY, expected="usually about 2 min")
    out = capsys.readouterr().out
    assert calls == [] and first["source"] == "kit" and first["accuracy"] == 0.81 and first["built"] == built
    assert "computed when the kit was built (2026-12-03 15:00 UTC" in out and "RETRAIN = True" in out
    assert "usually about 2 min" in out and not (tmp_path / "cache").exists(), "nothing is written for shipped figures"
    # Other settings: nothing ships for them, so they train.
    assert finetune.finetune_cached("minilm", train, held_out, preset=TINY, epochs=2)["source"] == "trained"
    assert calls == ["minilm"]
    # RETRAIN: trains here; from then on this machine's own figures come first.
    retrained = finetune.finetune_cached("minilm", train, held_out, preset=TINY, retrain=True)
    assert retrained["source"] == "trained" and retrained["accuracy"] == 0.6 and len(calls) == 2
    again = finetune.finetune_cached("minilm", train, held_out, preset=TINY)
    assert again["source"] == "cache" and again["accuracy"] == 0.6 and len(calls) == 2


def test_a_shipped_file_for_another_key_is_not_used(reviews, tmp_path, monkeypatch):
    monkeypatch.setenv("BERTLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(finetune, "SHIPPED_DIR", tmp_path / "shipped")
    calls: list = []
    _fake_trainer(monkeypatch, calls)
    train, held_out = reviews
    stale = {**finetune.finetune_key("minilm", train, held_out, TINY), "format": finetune.CACHE_FORMAT - 1}
    finetune.write_shipped_finetune(finetune.shipped_finetune_path("minilm", TINY), stale, {"accuracy": 0.9}, {})
    assert finetune.finetune_cached("minilm", train, held_out, preset=TINY, verbose=False)["source"] == "trained"
    assert calls == ["minilm"]
