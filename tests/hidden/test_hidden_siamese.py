"""Hidden suite, task siamese: SiameseBert (encode, forward) and create_sbert.

The student's siamese.py calls the student's own masked_mean_pool, so a pooling mistake would leak
into these tests. It must not: one mistake costs points in its own task only. Two rules keep it out:

- Wiring tests compare the student's output with the reference wiring composed with EITHER pooling:
  the reference's, or the student's own masked_mean_pool (called on hidden states computed here, in
  the trusted process). Matching either one means the siamese part is right.
- The lesson-quality tests (SBERT beats DAN): when the student's output is exactly the reference
  wiring over the student's own pooling, any shortfall belongs to the pooling task and the test
  passes. The DAN baseline is built with the reference pooling only: it is not the task under test,
  so a pooling mistake (a last-token "mean" gives a nan Spearman) must not move it.

Trainability (a loss on the wrapper's output must train the one shared encoder, through both
branches) is measured where the student's objects live: bertlab/probes.py runs the backward step
in the sandbox and returns plain numbers.

Models cross the sandbox by name (bertlab.models.named_model): the worker builds the same model. The
student's SiameseBert is a handle: we call its methods, never look inside it.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from bertlab.assertions import (check_close, check_finite, check_shape, close, did_not_finish, fail, generator,
                            name_mistake, tensor_result)
from bertlab.datasets import LESSON_QUERY, LESSON_REVIEW_SNIPPETS, LESSON_SIAMESE_PAIRS, LESSON_STS_PAIRS
from bertlab.mistakes import hint as mistake_hint
from bertlab.probes import run_probe
from bertlab.teaching.siamese import disjoint_pair_batch
from bertlab.sts import spearman

from bertlab_grader.hidden import reference_data as data

pytestmark = pytest.mark.siamese

# The quality floor is the reference's own Spearman on the same pairs (computed in the test from the
# reference pooling of the same MiniLM states) minus QUALITY_SLACK. For the record: 0.881 on the
# lesson's pairs (DAN 0.452), 0.815 on the 40-pair STS sample (DAN 0.519).
QUALITY_SLACK = 0.05
DAN_MARGIN = 0.2
WIRING_TOL = 1e-4      # the sandboxed server's forward pass may differ from ours by float round-off

SENTENCES_A = LESSON_REVIEW_SNIPPETS[:4]
SENTENCES_B = (LESSON_QUERY, LESSON_SIAMESE_PAIRS[0][0], "Awful.", LESSON_SIAMESE_PAIRS[2][1])


def _reference_pool(states, mask):
    from bertlab_grader.solutions.pooling import masked_mean_pool

    return masked_mean_pool(states, mask)


def own_pooling_raises(impl) -> bool:
    """True when the student's masked_mean_pool raises on a small valid batch (a stub, a hostile one)."""
    g = generator(43)
    try:
        impl.pooling.masked_mean_pool(torch.randn(2, 4, 8, generator=g), torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]]))
    except Exception as exc:  # noqa: BLE001 - whatever it raised, the pooling task reports it
        if did_not_finish(exc):
            raise
        return True
    return False


@pytest.fixture(scope="module", autouse=True)
def _stand_in_for_a_pooling_that_raises(impl):
    """A student's encode calls the student's own masked_mean_pool. When that raises on valid input,
    every siamese test would fail for a pooling mistake, so for this module the student's siamese.py
    runs over the reference pooling instead (called back in this process: nothing of it enters the
    sandbox), and the student's function is put back afterwards (the performance task times it)."""
    if not own_pooling_raises(impl):
        yield
        return
    siamese = [impl.siamese] if _module_loaded(impl, "siamese") else []
    previous = run_probe(impl, "substitute", impl.pooling, "masked_mean_pool", _reference_pool, siamese)
    try:
        yield
    finally:
        run_probe(impl, "substitute", impl.pooling, "masked_mean_pool", previous, siamese)


def _module_loaded(impl, module: str) -> bool:
    """Did the submission's ``module`` import (a sandboxed one lists its import errors)?"""
    errors = getattr(impl, "import_errors", None)
    return not (callable(errors) and module in errors())


def own_pool(impl):
    """The student's masked_mean_pool as a plain function, or None where it does not run."""
    def pool(states, mask):
        return torch.as_tensor(impl.pooling.masked_mean_pool(states.clone(), mask.clone())).detach()
    return pool


