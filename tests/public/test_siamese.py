"""Public tests of task siamese: create_sbert / SiameseBert.encode / forward.

Most tests use the named model "tiny-bert-seed0" (a random 2-layer BERT with MiniLM's vocabulary: fast)
and MiniLM's tokenizer. The oracle runs the same model in the test and averages the real tokens of its
last hidden state with an explicit loop; cosines come from torch.nn.functional.cosine_similarity.
One test uses the real all-MiniLM-L6-v2 on the lesson's Concept 4 pairs.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bertlab.datasets import LESSON_SIAMESE_PAIRS, LESSON_STS_PAIRS
from bertlab.models import load_tokenizer, named_model

from bertlab.assertions import check_close, check_tensor, close, fail, name_mistake
from bertlab.mistakes import hint as mistake_hint
from bertlab.probes import run_probe
from bertlab.teaching.siamese import disjoint_pair_batch

pytestmark = pytest.mark.siamese

TINY = "tiny-bert-seed0"
HIDDEN = 64  # hidden size of the tiny named models
# Sentences of different lengths, so a batch always holds padding.
SENTENCES_A = [p.a for p in LESSON_STS_PAIRS[:5]]
SENTENCES_B = [p.b for p in LESSON_STS_PAIRS[:5]]


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("minilm")


@pytest.fixture(scope="module")
def tiny_model():
    """The named tiny model, built once for this module; tests never modify it."""
    return named_model(TINY)


def tokens(tokenizer, texts, **padding):
    """(input_ids [B, T], attention_mask [B, T]) for texts; padding="longest" unless told otherwise."""
    batch = tokenizer(list(texts), return_tensors="pt", padding=padding.pop("padding", "longest"), **padding)
    return batch["input_ids"], batch["attention_mask"]


@torch.no_grad()
def oracle_encode(model, input_ids, attention_mask, encoder_sees_mask: bool = True) -> torch.Tensor:
    """[B, D] float64: for each sentence, the plain average of last_hidden_state over its real tokens.

    encoder_sees_mask=False reproduces a classic mistake (the encoder attends to padding), to name it.
    """
    hidden = model(input_ids=input_ids, attention_mask=attention_mask if encoder_sees_mask else None).last_hidden_state
    rows = []
    for b in range(hidden.shape[0]):
        real = [t for t in range(hidden.shape[1]) if attention_mask[b, t] == 1]
        rows.append(torch.stack([hidden[b, t] for t in real]).to(torch.float64).mean(dim=0))
    return torch.stack(rows)


def diagnose_encode(actual, model, input_ids, attention_mask) -> str:
    """Name the usual mistake (bertlab/mistakes.py) whose encoding equals ``actual``."""
    with torch.no_grad():
        output = model(input_ids=input_ids, attention_mask=attention_mask)
    known = name_mistake(actual, {
        "sbert_cls_encode": output.last_hidden_state[:, 0],
        "sbert_unmasked_mean": output.last_hidden_state.mean(dim=1),
        "sbert_no_encoder_mask": oracle_encode(model, input_ids, attention_mask, encoder_sees_mask=False),
        "sbert_pooler_output": getattr(output, "pooler_output", None),
    }, tol=1e-4)
    return known or ("encode must be masked_mean_pool(encoder(input_ids=..., attention_mask=...).last_hidden_state, "
                     "attention_mask), using the model given to create_sbert.")


def forward(sbert, a, b) -> torch.Tensor:
    with torch.no_grad():  # no autograd graph needed (and no effect through a remote proxy)
        return sbert(a[0], a[1], b[0], b[1])


def check_scores(value, B: int, what: str) -> torch.Tensor:
    return check_tensor(value, [B], what,
                        shape_hint="forward compares a[i] with b[i] only: one cosine per pair, not a [B, B] matrix.",
                        finite_hint="A cosine is always finite: did a norm come out as 0?")


def test_encode_is_the_masked_mean_of_the_last_hidden_state(impl, tokenizer, tiny_model):
    sbert = impl.siamese.create_sbert(tiny_model)
    ids, mask = tokens(tokenizer, SENTENCES_A)
    assert (mask == 0).any(), "test set-up: the batch should contain padding"
    with torch.no_grad():
        out = check_tensor(sbert.encode(ids, mask), [len(SENTENCES_A), HIDDEN], "SiameseBert.encode",
                           shape_hint="One D-vector per sentence (D = the encoder's hidden size).")
    check_close(out, oracle_encode(tiny_model, ids, mask), "SiameseBert.encode", atol=1e-5, rtol=1e-5,
                diagnose=lambda a: diagnose_encode(a, tiny_model, ids, mask))


def test_forward_is_the_cosine_of_the_two_encodings(impl, tokenizer, tiny_model):
    sbert = impl.siamese.create_sbert(tiny_model)
    a, b = tokens(tokenizer, SENTENCES_A), tokens(tokenizer, SENTENCES_B)
    scores = check_scores(forward(sbert, a, b), len(SENTENCES_A), "SiameseBert.forward")
    ea, eb = oracle_encode(tiny_model, *a), oracle_encode(tiny_model, *b)
    expected = F.cosine_similarity(ea, eb, dim=-1)
    dot = (ea * eb).sum(dim=-1)

    def diagnose(actual):
        if close(actual, dot, tol=1e-4):
            return mistake_hint("sbert_dot_product")
        with torch.no_grad():
            own = F.cosine_similarity(torch.as_tensor(sbert.encode(*a)).detach().double(),
                                      torch.as_tensor(sbert.encode(*b)).detach().double(), dim=-1)
        if close(actual, own, tol=1e-5):
            return ("forward is the cosine of your own encode, so the cosine part is right: fix encode first "
                    "(see test_encode_is_the_masked_mean_of_the_last_hidden_state).")
        return "forward(a, b)[i] must be the cosine of encode(a)[i] and encode(b)[i]."

    check_close(scores, expected, "SiameseBert.forward", atol=1e-5, diagnose=diagnose)


def test_a_sentence_scores_one_with_itself(impl, tokenizer, tiny_model):
    sbert = impl.siamese.create_sbert(tiny_model)
    a = tokens(tokenizer, SENTENCES_A)
    scores = check_scores(forward(sbert, a, a), len(SENTENCES_A), "SiameseBert.forward(a, a)")
    check_close(scores, torch.ones(len(SENTENCES_A), dtype=torch.float64), "SiameseBert.forward(a, a)", atol=1e-5,
                hint="The cosine of a vector with itself is 1: are both sides encoded the same way?")


def test_padding_each_side_differently_changes_nothing(impl, tokenizer, tiny_model):
    # Side a padded to its longest sentence, side b to a fixed 40 tokens (Ta != Tb); each pair alone,
    # with no padding at all, must get the same score.
    sbert = impl.siamese.create_sbert(tiny_model)
    a = tokens(tokenizer, SENTENCES_A)
    b = tokens(tokenizer, SENTENCES_B, padding="max_length", max_length=40)
    assert a[0].shape[1] != b[0].shape[1], "test set-up: the two sides should have different lengths"
    batched = check_scores(forward(sbert, a, b), len(SENTENCES_A), "SiameseBert.forward on padded sides")
    alone = []
    for text_a, text_b in zip(SENTENCES_A, SENTENCES_B):
        one = check_scores(forward(sbert, tokens(tokenizer, [text_a]), tokens(tokenizer, [text_b])), 1,
                           "SiameseBert.forward on a single pair")
        alone.append(one[0])
    check_close(batched, torch.stack(alone), "scores of padded batches vs the same pairs one at a time", atol=1e-5,
                hint="Padding changed a score: pool with the attention mask of the same side (a's mask for a, b's "
                     "for b) and pass the mask to the encoder so real tokens do not attend to [PAD].")


def test_training_reaches_the_one_encoder_through_both_sides(impl):
    # Fine-tuning SBERT means: a loss on forward's score updates the ONE encoder, from both sentences.
    # One backward step on sides with disjoint words: the word-embedding rows of side a's words can
    # only get a gradient through side a, and side b's through side b.
    model = named_model(TINY)  # a fresh copy: the step writes (then clears) its gradients
    sbert = impl.siamese.create_sbert(model)
    (ids_a, mask_a), (ids_b, mask_b) = disjoint_pair_batch(seed=0)
    report = run_probe(impl, "siamese_gradients", sbert, model, ids_a, mask_a, ids_b, mask_b)
    if report["output"] != "tensor":
        fail(f"SiameseBert.forward returned {report['output']}; expected a tensor of cosines, one per pair.")
    expected = F.cosine_similarity(oracle_encode(model, ids_a, mask_a), oracle_encode(model, ids_b, mask_b), dim=-1)
    check_close(check_scores(report["scores"], ids_a.shape[0], "SiameseBert.forward"), expected,
                "SiameseBert.forward", atol=1e-5, hint="Fix the scores first (see the tests above).")
    if not report["has_graph"]:
        fail("SiameseBert.forward gives the right scores, but they carry no gradient (requires_grad is False). "
             + mistake_hint("sbert_encode_no_grad"))
    cut = [side for side in ("a", "b") if not report[f"branch_{side}"] > 0]
    if len(cut) == 2:
        fail(f"A loss on forward's scores sent no gradient into the model given to create_sbert "
             f"({report['reached']} of its {report['trainable']} weight tensors got one). "
             + mistake_hint("sbert_wraps_a_copy"))
    if cut:
        fail(f"A loss on forward's scores reaches the encoder through one side but not through side {cut[0]} (the "
             f"embeddings of the words only side {cut[0]} uses got no gradient). Both sentences must go through the "
             f"same self.encoder with gradients on: look on side {cut[0]}'s path for a .detach(), a torch.no_grad() "
             "or a second copy of the encoder.")


def test_minilm_scores_the_lessons_similar_pairs_above_the_unrelated_one(impl, minilm):
    # Concept 4 of the lesson: pairs 0 and 2 are two reviews saying the same thing; pair 1 pairs a
    # review with a restaurant complaint.
    tokenizer, model = minilm
    sbert = impl.siamese.create_sbert(model)
    a = tokens(tokenizer, [p[0] for p in LESSON_SIAMESE_PAIRS])
    b = tokens(tokenizer, [p[1] for p in LESSON_SIAMESE_PAIRS])
    scores = check_scores(forward(sbert, a, b), 3, "SiameseBert.forward on the lesson's pairs")
    if (scores.abs() > 1 + 1e-5).any():
        pytest.fail(f"cosines lie in [-1, 1]; got {scores.tolist()}.", pytrace=False)
    similar, unrelated = scores[[0, 2]], scores[1]
    if not (similar > unrelated).all():
        pytest.fail(f"With all-MiniLM-L6-v2, the two similar review pairs should score above the review paired with "
                    f"a restaurant complaint; got {[round(float(s), 3) for s in scores]} (pairs 0 and 2 similar, "
                    "1 unrelated). Check that encode mean-pools the last hidden state with the mask.",
                    pytrace=False)
