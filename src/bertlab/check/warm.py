"""The warm checker of `bertlab check --watch`: load once, fork a fresh child for every check.

``WarmChecker.load()`` does, once, in the watcher's own process, what makes a fresh check slow:
importing torch and transformers, pytest and hypothesis, collecting the public tests (which imports
their modules, conftest and data), and loading the packaged MiniLM model. Its ``launch`` is a
run.py launcher: each check is a guarded fork of that process (guard.py) in which pytest runs the
public tests in-process, so a check costs only the tests themselves.

What a fork must not inherit, and how it does not:

- **The student's code.** The watcher never imports an exercise module: collecting the tests does
  not call the ``impl`` fixture, so the student's files are imported in each child, from source
  (never from a ``.pyc`` a second save within the same second would leave stale), and die with it.
- **torch's thread pool.** A fork of a process whose OpenMP pool has started can deadlock at its
  first parallel region (GNU libgomp is not fork-safe). The watcher sets torch to one thread before
  it computes anything, so no pool ever starts in it. The checks run with one torch thread too
  (``OMP_NUM_THREADS``, when set, says how many; the child then starts a pool of its own): the public
  tests' tensors are small, and on a busy 2-core machine two threads made all four tasks slower, not
  faster (6.5 s against 4.0 s: a thread waiting at a barrier for one the machine has descheduled).
- **State that a fresh Python would not have.** Each child gets fresh stdin/stdout/stderr objects
  (the watcher's may be locked by its display thread at the moment of the fork), the environment
  of its check, torch's random state as it was just after ``import torch``, and freshly seeded
  Python and NumPy generators.
- **The garbage collector's work.** Every object loaded so far is frozen (``gc.freeze``): the
  child's collections skip them instead of touching, and so copying, every page of the heap (a
  check of task siamese took 2.4 s of garbage collection without it, 0.4 s in all with it).
"""

from __future__ import annotations

import gc
import io
import os
import random
import sys
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from bertlab.check import guard
from bertlab.check.events import CODE_ENV, REPORT_ENV
from bertlab.check.run import CheckChild, pytest_args
from bertlab.tasks import EXERCISE_TASKS


def supported() -> bool:
    """Whether this system can run a warm checker: Linux (fork, and guard.py's prctl)."""
    return guard.supported()


class WarmChecker:
    """A process that has loaded, once, what every check needs; ``launch`` forks a check from it."""

    def __init__(self):
        self.loaded = False
        self.torch_threads = 1       # torch threads in each check (see the module's docstring)
        self._torch_rng = None       # torch's random state just after import, as a fresh Python has it
        self._kept: list = []        # the watcher's stdio objects, kept alive in a child (never flushed there)

    def load(self, say: Callable[[str], None], code_dir: Path) -> None:
        """Import and load everything a check needs, saying what and how long (``say`` prints a line)."""
        started = time.monotonic()
        with _step(say, "importing torch and transformers"):
            import torch

            torch.set_num_threads(1)  # before any computation: no OpenMP pool may start in this process
            self.torch_threads = _threads_asked_for()
            self._torch_rng = torch.random.get_rng_state()
            import numpy  # noqa: F401
            import transformers  # noqa: F401
        with _step(say, "loading the MiniLM model"):
            self._load_model()
        with _step(say, "loading the public tests"):
            self._collect_public_tests(code_dir)
            _import_what_failures_need()
        gc.collect()
        gc.freeze()
        self.loaded = True
        say(f"Ready in {time.monotonic() - started:.1f} s; from now on each check starts at once.")

    @staticmethod
    def _load_model() -> None:
        """The packaged MiniLM (kept: bertlab.models caches it) and its tokenizer (imports its code).
        bertlab.models loads without a progress bar, so no tqdm monitor thread is started to fork."""
        from bertlab.models import load_tokenizer, named_model

        named_model("minilm")
        load_tokenizer("minilm")

    @staticmethod
    def _collect_public_tests(code_dir: Path) -> None:
        """Collect (never run) the public tests, output discarded: it imports pytest, its plugins, the
        tests' modules and their data, exactly as the child's pytest will look them up."""
        import pytest

        saved_report = os.environ.pop(REPORT_ENV, None)  # no events from this run
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            pytest.main(pytest_args(EXERCISE_TASKS, str(code_dir)) + ["--collect-only"])
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in (*saved, devnull):
                os.close(fd)
            if saved_report is not None:
                os.environ[REPORT_ENV] = saved_report

    def launch(self, tasks: Sequence[str], impl: str, cwd: Path, env: dict, output: Path) -> CheckChild:
        """A run.py launcher: the check in a guarded fork of this process."""
        # pytest would warn that plugins this process imported before pytest ran (this package's
        # events plugin, anyio's) cannot have their asserts rewritten: true, harmless, and the same in
        # every check, so not said (a fresh child imports them through pytest and has no such warning).
        args = pytest_args(tasks, impl) + ["-W", "ignore::pytest.PytestAssertRewriteWarning"]
        return guard.start(lambda: self._pytest_in_this_child(args, cwd, env), output)

    def _pytest_in_this_child(self, args: list[str], cwd: Path, env: dict) -> int:
        """In the forked child: make it look like a fresh Python, then run pytest in it."""
        import pytest
        import torch

        self._kept.extend((sys.stdin, sys.stdout, sys.stderr))
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - this process's own
        sys.stdout = io.TextIOWrapper(open(1, "wb", closefd=False), encoding="utf-8", errors="backslashreplace",
                                      line_buffering=True)
        sys.stderr = io.TextIOWrapper(open(2, "wb", closefd=False), encoding="utf-8", errors="backslashreplace",
                                      line_buffering=True)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        torch.set_num_threads(self.torch_threads)
        if self._torch_rng is not None:
            torch.random.set_rng_state(self._torch_rng)
        random.seed()
        import numpy

        numpy.random.seed()
        _import_from_source(Path(env[CODE_ENV]))
        return int(pytest.main(args))


