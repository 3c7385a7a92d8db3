"""The `bertlab` command: argument parsing and dispatch only; each command lives in its own module.

The student commands (check, lesson) are defined here. Other packages add commands through the
``bertlab.commands`` entry-point group: each entry point names a function ``register(subparsers)``
that adds its sub-commands. The instructor kit (bertlab_grader) adds the grading commands this way,
so the student bundle, which does not contain it, shows only the student commands.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Optional

from .errors import ReportedError
from .tasks import EXERCISE_MODULES, EXERCISE_TASKS, exercise

COMMANDS_GROUP = "bertlab.commands"
DESCRIPTION = ("bertlab: the week-7 transfer-learning exercises (CKA, pooling, Sentence-BERT, semantic search). "
               "Write your code in exercises/, then run `bertlab check` to see what passes and what to do next.")


def _cmd_check(args) -> int:
    from .check import run_check

    return run_check(task=args.task, impl=args.impl, verbose=args.verbose,
                     directory=Path(args.dir) if args.dir else None)


def _cmd_lesson(args) -> int:
    from .headline import format_figures, lesson_figures
    from .implementations import load_directory, load_implementation
    from .workspace import find_workspace

    folder = None
    if args.reference:
        impl = load_implementation("reference")
    else:
        folder = find_workspace(Path(args.dir) if args.dir else None).exercises
        impl = load_directory(folder)
    try:
        figures = lesson_figures(impl, full=not args.quick)
    except NotImplementedError as exc:  # a stub, or the student's own: one line saying what to do
        raise ReportedError(_not_implemented_line(exc, folder)) from exc
    print(format_figures(figures))
    return 0


def _not_implemented_line(exc: NotImplementedError, folder: Optional[Path]) -> str:
    """What `bertlab lesson` says when the code it runs reaches a NotImplementedError: the task and
    function a stub names (a plain NotImplementedError: the exercise file it was raised in)."""
    task, function = getattr(exc, "task", None), getattr(exc, "function", None)
    if task is None:  # the student's own: name the exercise file it came from, if it did
        tb, files = exc.__traceback__, set(EXERCISE_MODULES)
        while tb is not None:
            path = Path(tb.tb_frame.f_code.co_filename)
            if path.stem in files and (folder is None or path.parent.resolve() == folder.resolve()):
                task, function = EXERCISE_TASKS[EXERCISE_MODULES.index(path.stem)], tb.tb_frame.f_code.co_name
            tb = tb.tb_next
    where = f"{folder.name if folder else 'exercises'}/{exercise(task).filename}" if task else "your exercises"
    what = f"{function} in {where}" if function else where
    if task is None:
        return (f"your code raised NotImplementedError ({exc}): the lesson needs all four tasks. "
                "Run `bertlab check` to see which one is not finished.")
    return (f"task {task} is not implemented yet: {what} still raises NotImplementedError. Write it (see its "
            f"docstring), then run `bertlab check --task {task}`; the lesson needs all four tasks.")


def add_student_commands(sub) -> None:
    p = sub.add_parser("check", help="run the public tests on your exercises, task by task, and say what to do next")
    p.add_argument("--task", choices=EXERCISE_TASKS, help="only this task")
    p.add_argument("--dir", metavar="DIR", help="your exercises folder (default: found from the working directory)")
    p.add_argument("-v", "--verbose", action="store_true", help="show every test, not just the first failure")
    p.add_argument("--impl", default="exercises", help=argparse.SUPPRESS)  # the kit's own tests: 'reference'
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser("lesson", help="compute the lesson's headline figures with your code")
    p.add_argument("--dir", metavar="DIR", help="your exercises folder (default: found from the working directory)")
    p.add_argument("--reference", action="store_true", help="use the reference solutions (instructor kit only)")
    p.add_argument("--quick", action="store_true", help="skip the STS benchmark (about 10 s)")
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


if __name__ == "__main__":
    sys.exit(main())
