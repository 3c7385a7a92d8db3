"""The lesson's headline figures: the lesson's own (``LESSON_FIGURES``, the one place they are written)
and this run's, computed end to end from an implementation, side by side.

Used by `bertlab lesson`, the lesson notebook (its last table) and the kit's acceptance tests. Every
measured number comes from running the given implementation on the packaged MiniLM and the shipped data:

- SBERT vs DAN on the lesson's 8 STS pairs: cosines, Spearman, MAE;
- the lesson's search query over its six review snippets: top-3 for SBERT and DAN;
- STS benchmark test split: Spearman for SBERT and DAN (``full=True``; about 10 s on 2 cores);
- CKA: untrained TinyBERT (frozen MiniLM embeddings) over several seeds, and trained MiniLM;
- early vs late [CLS]: cosine of each probe sentence's [CLS] after layer 1 and after layer 6 of MiniLM;
- parameter counts: BERT-base from ``BertConfig()`` (no weights), MiniLM.

``lesson_figures`` runs each figure as a step (``bertlab.lesson.LessonSteps``): a figure whose code
reaches unfinished work is left out with one line naming the tasks it waits for, and the rest go on.
Fine-tuning is not measured here (minutes of training): the notebook's Concept 3 measures it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence
import textwrap

import torch

from . import datasets
from .dan import DANEncoder
from .encoder import create_bert
from .implementations import Implementation
from .lesson import LessonSteps, announce as say_how_long
from .models import count_parameters, load_tokenizer, named_model
from .representations import layer_representations
from .sts import encode_texts, evaluate_pairs
from .tables import cls_layer_cosines, bert_base_on_meta
from .tasks import EXERCISE_TASKS, LESSON_FIGURE_TASKS

CKA_PROBE_SIZE = 64  # IMDb reviews used as CKA probe inputs (truncated to 128 tokens)


def probe_batch(tokenizer, n: int = CKA_PROBE_SIZE, max_length: int = 128) -> dict:
    """A fixed batch of IMDb reviews (seeded sample) tokenised for CKA probing."""
    texts = [text for text, _ in datasets.load_movie_reviews("imdb", n, seed=0)]
    return tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")


def untrained_tinybert_cka(impl: Implementation, model, batch, seed: int) -> torch.Tensor:
    """[4, 4] CKA of the blocks of an untrained 4-layer TinyBERT on MiniLM's frozen embedding table."""
    weight = model.get_input_embeddings().weight.detach()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        tiny = create_bert(vocab_size=weight.shape[0], d_model=weight.shape[1], num_heads=4,
                           mlp_hidden_dim=4 * weight.shape[1], num_layers=4, pad_id=0, use_rope=True,
                           use_absolute_positions=False, pretrained_embedding_weight=weight)
    reps = layer_representations(tiny, batch["input_ids"], batch["attention_mask"], impl.pooling.masked_mean_pool,
                                 include_embeddings=False)
    return impl.cka.cka_matrix(reps)


def off_diagonal(matrix: torch.Tensor) -> torch.Tensor:
    """The off-diagonal entries of a square matrix, flattened."""
    mask = ~torch.eye(matrix.shape[0], dtype=torch.bool)
    return matrix[mask]


def cls_early_late(model, tokenizer, sentences: Sequence[str] = datasets.LAYER_PROBE_SENTENCES) -> list[float]:
    """Cosine of each sentence's [CLS] vector after layer 1 and after the last layer (MiniLM: 6)."""
    return cls_layer_cosines(model, tokenizer, sentences, early=1, late=-1)


def bert_base_parameters() -> int:
    """Parameters of BERT-base (``BertModel(BertConfig())``), built on the meta device: no weights."""
    return count_parameters(bert_base_on_meta())


