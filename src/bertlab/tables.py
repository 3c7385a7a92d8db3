"""The lesson's tables and descriptions: architectures side by side (Concept 2), masked-word
predictions, search hits, STS cosines, accuracies; one line per value summary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from bertlab.models import count_parameters


@dataclass(frozen=True)
class Architecture:
    """The shape of an encoder, read from its config (Hugging Face) or its modules (TinyBERT)."""

    name: str
    layers: int
    heads: int
    hidden: int
    ffn: int
    vocab: int
    positions: str
    parameters: int
    trainable: int


def bert_base_on_meta():
    """BERT-base (``BertModel(BertConfig())``) on the meta device: the full architecture, no weights, no memory."""
    from transformers import BertConfig, BertModel

    with torch.device("meta"):
        return BertModel(BertConfig())


def describe_architecture(name: str, model: torch.nn.Module) -> Architecture:
    """Layers, heads, widths, vocabulary, positions and parameter counts of a model."""
    from .encoder import TinyBERT

    parameters = count_parameters(model)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if isinstance(model, TinyBERT):
        block = model.blocks[0]
        positions = ("rotary (RoPE), no fixed limit" if block.attention.rope is not None
                     else f"{model.embedding.positions.shape[0]} sinusoidal (fixed)")
        return Architecture(name, len(model.blocks), block.attention.num_heads, model.d_model,
                            block.mlp[0].out_features, model.embedding.token.num_embeddings, positions,
                            parameters, trainable)
    config = getattr(model, "config", None)
    if config is None:
        raise TypeError(f"cannot describe {type(model).__name__}: not a TinyBERT and has no Hugging Face config.")
    kind = getattr(config, "position_embedding_type", "absolute")
    positions = f"{config.max_position_embeddings} learned" + ("" if kind == "absolute" else f" ({kind})")
    return Architecture(name, config.num_hidden_layers, config.num_attention_heads, config.hidden_size,
                        config.intermediate_size, config.vocab_size, positions, parameters, trainable)


def architecture_table(models: Mapping[str, torch.nn.Module]) -> str:
    """A text table of ``describe_architecture`` for each (name, model), plus size ratios to the last one."""
    rows = [describe_architecture(name, model) for name, model in models.items()]
    header = f"{'':<22}{'layers':>7}{'heads':>7}{'hidden':>8}{'FFN':>7}{'vocab':>8}{'parameters':>14}{'trainable':>13}  positions"
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(f"{r.name:<22}{r.layers:>7}{r.heads:>7}{r.hidden:>8}{r.ffn:>7}{r.vocab:>8}"
                     f"{r.parameters:>14,}{r.trainable:>13,}  {r.positions}")
    if len(rows) > 1:
        last = rows[-1]
        ratios = ", ".join(f"{r.name} {r.parameters / last.parameters:.1f}x" for r in rows[:-1])
        lines.append(f"Size relative to {last.name}: {ratios}")
    return "\n".join(lines)


@torch.no_grad()
def cls_layer_cosines(model: torch.nn.Module, tokenizer, sentences: Sequence[str], early: int = 1,
                      late: int = -1) -> list[float]:
    """Cosine between each sentence's [CLS] vector at hidden state ``early`` and at ``late``.

    hidden_states[0] is the embedding output, hidden_states[i] the output of layer i; for MiniLM,
    early=1, late=-1 compares layer 1 with layer 6.
    """
    from .representations import hidden_states

    batch = tokenizer(list(sentences), padding=True, return_tensors="pt")
    states = hidden_states(model, batch["input_ids"], batch["attention_mask"])  # tuple of [B, T, D]
    return F.cosine_similarity(states[early][:, 0], states[late][:, 0], dim=-1).tolist()


def short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def format_mask_predictions(sentence: str, predictions) -> str:
    """The lesson's fill-in display: '[0.191] beautiful -> the film was ...'."""
    lines = [f"Sentence: {sentence}"]
    lines += [f"  [{p.score:.3f}] {p.token:<14} -> {p.sequence}" for p in predictions]
    return "\n".join(lines)


def format_search(query: str, results: Mapping[str, Sequence]) -> str:
    """Top-k hits of several encoders for one query: {name: [Hit, ...]}."""
    lines = [f"Query: {query!r}"]
    for name, hits in results.items():
        lines.append(f"  {name} top-{len(hits)}:")
        lines += [f"    [{hit.score:.3f}] {hit.text}" for hit in hits]
    return "\n".join(lines)


def format_sts_table(pairs, columns: Mapping[str, Sequence[float]], width: int = 70) -> str:
    """ref | one column per encoder | the pair: the lesson's 8-pair table."""
    names = list(columns)
    lines = [f"{'ref':>5} " + " ".join(f"{n:>6}" for n in names) + "  A vs B"]
    for i, pair in enumerate(pairs):
        values = " ".join(f"{columns[n][i]:6.3f}" for n in names)
        lines.append(f"{pair.score:5.2f} {values}  " + short(f"{pair.a!r} vs {pair.b!r}", width))
    return "\n".join(lines)


def format_accuracy_table(results: Mapping[str, Optional[dict]],
                          needs: Optional[Mapping[str, Sequence[str]]] = None) -> str:
    """Held-out accuracy, training minutes and parameters of each training run.

    A None result is a run that did not happen: ``needs[name]`` names the unfinished tasks it needs. A
    result loaded from the cache (``from_cache``) or shipped with the kit (``source`` "kit") is marked:
    its minutes are those of the run that made it.
    """
    lines = [f"{'model':<38}{'held-out accuracy':>18}{'minutes':>9}{'parameters':>13}{'steps':>7}"]
    for name, result in results.items():
        if result is None:
            tasks = list((needs or {}).get(name, ()))
            lines.append(f"{name:<38}  " + (f"(not run yet: needs task(s) {', '.join(tasks)})" if tasks else "(not run)"))
            continue
        cached = ("  (computed when the kit was built)" if result.get("source") == "kit"
                  else "  (cached)" if result.get("from_cache") else "")
        lines.append(f"{name:<38}{result['accuracy']:>18.3f}{result['minutes']:>9.1f}"
                     f"{result['parameters']:>13,}{result['steps']:>7}{cached}")
    return "\n".join(lines)


def describe_value(values: Tensor) -> str:
    """'min-max' of a 1-D tensor with 3 decimals (for printing CKA ranges)."""
    values = values[~torch.isnan(values)]
    return f"{float(values.min()):.3f}-{float(values.max()):.3f}" if values.numel() else "nan"
