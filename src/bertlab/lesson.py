"""The glue the lesson notebook (exercises/Week_7_encoder.ipynb) and `bertlab lesson` call.

- Which implementation the notebook runs: ``BERTLAB_IMPL`` = ``exercises`` (default: your code, the
  exercises folder found from the notebook's folder), ``reference`` (instructor kit only; the kit's
  CI) or a directory holding cka.py, pooling.py, siamese.py, retrieval.py. ``BERTLAB_FAST=1`` shrinks
  every training run to seconds (the kit's tests): its accuracies mean nothing, every other figure is
  the same.
- Steps (``LessonSteps``; in the notebook ``student_code(*tasks)`` and ``require()``): a step names
  the tasks it uses; when it reaches unfinished work it prints one line, "Skipped (waiting for
  task(s): ...): ...", naming exactly those of its tasks that are not written yet and what to do, and
  the run goes on. Any other error is shown with the check to run.
- Time: ``USUAL_SECONDS`` (measured) and ``ESTIMATED_SECONDS`` (the lesson's full run), said by
  ``announce`` before a slow step starts.
- The kit's cache (``cache_root``): ``describe_cache`` says where it is and how large;
  ``clear_cache`` removes what the kit wrote there (`bertlab lesson --clear-cache`).
- ``progress_report(impl)``: which tasks work, and which one to do next.
- Tables: the architecture table (from configs and modules; BERT-base is built on the meta device,
  no weights), early vs late [CLS] cosines, the STS table, search results side by side.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import os
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import torch

from .errors import NotImplementedYet, unfinished
from .implementations import Implementation, load_implementation
from .tasks import EXERCISE_TASKS, exercise  # (EXERCISE_TASKS: the order a student works in)

IMPL_ENV = "BERTLAB_IMPL"
FAST_ENV = "BERTLAB_FAST"

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


def task_module(impl: Implementation, task: str):
    """The module of ``task`` in ``impl``, or None when this course leaves the task out (bertlab
    remove-task): the lesson's steps that use it then say so and skip (LessonSteps.step)."""
    return getattr(impl, exercise(task).module, None) if task in EXERCISE_TASKS else None


def load_lesson_implementation(target: Optional[str] = None) -> Implementation:
    """Import the implementation the notebook should use (``target`` or ``$BERTLAB_IMPL``); its steps
    (``student_code``) start afresh, and the digest of each task's file is taken now (``cached_step``
    keys on the code this session runs, not on a file edited since)."""
    global _current_target, _steps, _source_digests, _helper_digest
    _current_target = target or implementation_target()
    impl = load_implementation(_current_target)
    _steps = LessonSteps(impl)
    _source_digests = source_digests(impl)
    _helper_digest = helper_digest(impl)
    return impl


def helper_digest(impl: Implementation) -> str:
    """sha256 of the other .py files beside the task files (a helper module a student's task file may
    import): every kept step's key holds it, so an edit there computes again too."""
    folders = {Path(path).parent for path in (getattr(task_module(impl, task), "__file__", None)
                                              for task in EXERCISE_TASKS) if path}
    task_files = {f"{exercise(task).module}.py" for task in EXERCISE_TASKS}
    digest = hashlib.sha256()
    for folder in sorted(folders):
        for path in sorted(folder.glob("*.py")):
            if path.name not in task_files:
                digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def source_digests(impl: Implementation) -> dict[str, Optional[str]]:
    """{task: sha256 of its module's file}, read now; None for a task whose module has no file (left
    out of this course, or not a plain module): a step that uses it is never cached."""
    digests: dict[str, Optional[str]] = {}
    for task in EXERCISE_TASKS:
        path = getattr(task_module(impl, task), "__file__", None)
        try:
            digests[task] = hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else None
        except OSError:
            digests[task] = None
    return digests