def lesson_figures(impl: Implementation, full: bool = True, seeds=(0, 1, 2), steps=None,
                   announce: bool = False) -> dict[str, Any]:
    """Every headline figure as plain data (floats, lists, nested dicts).

    Each figure is one step of ``steps`` (a ``bertlab.lesson.LessonSteps``; default: a quiet one on
    ``impl``, no tracebacks). A figure whose step reaches unfinished work (or your code's error) is
    absent from the result; ``figures["waiting"]`` maps it to the tasks it waits for (see FIGURE_USES).
    ``announce``: print how long a slow step usually takes before it starts.
    """
    steps = steps if steps is not None else LessonSteps(impl, tracebacks=False)
    tokenizer, model = load_tokenizer("minilm"), named_model("minilm")
    figures: dict[str, Any] = {"implementation": impl.name}

    embedders = {}
    with steps.step("siamese", title="Sentence-BERT (create_sbert)"):
        steps.require()
        sbert = impl.siamese.create_sbert(model)
        embedders["sbert"] = lambda texts: encode_texts(sbert.encode, tokenizer, texts)
    dan = DANEncoder.from_model(model, impl.pooling.masked_mean_pool)  # stores the function, calls nothing yet
    embedders["dan"] = lambda texts: dan.embed_texts(tokenizer, texts)
    for name, embed in embedders.items():
        label = name.upper()
        with steps.step(*FIGURE_USES[f"lesson_sts_{name}"], title=f"the lesson's 8 STS pairs, {label}"):
            steps.require()
            figures[f"lesson_sts_{name}"] = evaluate_pairs(embed, datasets.LESSON_STS_PAIRS)
        with steps.step(*FIGURE_USES[f"search_{name}"], title=f"the lesson's search, {label}"):
            steps.require()
            index = impl.retrieval.SemanticIndex(embed)
            index.add(datasets.LESSON_REVIEW_SNIPPETS)
            figures[f"search_{name}"] = [_hit_dict(hit) for hit in index.search(datasets.LESSON_QUERY, top_k=3)[0]]
        if full:
            with steps.step(*FIGURE_USES[f"stsb_test_{name}"], title=f"STS benchmark, {label}"):
                steps.require()
                if announce and name == "sbert":  # the DAN only looks words up: about a second
                    say_how_long("stsb:sbert", f"STS benchmark test split (1,379 pairs), {label}")
                figures[f"stsb_test_{name}"] = evaluate_pairs(embed, datasets.load_sts_benchmark("test"))["spearman"]

    batch = probe_batch(tokenizer)
    with steps.step(*FIGURE_USES["cka_untrained_min_offdiag"], title="CKA of an untrained 4-layer encoder"):
        steps.require()
        untrained = [untrained_tinybert_cka(impl, model, batch, seed) for seed in seeds]
        figures["cka_untrained_min_offdiag"] = [float(off_diagonal(m).min()) for m in untrained]
        figures["cka_untrained_seed0"] = torch.as_tensor(untrained[0]).tolist()
    with steps.step(*FIGURE_USES["cka_minilm_mean"], title="CKA of the trained MiniLM"):
        steps.require()
        trained = impl.cka.cka_matrix(layer_representations(model, batch["input_ids"], batch["attention_mask"],
                                                            impl.pooling.masked_mean_pool))
        figures["cka_minilm_mean"] = torch.as_tensor(trained).tolist()
    with steps.step(*FIGURE_USES["cka_minilm_cls_layer0_defined"], title="CKA of MiniLM's [CLS] vectors"):
        steps.require()
        cls_reps = layer_representations(model, batch["input_ids"], batch["attention_mask"], "cls")
        cls_trained = impl.cka.cka_matrix(cls_reps)
        figures["cka_minilm_cls_layer0_defined"] = not bool(torch.isnan(torch.as_tensor(cls_trained)[0, 0]))

    figures["cls_early_late"] = cls_early_late(model, tokenizer)
    figures["params_bert_base"] = bert_base_parameters()
    figures["params_minilm"] = count_parameters(model)
    wanted = [key for key in FIGURE_USES if full or not key.startswith("stsb_")]
    figures["waiting"] = {key: steps.waiting_for(FIGURE_USES[key]) for key in wanted if key not in figures}
    figures["failed_tasks"] = list(steps.failed)
    return figures


