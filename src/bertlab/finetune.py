"""Concept 3: fine-tune a pre-trained encoder, and train the same kind of classifier from scratch.

Both runs go through the same loop (the transformers ``Trainer``), on the same reviews, with the
same batch size, epochs and length limit, so the only differences are the starting weights and the
learning rate each kind of start needs:

- ``finetune_classifier``: a pre-trained checkpoint (default: the packaged all-MiniLM-L6-v2) with a
  new 2-way classification head on its pooled [CLS] (``AutoModelForSequenceClassification``), trained
  at a low learning rate so it *steers* what the encoder already knows;
- ``train_from_scratch``: the kit's TinyBERT (``create_bert``: random weights, random embedding table,
  no pre-training at all) with a linear head on its mean-pooled output, at a higher learning rate.

Presets (``PRESETS``): ``"cpu"`` finishes in about two minutes on a 2-core CPU; ``"lesson"`` is the
lesson's run (5,000 train / 1,000 held-out reviews, 5 epochs, lr 2e-5, batch 4, evaluated every epoch,
best epoch kept): hours on a CPU, under an hour on a GPU (``bertlab.lesson.USUAL_SECONDS`` has the
figures); ``"fast"`` is for tests and CI (seconds, meaningless accuracy).

``finetune_cached`` keeps a fine-tuning run's figures (accuracy, loss curve, time; not the weights) in
the kit's cache, so a second run of the notebook shows them without training again. Its key is the
model, the settings and the reviews, so any change trains afresh. The notebook's default run (MiniLM,
the "cpu" preset) calls no student code, so its figures ship with the kit (``SHIPPED_DIR``, computed
by tools/build_lesson_figures.py when the kit is built): a first run shows them at once, said as such,
and ``retrain=True`` trains it on this machine. The from-scratch run calls the student's pooling
function: the notebook keeps it with ``bertlab.lesson.cached_step``, keyed on that code.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor, nn

from .cache import cache_root, size_text
from .cache import key_digest as digest
from .encoder import TinyBERT, create_bert
from .fileio import atomic_write_text
from .lesson import duration
from .models import MissingModelError, load_pretrained, count_parameters, load_tokenizer, without_progress_bars

Review = tuple[str, int]  # (text, label), label 1 = positive
PoolFn = Callable[[Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class FinetuneSettings:
    """One training recipe, shared by the fine-tuned and the from-scratch model."""

    n_train: int
    n_eval: int
    epochs: float
    learning_rate: float          # for the pre-trained model: small, to adjust rather than overwrite
    batch_size: int
    max_length: int               # tokens per review (IMDb reviews average ~230 words: most are cut)
    scratch_learning_rate: float  # a random start needs much bigger steps
    scratch_d_model: int          # width of the from-scratch TinyBERT (4 layers, 4 heads, FFN 4x)
    eval_each_epoch: bool = False  # lesson: evaluate every epoch and keep the best one
    warmup_ratio: float = 0.0     # fraction of the steps over which the learning rate ramps up from 0
    logging_steps: int = 5
    seed: int = 0


PRESETS: dict[str, FinetuneSettings] = {
    "lesson": FinetuneSettings(n_train=5000, n_eval=1000, epochs=5, learning_rate=2e-5, batch_size=4,
                               max_length=256, scratch_learning_rate=5e-4, scratch_d_model=256,
                               eval_each_epoch=True, logging_steps=50),
    # 63 steps: a 1e-4 peak after a 10% warm-up moves MiniLM's head and top layers far enough in one pass
    # (measured on the 1,000/500 split: held-out accuracy 0.81 at 1e-4, 0.80 at 2e-4, 0.70 at 5e-5).
    "cpu": FinetuneSettings(n_train=1000, n_eval=500, epochs=1, learning_rate=1e-4, batch_size=16,
                            max_length=128, scratch_learning_rate=1e-3, scratch_d_model=128,
                            warmup_ratio=0.1, logging_steps=4),
    "fast": FinetuneSettings(n_train=32, n_eval=32, epochs=1, learning_rate=1e-4, batch_size=16,
                             max_length=32, scratch_learning_rate=1e-3, scratch_d_model=32, logging_steps=1),
}


def get_settings(preset: Union[str, FinetuneSettings] = "cpu", **overrides) -> FinetuneSettings:
    """A preset by name (or a FinetuneSettings), with any field overridden, e.g. ``epochs=2``."""
    if isinstance(preset, FinetuneSettings):
        settings = preset
    elif preset in PRESETS:
        settings = PRESETS[preset]
    else:
        raise ValueError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)} or pass a FinetuneSettings.")
    return replace(settings, **overrides) if overrides else settings


class ReviewDataset(torch.utils.data.Dataset):
    """(text, label) reviews tokenised once; items are unpadded dicts (the collator pads per batch)."""

    def __init__(self, tokenizer, reviews: Sequence[Review], max_length: int):
        if not reviews:
            raise ValueError("no reviews to train or evaluate on.")
        texts = [text for text, _ in reviews]
        # No token_type_ids: a single segment is all zeros anyway, and TinyBERT takes no such input.
        self.encoded = tokenizer(texts, truncation=True, max_length=max_length, return_token_type_ids=False)
        self.labels = [int(label) for _, label in reviews]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.encoded["input_ids"][index], "attention_mask": self.encoded["attention_mask"][index],
                "labels": self.labels[index]}


class ScratchClassifier(nn.Module):
    """TinyBERT encoder -> pooled sentence vector -> linear layer -> 2 logits; trains with the Trainer."""

    def __init__(self, encoder: TinyBERT, pool: PoolFn, num_labels: int = 2):
        super().__init__()
        self.encoder = encoder
        self.pool = pool
        self.head = nn.Linear(encoder.d_model, num_labels)

    def forward(self, input_ids: Int[Tensor, "B T"], attention_mask: Int[Tensor, "B T"],
                labels: Optional[Int[Tensor, "B"]] = None):
        """logits [B, num_labels] (and the cross-entropy loss when labels are given)."""
        from transformers.modeling_outputs import SequenceClassifierOutput

        states = self.encoder(input_ids, attention_mask)  # [B, T, D]
        logits = self.head(self.pool(states, attention_mask))  # [B, D] -> [B, num_labels]
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return SequenceClassifierOutput(loss=loss, logits=logits)


def scratch_classifier(vocab_size: int, pad_id: int, pool: PoolFn, d_model: int = 128, num_layers: int = 4,
                       num_heads: int = 4, seed: int = 0) -> ScratchClassifier:
    """A randomly initialised TinyBERT classifier (RoPE positions, trainable random embedding table)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        encoder = create_bert(vocab_size=vocab_size, d_model=d_model, num_heads=num_heads,
                              mlp_hidden_dim=4 * d_model, num_layers=num_layers, pad_id=pad_id,
                              use_rope=True, use_absolute_positions=False, freeze_embedding=False)
        return ScratchClassifier(encoder, pool)


