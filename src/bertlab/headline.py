"""The lesson's headline figures, computed end to end from an implementation.

Used by `bertlab demo` (after grading), the lesson notebook and the kit's acceptance tests. Every
number comes from running the given implementation on the packaged MiniLM and the shipped data:

- SBERT vs DAN on the lesson's 8 STS pairs: cosines, Spearman, MAE;
- the lesson's search query over its six review snippets: top-3 for SBERT and DAN;
- STS benchmark test split: Spearman for SBERT and DAN (``full=True``; about 10 s on 2 cores);
- CKA: untrained TinyBERT (frozen MiniLM embeddings) over several seeds, and trained MiniLM;
- parameter counts: BERT-base from ``BertConfig()`` (no weights), MiniLM, TinyBERT.
"""

from __future__ import annotations

from typing import Any

import torch

from . import datasets
from .dan import DANEncoder
from .encoder import create_bert
from .implementations import Implementation
from .models import count_parameters, load_tokenizer, named_model
from .representations import layer_representations
from .sts import encode_texts, evaluate_pairs

CKA_PROBE_SIZE = 64  # IMDb reviews used as CKA probe inputs (truncated to 128 tokens)


def lesson_models(impl: Implementation):
    """(tokenizer, MiniLM, SBERT embed fn, DAN embed fn) built from ``impl``'s own code."""
    tokenizer, model = load_tokenizer("minilm"), named_model("minilm")
    sbert = impl.siamese.create_sbert(model)
    dan = DANEncoder.from_model(model, impl.pooling.masked_mean_pool)

    def sbert_embed(texts):
        return encode_texts(sbert.encode, tokenizer, texts)

    def dan_embed(texts):
        return dan.embed_texts(tokenizer, texts)

    return tokenizer, model, sbert_embed, dan_embed


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


def lesson_figures(impl: Implementation, full: bool = True, seeds=(0, 1, 2)) -> dict[str, Any]:
    """Every headline figure as plain data (floats, lists, nested dicts)."""
    from transformers import BertConfig, BertModel

    tokenizer, model, sbert_embed, dan_embed = lesson_models(impl)
    figures: dict[str, Any] = {"implementation": impl.name}
    for name, embed in (("sbert", sbert_embed), ("dan", dan_embed)):
        figures[f"lesson_sts_{name}"] = evaluate_pairs(embed, datasets.LESSON_STS_PAIRS)
        index = impl.retrieval.SemanticIndex(embed)
        index.add(datasets.LESSON_REVIEW_SNIPPETS)
        figures[f"search_{name}"] = [hit._asdict() if hasattr(hit, "_asdict") else tuple(hit)
                                     for hit in index.search(datasets.LESSON_QUERY, top_k=3)[0]]
        if full:
            figures[f"stsb_test_{name}"] = evaluate_pairs(embed, datasets.load_sts_benchmark("test"))["spearman"]

    batch = probe_batch(tokenizer)
    untrained = [untrained_tinybert_cka(impl, model, batch, seed) for seed in seeds]
    figures["cka_untrained_min_offdiag"] = [float(off_diagonal(m).min()) for m in untrained]
    figures["cka_untrained_seed0"] = untrained[0].tolist()
    trained = impl.cka.cka_matrix(layer_representations(model, batch["input_ids"], batch["attention_mask"],
                                                        impl.pooling.masked_mean_pool))
    figures["cka_minilm_mean"] = trained.tolist()
    cls_trained = impl.cka.cka_matrix(layer_representations(model, batch["input_ids"], batch["attention_mask"], "cls"))
    figures["cka_minilm_cls_layer0_defined"] = not bool(torch.isnan(cls_trained[0, 0]))

    with torch.device("meta"):  # architecture only: no memory, no weights
        bert_base = BertModel(BertConfig())
    figures["params_bert_base"] = count_parameters(bert_base)
    figures["params_minilm"] = count_parameters(model)
    return figures


def format_figures(figures: dict[str, Any]) -> str:
    """A readable report of ``lesson_figures`` output."""
    lines = [f"Lesson figures ({figures['implementation']})", ""]
    sb, dn = figures["lesson_sts_sbert"], figures["lesson_sts_dan"]
    lines.append("The lesson's 8 STS pairs:")
    lines.append(f"  {'ref':>5} {'SBERT':>6} {'DAN':>6}  A vs B")
    for pair, s, d in zip(datasets.LESSON_STS_PAIRS, sb["cosines"], dn["cosines"]):
        lines.append(f"  {pair.score:5.2f} {s:6.3f} {d:6.3f}  {pair.a!r} vs {pair.b!r}")
    lines.append(f"  Spearman: SBERT {sb['spearman']:.3f}, DAN {dn['spearman']:.3f}; "
                 f"MAE: SBERT {sb['mae']:.3f}, DAN {dn['mae']:.3f}")
    if "stsb_test_sbert" in figures:
        lines.append(f"STS benchmark test (1,379 pairs) Spearman: SBERT {figures['stsb_test_sbert']:.3f}, "
                     f"DAN {figures['stsb_test_dan']:.3f}")
    lines.append("")
    lines.append(f"Query: {datasets.LESSON_QUERY!r}")
    for name in ("sbert", "dan"):
        lines.append(f"  {name.upper()} top-3:")
        for hit in figures[f"search_{name}"]:
            hit = hit if isinstance(hit, dict) else dict(zip(("corpus_id", "score", "text"), hit))
            lines.append(f"    [{hit['score']:.3f}] {hit['text']}")
    lines.append("")
    mins = ", ".join(f"{m:.3f}" for m in figures["cka_untrained_min_offdiag"])
    lines.append(f"CKA, untrained 4-layer TinyBERT (frozen MiniLM embeddings): min off-diagonal per seed {mins}")
    trained = torch.tensor(figures["cka_minilm_mean"])
    adjacent = torch.diagonal(trained, 1)
    lines.append(f"CKA, trained MiniLM (7 hidden states, mean-pooled): adjacent layers {adjacent.min():.3f}-"
                 f"{adjacent.max():.3f}, layer 0 vs layer 6 {trained[0, -1]:.3f}")
    lines.append(f"Layer-0 [CLS] CKA defined: {figures['cka_minilm_cls_layer0_defined']} "
                 "(the same vector for every input, so CKA is undefined: nan)")
    lines.append("")
    lines.append(f"Parameters: BERT-base {figures['params_bert_base']:,}; all-MiniLM-L6-v2 {figures['params_minilm']:,}")
    return "\n".join(lines)