def measured_figures(figures: Mapping[str, Any]) -> dict[str, Any]:
    """``lesson_figures`` output keyed like ``LESSON_FIGURES`` (what ``compare_with_lesson`` reads)."""
    return {"cka_untrained": figures.get("cka_untrained_seed0"), "cka_trained": figures.get("cka_minilm_mean"),
            "params_bert_base": figures.get("params_bert_base"), "cls_early_late": figures.get("cls_early_late"),
            "sts_sbert": figures.get("lesson_sts_sbert"), "sts_dan": figures.get("lesson_sts_dan"),
            "search_sbert": figures.get("search_sbert"), "search_dan": figures.get("search_dan")}


def _waiting_by_figure(figures: Mapping[str, Any]) -> dict[str, list[str]]:
    waiting = figures.get("waiting", {})
    keys = {"cka_untrained": "cka_untrained_min_offdiag", "cka_trained": "cka_minilm_mean",
            "sts_sbert": "lesson_sts_sbert", "sts_dan": "lesson_sts_dan",
            "search_sbert": "search_sbert", "search_dan": "search_dan"}
    return {figure: list(waiting.get(key, ())) for figure, key in keys.items()}


def _hit_dict(hit) -> dict:
    """A search hit (the student's Hit, a namedtuple, a dict or a plain tuple) as {corpus_id, score, text}."""
    if isinstance(hit, Mapping):
        return dict(hit)
    if hasattr(hit, "_asdict"):
        return dict(hit._asdict())
    return dict(zip(("corpus_id", "score", "text"), tuple(hit)))


def format_figures(figures: dict[str, Any]) -> str:
    """A readable report of ``lesson_figures`` output: what was measured, then the lesson side by side."""
    lines = [f"Lesson figures ({figures['implementation']})", ""]
    sb, dn = figures.get("lesson_sts_sbert"), figures.get("lesson_sts_dan")
    if sb or dn:
        lines.append("The lesson's 8 STS pairs:")
        names = [n for n, r in (("SBERT", sb), ("DAN", dn)) if r]
        lines.append(f"  {'ref':>5} " + " ".join(f"{n:>6}" for n in names) + "  A vs B")
        for i, pair in enumerate(datasets.LESSON_STS_PAIRS):
            values = " ".join(f"{r['cosines'][i]:6.3f}" for r in (sb, dn) if r)
            lines.append(f"  {pair.score:5.2f} {values}  {pair.a!r} vs {pair.b!r}")
        lines.append("  " + "; ".join(f"{n}: Spearman {r['spearman']:.3f}, MAE {r['mae']:.3f}"
                                      for n, r in (("SBERT", sb), ("DAN", dn)) if r))
    if "stsb_test_sbert" in figures or "stsb_test_dan" in figures:
        parts = [f"{n} {figures[k]:.3f}" for n, k in (("SBERT", "stsb_test_sbert"), ("DAN", "stsb_test_dan"))
                 if k in figures]
        lines.append(f"STS benchmark test (1,379 pairs) Spearman: {', '.join(parts)}")
    searches = [name for name in ("sbert", "dan") if f"search_{name}" in figures]
    if searches:
        lines += ["", f"Query: {datasets.LESSON_QUERY!r}"]
        for name in searches:
            lines.append(f"  {name.upper()} top-3:")
            lines += [f"    [{hit['score']:.3f}] {hit['text']}" for hit in figures[f"search_{name}"]]
    lines.append("")
    if "cka_untrained_min_offdiag" in figures:
        mins = ", ".join(f"{m:.3f}" for m in figures["cka_untrained_min_offdiag"])
        seeds = len(figures["cka_untrained_min_offdiag"])
        lines.append(f"CKA, untrained 4-layer TinyBERT (frozen MiniLM embeddings): min off-diagonal "
                     f"{'per seed ' if seeds > 1 else '(seed 0) '}{mins}")
    if "cka_minilm_mean" in figures:
        trained = torch.tensor(figures["cka_minilm_mean"])
        adjacent = torch.diagonal(trained, 1)
        lines.append(f"CKA, trained MiniLM (7 hidden states, mean-pooled): adjacent layers {adjacent.min():.3f}-"
                     f"{adjacent.max():.3f}, layer 0 vs layer 6 {trained[0, -1]:.3f}")
    if "cka_minilm_cls_layer0_defined" in figures:
        lines.append(f"Layer-0 [CLS] CKA defined: {figures['cka_minilm_cls_layer0_defined']} "
                     "(the same vector for every input, so CKA is undefined: nan)")
    lines.append(f"Parameters: BERT-base {figures['params_bert_base']:,}; all-MiniLM-L6-v2 {figures['params_minilm']:,}")
    lines += ["", format_comparison(compare_with_lesson(measured_figures(figures), waiting=_waiting_by_figure(figures),
                                                        finetune_note=FINETUNE_NOT_IN_COMMAND))]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The lesson's figures, side by side with this run's
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LessonFigure:
    """One headline figure of the lesson: what the lesson reported, and why ours may differ by design.

    ``same_setup``: the lesson measured it with the same model and data as this kit, so a different
    value means different code (then the note names the tasks to check).
    """

    key: str
    label: str
    lesson: str                     # the lesson's value, as the lesson gave it
    lesson_values: tuple = ()       # the same as numbers, where this run is compared number by number
    same_setup: bool = False
    why_different: str = ""         # why this run's value differs by design (empty when it should not)

    @property
    def uses(self) -> tuple[str, ...]:
        """The exercise tasks this run needs to measure it (the registry's LESSON_FIGURE_TASKS)."""
        return LESSON_FIGURE_TASKS[self.key]