@contextlib.contextmanager
def silenced_transformers():
    """Silence transformers' weight-loading bars and info warnings; our callback reports progress."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with without_progress_bars():
            yield
    finally:
        hf_logging.set_verbosity(level)


def _progress_callback(label: str, started: float, verbose: bool):
    from transformers import TrainerCallback

    class Progress(TrainerCallback):
        """One short line per logging step instead of the Trainer's dict dumps, with the time left."""


        def on_log(self, args, state, control, logs=None, **kwargs):
            if not verbose or not logs:
                return
            seconds = time.perf_counter() - started
            minutes = seconds / 60
            if "loss" in logs:
                left = ""
                if 0 < state.global_step < state.max_steps:  # steps so far predict the rest (evaluation not counted)
                    rest = seconds / state.global_step * (state.max_steps - state.global_step)
                    left = f", about {duration(rest)} left"
                print(f"  [{label}] step {state.global_step}/{state.max_steps}: training loss {logs['loss']:.3f} "
                      f"({minutes:.1f} min{left})", flush=True)
            elif "eval_accuracy" in logs:
                print(f"  [{label}] held-out accuracy {logs['eval_accuracy']:.3f} after epoch {logs.get('epoch', 0):g} "
                      f"({minutes:.1f} min)", flush=True)

    return Progress()


def _accuracy(eval_prediction) -> dict:
    logits, labels = eval_prediction.predictions, eval_prediction.label_ids
    if isinstance(logits, tuple):
        logits = logits[0]
    return {"accuracy": float((np.argmax(logits, axis=-1) == labels).mean())}


