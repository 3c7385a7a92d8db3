"""The mutant bank's entries for task siamese: the Siamese wrapper (SiameseBert, create_sbert).

Mutants (one realistic mistake each: the mistake of the same name in bertlab/teaching/siamese.py holds
the hint a student gets) and variants (correct, but not the reference's way). To add a mutant: add its
mistake there, a ``Mutant(...)`` here, then run ``bertlab audit --only <name>``.
"""

from __future__ import annotations

import functools

import torch

from bertlab.assertions import did_not_finish

from bertlab_grader.mutants.fingerprint import FingerprintAborted, Record, gen, outcome
from bertlab_grader.mutants.recipe import Mutant, Variant

MUTANTS = (
    Mutant("sbert_dot_product", "siamese", "siamese.py",
           "forward returns the dot product instead of the cosine",
           (("        return F.cosine_similarity(emb_a, emb_b, dim=-1)", "        return (emb_a * emb_b).sum(dim=-1)"),)),
    Mutant("sbert_not_shared", "siamese", "siamese.py",
           "side b runs a deep copy of the encoder (weights not shared)",
           (("import torch\n", "import copy\n\nimport torch\n"),
            ("        self.encoder = encoder  # one module, used for both sides: the weights are shared",
             "        self.encoder = encoder\n        self.encoder_b = copy.deepcopy(encoder)  # a tower for side b"),
            ("        emb_b = self.encode(input_ids_b, attention_mask_b)",
             "        output_b = self.encoder_b(input_ids=input_ids_b, attention_mask=attention_mask_b)\n"
             "        emb_b = masked_mean_pool(output_b.last_hidden_state, attention_mask_b)"))),
    Mutant("sbert_cls_encode", "siamese", "siamese.py",
           "encode returns the [CLS] vector instead of the masked mean",
           (("        return masked_mean_pool(output.last_hidden_state, attention_mask)",
             "        return output.last_hidden_state[:, 0]"),)),
    Mutant("sbert_pooler_output", "siamese", "siamese.py",
           "encode returns pooler_output",
           (("        return masked_mean_pool(output.last_hidden_state, attention_mask)",
             "        return output.pooler_output"),)),
    Mutant("sbert_all_pairs", "siamese", "siamese.py",
           "forward returns the [B, B] matrix of all pairs",
           (("        return F.cosine_similarity(emb_a, emb_b, dim=-1)",
             "        return F.normalize(emb_a, dim=-1) @ F.normalize(emb_b, dim=-1).T"),)),
    Mutant("sbert_unmasked_mean", "siamese", "siamese.py",
           "encode averages all positions (its own mean, padding included)",
           (("        return masked_mean_pool(output.last_hidden_state, attention_mask)",
             "        return output.last_hidden_state.mean(dim=1)"),)),
    Mutant("sbert_no_encoder_mask", "siamese", "siamese.py",
           "calls the encoder without attention_mask (real tokens attend to padding)",
           (("        output = self.encoder(input_ids=input_ids, attention_mask=attention_mask)",
             "        output = self.encoder(input_ids=input_ids)"),)),
    Mutant("sbert_cosine_distance", "siamese", "siamese.py",
           "forward returns 1 - cosine (a distance)",
           (("        return F.cosine_similarity(emb_a, emb_b, dim=-1)",
             "        return 1 - F.cosine_similarity(emb_a, emb_b, dim=-1)"),)),
    Mutant("sbert_encode_no_grad", "siamese", "siamese.py",
           "encode runs the encoder under torch.no_grad() (right values, nothing to train)",
           (("        output = self.encoder(input_ids=input_ids, attention_mask=attention_mask)\n",
             "        with torch.no_grad():\n"
             "            output = self.encoder(input_ids=input_ids, attention_mask=attention_mask)\n"),)),
    Mutant("sbert_detach_branch_b", "siamese", "siamese.py",
           "forward detaches side b's embedding (only branch a trains the encoder)",
           (("        emb_b = self.encode(input_ids_b, attention_mask_b)",
             "        emb_b = self.encode(input_ids_b, attention_mask_b).detach()"),)),
    Mutant("sbert_wraps_a_copy", "siamese", "siamese.py",
           "create_sbert wraps a deep copy of the model it is given",
           (("import torch\n", "import copy\n\nimport torch\n"),
            ("    return SiameseBert(bert_model)", "    return SiameseBert(copy.deepcopy(bert_model))"))),
    Mutant("sbert_cosine_wrong_dim", "siamese", "siamese.py",
           "takes the cosine over the batch dimension (dim=0)",
           (("        return F.cosine_similarity(emb_a, emb_b, dim=-1)",
             "        return F.cosine_similarity(emb_a, emb_b, dim=0)"),)),
)


# ---------------------------------------------------------------------------------------------
# Variants: correct, but not the reference's way
# ---------------------------------------------------------------------------------------------

