"""Acceptance: the solutions on the packaged MiniLM reproduce the reference figures of the README."""

import pytest
import torch

from bertlab.headline import lesson_figures, off_diagonal
from bertlab.implementations import load_implementation

LESSON_SBERT_COSINES = [0.585, 0.804, 0.547, 0.389, 0.403, 0.436, 0.389, 0.102]  # the lesson's figures (README)


@pytest.fixture(scope="module")
def figures():
    return lesson_figures(load_implementation("reference"), full=True)


def test_lesson_sts_pairs(figures):
    sbert, dan = figures["lesson_sts_sbert"], figures["lesson_sts_dan"]
    assert sbert["cosines"] == pytest.approx(LESSON_SBERT_COSINES, abs=1e-3)
    assert sbert["spearman"] == pytest.approx(0.881, abs=1e-3)
    assert sbert["mae"] == pytest.approx(0.285, abs=1e-3)
    assert sbert["spearman"] > dan["spearman"] + 0.3, "SBERT should beat the non-contextual DAN baseline widely"


def test_lesson_search(figures):
    assert [h["score"] for h in figures["search_sbert"]] == pytest.approx([0.560, 0.481, 0.454], abs=1e-3)
    assert figures["search_sbert"][0]["text"].startswith("Cheap special effects")


def test_sts_benchmark(figures):
    assert figures["stsb_test_sbert"] == pytest.approx(0.820, abs=1e-3)
    assert figures["stsb_test_dan"] < figures["stsb_test_sbert"] - 0.2


def test_cka_untrained_is_flat_and_trained_is_a_staircase(figures):
    assert len(figures["cka_untrained_min_offdiag"]) >= 3
    assert min(figures["cka_untrained_min_offdiag"]) > 0.9
    trained = torch.tensor(figures["cka_minilm_mean"])
    adjacent = torch.diagonal(trained, 1).mean()
    distant = trained[0, -1]
    assert adjacent > distant + 0.1, f"no staircase: adjacent mean {adjacent:.3f}, first vs last {distant:.3f}"
    assert off_diagonal(trained).min() < min(figures["cka_untrained_min_offdiag"])
    assert figures["cka_minilm_cls_layer0_defined"] is False


def test_parameter_counts(figures):
    assert figures["params_bert_base"] == 109_482_240
    assert figures["params_minilm"] == 22_713_216
