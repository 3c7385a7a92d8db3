"""The `bertlab` command: argument parsing and dispatch only; each command lives in its own module.

The student commands (check, lesson) are defined here. Other packages add commands through the
``bertlab.commands`` entry-point group: each entry point names a function ``register(subparsers)``
that adds its sub-commands. The instructor kit (bertlab_grader) adds the grading commands this way,
so the student bundle, which does not contain it, shows only the student commands.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from importlib.metadata import entry_points
from pathlib import Path

from .errors import ReportedError
from .tasks import ASSIGNMENT, EXERCISE_TASKS

COMMANDS_GROUP = "bertlab.commands"
DESCRIPTION = ("bertlab: the week-7 transfer-learning exercises (CKA, pooling, Sentence-BERT, semantic search). "
               "Write your code in exercises/, then run `bertlab check` to see what passes and what to do next.")


def _cmd_check(args) -> int:
    from bertlab.check.command import run_check
    from bertlab.check.watch import watch_check

    directory = Path(args.dir) if args.dir else None
    if args.watch:
        return watch_check(task=args.task, impl=args.impl, verbose=args.verbose, directory=directory)
    return run_check(task=args.task, impl=args.impl, verbose=args.verbose, directory=directory)


def _cmd_submit(args) -> int:
    from .handin.command import submit

    return submit(directory=Path(args.dir) if args.dir else None, out=Path(args.out) if args.out else None,
                  anyway=args.anyway, nbgrader=args.nbgrader, assignment=args.assignment)


def _cmd_lesson(args) -> int:
    # Before torch starts its threads (as in the notebook's first cell): an idle thread sleeps instead of
    # spinning, so a machine busy with anything else does not make the lesson 2-5 times slower.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from . import lesson

    if args.clear_cache:
        return _clear_cache()
    from .headline import format_figures, lesson_figures
    from .implementations import load_directory, load_implementation
    from .workspace import find_workspace

    if args.reference:
        impl, target = load_implementation("reference"), "reference"
    else:
        folder = find_workspace(Path(args.dir) if args.dir else None).exercises
        impl, target = load_directory(folder), _shown_path(folder)
    print(f"The lesson's figures with {'the reference solutions' if args.reference else f'your code ({target})'}"
          + ("; --quick: without the STS benchmark." if args.quick else "."), flush=True)
    lesson.quiet_transformers()  # no weight-loading bars between the lines
    steps = lesson.LessonSteps(impl, tracebacks=getattr(args, "debug", False), target=target)
    # --quick: no STS benchmark, and the untrained encoder's CKA for one seed instead of three.
    figures = lesson_figures(impl, full=not args.quick, seeds=(0,) if args.quick else (0, 1, 2), steps=steps,
                             announce=True)
    print()
    print(format_figures(figures))
    if steps.failed:  # a step stopped on the student's own error (not on unfinished work): exit 1
        tasks = ", ".join(dict.fromkeys(steps.failed))
        raise ReportedError(f"your code for task(s) {tasks} raised an error (the lines above say where); "
                            f"run `bertlab check --task {steps.failed[0]}` for a precise diagnosis.")
    return 0


def _shown_path(folder: Path) -> str:
    """The exercises folder as a student would type it: relative to the working directory when inside it."""
    try:
        return str(folder.resolve().relative_to(Path.cwd().resolve())) or "."
    except ValueError:
        return str(folder)


def _clear_cache() -> int:
    """`bertlab lesson --clear-cache`: remove what the kit keeps between runs, saying what and how much."""
    from .cache import cache_root, clear_cache, size_text

    root = cache_root()
    removed, left = clear_cache()
    if not removed:
        print(f"Nothing to remove: the kit's cache ({root}) holds nothing the kit wrote.")
    else:
        print(f"Removed from {root}:")
        for path, size in removed:
            print(f"  {path.name:<40} {size_text(size):>9}")
        print(f"Freed {size_text(sum(size for _, size in removed))}. The next run of the notebook trains or "
              "builds them again.")
    if left:
        print(f"Left alone in {root} (not written by the kit): {', '.join(p.name for p in left)}")
    return 0


def add_student_commands(sub) -> None:
    p = sub.add_parser("check", help="run the public tests on your exercises, task by task, and say what to do next")
    p.add_argument("--task", choices=EXERCISE_TASKS, help="only this task")
    p.add_argument("--dir", metavar="DIR", help="your exercises folder (default: found from the working directory)")
    p.add_argument("-v", "--verbose", action="store_true", help="show every test, not just the first failure")
    p.add_argument("--watch", action="store_true",
                   help="keep going: check again each time you save a file (the first check loads for a few "
                        "seconds, later ones take about a second); Ctrl-C to stop")
    p.add_argument("--impl", default="exercises", help=argparse.SUPPRESS)  # the kit's own tests: 'reference'
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser("submit", help="hand in: check a fresh copy of your files, then pack exactly them "
                                      "(week7-submission.zip beside exercises/, with a manifest)")
    p.add_argument("--dir", metavar="DIR", help="your exercises folder (default: found from the working directory)")
    p.add_argument("--out", metavar="PATH", help="where to write the archive (default: week7-submission.zip beside "
                                                 "exercises/)")
    p.add_argument("--anyway", action="store_true",
                   help="pack even files that do not import (they will score nothing)")
    p.add_argument("--nbgrader", action="store_true",
                   help="hand in through your course's nbgrader exchange (JupyterHub) instead of writing an archive")
    p.add_argument("--assignment", default=ASSIGNMENT, help=argparse.SUPPRESS)
    p.set_defaults(func=_cmd_submit)

    p = sub.add_parser("lesson", help="compute the lesson's headline figures with your code")
    p.add_argument("--dir", metavar="DIR", help="your exercises folder (default: found from the working directory)")
    p.add_argument("--reference", action="store_true", help="use the reference solutions (instructor kit only)")
    p.add_argument("--quick", action="store_true",
                   help="skip the STS benchmark and compute the untrained encoder's CKA for one seed, not three")
    p.add_argument("--clear-cache", action="store_true",
                   help="remove what the lesson keeps between runs (~/.cache/bertlab or $BERTLAB_CACHE_DIR), then exit")
    p.set_defaults(func=_cmd_lesson)


def _plugin_registrations():
    """The ``register`` functions of installed command plugins, in name order. An entry point whose
    package is gone (metadata left behind by an uninstall, a path that shadows it) adds nothing."""
    found = []
    for ep in sorted(entry_points(group=COMMANDS_GROUP), key=lambda ep: ep.name):
        try:
            found.append(ep.load())
        except ModuleNotFoundError as exc:
            if not (exc.name and ep.module.split(".")[0] == exc.name.split(".")[0]):
                raise  # the plugin is there but broken: that is worth a traceback
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bertlab", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_student_commands(sub)
    for register in _plugin_registrations():
        register(sub)
    for command in sub.choices.values():  # every command: one line per error, --debug for the traceback
        if not any("--debug" in action.option_strings for action in command._actions):
            command.add_argument("--debug", action="store_true", help="show Python tracebacks of errors")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command. Exit codes: 0 done; 1 a failure the command explains (for `check`: a task
    does not pass yet); 2 a usage or layout error (nothing changed). See docs/commands.md."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    args = build_parser().parse_args(argv)
    debug = getattr(args, "debug", False)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `bertlab similar | head`: the reader stopped early, which is not an error
        # Python would complain again when it flushes stdout at exit: point stdout at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # noqa: BLE001 - one clear line per error; --debug for the traceback
        if debug:
            import traceback

            traceback.print_exc()
        code = getattr(exc, "exit_code", None)
        if isinstance(code, int):  # a ReportedError: the kit's own message says what to do
            print(f"bertlab {args.command}: {exc}", file=sys.stderr)
            return code
        print(f"bertlab {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        if not debug:
            print("  (an internal error: rerun with --debug for the traceback)", file=sys.stderr)
        return 1
    finally:
        if argv is None:  # the command line's own process, about to exit (not a caller's, e.g. a test)
            # Python's shutdown would collect every object the command's imports made, one by one: half
            # a second after `bertlab grade` (torch, nbgrader) has printed its last line. Frozen objects
            # are left to the operating system; files and processes were closed by then.
            gc.freeze()


if __name__ == "__main__":
    sys.exit(main())