def wirings(impl, compose):
    """{"reference pooling": compose(ref_pool), "your masked_mean_pool": compose(own_pool)}; the
    second is left out where the student's pooling raises."""
    found = {"reference pooling": compose(_reference_pool)}
    try:
        found["your masked_mean_pool"] = compose(own_pool(impl))
    except Exception as exc:  # noqa: BLE001 - the pooling task reports its own failures
        if did_not_finish(exc):
            raise
    return found


def check_wiring(actual, candidates: dict, what: str, diagnose) -> torch.Tensor:
    """Pass when ``actual`` is one of the candidate wirings (exact shape, values); else the
    reference candidate decides the message: shape, NaN, values, likely mistake."""
    actual = tensor_result(actual, what)
    if any(close(actual, c, WIRING_TOL) for c in candidates.values()):
        return actual
    expected = candidates["reference pooling"]
    mistake = diagnose(actual)
    check_shape(actual, expected.shape, what, mistake)
    check_finite(actual, what, mistake)
    check_close(actual, expected, what, atol=WIRING_TOL, rtol=WIRING_TOL, hint=mistake)
    fail(f"{what} does not match the expected values. {mistake}".strip())  # e.g. NaN pattern


def _hidden(model, ids, mask, with_mask: bool = True):
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask) if with_mask else model(input_ids=ids)
    return out


# ---------------------------------------------------------------------------------------------
# Wiring on a small random BERT (tiny-bert-seed<k>)
# ---------------------------------------------------------------------------------------------