LESSON_FIGURES: tuple[LessonFigure, ...] = (
    LessonFigure(
        "cka_untrained", "CKA, untrained 4-layer encoder",
        "flat: 0.952-0.988 between any two blocks", (0.952, 0.988),
        why_different="our blocks read MiniLM's 30,522 x 384 word table, the lesson's its Week 3 one; "
                      "the residual stream keeps it flat and above 0.9 either way"),
    LessonFigure(
        "cka_trained", "CKA, trained encoder",
        "staircase: neighbours similar, falling with distance, embeddings least like the last layer "
        "(bert-base-uncased, 13 [CLS] states)", (),
        why_different="MiniLM's 7 mean-pooled states, not bert-base's 13 [CLS] states (MiniLM's layer-0 [CLS] "
                      "is the same for every input, so its CKA is undefined); the same shape"),
    LessonFigure(
        "params_bert_base", "BERT-base parameters", "109,482,240", (109_482_240,), same_setup=True),
    LessonFigure(
        "cls_early_late", "cosine of [CLS] early vs late",
        "0.163-0.204 (layer 1 vs 12, bert-base-uncased)", (0.163, 0.204),
        why_different="MiniLM, layer 1 vs 6: its [CLS] was never trained to summarise a sentence (MiniLM was "
                      "trained through mean pooling), so only its last layer moves it"),
    LessonFigure(
        "finetune", "IMDb accuracy, fine-tuned vs from scratch",
        "91.6% fine-tuned bert-base-uncased vs 72.8% Week 6 model from scratch", (0.916, 0.728)),
    LessonFigure(
        "sts_sbert", "8 STS pairs, SBERT: Spearman / MAE", "0.881 / 0.285 (all-MiniLM-L6-v2)", (0.881, 0.285),
        same_setup=True),
    LessonFigure(
        "sts_dan", "8 STS pairs, DAN: Spearman / MAE", "-0.143 / 0.454 (the Week 3 DAN)", (-0.143, 0.454),
        why_different="our DAN averages MiniLM's own input embeddings, the lesson's was its Week 3 model: a "
                      "different model, the same story (far below SBERT)"),
    LessonFigure(
        "search_sbert", "search top-3, SBERT", "0.560, 0.481, 0.454 (all-MiniLM-L6-v2)", (0.560, 0.481, 0.454),
        same_setup=True),
    LessonFigure(
        "search_dan", "search top-3, DAN", "0.435, 0.301, 0.245 (the Week 3 DAN)", (0.435, 0.301, 0.245),
        why_different="a different DAN (MiniLM's embeddings): higher cosines and a different third hit"),
)