def quiet_transformers() -> None:
    """No progress bars (weight loading, saving) and only errors from transformers' logger: clean outputs."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def fast_mode() -> bool:
    """True when ``$BERTLAB_FAST`` is set to 1/true/yes: tiny training runs, for CI."""
    return os.environ.get(FAST_ENV, "").strip().lower() in ("1", "true", "yes", "on")


# ---------------------------------------------------------------------------------------------
# How long things take, said before they start
# ---------------------------------------------------------------------------------------------

# Wall seconds of each slow step on 2 CPU cores with the reference code, the one place these figures
# are kept (docs/student-guide.md has the whole run, section by section, and how it was measured:
# CPU seconds of both threads, about 1.5 times the wall time on an idle 2-core machine).
# Keys: step, or step:preset.
USUAL_SECONDS: dict[str, float] = {
    "finetune:cpu": 130,      # all-MiniLM-L6-v2, 63 steps of 16 reviews x 128 tokens, then 500 held out
    "scratch:cpu": 20,        # TinyBERT (width 128) from random weights, the same 63 steps
    "finetune:fast": 5,       # BERTLAB_FAST=1: 2 steps of 16 reviews x 32 tokens
    "scratch:fast": 2,
    "stsb:sbert": 12,         # the STS benchmark's 1,379 pairs through MiniLM (the DAN takes about 1 s)
}
# The lesson's own run (FULL = True, preset "lesson": 6,250 steps of 4 reviews x 256 tokens, 5
# evaluations of 1,000 reviews). Estimates, never run whole on a CPU: the seconds per step measured
# on one thread (bert-base-uncased 10 s, all-MiniLM-L6-v2 1.9 s, TinyBERT width 256 0.5 s; about
# 0.6 times that on 2 cores) times the steps, plus the evaluations.
ESTIMATED_SECONDS: dict[str, float] = {
    "finetune:lesson:bert-base-uncased": 11 * 3600,
    "finetune:lesson:minilm": 2 * 3600,
    "scratch:lesson": 0.5 * 3600,
}
# On a GPU (FULL = True): an estimate from the computation per step (about 0.5 TFLOP for bert-base at
# 4 x 256 tokens), not a measured run.
GPU_ESTIMATE = "about 15-25 min for bert-base-uncased on a Colab-class GPU (T4), a few minutes on a recent one"


def duration(seconds: float) -> str:
    """'40 s', '3 min', '2.5 h'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    hours = seconds / 3600
    return f"{hours:.0f} h" if hours >= 10 else f"{hours:.1f} h"


def usual_time(key: str) -> str:
    """How long ``key`` (a USUAL_SECONDS or ESTIMATED_SECONDS key) takes, as a phrase."""
    if key in USUAL_SECONDS:
        return f"usually about {duration(USUAL_SECONDS[key])} on 2 CPU cores"
    if key in ESTIMATED_SECONDS:
        return f"about {duration(ESTIMATED_SECONDS[key])} on 2 CPU cores (an estimate)"
    raise KeyError(f"no time recorded for {key!r}; known: {', '.join(sorted({**USUAL_SECONDS, **ESTIMATED_SECONDS}))}")


def announce(key: str, what: str) -> None:
    """Print, before a slow step starts, what it is and how long it usually takes."""
    print(f"{what}: {usual_time(key)}...", flush=True)


def task_file(task: str, target: Optional[str] = None) -> str:
    """Where the student edits ``task``: ``exercises/cka.py`` (or the directory's own file)."""
    target = target or _current_target
    if target == "exercises":
        return f"exercises/{task}.py"
    if target == "reference":
        return f"solutions/{task}.py"
    return str(Path(target) / f"{task}.py")


# ---------------------------------------------------------------------------------------------
# Slow steps on student code, kept for the same code
# ---------------------------------------------------------------------------------------------

_source_digests: dict[str, Optional[str]] = {}
_helper_digest = ""
STEP_CACHE_FORMAT = 1  # bump when a kept step's result changes meaning


def _kit_module_digest(name: str) -> str:
    return hashlib.sha256((Path(__file__).parent / f"{name}.py").read_bytes()).hexdigest()


def cached_step(what: str, uses: Sequence[str], compute: Callable[[], dict], *, label: str,
                settings: Optional[dict] = None, kit_modules: Sequence[str] = (), announce_key: str = "",
                retrain: bool = False) -> dict:
    """``compute()`` (a dict of plain data), kept in the kit's cache for the same code (``cache.cached_json``).

    The key holds the digest of exactly the task files the step runs (``uses``, e.g. ("siamese",
    "pooling") for SBERT, whose encoder pools with masked_mean_pool), as they were when the notebook
    loaded them, and of any other .py file beside them (``helper_digest``); the kit's version, torch's version and the digests of the kit modules the step runs
    (``kit_modules``, e.g. ("finetune", "encoder")); ``settings`` (plain data: the preset, the data's
    digests). A rerun with the same files loads the result; an edit to one of them computes it again.
    A task without a file (see ``source_digests``) is never cached: the step just runs.
    announce_key: a ``USUAL_SECONDS`` key, said (``announce``) just before computing.
    """
    from . import __version__
    from .cache import cached_json

    code = {task: _source_digests.get(task) for task in uses}  # by task, not path: the same file anywhere is the same code

    def before() -> None:
        if announce_key:
            announce(announce_key, label)

    if not uses or any(digest is None for digest in code.values()):
        before()
        return {**compute(), "source": "computed", "from_cache": False}
    import transformers

    key = {"step": what, "format": STEP_CACHE_FORMAT, "kit": __version__, "torch": torch.__version__,
           "transformers": transformers.__version__, "code": code, "helpers": _helper_digest,
           "kit_code": {name: _kit_module_digest(name) for name in kit_modules}, "settings": settings or {}}
    files = " and ".join(task_file(task) for task in uses)
    return cached_json(what, key, compute, label=label, depends_on=f"this same {files}", retrain=retrain,
                       before_compute=before)