def left_padded(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same right-padded batch padded on the left instead: each row rolled so its real tokens come last."""
    ids, mask = ids.clone(), mask.clone()
    for b, length in enumerate((mask != 0).sum(dim=1).tolist()):
        shift = mask.shape[1] - length
        ids[b], mask[b] = ids[b].roll(shift), mask[b].roll(shift)
    return ids, mask


def with_holes(mask: torch.Tensor) -> torch.Tensor:
    """The mask with position 2 of every row longer than 3 real tokens set to 0 (a token left out)."""
    holes = mask.clone()
    holes[(mask != 0).sum(dim=1) > 3, 2] = 0
    return holes


@pytest.mark.points(4)
def test_encode_is_masked_mean_of_last_hidden_state(impl):
    model = data.tiny_bert("tiny-bert-seed1", impl)
    sbert = impl.siamese.create_sbert(model)
    ids, mask = data.padded_batch(SENTENCES_A + SENTENCES_B)
    # The docstring's rule holds for the positions whose mask is 1, wherever they are: padded on the
    # right (most BERT tokenizers), on the left (some tokenizers do), and a mask with holes.
    batches = {"padded on the right": (ids, mask), "padded on the left": left_padded(ids, mask),
               "a mask with holes": (ids, with_holes(mask))}
    for how, (ids, mask) in batches.items():
        with torch.no_grad():
            actual = sbert.encode(ids.clone(), mask.clone())
        out = _hidden(model, ids, mask)
        h = out.last_hidden_state
        unmasked = _hidden(model, ids, mask, with_mask=False).last_hidden_state

        def diagnose(a, h=h, out=out, unmasked=unmasked, mask=mask):
            return name_mistake(a, {
                "sbert_cls_encode": h[:, 0],
                "sbert_pooler_output": out.pooler_output,
                "sbert_unmasked_mean": h.mean(1),
                "sbert_no_encoder_mask": _reference_pool(unmasked, mask),
                "sbert_no_mask_anywhere": unmasked.mean(1),
            }, tol=WIRING_TOL)

        candidates = wirings(impl, lambda pool: pool(h, mask))
        check_wiring(actual, candidates,
                     f"encode(input_ids [{ids.shape[0]}, {ids.shape[1]}], attention_mask), {how}", diagnose)


@pytest.mark.points(3)
def test_forward_is_pairwise_cosine(impl):
    model = data.tiny_bert("tiny-bert-seed2", impl)
    sbert = impl.siamese.create_sbert(model)
    ids_a, mask_a = data.padded_batch(SENTENCES_A)
    ids_b, mask_b = data.padded_batch(SENTENCES_B)
    assert ids_a.shape[1] != ids_b.shape[1], "test set-up: the two sides should have different lengths"
    with torch.no_grad():
        actual = sbert(ids_a.clone(), mask_a.clone(), ids_b.clone(), mask_b.clone())
    h_a, h_b = _hidden(model, ids_a, mask_a).last_hidden_state, _hidden(model, ids_b, mask_b).last_hidden_state
    B = ids_a.shape[0]
    e_a, e_b = _reference_pool(h_a, mask_a), _reference_pool(h_b, mask_b)

    def diagnose(a):
        if tuple(a.shape) == (B, B):
            return mistake_hint("sbert_all_pairs")
        return name_mistake(a, {
            "sbert_dot_product": (e_a * e_b).sum(-1),
            "sbert_cosine_distance": 1 - F.cosine_similarity(e_a, e_b, dim=-1),
            "sbert_cosine_wrong_dim": F.cosine_similarity(e_a, e_b, dim=0),
        }, tol=WIRING_TOL)

    candidates = wirings(impl, lambda pool: F.cosine_similarity(pool(h_a, mask_a), pool(h_b, mask_b), dim=-1))
    check_wiring(actual, candidates,
                 f"forward(a [{B}, {ids_a.shape[1]}], b [{B}, {ids_b.shape[1]}]) (sides padded differently)", diagnose)


@pytest.mark.points(3)
def test_both_sides_share_one_encoder(impl):
    # Deep-copying the encoder for one side gives the same numbers until the weights change (e.g. a
    # training step). So change the weights of the encoder the wrapper exposes (state_dict /
    # load_state_dict, through the sandbox too) and check that both sides follow: with one shared
    # encoder, swapping the two sentences of a pair cannot change its score.
    name = "tiny-bert-seed31"  # only this test uses this model: it changes the weights
    model = data.tiny_bert(name, impl)
    sbert = impl.siamese.create_sbert(model)
    x, mask_x = data.padded_batch(SENTENCES_A[:3])
    y, mask_y = data.padded_batch(SENTENCES_B[:3])
    h_x, h_y = _hidden(model, x, mask_x).last_hidden_state, _hidden(model, y, mask_y).last_hidden_state
    with torch.no_grad():
        before = tensor_result(sbert.encode(x.clone(), mask_x.clone()), "encode(...)")
    state = sbert.state_dict()
    if not isinstance(state, dict):
        fail(f"SiameseBert.state_dict() returned {type(state).__name__}; keep SiameseBert a torch.nn.Module.")
    anchor = "embeddings.word_embeddings.weight"
    model_state = model.state_dict()
    prefixes = sorted(key[: -len(anchor)] for key in state if key.endswith(anchor)
                      and all(key[: -len(anchor)] + k in state for k in model_state))
    if not prefixes:
        fail("SiameseBert.state_dict() does not hold the encoder's weights: store the encoder as a "
             "submodule attribute (self.encoder = bert_model) so that training and saving see it.")
    g = generator(31)
    perturbed = {prefixes[0] + k: v + 0.5 * torch.randn(v.shape, generator=g)
                 for k, v in model_state.items() if v.is_floating_point()}
    sbert.load_state_dict(perturbed, strict=False)
    with torch.no_grad():
        after = tensor_result(sbert.encode(x.clone(), mask_x.clone()), "encode(...) after a weight change")
        xy = tensor_result(sbert(x.clone(), mask_x.clone(), y.clone(), mask_y.clone()), "forward(x, y)")
        yx = tensor_result(sbert(y.clone(), mask_y.clone(), x.clone(), mask_x.clone()), "forward(y, x)")
    # What encode must give now: the wiring (either pooling) over a trusted copy with the same new weights.
    changed = copy.deepcopy(model)
    changed.load_state_dict({k[len(prefixes[0]):]: v for k, v in perturbed.items()}, strict=False)
    h_x_after = _hidden(changed, x, mask_x).last_hidden_state
    follows = any(close(after, c, WIRING_TOL) for c in wirings(impl, lambda pool: pool(h_x_after, mask_x)).values())
    if not follows and close(after, before, 1e-6):
        fail("After the wrapped encoder's weights changed (load_state_dict), encode gave the same vectors: "
             "encode must run the encoder stored in the SiameseBert, not another copy of it.")
    if not follows:  # the points need the right vectors, not only different ones
        fail("After the wrapped encoder's weights changed (load_state_dict), encode does not give the masked "
             "mean of the changed encoder's last hidden state. Fix encode first (its own test says how).")
    shapes = {(x.shape[0],)} | {tuple(c.shape) for c in wirings(impl, lambda pool: F.cosine_similarity(
        pool(h_x, mask_x), pool(h_y, mask_y), dim=-1)).values()}
    if tuple(xy.shape) not in shapes:
        check_shape(xy, (x.shape[0],), "forward(x, y)", "forward returns one cosine per pair: shape [B].")
    if tuple(yx.shape) != tuple(xy.shape) or not torch.allclose(xy.double(), yx.double(), atol=1e-4, rtol=1e-4):
        worst = int((xy.double() - yx.double()).abs().reshape(-1).argmax()) if yx.shape == xy.shape else 0
        fail(f"After the encoder's weights changed, swapping the two sentences of a pair changed its score "
             f"(pair {worst}: forward(x, y) = {xy.reshape(-1)[worst].item():.4f}, forward(y, x) = "
             f"{yx.reshape(-1)[worst].item():.4f}): the two sides use different copies of the encoder. A Siamese "
             "network has ONE encoder: keep one module and call it for both sentences (no copy.deepcopy).")


@pytest.mark.points(4)
def test_training_reaches_the_shared_encoder_through_both_branches(impl):
    # One backward step of a loss on forward's output, run next to the student's objects (in the
    # sandbox while grading). Side a and side b use disjoint words, so the word-embedding rows of
    # a's words can only get a gradient through branch a, and b's through branch b: both must, on
    # the parameters of the very model given to create_sbert.
    name = "tiny-bert-seed41"  # only this test uses this model: the probe writes (then clears) its grads
    model = data.tiny_bert(name, impl)
    sbert = impl.siamese.create_sbert(model)
    (ids_a, mask_a), (ids_b, mask_b) = disjoint_pair_batch(seed=41)
    report = run_probe(impl, "siamese_gradients", sbert, model, ids_a.clone(), mask_a.clone(), ids_b.clone(),
                       mask_b.clone())
    what = f"forward(a [{ids_a.shape[0]}, {ids_a.shape[1]}], b [{ids_b.shape[0]}, {ids_b.shape[1]}])"
    if report["output"] != "tensor":
        fail(f"{what} returned {report['output']}; expected a tensor of cosines, one per pair.")
    # A right answer first: points for trainability go only with the right scores.
    h_a, h_b = _hidden(model, ids_a, mask_a).last_hidden_state, _hidden(model, ids_b, mask_b).last_hidden_state
    candidates = wirings(impl, lambda pool: F.cosine_similarity(pool(h_a, mask_a), pool(h_b, mask_b), dim=-1))
    check_wiring(report["scores"], candidates, what, lambda a: "")
    problem = _training_problem(report, what)
    # A pooling that passes no gradient (NumPy inside, a constant result) cuts every wrapper built on
    # it: that is the pooling task's mistake (its own gradient test charges it), not this one's.
    if problem and own_pooling_trains(impl):
        fail(problem)


def _training_problem(report: dict, what: str) -> str:
    """What keeps a loss on the scores from training the shared encoder ('' when nothing does)."""
    if not report["has_graph"]:
        return (f"{what} gives the right scores, but they carry no gradient (requires_grad is False). "
                f"{mistake_hint('sbert_encode_no_grad')}")
    cut = [side for side in ("a", "b") if not report[f"branch_{side}"] > 0]
    if len(cut) == 2:
        return (f"A loss on {what} sent no gradient into the model given to create_sbert ({report['reached']} of "
                f"its {report['trainable']} trainable weight tensors got one). {mistake_hint('sbert_wraps_a_copy')}")
    if cut:
        side, other = cut[0], "b" if cut[0] == "a" else "a"
        return (f"A loss on {what} reaches the shared encoder through side {other} but not through side {side} "
                f"(the embeddings of the words only side {side} uses got no gradient). Both sentences must go "
                f"through the same self.encoder with gradients on: look on side {side}'s path for a .detach(), a "
                "torch.no_grad() or a second copy of the encoder.")  # the symptom and where to look: any of the three cuts it
    return ""


def own_pooling_trains(impl) -> bool:
    """Does the student's masked_mean_pool pass a gradient to every real token of a padded batch?
    (Run where the student's code runs, like the wrapper's own backward step.)"""
    g = generator(42)
    hidden = torch.randn(2, 5, 8, generator=g)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    try:
        report = run_probe(impl, "pooling_gradients", impl.pooling.masked_mean_pool, hidden, mask)
    except Exception as exc:  # noqa: BLE001 - a pooling that raises trains nothing
        if did_not_finish(exc):
            raise
        return False
    grad = report["grad"]
    if not report["has_graph"] or not isinstance(grad, torch.Tensor) or tuple(grad.shape) != tuple(hidden.shape):
        return False
    return bool((grad[mask.bool()].abs().sum(-1) > 0).all())


# ---------------------------------------------------------------------------------------------
# The lesson: SBERT over MiniLM beats the DAN baseline
# ---------------------------------------------------------------------------------------------

def _rows(groups, n_texts: int, rows_of) -> list:
    """Per text, its row of the per-group results ``rows_of(group)`` (None where that failed)."""
    out = [None] * n_texts
    for group in groups:
        values = rows_of(group)
        if values is None:
            continue
        for position, index in enumerate(group.indices):
            out[index] = values[position]
    return out


def _dan_cosines(pairs, texts) -> list[float]:
    """DAN cosines: MiniLM's non-contextual embeddings of each text (unpadded), mean-pooled by the
    reference. The baseline is not the task under test: the student's pooling never touches it."""
    groups = data.unpadded_groups(texts, contextual=False)
    vectors = _rows(groups, len(texts), lambda group: _reference_pool(group.states, group.attention_mask).float())
    index = {t: i for i, t in enumerate(texts)}
    return [F.cosine_similarity(vectors[index[p.a]], vectors[index[p.b]], dim=0).item() for p in pairs]


def pooling_owns_the_difference(actual_rows, own_rows, ref_rows) -> bool:
    """True when the student's outputs are exactly the reference wiring over the student's OWN pooling
    and that pooling differs from the reference: whatever is wrong is the pooling task's business."""
    return (own_rows is not None
            and all(close(a, o, WIRING_TOL) for a, o in zip(actual_rows, own_rows))
            and not all(close(o, r, WIRING_TOL) for o, r in zip(own_rows, ref_rows)))


def _judge_quality(scores, dan, pairs, where: str, reference_scores, diagnosis: str) -> None:
    references = [p.score for p in pairs]
    rho, rho_dan = spearman(scores, references), spearman(dan, references)
    rho_reference = spearman(reference_scores, references)
    if not rho >= rho_reference - QUALITY_SLACK:
        fail(f"Your SBERT's Spearman correlation on {where} is {rho:.3f}; mean-pooled MiniLM reaches "
             f"{rho_reference:.3f}, and {QUALITY_SLACK} below that is the floor. {diagnosis}".strip())
    if not rho - rho_dan >= DAN_MARGIN:
        fail(f"On {where}, your SBERT (Spearman {rho:.3f}) beats the DAN baseline ({rho_dan:.3f}) by only "
             f"{rho - rho_dan:.3f}; context should add at least {DAN_MARGIN}. {diagnosis}".strip())


def _quality_diagnosis(cosines: torch.Tensor, states_a, states_b) -> str:
    """Which classic siamese mistake (bertlab/mistakes.py) these pair cosines come from (on unpadded
    MiniLM states)."""
    model = data.minilm()
    ones_a = [torch.ones(s.shape[:2], dtype=torch.long) for s in states_a]
    ones_b = [torch.ones(s.shape[:2], dtype=torch.long) for s in states_b]
    mean_a = [_reference_pool(s, m)[0] for s, m in zip(states_a, ones_a)]
    mean_b = [_reference_pool(s, m)[0] for s, m in zip(states_b, ones_b)]
    with torch.no_grad():
        pool_a = [model.pooler(s)[0] for s in states_a]
        pool_b = [model.pooler(s)[0] for s in states_b]
    return name_mistake(cosines, {
        "sbert_dot_product": torch.stack([(x * y).sum() for x, y in zip(mean_a, mean_b)]),
        "sbert_cls_encode":
            torch.stack([F.cosine_similarity(s[0, 0], t[0, 0], dim=0) for s, t in zip(states_a, states_b)]),
        "sbert_pooler_output": torch.stack([F.cosine_similarity(x, y, dim=0) for x, y in zip(pool_a, pool_b)]),
        "sbert_cosine_distance": torch.stack([1 - F.cosine_similarity(x, y, dim=0) for x, y in zip(mean_a, mean_b)]),
    }, tol=WIRING_TOL)


@pytest.mark.points(3)
def test_sbert_beats_dan_on_lesson_pairs(impl):
    pairs = LESSON_STS_PAIRS
    texts = tuple(dict.fromkeys(t for p in pairs for t in (p.a, p.b)))
    # All 8 pairs in one call, each side padded to its longest sentence (one forward per side instead
    # of 16 single-sentence ones). A pooling mistake about the mask is left to the pooling task when
    # the output is the reference wiring over the student's own pooling.
    ids_a, m_a, h_a = data.padded_states(tuple(p.a for p in pairs))
    ids_b, m_b, h_b = data.padded_states(tuple(p.b for p in pairs))
    sbert = impl.siamese.create_sbert(data.minilm())
    with torch.no_grad():
        actual = tensor_result(sbert(ids_a.clone(), m_a.clone(), ids_b.clone(), m_b.clone()),
                               f"forward on the lesson's {len(pairs)} pairs (each side padded)")
    reference_scores = F.cosine_similarity(_reference_pool(h_a, m_a), _reference_pool(h_b, m_b), dim=-1)
    try:
        pool = own_pool(impl)
        own = F.cosine_similarity(pool(h_a, m_a), pool(h_b, m_b), dim=-1)
    except Exception as exc:  # noqa: BLE001
        if did_not_finish(exc):
            raise
        own = None
    if pooling_owns_the_difference([actual], None if own is None else [own], [reference_scores]):
        return
    check_shape(actual, (len(pairs),), f"forward(a [{len(pairs)}, Ta], mask_a, b [{len(pairs)}, Tb], mask_b)",
                "forward returns one cosine per pair: shape [B].")
    scores = [float(x) for x in actual]
    # The classic mistakes, named from each sentence's own unpadded states.
    groups = data.unpadded_groups(texts, contextual=True)
    single = _rows(groups, len(texts), lambda g: [g.states[i:i + 1] for i in range(len(g.indices))])
    index = {t: i for i, t in enumerate(texts)}
    diagnosis = _quality_diagnosis(torch.tensor(scores), [single[index[p.a]] for p in pairs],
                                   [single[index[p.b]] for p in pairs])
    _judge_quality(scores, _dan_cosines(pairs, texts), pairs, "the lesson's 8 STS pairs",
                   [float(x) for x in reference_scores], diagnosis)


@pytest.mark.points(3)
def test_sbert_beats_dan_on_sts_sample(impl):
    pairs = data.sts_sample()
    texts = tuple(dict.fromkeys(t for p in pairs for t in (p.a, p.b)))
    # Batches of similar lengths, padded: a pooling mistake about the mask shows here, and is left to
    # the pooling task when the output is the reference wiring over the student's own pooling.
    groups = data.length_buckets(texts)
    sbert = impl.siamese.create_sbert(data.minilm())
    pool = own_pool(impl)
    actual, ref_rows, own_rows = [], [], []
    for group in groups:
        what = (f"encode of {len(group.indices)} sentences padded to {group.input_ids.shape[1]} tokens "
                "(attention_mask marks the padding)")
        with torch.no_grad():
            actual.append(tensor_result(sbert.encode(group.input_ids.clone(), group.attention_mask.clone()), what))
        ref_rows.append(_reference_pool(group.states, group.attention_mask))
        if own_rows is not None:
            try:
                own_rows.append(pool(group.states, group.attention_mask))
            except Exception as exc:  # noqa: BLE001
                if did_not_finish(exc):
                    raise
                own_rows = None
    if pooling_owns_the_difference(actual, own_rows, ref_rows):
        return
    for out, group in zip(actual, groups):
        check_shape(out, (len(group.indices), group.states.shape[2]), "encode(input_ids, attention_mask)",
                    "One D-vector per sentence.")
    vectors = [None] * len(texts)
    for out, group in zip(actual, groups):
        for position, i in enumerate(group.indices):
            vectors[i] = out[position].float()
    by_group = iter(ref_rows)
    reference_vectors = _rows(groups, len(texts), lambda _group: next(by_group))
    index = {t: i for i, t in enumerate(texts)}

    def cosines(rows):
        return [F.cosine_similarity(rows[index[p.a]].float(), rows[index[p.b]].float(), dim=0).item() for p in pairs]

    _judge_quality(cosines(vectors), _dan_cosines(pairs, texts), pairs,
                   f"{len(pairs)} STS-benchmark test pairs", cosines(reference_vectors), "")
