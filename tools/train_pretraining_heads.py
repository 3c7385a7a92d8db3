"""Train (or measure) the kit's masked-LM and next-sentence heads for the packaged all-MiniLM-L6-v2.

For kit developers. The heads ship as package data in src/bertlab/data/pretraining_heads/, one pair of
files per head: <head>.safetensors (the trained tensors) and <head>.json (settings, held-out figures,
the lesson's examples, the weights' sha256). bertlab.mlm.kit_pretraining_model() loads them.

    python tools/train_pretraining_heads.py --evaluate                # measure the shipped heads (held-out reviews)
    python tools/train_pretraining_heads.py --evaluate --write        # ... and store those figures in their .json
    python tools/train_pretraining_heads.py                           # train both heads again
    python tools/train_pretraining_heads.py --only next_sentence      # one head (the other is left alone)

Training is deterministic (fixed seeds, eval-mode forward passes: no dropout). Given the same torch build
and thread count it reproduces the shipped files; across machines the figures agree to a fraction of a
point. Both heads train on the 6,000 training reviews of bertlab.mlm.pretraining_reviews("train") and are
measured on its 1,000 held-out reviews, which no training step ever reads.

Cost on a quiet 2-core CPU (measured 2026-11-30, --threads 2): the masked-LM head 17 minutes wall, 33
CPU-minutes (1,500 steps of 32 sentences through the whole encoder, forward and backward), the
next-sentence head 4.7 minutes wall (encoding its pairs once), measuring both a few minutes more.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from bertlab import lesson, mlm, nsp
from bertlab.models import load_pretrained, load_tokenizer, named_model

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "src" / "bertlab" / "data" / "pretraining_heads"


@dataclass(frozen=True)
class MaskedLMSettings:
    """Everything that determines the masked-LM head's tensors."""

    steps: int = 1500
    batch_size: int = 32           # sentences per step
    max_length: int = 64           # tokens per sentence, [CLS] and [SEP] included
    learning_rate: float = 2e-3    # peak (AdamW, no weight decay), after a linear warm-up, then linear decay to 0
    warmup_steps: int = 100
    rank: int = 8                  # of the low-rank correction on every linear map of every layer
    mask_rate: float = 0.15        # BERT's
    seed: int = 0
    monitor_sentences: int = 256   # held-out sentences scored every 100 steps (progress lines only)


@dataclass(frozen=True)
class NextSentenceSettings:
    """Everything that determines the next-sentence head's tensors."""

    n_reviews: int = 4000                       # training reviews: one pair per review and segment length
    segment_lengths: tuple[int, ...] = (1, 2, 4, 6)  # sentences per side
    epochs: int = 300                           # full-batch Adam steps on the pairs' vectors
    learning_rate: float = 0.01
    seed: int = 0


EVALUATION_SEED = 1  # the masking of the held-out sentences; the held-out pairs use EVALUATION_SEED + k


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> str:
    wall, cpu = time.perf_counter() - start[0], time.process_time() - start[1]
    return f"{wall / 60:.1f} min wall, {cpu / 60:.1f} CPU-min"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_atomically(path: Path, write) -> None:
    # Write next to the target, then rename: an interrupted run never leaves a half-written head.
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, staging = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(handle)
    try:
        write(Path(staging))
        os.chmod(staging, 0o644)  # mkstemp makes it private; package data must be readable by everyone
        os.replace(staging, path)
    finally:
        Path(staging).unlink(missing_ok=True)