# ---------------------------------------------------------------------------------------------
# Running student code without tracebacks for unfinished tasks
# ---------------------------------------------------------------------------------------------

class StepSkipped(Exception):
    """A step needs a result that an earlier step did not produce."""


def not_started(exc: BaseException, default_task: str) -> tuple[str, Optional[str]]:
    """(task, function name) of the stub behind a NotImplementedError: a stub's NotImplementedYet
    carries both; a plain one (the student's own) counts for ``default_task``, function unknown."""
    found = unfinished(exc) or exc
    task = getattr(found, "task", None)
    return (task if task in EXERCISE_TASKS else default_task), getattr(found, "function", None)


def not_implemented_message(task: str, name: Optional[str] = None, waiting: Sequence[str] = (),
                            target: Optional[str] = None) -> str:
    """The one line shown instead of a traceback when a step reaches an unfinished task.

    ``waiting``: every task the step waits for (``task`` first among them, in lesson order); the line
    names them all, then says what to do for ``task`` (``name``: the function still to write).
    """
    waiting = _in_lesson_order(set(waiting) | {task})
    where = f"the `raise NotImplementedYet(...)` in {name}" if name else "its `raise NotImplementedYet(...)` stubs"
    return (f"Skipped (waiting for task(s): {', '.join(waiting)}): task {task} is not implemented yet: open "
            f"{task_file(task, target)}, replace {where} with your code, then run `bertlab check --task {task}`.")


def _in_lesson_order(tasks) -> list[str]:
    return sorted(set(tasks), key=EXERCISE_TASKS.index)