def train_and_evaluate(model: nn.Module, tokenizer, train: Sequence[Review], held_out: Sequence[Review],
                       settings: FinetuneSettings, learning_rate: float, label: str = "model",
                       verbose: bool = True) -> dict:
    """Train ``model`` with the transformers Trainer and measure held-out accuracy.

    Returns a dict: accuracy (float in [0, 1], on ``held_out``), losses (list of [step, training loss]),
    epoch_accuracy (list of [epoch, accuracy] when settings.eval_each_epoch), minutes (training and
    evaluation, wall clock), steps, parameters, trainable_parameters.
    """
    from transformers import DataCollatorWithPadding, PrinterCallback, Trainer, TrainingArguments, set_seed

    started = time.perf_counter()
    set_seed(settings.seed)
    train_data = ReviewDataset(tokenizer, train, settings.max_length)
    eval_data = ReviewDataset(tokenizer, held_out, settings.max_length)
    with tempfile.TemporaryDirectory(prefix="bertlab-trainer-") as output_dir, silenced_transformers():
        epoch_strategy = "epoch" if settings.eval_each_epoch else "no"
        args = TrainingArguments(
            output_dir=output_dir,
            num_train_epochs=settings.epochs,
            per_device_train_batch_size=settings.batch_size,
            per_device_eval_batch_size=max(settings.batch_size, 32),
            learning_rate=learning_rate,
            warmup_steps=settings.warmup_ratio,  # a float below 1 is a fraction of the total steps
            weight_decay=0.01,
            eval_strategy=epoch_strategy,
            save_strategy=epoch_strategy,  # load_best_model_at_end needs a checkpoint per evaluation
            save_total_limit=2 if settings.eval_each_epoch else None,
            save_only_model=True,
            load_best_model_at_end=settings.eval_each_epoch,
            metric_for_best_model="accuracy" if settings.eval_each_epoch else None,
            logging_strategy="steps",
            logging_steps=settings.logging_steps,
            logging_first_step=True,
            report_to="none",
            disable_tqdm=True,
            seed=settings.seed,
            data_seed=settings.seed,
            dataloader_num_workers=0,
            dataloader_pin_memory=torch.cuda.is_available(),
        )
        trainer = Trainer(model=model, args=args, train_dataset=train_data, eval_dataset=eval_data,
                          data_collator=DataCollatorWithPadding(tokenizer), compute_metrics=_accuracy)
        trainer.remove_callback(PrinterCallback)
        trainer.add_callback(_progress_callback(label, started, verbose))
        trainer.train()
        history = list(trainer.state.log_history)  # before the final evaluation adds its own entry
        steps = trainer.state.global_step
        accuracy = trainer.evaluate()["eval_accuracy"]
    model.eval()
    return {
        "accuracy": float(accuracy),
        "losses": [[entry["step"], float(entry["loss"])] for entry in history if "loss" in entry],
        "epoch_accuracy": [[float(entry["epoch"]), float(entry["eval_accuracy"])] for entry in history
                           if "eval_accuracy" in entry],
        "minutes": (time.perf_counter() - started) / 60,
        "steps": steps,
        "parameters": count_parameters(model),
        "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "n_train": len(train),
        "n_eval": len(held_out),
        "settings": asdict(settings),
    }


def finetune_classifier(model_name_or_model: Union[str, nn.Module] = "minilm", train: Sequence[Review] = (),
                        held_out: Sequence[Review] = (), preset: Union[str, FinetuneSettings] = "cpu",
                        tokenizer=None, verbose: bool = True, **overrides) -> dict:
    """Fine-tune a pre-trained encoder plus a new classification head on ``train``; score it on ``held_out``.

    model_name_or_model: a checkpoint name/directory (loaded offline as AutoModelForSequenceClassification
    with 2 labels; the head is new, seeded) or a ready sequence-classification module (then pass its
    tokenizer). Returns the dict of ``train_and_evaluate``.
    """
    settings = get_settings(preset, **overrides)
    if isinstance(model_name_or_model, str):
        from transformers import AutoModelForSequenceClassification, set_seed

        tokenizer = tokenizer or load_tokenizer(model_name_or_model)
        set_seed(settings.seed)  # the new head's initial weights
        with silenced_transformers():
            model = load_pretrained(AutoModelForSequenceClassification, model_name_or_model, num_labels=2)
    else:
        if tokenizer is None:
            raise ValueError("pass the tokenizer that belongs to the model.")
        model = model_name_or_model
    return train_and_evaluate(model, tokenizer, train, held_out, settings, settings.learning_rate,
                              label="fine-tune", verbose=verbose)