def save_head(part: str, state: dict, figures: dict, directory: Path) -> None:
    from safetensors.torch import save_file

    weights = mlm.head_file(part, directory=directory)
    tensors = {name: tensor.detach().contiguous().float() for name, tensor in sorted(state.items())}
    _write_atomically(weights, lambda p: save_file(tensors, str(p)))
    figures = {**figures, "weights_sha256": _sha256(weights), "weights_bytes": weights.stat().st_size,
               "torch": torch.__version__, "transformers": __import__("transformers").__version__}
    _write_atomically(mlm.head_file(part, ".json", directory),
                      lambda p: p.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8"))
    print(f"wrote {weights} ({weights.stat().st_size / 1e6:.2f} MB) and its .json", flush=True)


# ---------------------------------------------------------------------------------------------
# Masked-LM head
# ---------------------------------------------------------------------------------------------

class LowRankCorrection(nn.Module):
    """A parametrization W -> W + up @ down (up [out, r] starts at zero, so training starts from MiniLM)."""

    def __init__(self, out_features: int, in_features: int, rank: int, generator: torch.Generator):
        super().__init__()
        self.down = nn.Parameter(torch.randn(rank, in_features, generator=generator) / math.sqrt(in_features))
        self.up = nn.Parameter(torch.zeros(out_features, rank))

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return weight + self.up @ self.down


class MaskedLMTrainer(nn.Module):
    """MiniLM (frozen) as a BertForMaskedLM, with the trainable parts the kit ships: low-rank corrections,
    the [MASK] input vector and the masked-LM head. ``logits`` scores the masked positions only."""

    def __init__(self, settings: MaskedLMSettings, word_counts: torch.Tensor):
        super().__init__()
        from torch.nn.utils import parametrize
        from transformers import BertForMaskedLM

        from bertlab.finetune import silenced_transformers

        with silenced_transformers():
            self.model = load_pretrained(BertForMaskedLM, "minilm").eval()
        for parameter in self.model.parameters():
            parameter.requires_grad_(False)
        generator = torch.Generator().manual_seed(settings.seed)
        self.corrections = {}
        for index, layer in enumerate(self.model.bert.encoder.layer):
            for path in mlm.ADAPTED_LINEARS:
                linear = layer.get_submodule(path)
                correction = LowRankCorrection(linear.out_features, linear.in_features, settings.rank, generator)
                parametrize.register_parametrization(linear, "weight", correction)
                self.corrections[f"{index}.{path}"] = correction
        self.mask_embedding_delta = nn.Parameter(torch.zeros(self.model.config.hidden_size))
        head = self.model.cls.predictions
        with torch.no_grad():  # BERT's initialisation, from our seed; the bias starts at the log word frequencies
            head.transform.dense.weight.copy_(torch.randn(head.transform.dense.weight.shape, generator=generator) * 0.02)
            head.transform.dense.bias.zero_()
            head.transform.LayerNorm.weight.fill_(1.0)
            head.transform.LayerNorm.bias.zero_()
            prior = (word_counts.float() + 1).log()
            head.bias.copy_(prior - prior.mean())
        for parameter in [*head.transform.parameters(), head.bias]:
            parameter.requires_grad_(True)
        self.mask_token_id = load_tokenizer("minilm").mask_token_id

    def trainable(self) -> list[nn.Parameter]:
        head = self.model.cls.predictions
        return [p for c in self.corrections.values() for p in (c.down, c.up)] + [self.mask_embedding_delta,
                                                                                *head.transform.parameters(), head.bias]

    def logits(self, masked_ids, attention_mask, labels) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits [M, V], targets [M]) at the M masked positions; the same numbers as the merged
        BertForMaskedLM that bertlab.mlm builds from the saved tensors."""
        words = self.model.bert.embeddings.word_embeddings
        is_mask = (masked_ids == self.mask_token_id).unsqueeze(-1).to(words.weight.dtype)  # [B, T, 1]
        inputs = words(masked_ids) + is_mask * self.mask_embedding_delta
        hidden = self.model.bert(inputs_embeds=inputs, attention_mask=attention_mask,
                                 token_type_ids=torch.zeros_like(masked_ids)).last_hidden_state  # [B, T, H]
        chosen = labels != -100
        transformed = self.model.cls.predictions.transform(hidden[chosen])  # [M, H]
        # The output layer is the (tied) word table, whose [MASK] row carries the trained vector too.
        table = words.weight.index_add(0, torch.tensor([self.mask_token_id]), self.mask_embedding_delta[None])
        return transformed @ table.T + self.model.cls.predictions.bias, labels[chosen]

    def state(self) -> dict[str, torch.Tensor]:
        """The tensors bertlab.mlm.masked_lm_from_head expects."""
        state = {"mask_embedding_delta": self.mask_embedding_delta}
        for name, correction in self.corrections.items():
            state[f"adapters.{name}.down"], state[f"adapters.{name}.up"] = correction.down, correction.up
        head = self.model.cls.predictions
        state.update({f"cls.predictions.transform.{k}": v for k, v in head.transform.state_dict().items()})
        state["cls.predictions.bias"] = head.bias
        return {k: v.detach().clone() for k, v in state.items()}


def word_counts(tokenizer, sentences) -> torch.Tensor:
    counts = torch.zeros(len(tokenizer), dtype=torch.long)
    for start in range(0, len(sentences), 1000):
        ids = tokenizer(sentences[start : start + 1000], add_special_tokens=False)["input_ids"]
        counts += torch.bincount(torch.tensor([t for row in ids for t in row], dtype=torch.long), minlength=len(counts))
    return counts


def length_bucketed_batches(lengths: list[int], batch_size: int, rng: random.Random):
    """Endless batches of indices: shuffled, then sorted by length within groups of 50 batches (less padding)."""
    while True:
        order = list(range(len(lengths)))
        rng.shuffle(order)
        group = batch_size * 50
        batches = []
        for start in range(0, len(order), group):
            chunk = sorted(order[start : start + group], key=lambda i: lengths[i])
            batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
        rng.shuffle(batches)
        yield from (b for b in batches if len(b) == batch_size)


def train_masked_lm(settings: MaskedLMSettings) -> tuple[dict, dict]:
    tokenizer = load_tokenizer("minilm")
    start = _clock()
    sentences = mlm.review_sentences(mlm.pretraining_reviews("train"))
    monitor = mlm.review_sentences(mlm.pretraining_reviews("held-out"))[: settings.monitor_sentences]
    encoded = tokenizer(sentences, truncation=True, max_length=settings.max_length)["input_ids"]
    counts = word_counts(tokenizer, sentences)
    torch.manual_seed(settings.seed)
    trainer = MaskedLMTrainer(settings, counts)
    parameters = trainer.trainable()
    n_trainable = sum(p.numel() for p in parameters)
    print(f"masked-LM head: {len(sentences):,} training sentences, {n_trainable:,} trainable numbers, "
          f"{settings.steps} steps of {settings.batch_size}", flush=True)
    optimizer = torch.optim.AdamW(parameters, lr=settings.learning_rate, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / settings.warmup_steps)
                                                 * max(0.0, 1 - s / settings.steps))
    batches = length_bucketed_batches([len(ids) for ids in encoded], settings.batch_size, random.Random(settings.seed))
    generator = torch.Generator().manual_seed(settings.seed)
    special = torch.tensor([tokenizer.cls_token_id, tokenizer.sep_token_id])
    losses, recent = [], []
    for step in range(1, settings.steps + 1):
        rows = [encoded[i] for i in next(batches)]
        width = max(len(r) for r in rows)
        input_ids = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])
        attention_mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        masked, labels = mlm.mask_tokens(input_ids, torch.isin(input_ids, special).long(), attention_mask,
                                         tokenizer.mask_token_id, generator, settings.mask_rate)
        if not (labels != -100).any():
            continue
        logits, targets = trainer.logits(masked, attention_mask, labels)
        loss = F.cross_entropy(logits, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        recent.append(loss.item())
        if step % 100 == 0 or step == settings.steps:
            losses.append([step, round(sum(recent) / len(recent), 4)])
            recent = []
            top1, top5 = _monitor(trainer, tokenizer, monitor)
            print(f"  step {step}/{settings.steps}: loss {losses[-1][1]:.3f}, held-out top-1 {top1:.1%}, "
                  f"top-5 {top5:.1%} ({_since(start)})", flush=True)
    state = trainer.state()
    _check_merged_model_matches(trainer, state, tokenizer, monitor)
    info = {"what": "masked-LM head for all-MiniLM-L6-v2: low-rank corrections (every linear map of every layer), "
                    "a [MASK] input vector, BERT's masked-LM head; output layer tied to MiniLM's word table",
            "settings": asdict(settings), "n_train_reviews": mlm.N_TRAIN_REVIEWS, "n_train_sentences": len(sentences),
            "trainable_parameters": n_trainable, "losses": losses,
            "training_minutes_wall": round((time.perf_counter() - start[0]) / 60, 1),
            "training_cpu_minutes": round((time.process_time() - start[1]) / 60, 1), "threads": torch.get_num_threads()}
    return state, info


@torch.no_grad()
def _monitor(trainer: MaskedLMTrainer, tokenizer, sentences) -> tuple[float, float]:
    hits1 = hits5 = total = 0
    for masked, attention_mask, labels in mlm.masked_batches(tokenizer, sentences, EVALUATION_SEED):
        logits, targets = trainer.logits(masked, attention_mask, labels)
        top5 = logits.topk(5, dim=-1).indices
        hits1 += int((top5[:, 0] == targets).sum())
        hits5 += int((top5 == targets[:, None]).any(-1).sum())
        total += len(targets)
    return hits1 / max(total, 1), hits5 / max(total, 1)


@torch.no_grad()
def _check_merged_model_matches(trainer: MaskedLMTrainer, state: dict, tokenizer, sentences) -> None:
    # What ships is the merged BertForMaskedLM: it must give the numbers training saw.
    merged = mlm.masked_lm_from_head(state)
    masked, attention_mask, labels = next(mlm.masked_batches(tokenizer, sentences[:32], EVALUATION_SEED))
    expected, _ = trainer.logits(masked, attention_mask, labels)
    got = merged(input_ids=masked, attention_mask=attention_mask).logits[labels != -100]
    gap = float((got - expected).abs().max())
    if gap > 1e-3:
        raise AssertionError(f"the merged masked-LM differs from the trained one by {gap:.2e}: a bug in the merge.")
    print(f"  merged BertForMaskedLM matches the trained model (largest logit gap {gap:.1e})", flush=True)


def evaluate_masked_lm(model, tokenizer) -> dict:
    """Held-out top-1/top-5 on every sentence of the 1,000 held-out reviews, the frequency prior's, and
    the lesson's three sentences with their top-3 words."""
    held_out = mlm.review_sentences(mlm.pretraining_reviews("held-out"))
    scores = mlm.masked_word_accuracy(model, tokenizer, held_out, seed=EVALUATION_SEED)
    prior = mlm.frequency_prior_accuracy(tokenizer, mlm.review_sentences(mlm.pretraining_reviews("train")),
                                         held_out, seed=EVALUATION_SEED)
    examples = [{"sentence": sentence,
                 "top3": [[p.token, round(p.score, 3)] for p in mlm.fill_mask(model, tokenizer, sentence, top_k=3)]}
                for sentence in lesson.LESSON_MASK_SENTENCES]
    return {"held_out": {"top1": round(scores["top1"], 4), "top5": round(scores["top5"], 4),
                         "n_masked": scores["n_masked"], "n_sentences": len(held_out),
                         "prior_top1": round(prior["top1"], 4), "prior_top5": round(prior["top5"], 4)},
            "lesson_sentences": examples}