class LessonSteps:
    """Runs the lesson's steps on one implementation: a step that reaches unfinished work prints one
    line naming every task it waits for, and the run goes on.

    A step declares the tasks it uses (``step("pooling", "cka")``). When it stops on a
    NotImplementedError, the tasks it waits for are the one that raised plus those of its declared
    tasks that do not run yet, as the probe (``task_states``: each task called once on tiny inputs)
    sees them; a task that needs another one first (a siamese.py that calls your unfinished
    masked_mean_pool) counts as that one. So the line names exactly what this step uses and lacks.
    """

    def __init__(self, impl: Optional[Implementation] = None, tracebacks: bool = True, target: Optional[str] = None):
        self.impl = impl
        self.target = target  # names the files in messages (task_file); None: the notebook's target
        self.tracebacks = tracebacks  # the notebook shows a bug's traceback; `bertlab lesson` one line
        self._states: Optional[dict[str, tuple[str, Optional[str]]]] = None
        self.current: tuple[str, ...] = ()        # the tasks of the step running now
        self.skipped: list[tuple[str, ...]] = []   # the tasks each skipped step waited for
        self.failed: list[str] = []                # the task of each step your code broke

    def states(self) -> dict[str, tuple[str, Optional[str]]]:
        """``task_states`` of the implementation, probed once (before any step needs them)."""
        if self._states is None:
            self._states = _task_states(self.impl) if self.impl is not None else {}
        return self._states

    def waiting_for(self, tasks: Sequence[str]) -> list[str]:
        """The tasks among ``tasks`` that do not run yet (a task that needs another first: that one)."""
        waiting = set()
        for task in tasks:
            status, _ = self.states().get(task, ("runs", None))
            if status.startswith("needs task "):  # e.g. your siamese.py calls your unfinished pooling
                needed = status.split()[2]
                waiting.add(needed if needed in EXERCISE_TASKS else task)
            elif status.startswith("not implemented"):
                waiting.add(task)
            # "runs", or "raises ...": the step runs and shows the error where it happens
        return _in_lesson_order(waiting)

    def _function_to_write(self, task: str) -> Optional[str]:
        return self.states().get(task, ("runs", None))[1]

    @contextlib.contextmanager
    def step(self, *tasks: str, title: str = "") -> Iterator[None]:
        """Run the block; on unfinished work print one line (which tasks, what to do) and skip the rest.

        Any other exception is probably a bug in your code: it is shown (with the traceback in the
        notebook, as one line for `bertlab lesson`) with the check to run; the step ends, the run goes on.
        ``title`` starts the line (`bertlab lesson` names its steps; a notebook cell is its own title).
        """
        if not tasks:
            raise ValueError(f"a step names the tasks it uses, from {', '.join(EXERCISE_TASKS)}; got none.")
        prefix = f"{title}: " if title else ""
        outer, self.current = self.current, tasks
        absent = [task for task in tasks if task not in EXERCISE_TASKS]
        if absent:
            # A task the instructor removed from this course (bertlab remove-task): the step reaches for
            # it (impl has no such module) or stops at require(); it is skipped, and says why.
            try:
                yield
            except Exception:  # noqa: BLE001 - whatever the missing task made the step raise
                self.skipped.append(())
                print(f"{prefix}Skipped: this step uses task {', '.join(absent)}, which is not part of this "
                      "course.", flush=True)
            finally:
                self.current = outer
            return
        try:
            yield
        except NotImplementedError as exc:
            found, name = not_started(exc, tasks[0])
            waiting = _in_lesson_order([found, *self.waiting_for(tasks)])
            first = waiting[0]
            if first != found:
                found, name = first, self._function_to_write(first)
            self.skipped.append(tuple(waiting))
            print(prefix + not_implemented_message(found, name, waiting, self.target), flush=True)
        except StepSkipped as exc:
            waiting = self.waiting_for(tasks)
            if waiting:
                self.skipped.append(tuple(waiting))
                print(prefix + not_implemented_message(waiting[0], self._function_to_write(waiting[0]), waiting,
                                                       self.target), flush=True)
            else:  # every task runs, but a step above that this one needs did not finish
                self.skipped.append(())
                print(f"{prefix}Skipped: {exc}", flush=True)
        except Exception as exc:  # a bug in the student's code: show it, keep the lesson going
            task = self._task_of(exc, tasks)
            self.failed.append(task)
            if self.tracebacks:
                lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
                print("".join(lines[-12:]).rstrip(), file=sys.stderr)
            print(f"{prefix}Your code for task {task} raised {type(exc).__name__}: {_first_line(exc)}. Run `bertlab "
                  f"check --task {task}` for a precise diagnosis. (The rest of this step is skipped.)", flush=True)
        finally:
            self.current = outer

    def require(self, *values: Any) -> None:
        """Inside a step: stop it now (StepSkipped) when one of its tasks does not run yet, or when a
        result of a step above is missing (None). The step then prints the one line naming what it
        waits for. Call it first in a step that computes before it reaches your code, so nothing
        starts (or announces how long it takes) only to stop."""
        if any(task not in EXERCISE_TASKS for task in self.current):
            raise StepSkipped("this step's task is not part of this course.")
        if self.waiting_for(self.current):
            raise StepSkipped("this step's tasks are not all written yet.")
        if any(v is None for v in values):
            raise StepSkipped("this step uses a result from a step above that did not finish (see the message there).")

    def _task_of(self, exc: BaseException, tasks: Sequence[str]) -> str:
        """The task whose exercise file the error was raised in (its innermost frame), else the step's first."""
        files = {}
        for task in EXERCISE_TASKS:
            module = getattr(self.impl, task, None) if self.impl is not None else None
            path = getattr(module, "__file__", None)
            if path:
                files[str(Path(path).resolve())] = task
        found = None
        for frame, _ in traceback.walk_tb(exc.__traceback__):
            found = files.get(str(Path(frame.f_code.co_filename).resolve()), found)
        return found or tasks[0]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else "(no message)"


_steps = LessonSteps()


def lesson_steps() -> LessonSteps:
    """The steps of this notebook session (set by ``load_lesson_implementation``)."""
    return _steps


def student_code(*tasks: str):
    """``with student_code("pooling", "cka"): ...``: a notebook step that uses these tasks (see LessonSteps.step)."""
    return _steps.step(*tasks)