def train_from_scratch(train: Sequence[Review], held_out: Sequence[Review], tokenizer, pool: PoolFn,
                       preset: Union[str, FinetuneSettings] = "cpu", verbose: bool = True, **overrides) -> dict:
    """Train a random-init TinyBERT classifier (mean pooling with ``pool``, e.g. your masked_mean_pool)
    on the same data; same loop as ``finetune_classifier``. Returns the dict of ``train_and_evaluate``."""
    settings = get_settings(preset, **overrides)
    model = scratch_classifier(len(tokenizer), tokenizer.pad_token_id, pool, d_model=settings.scratch_d_model,
                               seed=settings.seed)
    return train_and_evaluate(model, tokenizer, train, held_out, settings, settings.scratch_learning_rate,
                              label="from scratch", verbose=verbose)


# ---------------------------------------------------------------------------------------------
# The lesson's model when it is cached, and fine-tuning figures kept between runs
# ---------------------------------------------------------------------------------------------

LESSON_MODEL = "bert-base-uncased"
CACHE_FORMAT = 1  # bump when a change to the training loop changes the figures


WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def full_model(prefer: str = LESSON_MODEL) -> str:
    """``prefer`` (the lesson's bert-base-uncased, or a local model folder) when its config and weights
    are on this machine (the Hugging Face cache), else ``"minilm"`` (the packaged all-MiniLM-L6-v2).
    Never downloads."""
    from huggingface_hub import try_to_load_from_cache
    from transformers import AutoConfig

    try:
        load_pretrained(AutoConfig, prefer)
    except MissingModelError:
        return "minilm"
    if Path(prefer).is_dir():
        return prefer if any((Path(prefer) / name).is_file() for name in WEIGHT_FILES) else "minilm"
    for weights in WEIGHT_FILES:
        if isinstance(try_to_load_from_cache(prefer, weights), str):
            return prefer
    return "minilm"


def _reviews_digest(reviews: Sequence[Review]) -> str:
    digest = hashlib.sha256()
    for text, label in reviews:
        digest.update(f"{int(label)}\t{text}\n".encode())
    return digest.hexdigest()


def finetune_key(model_name: str, train: Sequence[Review], held_out: Sequence[Review],
                 settings: FinetuneSettings) -> dict:
    """Everything a fine-tuning run's figures depend on: the model, the settings, the reviews (digests)
    and ``CACHE_FORMAT`` (the training loop's version). No student code is in it: there is none in the run."""
    return {"format": CACHE_FORMAT, "model": model_name, "settings": asdict(settings),
            "train": _reviews_digest(train), "held_out": _reviews_digest(held_out)}


def key_digest(key: dict) -> str:
    """12 hex digits of the key's sha256 (its JSON, keys sorted): the name of its cache entry."""
    return digest(key)


def finetune_cache_path(model_name: str, train: Sequence[Review], held_out: Sequence[Review],
                        settings: FinetuneSettings) -> Path:
    """Where ``finetune_cached`` keeps the figures of this run: ``<kit cache>/finetune-<12 hex>.json``."""
    return cache_root() / f"finetune-{key_digest(finetune_key(model_name, train, held_out, settings))}.json"


# ---------------------------------------------------------------------------------------------
# The notebook's default fine-tuning, computed when the kit was built
# ---------------------------------------------------------------------------------------------

SHIPPED_DIR = Path(__file__).parent / "data" / "lesson_figures"
SHIPPED_MODEL, SHIPPED_PRESET = "minilm", "cpu"  # the run the notebook makes by default (FULL = False)


def shipped_finetune_path(model_name: str = SHIPPED_MODEL, settings: Union[str, FinetuneSettings] = SHIPPED_PRESET) -> Path:
    """``<package data>/lesson_figures/finetune-<model>-<12 hex of the settings>.json``."""
    settings = get_settings(settings)
    name = re.sub(r"[^a-z0-9]+", "-", Path(model_name).name.lower()).strip("-") or "model"
    return SHIPPED_DIR / f"finetune-{name}-{key_digest(asdict(settings))}.json"


def write_shipped_finetune(path: Path, key: dict, result: dict, built: dict) -> None:
    """Write the figures of a run made when the kit is built (tools/build_lesson_figures.py)."""
    record = {"what": "the lesson notebook's default fine-tuning run (Concept 3), computed when the kit was built; "
                      "it calls no student code", "key": key, "key_digest": key_digest(key), "built": built,
              "result": {k: v for k, v in result.items() if k not in ("from_cache", "cache_path", "source")}}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(record, indent=1) + "\n")