#: Modules a check imports only when a test fails (hypothesis's explanation of a failing example
#: imports libcst: 0.7 s) or when it loads the student's code: imported once here instead.
FAILURE_MODULES = ("bertlab.implementations", "hypothesis.extra._patching", "libcst.native",
                   "torch._subclasses.schema_check_mode")


def _import_what_failures_need() -> None:
    import importlib

    for name in FAILURE_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - another version without it: the check imports what it needs
            pass


def _threads_asked_for() -> int:
    """``OMP_NUM_THREADS`` when it is a positive number, else 1."""
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "")))
    except ValueError:
        return 1


class _step:
    """``with _step(say, "loading X"):`` says 'loading X...' before and how long it took after."""

    def __init__(self, say: Callable[[str], None], what: str):
        self.say, self.what = say, what

    def __enter__(self):
        self.say(f"  {self.what}...")
        self.started = time.monotonic()

    def __exit__(self, *exc):
        if exc[0] is None:
            self.say(f"  {self.what}: {time.monotonic() - self.started:.1f} s")


def _import_from_source(code_dir: Path) -> None:
    """Make this process import the student's files from their source, never from a cached ``.pyc``,
    and write none: a ``.pyc`` is trusted when its source has the same size and modification second,
    so two saves within a second would otherwise run the older code."""
    from importlib.machinery import SOURCE_SUFFIXES, FileFinder, SourceFileLoader

    class SourceOnlyLoader(SourceFileLoader):
        def get_data(self, path):
            if str(path).endswith(".pyc"):
                raise OSError("compiled from source in a watched check")
            return super().get_data(path)

        def set_data(self, path, data, *, _mode=0o666):
            pass

    base = code_dir.resolve()

    def finder_for(entry: str):
        try:
            folder = Path(entry).resolve()
        except (OSError, RuntimeError, ValueError):
            raise ImportError(entry) from None
        if folder != base and base not in folder.parents:
            raise ImportError(entry)
        return FileFinder(entry, (SourceOnlyLoader, SOURCE_SUFFIXES))

    sys.path_hooks.insert(0, finder_for)
    for entry in list(sys.path_importer_cache):
        try:
            if Path(entry).resolve() == base or base in Path(entry).resolve().parents:
                del sys.path_importer_cache[entry]
        except (OSError, RuntimeError, ValueError, TypeError):
            continue


def prepare(say: Callable[[str], None], code_dir: Path) -> Optional[WarmChecker]:
    """A loaded WarmChecker, or None (said why) where this system cannot have one or loading failed:
    the watcher then starts a fresh Python for every check."""
    if not supported():
        say("(This system cannot fork a warm checker: every check starts a fresh Python, a few seconds each.)")
        return None
    checker = WarmChecker()
    try:
        checker.load(say, code_dir)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:  # noqa: BLE001 - a slower watcher is better than none
        say(f"(Could not prepare the warm checker: {type(exc).__name__}: {exc}. Every check starts a fresh "
            "Python instead, a few seconds each.)")
        return None
    return checker