def try_student(task: str, fn: Callable, *args, **kwargs) -> Any:
    """``fn(*args, **kwargs)``, or None (with the one-line note) when it reaches unfinished work."""
    with student_code(task):
        return fn(*args, **kwargs)
    return None


def require(*values: Any) -> None:
    """Inside a notebook step: stop it now when one of its tasks does not run yet, or when a result of a
    step above is missing (None); the step then names what it waits for (LessonSteps.require)."""
    _steps.require(*values)


def waiting_for(*tasks: str) -> list[str]:
    """Of ``tasks``, those that do not run yet in this session's implementation (lesson order)."""
    return _steps.waiting_for(tasks)


# ---------------------------------------------------------------------------------------------
# Progress: call each task once on tiny inputs
# ---------------------------------------------------------------------------------------------

def _call_once(task: str, impl: Implementation) -> None:
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
        _probe_unknown_task(task, impl)


#: The status of a task the lesson has no call for (one an instructor added with `bertlab new-task`)
#: whose functions are no longer stubs: the lesson cannot say whether it runs, only that it is written.
WRITTEN = "written"


class _Written(Exception):
    """Raised by _probe_unknown_task: the task's functions are written (status WRITTEN)."""


def _probe_unknown_task(task: str, impl: Implementation) -> None:
    """For a task _call_once has no inputs for: raise the stub's NotImplementedYet when one of the
    task's functions still holds it (read from its source: calling it would need inputs the lesson does
    not know), else _Written. A task this course leaves out is skipped by the steps (LessonSteps.step)."""
    module = task_module(impl, task)
    for name in exercise(task).functions:
        function = getattr(module, name, None)
        try:
            source = inspect.getsource(function) if function is not None else ""
        except (OSError, TypeError):  # defined where no source can be read: taken as written
            source = ""
        if "NotImplementedYet(" in source:
            raise NotImplementedYet(task, name)
    raise _Written(task)


def _task_states(impl: Implementation) -> dict[str, tuple[str, Optional[str]]]:
    """{task: (status, the function of the task still to write, when a stub named it)}."""
    states: dict[str, tuple[str, Optional[str]]] = {}
    for task in EXERCISE_TASKS:
        try:
            _call_once(task, impl)
            states[task] = ("runs", None)
        except _Written:
            states[task] = (WRITTEN, None)
        except NotImplementedError as exc:
            found, name = not_started(exc, task)
            states[task] = ((f"needs task {found} first", None) if found != task
                            else (f"not implemented: {name or '?'}", name))
        except Exception as exc:  # noqa: BLE001 - any error is worth reporting as a status
            states[task] = (f"raises {type(exc).__name__}: {str(exc)[:80]}", None)
    return states


def task_status(impl: Implementation) -> dict[str, str]:
    """{task: status} where status is "runs", "written" (a task the lesson has no call for, whose functions
    are no longer stubs), "not implemented: <name>", "needs task <t> first" or an error."""
    return {task: status for task, (status, _) in _task_states(impl).items()}


def progress_report(impl: Implementation) -> str:
    """A per-task summary and the task to do next."""
    states = _task_states(impl)
    lines = [f"Progress ({impl.name}):"]
    width = max(10, *(len(task) for task in EXERCISE_TASKS))  # a task an instructor added may be longer
    for task in EXERCISE_TASKS:
        lines.append(f"  {task:<{width}} {states[task][0]}")
    todo = [t for t in EXERCISE_TASKS if states[t][0] not in ("runs", WRITTEN)]
    if not todo:
        runs = "runs" if all(states[t][0] == "runs" for t in EXERCISE_TASKS) else "is written"
        lines.append(f"Every task {runs}. Now make sure they are right: `bertlab check` runs the public tests.")
    else:
        task = todo[0]
        name = states[task][1]
        lines.append(f"Next: task {task}. Open {task_file(task)}"
                     + (f", implement {name}" if name else "")
                     + f", then run `bertlab check --task {task}` and re-run this notebook.")
    return "\n".join(lines)


# The notebook reads everything as lesson.<name>: the cache and the tables live in their own modules.
from bertlab.cache import (  # noqa: E402,F401
    cache_entries, cache_root, clear_cache, describe_cache, size_text)
from bertlab.tables import (  # noqa: E402,F401
    Architecture, short, architecture_table, bert_base_on_meta, cls_layer_cosines, describe_architecture, describe_value, format_accuracy_table, format_mask_predictions, format_search, format_sts_table)