# The tasks each figure of ``lesson_figures`` needs: those the registry gives the lesson figure it is
# measured for (LESSON_FIGURE_TASKS). A siamese.py that calls your pooling adds pooling:
# LessonSteps.waiting_for sees that.
FIGURE_USES: dict[str, tuple[str, ...]] = {
    measured: LESSON_FIGURE_TASKS[lesson_key] for measured, lesson_key in (
        ("lesson_sts_sbert", "sts_sbert"), ("lesson_sts_dan", "sts_dan"),
        ("search_sbert", "search_sbert"), ("search_dan", "search_dan"),
        ("stsb_test_sbert", "sts_sbert"), ("stsb_test_dan", "sts_dan"),
        ("cka_untrained_min_offdiag", "cka_untrained"), ("cka_minilm_mean", "cka_trained"),
        ("cka_minilm_cls_layer0_defined", "cka_cls"))
}


#: What `bertlab lesson` says in the fine-tuning row: it does not train.
FINETUNE_NOT_IN_COMMAND = ("not measured by `bertlab lesson` (training takes minutes): the notebook's "
                           "Concept 3 measures it")

_TOLERANCE = 0.0015  # three decimals, as the lesson printed them


@dataclass(frozen=True)
class Comparison:
    """One row of the side-by-side table."""

    label: str
    lesson: str
    this_run: str
    note: str


def _matrix(value) -> Optional[torch.Tensor]:
    return None if value is None else torch.as_tensor(value, dtype=torch.float64)


def _describe(key: str, value: Any) -> tuple[str, Optional[tuple]]:
    """(this run's value as text, the same as numbers comparable with the lesson's) for one figure."""
    if key == "cka_untrained":
        values = off_diagonal(_matrix(value))
        shape = "flat" if float(values.min()) > 0.9 else "not flat"
        return f"{shape}: {float(values.min()):.3f}-{float(values.max()):.3f} between any two blocks", None
    if key == "cka_trained":
        matrix = _matrix(value)
        adjacent = torch.diagonal(matrix, 1)
        staircase = float(adjacent.mean()) > float(matrix[0, -1]) + 0.1
        return (f"{'staircase' if staircase else 'no staircase'}: neighbours {float(adjacent.min()):.3f}-"
                f"{float(adjacent.max()):.3f}, embeddings vs last layer {float(matrix[0, -1]):.3f}", None)
    if key == "params_bert_base":
        return f"{int(value):,}", (int(value),)
    if key == "cls_early_late":
        return f"{min(value):.3f}-{max(value):.3f} (layer 1 vs 6, all-MiniLM-L6-v2)", None
    if key in ("sts_sbert", "sts_dan"):
        return f"{value['spearman']:.3f} / {value['mae']:.3f}", (value["spearman"], value["mae"])
    if key in ("search_sbert", "search_dan"):
        scores = [float(_hit_dict(hit)["score"]) for hit in value]
        return ", ".join(f"{s:.3f}" for s in scores), tuple(scores)
    raise KeyError(key)


def _finetune_row(figure: LessonFigure, value: Optional[Mapping], waiting: Sequence[str], note: str) -> Comparison:
    """The fine-tuning row: both accuracies, and what differs from the lesson's run."""
    if not value or not (value.get("finetuned") or value.get("scratch")):
        return Comparison(figure.label, figure.lesson, "not measured", note)
    parts = []
    for name, result in (("fine-tuned", value.get("finetuned")), ("from scratch", value.get("scratch"))):
        parts.append(f"{result['accuracy']:.1%} {name}" if result else
                     f"{name}: waiting for task(s) {', '.join(waiting) or '(see above)'}")
    preset = value.get("preset", "cpu")
    model = value.get("model", "all-MiniLM-L6-v2")
    settings = next((r.get("settings") for r in (value.get("finetuned"), value.get("scratch")) if r), None) or {}
    if preset == "fast":
        why = "BERTLAB_FAST=1: a few seconds of training, so these accuracies mean nothing"
    elif preset == "lesson":
        why = (f"the lesson's settings (FULL = True) on {model}; the from-scratch model is our TinyBERT, "
               "trained on the same 5,000 reviews, not Week 6's model on 40,000")
    else:
        reviews, epochs = settings.get("n_train"), settings.get("epochs")
        run = f"{reviews:,} reviews for {epochs:g} epoch(s)" if reviews and epochs else "fewer reviews and epochs"
        why = (f"the {preset!r} preset, sized for a CPU: {model} (22.7M parameters, not bert-base's 109.5M) on {run}, "
               "not 5,000 for 5 (FULL = True runs the lesson's); the from-scratch TinyBERT gets the same few steps, "
               "Week 6's model 40,000 reviews")
    if (value.get("finetuned") or {}).get("source") == "kit":
        why += ("; the fine-tuned figures were computed when the kit was built, with these settings (they use none "
                "of your code; RETRAIN = True trains it here)")
    return Comparison(figure.label, figure.lesson, " vs ".join(parts), why)