def shipped_finetune(key: dict) -> Optional[dict]:
    """The shipped figures of the run with this key (``finetune_key``), with ``built`` (when, how, on
    what) added; None when none ship for it (another model, preset or reviews, or a changed loop)."""
    if not SHIPPED_DIR.is_dir():
        return None
    for path in sorted(SHIPPED_DIR.glob("finetune-*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if record.get("key") == key:
            return {**record["result"], "built": record["built"], "shipped_path": str(path)}
    return None


MODEL_NAMES = {"minilm": "all-MiniLM-L6-v2"}  # how the printed lines name the packaged model


def _kb(path: Path) -> str:
    return size_text(path.stat().st_size)


def _describe_build(built: dict) -> str:
    return (f"{built.get('at', '?')}, {built.get('threads', '?')} CPU threads, torch {built.get('torch', '?')}")


def finetune_cached(model_name: str, train: Sequence[Review], held_out: Sequence[Review],
                    preset: Union[str, FinetuneSettings] = "cpu", retrain: bool = False, verbose: bool = True,
                    expected: str = "", **overrides) -> dict:
    """``finetune_classifier(model_name, ...)``, its figures kept in the kit's cache (a few KB of JSON:
    accuracy, loss curve, minutes; the weights are not kept). Unless ``retrain``, a call finds, in order:

    1. this run's figures in the kit's cache (trained on this machine by an earlier call);
    2. the figures shipped with the kit for exactly this run (``shipped_finetune``: the notebook's
       default, computed when the kit was built; the run calls no student code, so they are the same
       for everyone);
    3. neither: it trains, and keeps the figures in the kit's cache.

    expected: how long training usually takes (e.g. "usually about 2 min on 2 CPU cores"), printed
    before it starts (and, for shipped figures, with how to train instead). Prints where the figures
    come from. Returns the dict of ``train_and_evaluate`` plus: source ("cache", "kit" or "trained"),
    from_cache (bool), cache_path (str; "" for shipped figures), measured_at (ISO time of the training
    run), model (the name); shipped figures add built (when, how and on what they were computed).
    """
    settings = get_settings(preset, **overrides)
    key = finetune_key(model_name, train, held_out, settings)
    path = finetune_cache_path(model_name, train, held_out, settings)
    shown = MODEL_NAMES.get(model_name, model_name)
    if not retrain and path.is_file():
        try:
            result = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            result = None  # a damaged entry: train again and replace it
        if result is not None:
            if verbose:
                print(f"Fine-tuning {shown}: loaded from the kit's cache ({path}, {_kb(path)}), trained "
                      f"{result.get('measured_at', '?')} in {result['minutes']:.1f} min. Set RETRAIN = True to train again.",
                      flush=True)
            return {**result, "source": "cache", "from_cache": True, "cache_path": str(path)}
    shipped = None if retrain else shipped_finetune(key)
    if shipped is not None:
        if verbose:
            print(f"Fine-tuning {shown}: these figures were computed when the kit was built ({_describe_build(shipped['built'])}: "
                  f"{shipped['steps']} steps in {shipped['minutes']:.1f} min), with exactly this cell's settings and "
                  "reviews. The run calls none of your code, so training it here gives the same figures (to a fraction "
                  "of a point with another torch build). Set RETRAIN = True to train it yourself"
                  + (f" ({expected})" if expected else "") + ".", flush=True)
        return {**shipped, "source": "kit", "from_cache": False, "cache_path": ""}
    if verbose:
        steps = -(-len(train) // settings.batch_size) * settings.epochs
        print(f"Fine-tuning {shown}: {steps:g} steps of {settings.batch_size} reviews, then {len(held_out):,} "
              f"held out" + (f": {expected}" if expected else "") + ".", flush=True)
    result = finetune_classifier(model_name, train, held_out, preset=settings, verbose=verbose)
    result = {**result, "model": model_name, "measured_at": datetime.now().astimezone().isoformat(timespec="seconds")}
    try:
        atomic_write_text(path, json.dumps(result, indent=1) + "\n")
        if verbose:
            print(f"Kept these figures (not the weights) in the kit's cache: {path} ({_kb(path)}); the next run "
                  "shows them without training.", flush=True)
    except OSError as exc:  # a read-only home: the run still counts, it just is not kept
        if verbose:
            print(f"Could not keep these figures in {path} ({exc}); the next run trains again.", flush=True)
    return {**result, "source": "trained", "from_cache": False, "cache_path": str(path)}