_SBERT_NORMALISE = '''    def forward(
        self,
        input_ids_a: Int[Tensor, "B Ta"],
        attention_mask_a: Int[Tensor, "B Ta"],
        input_ids_b: Int[Tensor, "B Tb"],
        attention_mask_b: Int[Tensor, "B Tb"],
    ) -> Float[Tensor, "B"]:
        """Cosine as the dot product of unit vectors."""
        a = F.normalize(self.encode(input_ids_a, attention_mask_a), dim=-1)
        b = F.normalize(self.encode(input_ids_b, attention_mask_b), dim=-1)
        return (a * b).sum(dim=-1)
'''

_SBERT_INLINE_POOL = '''    def encode(
        self, input_ids: Int[Tensor, "B T"], attention_mask: Int[Tensor, "B T"]
    ) -> Float[Tensor, "B D"]:
        """Mean of the real tokens' last hidden states, computed inline."""
        states = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        weights = attention_mask.unsqueeze(-1).to(states.dtype)
        return (states * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
'''


VARIANTS = (
    Variant("var_sbert_normalize_dot", "siamese", "siamese.py", "forward = dot product of F.normalize'd embeddings",
            {"SiameseBert.forward": _SBERT_NORMALISE}),
    Variant("var_sbert_inline_pool", "siamese", "siamese.py", "encode computes the masked mean inline",
            {"SiameseBert.encode": _SBERT_INLINE_POOL}),
)


# ---------------------------------------------------------------------------------------------
# The behaviour fingerprint the hints compare (grader/bertlab_grader/mutants/fingerprint.py)
# ---------------------------------------------------------------------------------------------

_PROBE_TEXTS_A = ("A wonderful film.", "The plot is thin and the acting is wooden throughout.", "Boring.")
_PROBE_TEXTS_B = ("Great movie with a clever script and a fine cast.", "Dull.", "I loved the music.")


def _tokens(texts) -> tuple[torch.Tensor, torch.Tensor]:
    batch = _tokenizer()(list(texts), padding=True, return_tensors="pt")
    return batch["input_ids"], batch["attention_mask"]


@functools.lru_cache(maxsize=1)
def _tokenizer():
    from bertlab.models import load_tokenizer

    return load_tokenizer("minilm")


def fingerprint(impl) -> dict:
    """What this task\'s functions return on small fixed inputs (values, shapes, dtypes, exception types)."""
    from bertlab.models import named_model

    ids_a, mask_a = _tokens(_PROBE_TEXTS_A)
    ids_b, mask_b = _tokens(_PROBE_TEXTS_B)
    record = Record()  # filled call by call: a hint's search may stop it early
    try:
        sbert = impl.siamese.create_sbert(named_model("tiny-bert-seed5"))
    except Exception as exc:  # noqa: BLE001
        if did_not_finish(exc):
            raise FingerprintAborted(str(exc)) from exc
        record["create"] = ("raises", type(exc).__name__)
        return record
    with torch.no_grad():
        record["encode"] = outcome(lambda: sbert.encode(ids_a.clone(), mask_a.clone()))
        record["forward"] = outcome(lambda: sbert(ids_a.clone(), mask_a.clone(), ids_b.clone(), mask_b.clone()))
        record["shared"] = outcome(lambda: _perturbed_self_similarity(impl, ids_a, mask_a))
    record["gradients"] = outcome(lambda: _gradient_reach(impl))
    return record


def _gradient_reach(impl) -> tuple:
    """(output type, has a graph, branch a reaches the encoder, branch b does) after one backward step
    (bertlab/probes.py, run where the submission runs): flags, not norms, so round-off never matters."""
    from bertlab.models import named_model
    from bertlab.probes import run_probe
    from bertlab.teaching.siamese import disjoint_pair_batch

    model = named_model("tiny-bert-seed7")
    sbert = impl.siamese.create_sbert(model)
    (ids_a, mask_a), (ids_b, mask_b) = disjoint_pair_batch(seed=907)
    report = run_probe(impl, "siamese_gradients", sbert, model, ids_a, mask_a, ids_b, mask_b)
    return (report["output"], report["has_graph"], report["branch_a"] > 0, report["branch_b"] > 0)


def _perturbed_self_similarity(impl, ids, mask):
    """forward(x, x) after changing the weights of the first encoder found in state_dict()."""
    from bertlab.models import named_model

    model = named_model("tiny-bert-seed6")
    sbert = impl.siamese.create_sbert(model)
    state, anchor = sbert.state_dict(), "embeddings.word_embeddings.weight"
    prefixes = sorted(k[: -len(anchor)] for k in state if k.endswith(anchor))
    if not prefixes:
        return "no encoder in state_dict"
    g = gen(906)
    sbert.load_state_dict({prefixes[0] + k: v + 0.5 * torch.randn(v.shape, generator=g)
                           for k, v in model.state_dict().items() if v.is_floating_point()}, strict=False)
    return sbert(ids.clone(), mask.clone(), ids.clone(), mask.clone())