def compare_with_lesson(measured: Mapping[str, Any], waiting: Optional[Callable | Mapping] = None,
                        finetune_note: str = "") -> list[Comparison]:
    """One row per ``LESSON_FIGURES`` entry: the lesson's value, this run's, and a note where they differ.

    measured: {figure key: value} with the values of ``lesson_figures`` ("cka_untrained": [4, 4] matrix,
    "cka_trained": [7, 7], "params_bert_base": int, "cls_early_late": [cosines], "sts_sbert"/"sts_dan":
    {"spearman", "mae"}, "search_sbert"/"search_dan": [3 hits], "finetune": {"finetuned": result,
    "scratch": result, "preset", "model", "settings"}); a missing or None value is "not measured".
    waiting: the tasks a figure waits for, as {key: tasks} or a function of the figure's ``uses``.
    """
    def waiting_tasks(figure: LessonFigure) -> list[str]:
        if callable(waiting):
            return list(waiting(*figure.uses))
        return list((waiting or {}).get(figure.key, ()))

    rows = []
    for figure in LESSON_FIGURES:
        value = measured.get(figure.key)
        if figure.key == "finetune":
            rows.append(_finetune_row(figure, value, waiting_tasks(figure), finetune_note))
            continue
        if value is None:
            tasks = waiting_tasks(figure)
            absent = [task for task in figure.uses if task not in EXERCISE_TASKS]
            this_run = (f"not measured: task {', '.join(absent)} is not part of this course" if absent
                        else f"not measured: waiting for task(s) {', '.join(tasks)}" if tasks
                        else "not measured (its step did not finish: see above)")
            rows.append(Comparison(figure.label, figure.lesson, this_run, ""))
            continue
        text, numbers = _describe(figure.key, value)
        same = (numbers is not None and len(numbers) == len(figure.lesson_values)
                and all(abs(a - b) <= _TOLERANCE for a, b in zip(numbers, figure.lesson_values)))
        if figure.same_setup:
            note = "" if same else (f"the lesson measured this with the same model and data, so the difference "
                                    f"is in your code: run `bertlab check --task {' / '.join(figure.uses) or '?'}`")
        else:
            note = figure.why_different
            if figure.key == "cka_untrained" and text.startswith("not flat"):
                note = "an untrained encoder's CKA should be flat (above 0.9): run `bertlab check --task cka`"
            elif figure.key == "cka_trained" and text.startswith("no staircase"):
                note = "a trained encoder should give a staircase: run `bertlab check --task cka`"
        rows.append(Comparison(figure.label, figure.lesson, text, note))
    return rows


def format_comparison(rows: Sequence[Comparison], width: int = 100) -> str:
    """The side-by-side table as text: figure, the lesson's value, this run's; each note on its own line."""
    lines = ["The lesson's figures and this run's, side by side:", ""]
    for row in rows:
        lines.append(f"- {row.label}")
        lines.append(f"    lesson:   {row.lesson}")
        lines.append(f"    this run: {row.this_run}")
        if row.note:
            lines += textwrap.wrap(f"why: {row.note}", width=width, initial_indent="    ",
                                   subsequent_indent="         ")
    return "\n".join(lines)