# ---------------------------------------------------------------------------------------------
# Next-sentence head
# ---------------------------------------------------------------------------------------------

def _pair_features(encoder, tokenizer, pairs):
    """((u, v, length_a, length_b), labels) of (a, b, label) pairs."""
    u, length_a = nsp.encode_segments(encoder, tokenizer, [a for a, _, _ in pairs])
    v, length_b = nsp.encode_segments(encoder, tokenizer, [b for _, b, _ in pairs])
    return (u, v, length_a, length_b), torch.tensor([label for _, _, label in pairs])


def train_next_sentence(settings: NextSentenceSettings) -> tuple[dict, dict]:
    tokenizer, encoder = load_tokenizer("minilm"), named_model("minilm")
    start = _clock()
    texts = mlm.pretraining_reviews("train")[: settings.n_reviews]
    pairs = [p for k in settings.segment_lengths for p in nsp.segment_pairs(texts, k, seed=settings.seed + k)]
    print(f"next-sentence head: encoding {len(pairs):,} training pairs "
          f"({', '.join(str(k) for k in settings.segment_lengths)} sentences a side)", flush=True)
    features, labels = _pair_features(encoder, tokenizer, pairs)
    print(f"  encoded ({_since(start)})", flush=True)
    u, v = features[:2]
    threshold = _best_threshold((u * v).sum(-1), labels)
    torch.manual_seed(settings.seed)
    head = nsp.NextSentenceHead(u.shape[1])
    with torch.no_grad():  # start at the best cosine rule: "follows" when cos(u, v) > threshold
        head.linear.weight.zero_()
        head.linear.weight[0, : u.shape[1]] = 5.0
        head.linear.weight[1, : u.shape[1]] = -5.0
        head.linear.bias.copy_(torch.tensor([-5.0 * threshold, 5.0 * threshold]))
    optimizer = torch.optim.Adam(head.parameters(), lr=settings.learning_rate)
    for _ in range(settings.epochs):
        loss = F.cross_entropy(head(*features), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        train_accuracy = float((head(*features).argmax(-1) == labels).float().mean())
    print(f"  trained: loss {loss.item():.3f}, training accuracy {train_accuracy:.1%} ({_since(start)})", flush=True)
    info = {"what": "next-sentence head: one linear layer on u * v and log(1 + length) of each segment, u and v the "
                    "unit mean-pooled all-MiniLM-L6-v2 vectors of the two segments (frozen); index 0 = B follows A",
            "settings": asdict(settings), "n_train_reviews": settings.n_reviews, "n_train_pairs": len(pairs),
            "train_accuracy": round(train_accuracy, 4), "cosine_rule_threshold": round(threshold, 4),
            "headline_sentences": nsp.HEADLINE_SENTENCES,
            "training_minutes_wall": round((time.perf_counter() - start[0]) / 60, 1),
            "training_cpu_minutes": round((time.process_time() - start[1]) / 60, 1), "threads": torch.get_num_threads()}
    return {f"linear.{k}": t for k, t in head.linear.state_dict().items()}, info


def _best_threshold(cosine: torch.Tensor, labels: torch.Tensor) -> float:
    """The cosine below which "random" is the best single-threshold rule on these pairs."""
    candidates = torch.linspace(-0.2, 1.0, 241)
    accuracy = torch.stack([((cosine < t).long() == labels).float().mean() for t in candidates])
    return float(candidates[int(accuracy.argmax())])


def evaluate_next_sentence(encoder, tokenizer, head, threshold: float, lengths) -> dict:
    """Held-out accuracy for each segment length (one pair per held-out review), the cosine rule's,
    and the lesson's example."""
    held_out = mlm.pretraining_reviews("held-out")
    figures = {}
    for k in lengths:
        pairs = nsp.segment_pairs(held_out, k, seed=EVALUATION_SEED + k)
        features, labels = _pair_features(encoder, tokenizer, pairs)
        u, v = features[:2]
        with torch.no_grad():
            accuracy = float((head(*features).argmax(-1) == labels).float().mean())
            cosine_rule = float((((u * v).sum(-1) < threshold).long() == labels).float().mean())
        figures[str(k)] = {"accuracy": round(accuracy, 4), "cosine_rule_accuracy": round(cosine_rule, 4),
                           "n_pairs": len(pairs)}
    return figures


def lesson_example(model, tokenizer) -> dict:
    """P(B follows A) for the lesson's continuation and its unrelated sentence (``mlm.next_sentence``)."""
    first, follows, unrelated = lesson.NSP_EXAMPLE
    return {"a": first, "follows": round(mlm.next_sentence(model, tokenizer, first, follows), 3),
            "unrelated": round(mlm.next_sentence(model, tokenizer, first, unrelated), 3)}


@torch.no_grad()
def lesson_example_from_head(encoder, tokenizer, head) -> dict:
    """``lesson_example`` computed from the head and encoder directly (the same numbers)."""
    first, follows, unrelated = lesson.NSP_EXAMPLE
    (u, v, length_a, length_b), _ = _pair_features(encoder, tokenizer, [(first, follows, 0), (first, unrelated, 1)])
    p = head(u, v, length_a, length_b).softmax(-1)[:, 0]
    return {"a": first, "follows": round(float(p[0]), 3), "unrelated": round(float(p[1]), 3)}


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------

def kit_model(masked_lm_state: dict, next_sentence_state: dict):
    """(KitPreTraining, tokenizer) from two heads' tensors: what bertlab.mlm.kit_pretraining_model builds."""
    tokenizer = load_tokenizer("minilm")
    model = mlm.KitPreTraining(mlm.masked_lm_from_head(masked_lm_state), named_model("minilm"),
                               mlm.next_sentence_head_from_state(next_sentence_state), tokenizer.cls_token_id,
                               tokenizer.pad_token_id)
    return model.eval(), tokenizer


def measure(model, tokenizer, threshold: float, lengths) -> dict:
    """Held-out figures of a KitPreTraining: {"masked_lm": {...}, "next_sentence": {...}}."""
    return {"masked_lm": evaluate_masked_lm(model, tokenizer),
            "next_sentence": {"held_out": evaluate_next_sentence(model.encoder, tokenizer, model.next_sentence_head,
                                                                 threshold, lengths),
                              "lesson_example": lesson_example(model, tokenizer)}}


def report_masked_lm(figures: dict) -> str:
    masked = figures["held_out"]
    lines = [f"masked word, {masked['n_masked']:,} masked tokens of {masked['n_sentences']:,} held-out sentences: "
             f"top-1 {masked['top1']:.1%}, top-5 {masked['top5']:.1%} "
             f"(most frequent words: top-1 {masked['prior_top1']:.1%}, top-5 {masked['prior_top5']:.1%})"]
    for example in figures["lesson_sentences"]:
        lines.append(f"  {example['sentence']}  ->  " + ", ".join(f"{t} {p:.3f}" for t, p in example["top3"]))
    return "\n".join(lines)


def report_next_sentence(figures: dict) -> str:
    lines = [f"next sentence, {k} sentence(s) a side, {row['n_pairs']} held-out pairs: accuracy "
             f"{row['accuracy']:.1%} (cosine rule alone {row['cosine_rule_accuracy']:.1%})"
             for k, row in figures["held_out"].items()]
    example = figures["lesson_example"]
    lines.append(f"  lesson example: P(follows) {example['follows']:.3f} for the continuation, "
                 f"{example['unrelated']:.3f} for the unrelated sentence")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evaluate", action="store_true", help="only measure the heads in --out on held-out reviews")
    parser.add_argument("--write", action="store_true",
                        help="with --evaluate: store the measured held-out figures in the heads' .json files")
    parser.add_argument("--only", choices=mlm.HEAD_PARTS, help="train only this head (the other is read from --out)")
    parser.add_argument("--out", type=Path, default=OUTPUT, help=f"folder of the heads (default: {OUTPUT})")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    parser.add_argument("--steps", type=int, help=f"masked-LM training steps (default: {MaskedLMSettings.steps})")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.evaluate:
        start = _clock()
        stored = mlm.heads_figures(args.out)
        model, tokenizer = kit_model(mlm.load_head("masked_lm", args.out), mlm.load_head("next_sentence", args.out))
        measured = measure(model, tokenizer, stored["next_sentence"]["cosine_rule_threshold"],
                           stored["next_sentence"]["settings"]["segment_lengths"])
        print(report_masked_lm(measured["masked_lm"]))
        print(report_next_sentence(measured["next_sentence"]))
        print(f"measured in {_since(start)}")
        differs = [part for part in mlm.HEAD_PARTS if measured[part]["held_out"] != stored[part]["held_out"]]
        if args.write:  # the weights are unchanged: only the figures measured on them are replaced
            for part in mlm.HEAD_PARTS:
                figures = {**stored[part], **measured[part], "evaluation_minutes_wall": round(
                    (time.perf_counter() - start[0]) / 60, 1)}
                _write_atomically(mlm.head_file(part, ".json", args.out),
                                  lambda p, f=figures: p.write_text(json.dumps(f, indent=1) + "\n", encoding="utf-8"))
            print(f"stored these figures in {args.out}")
            return 0
        if differs:
            print(f"differs from the figures stored in {args.out} for: {', '.join(differs)} "
                  "(a different torch build or thread count moves them slightly)")
        return 0
    parts = [args.only] if args.only else list(mlm.HEAD_PARTS)
    tokenizer, encoder = load_tokenizer("minilm"), named_model("minilm")
    if "masked_lm" in parts:
        state, info = train_masked_lm(MaskedLMSettings(**({"steps": args.steps} if args.steps else {})))
        start = _clock()
        info.update(evaluate_masked_lm(mlm.masked_lm_from_head(state), tokenizer))
        info["evaluation_minutes_wall"] = round((time.perf_counter() - start[0]) / 60, 1)
        save_head("masked_lm", state, info, args.out)
        print(report_masked_lm(info))
    if "next_sentence" in parts:
        state, info = train_next_sentence(NextSentenceSettings())
        start = _clock()
        head = mlm.next_sentence_head_from_state(state)
        info["held_out"] = evaluate_next_sentence(encoder, tokenizer, head, info["cosine_rule_threshold"],
                                                  info["settings"]["segment_lengths"])
        info["lesson_example"] = lesson_example_from_head(encoder, tokenizer, head)
        info["evaluation_minutes_wall"] = round((time.perf_counter() - start[0]) / 60, 1)
        save_head("next_sentence", state, info, args.out)
        print(report_next_sentence(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
