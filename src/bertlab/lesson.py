"""The glue the lesson notebook (exercises/Week_7_encoder.ipynb) calls.

- Which implementation the notebook runs: ``BERTLAB_IMPL`` = ``exercises`` (default: your code, the
  exercises folder found from the notebook's folder), ``reference`` (instructor kit only; the kit's
  CI) or a directory holding cka.py, pooling.py, siamese.py, retrieval.py. ``BERTLAB_FAST=1`` shrinks the two training runs to seconds (CI).
- ``student_code(task)`` / ``try_student(task, fn, ...)``: run a step that uses your code; a
  ``NotImplementedError`` becomes a short "Task X is not implemented yet: open ..." note, any other
  error is shown with its traceback, and either way the cell completes so the rest of the lesson runs.
- ``progress_report(impl)``: which tasks work, and which one to do next.
- Tables: the architecture table (from configs and modules; BERT-base is built on the meta device,
  no weights), early vs late [CLS] cosines, the STS table, search results side by side.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .errors import unfinished
from .implementations import Implementation, load_implementation
from .models import count_parameters
from .tasks import EXERCISE_MODULES

IMPL_ENV = "BERTLAB_IMPL"
FAST_ENV = "BERTLAB_FAST"
TASKS = tuple(EXERCISE_MODULES)  # the order a student works in: cka, pooling, siamese, retrieval

# The lesson's fill-in sentences (Concept 2), each with one [MASK].
LESSON_MASK_SENTENCES = (
    "The film was absolutely [MASK], I could not stop watching.",
    "The acting was [MASK] but the plot was predictable and dull.",
    "I would [MASK] this movie to anyone who enjoys slow-burn thrillers.",
)

# Next-sentence prediction: one opening sentence, a plausible continuation and an unrelated sentence.
NSP_EXAMPLE = (
    "The first hour of the film is gripping.",
    "After that, sadly, the story runs out of ideas.",
    "Preheat the oven and grease a large baking tin.",
)

# ---------------------------------------------------------------------------------------------
# Which code runs
# ---------------------------------------------------------------------------------------------

_current_target = "exercises"


def implementation_target() -> str:
    """``$BERTLAB_IMPL`` or ``"exercises"``."""
    return os.environ.get(IMPL_ENV, "").strip() or "exercises"


def load_lesson_implementation(target: Optional[str] = None) -> Implementation:
    """Import the implementation the notebook should use (``target`` or ``$BERTLAB_IMPL``)."""
    global _current_target
    _current_target = target or implementation_target()
    return load_implementation(_current_target)


def quiet_transformers() -> None:
    """No progress bars (weight loading, saving) and only errors from transformers' logger: clean outputs."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def fast_mode() -> bool:
    """True when ``$BERTLAB_FAST`` is set to 1/true/yes: tiny training runs, for CI."""
    return os.environ.get(FAST_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def task_file(task: str, target: Optional[str] = None) -> str:
    """Where the student edits ``task``: ``exercises/cka.py`` (or the directory's own file)."""
    target = target or _current_target
    if target == "exercises":
        return f"exercises/{task}.py"
    if target == "reference":
        return f"bertlab_grader/reference/{task}.py"
    return str(Path(target) / f"{task}.py")


# ---------------------------------------------------------------------------------------------
# Running student code without tracebacks for unfinished tasks
# ---------------------------------------------------------------------------------------------

class StepSkipped(Exception):
    """A step needs a result that an earlier, unfinished step did not produce."""


def not_started(exc: BaseException, default_task: str) -> tuple[str, Optional[str]]:
    """(task, function name) of the stub behind a NotImplementedError: a stub's NotImplementedYet
    carries both; a plain one (the student's own) counts for ``default_task``, function unknown."""
    found = unfinished(exc) or exc
    task = getattr(found, "task", None)
    return (task if task in TASKS else default_task), getattr(found, "function", None)


def not_implemented_message(task: str, name: Optional[str] = None) -> str:
    """The note shown instead of a traceback when ``task`` is still a stub."""
    where = f"the `raise NotImplementedYet(...)` in {name}" if name else "its `raise NotImplementedYet(...)` stubs"
    return (f"Task {task} is not implemented yet: open {task_file(task)}, replace {where} with your code, "
            f"then run `bertlab check --task {task}`. (The rest of this step is skipped.)")


_skipped_because: dict[str, str] = {}  # task -> first missing function seen in this session


@contextlib.contextmanager
def student_code(task: str) -> Iterator[None]:
    """Run the block; if it reaches an unfinished stub, print what to do and skip the rest of the block.

    Any other exception from the block is printed with its traceback (it is probably a bug in your
    code) together with the check to run; the cell still completes.
    """
    try:
        yield
    except NotImplementedError as exc:
        found_task, name = not_started(exc, task)
        _skipped_because.setdefault(found_task, name or "")
        print(not_implemented_message(found_task, name))
    except StepSkipped as exc:
        print(f"Skipped: {exc}")
    except Exception as exc:  # a bug in the student's code: show it, keep the lesson going
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
        print("".join(lines[-12:]).rstrip(), file=sys.stderr)
        print(f"Your code for task {task} raised {type(exc).__name__}: {exc}\n"
              f"Run `bertlab check --task {task}` for a precise diagnosis. (The rest of this step is skipped.)")


def try_student(task: str, fn: Callable, *args, **kwargs) -> Any:
    """``fn(*args, **kwargs)``, or None (with the friendly note) when it reaches an unfinished stub."""
    with student_code(task):
        return fn(*args, **kwargs)
    return None


def require(*values: Any) -> None:
    """Raise StepSkipped when an earlier step's result is missing (None), naming the tasks left to do."""
    if any(v is None for v in values):
        pending = ", ".join(sorted(_skipped_because, key=TASKS.index)) or "an earlier step"
        raise StepSkipped(f"this step uses a result from a step above that is waiting for task(s): {pending}.")


# ---------------------------------------------------------------------------------------------
# Progress: probe each task on tiny inputs
# ---------------------------------------------------------------------------------------------

def _probe(task: str, impl: Implementation) -> None:
    """Call the task's functions once on tiny seeded inputs (results are not checked here)."""
    generator = torch.Generator().manual_seed(0)
    if task == "cka":
        X, Y = torch.randn(6, 3, generator=generator), torch.randn(6, 4, generator=generator)
        impl.cka.linear_cka(X, Y)
        impl.cka.cka_matrix([X, Y])
    elif task == "pooling":
        impl.pooling.masked_mean_pool(torch.randn(2, 3, 4, generator=generator), torch.tensor([[1, 1, 0], [1, 0, 0]]))
    elif task == "siamese":
        from .models import named_model

        sbert = impl.siamese.create_sbert(named_model("tiny-bert-seed0"))
        ids, mask = torch.tensor([[101, 2204, 102]]), torch.ones(1, 3, dtype=torch.long)
        with torch.no_grad():
            sbert.encode(ids, mask)
            sbert(ids, mask, ids, mask)
    elif task == "retrieval":
        impl.retrieval.semantic_search(torch.randn(2, 4, generator=generator), torch.randn(5, 4, generator=generator), 2)
        index = impl.retrieval.SemanticIndex(lambda texts: torch.randn(len(texts), 4, generator=generator))
        index.add(["a", "b", "c"])
        index.search("a", top_k=2)
        len(index)
    else:
        raise ValueError(f"unknown task {task!r}")


def _task_states(impl: Implementation) -> dict[str, tuple[str, Optional[str]]]:
    """{task: (status, the function of the task still to write, when a stub named it)}."""
    states: dict[str, tuple[str, Optional[str]]] = {}
    for task in TASKS:
        try:
            _probe(task, impl)
            states[task] = ("runs", None)
        except NotImplementedError as exc:
            found, name = not_started(exc, task)
            states[task] = ((f"needs task {found} first", None) if found != task
                            else (f"not implemented: {name or '?'}", name))
        except Exception as exc:  # noqa: BLE001 - any error is worth reporting as a status
            states[task] = (f"raises {type(exc).__name__}: {str(exc)[:80]}", None)
    return states


def task_status(impl: Implementation) -> dict[str, str]:
    """{task: status} where status is "runs", "not implemented: <name>", "needs task <t> first" or an error."""
    return {task: status for task, (status, _) in _task_states(impl).items()}


def progress_report(impl: Implementation) -> str:
    """A per-task summary and the task to do next."""
    states = _task_states(impl)
    lines = [f"Progress ({impl.name}):"]
    for task in TASKS:
        lines.append(f"  {task:<10} {states[task][0]}")
    todo = [t for t in TASKS if states[t][0] != "runs"]
    if not todo:
        lines.append("All four tasks run. Now make sure they are right: `bertlab check` runs the public tests.")
    else:
        task = todo[0]
        name = states[task][1]
        lines.append(f"Next: task {task}. Open {task_file(task)}"
                     + (f", implement {name}" if name else "")
                     + f", then run `bertlab check --task {task}` and re-run this notebook.")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Concept 2: architectures
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------

def _short(text: str, width: int) -> str:
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
        lines.append(f"{pair.score:5.2f} {values}  " + _short(f"{pair.a!r} vs {pair.b!r}", width))
    return "\n".join(lines)


def format_accuracy_table(results: Mapping[str, Optional[dict]]) -> str:
    """Held-out accuracy, training minutes and parameters of each training run (None = not run)."""
    lines = [f"{'model':<38}{'held-out accuracy':>18}{'minutes':>9}{'parameters':>13}{'steps':>7}"]
    for name, result in results.items():
        if result is None:
            lines.append(f"{name:<38}{'(not run)':>18}")
            continue
        lines.append(f"{name:<38}{result['accuracy']:>18.3f}{result['minutes']:>9.1f}"
                     f"{result['parameters']:>13,}{result['steps']:>7}")
    return "\n".join(lines)


def describe_value(values: Tensor) -> str:
    """'min-max' of a 1-D tensor with 3 decimals (for printing CKA ranges)."""
    values = values[~torch.isnan(values)]
    return f"{float(values.min()):.3f}-{float(values.max()):.3f}" if values.numel() else "nan"
