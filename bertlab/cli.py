"""The `bertlab` command: argument parsing and dispatch only; each command lives in its own module.

Instructor commands (grade, release, audit, demo) live in the `grader` package, which the student
bundle does not contain; there they answer with a clear message instead of a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .tasks import EXERCISE_TASKS

KIT_ROOT = Path(__file__).resolve().parent.parent


def _cmd_demo(args) -> int:
    from grader.demo import run_demo

    return run_demo(keep=args.keep, workers=args.workers, unsafe_no_sandbox=args.unsafe_no_sandbox)


def _cmd_check(args) -> int:
    from .check import run_check

    return run_check(task=args.task, impl=args.impl, verbose=args.verbose)


def _cmd_release(args) -> int:
    from grader.release import ReleaseError, release

    try:
        release(Path(args.out), force=args.force)
    except ReleaseError as exc:
        print(f"bertlab release: {exc}", file=sys.stderr)
        return 2
    return 0


def _cmd_grade(args) -> int:
    from grader.runner import grade_course

    return grade_course(Path(args.course), assignment=args.assignment, workers=args.workers, db_url=args.db_url,
                        regrade=args.regrade or (), regrade_all=args.regrade_all,
                        unsafe_no_sandbox=args.unsafe_no_sandbox)


def _cmd_grade_one(args) -> int:
    from grader.runner import grade_one_command

    return grade_one_command(Path(args.submission), as_json=args.json, student=args.student,
                             unsafe_no_sandbox=args.unsafe_no_sandbox)


def _cmd_doctor(args) -> int:
    from grader.doctor import run_doctor

    return run_doctor(Path(args.course) if args.course else None, assignment=args.assignment, db_url=args.db_url,
                      preflight=not args.no_preflight)


def _cmd_audit(args) -> int:
    from grader.audit import run_audit

    return run_audit(only=args.only, workers=args.workers)


def _cmd_build_exercises(args) -> int:
    from .stubgen import build_exercises

    for path in build_exercises(KIT_ROOT, Path(args.out) if args.out else None):
        print(f"wrote {path}")
    return 0


def _cmd_lesson(args) -> int:
    from .headline import format_figures, lesson_figures
    from .implementations import load_implementation

    print(format_figures(lesson_figures(load_implementation(args.impl), full=not args.quick)))
    return 0


def _grading_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--unsafe-no-sandbox", action="store_true",
                   help="grade WITHOUT bubblewrap isolation (student code can read and write what you can); "
                        "recorded in every results.json")
    p.add_argument("--debug", action="store_true", help="show Python tracebacks of errors")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bertlab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="grade the embedded demo cohort end to end (offline) and print the gradebook")
    p.add_argument("--keep", metavar="DIR", help="build the demo course in DIR and keep it (default: a temp dir)")
    p.add_argument("--workers", type=int, default=None, help="parallel graders (default: number of cores)")
    _grading_flags(p)
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("check", help="run the public tests against your exercises/, task by task")
    p.add_argument("--task", choices=EXERCISE_TASKS, help="only this task")
    p.add_argument("--impl", default="exercises", help=argparse.SUPPRESS)
    p.add_argument("-v", "--verbose", action="store_true", help="show every test, not just the first failure")
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser("release", help="write the student bundle (no solutions, hidden tests or mutants)")
    p.add_argument("out", help="output directory")
    p.add_argument("--force", action="store_true",
                   help="replace an earlier bundle at OUT (refused while it holds a student's changes)")
    p.set_defaults(func=_cmd_release)

    p = sub.add_parser("grade", help="grade every COURSE/submitted/<student>/<assignment>/ (resumable)")
    p.add_argument("course", help="nbgrader course directory")
    p.add_argument("--assignment", default="week7")
    p.add_argument("--workers", type=int, default=None, help="parallel graders (default: number of cores)")
    p.add_argument("--db-url", default=None, help="gradebook SQLAlchemy URL (default: the course's nbgrader config)")
    p.add_argument("--regrade", nargs="+", metavar="ID", help="grade these students again even if unchanged")
    p.add_argument("--regrade-all", action="store_true", help="grade every submission again")
    _grading_flags(p)
    p.set_defaults(func=_cmd_grade)

    p = sub.add_parser("grade-one", help="grade one submission directory")
    p.add_argument("submission", help="directory with cka.py, pooling.py, siamese.py, retrieval.py")
    p.add_argument("--json", action="store_true", help="print results.json to stdout")
    p.add_argument("--student", default=None, help="student id to record (default: the directory name)")
    _grading_flags(p)
    p.set_defaults(func=_cmd_grade_one)

    p = sub.add_parser("doctor", help="check that this machine can grade: bubblewrap, the model, the course, "
                                      "the gradebook, a preflight")
    p.add_argument("course", nargs="?", default=None, help="also check this nbgrader course folder")
    p.add_argument("--assignment", default="week7")
    p.add_argument("--db-url", default=None, help="gradebook SQLAlchemy URL (default: the course's nbgrader config)")
    p.add_argument("--no-preflight", action="store_true", help="skip grading the reference in the sandbox (~20 s)")
    p.set_defaults(func=_cmd_doctor)

    p = sub.add_parser("audit", help="grade the mutant bank and the correct variants with the hidden suites")
    p.add_argument("--only", default=None, help="only mutants whose name contains this")
    p.add_argument("--workers", type=int, default=None)
    p.set_defaults(func=_cmd_audit)

    p = sub.add_parser("build-exercises", help="regenerate exercises/ stubs from solutions/")
    p.add_argument("--out", default=None, help="write elsewhere (default: exercises/)")
    p.set_defaults(func=_cmd_build_exercises)

    p = sub.add_parser("lesson", help="compute the lesson's headline figures with an implementation")
    p.add_argument("--impl", default="solutions", help="'solutions', 'exercises' or a directory")
    p.add_argument("--quick", action="store_true", help="skip the STS benchmark (about 10 s)")
    p.set_defaults(func=_cmd_lesson)
    for command in sub.choices.values():  # every command: one line per error, --debug for the traceback
        if not any("--debug" in action.option_strings for action in command._actions):
            command.add_argument("--debug", action="store_true", help="show Python tracebacks of errors")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command. Exit codes: 0 done; 1 the grader failed (some submissions not graded);
    2 a usage or course-layout error (nothing changed). See docs/commands.md."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    args = build_parser().parse_args(argv)
    debug = getattr(args, "debug", False)
    try:
        return int(args.func(args) or 0)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("grader", "solutions"):
            print(f"bertlab {args.command}: this is an instructor command and needs the full kit "
                  f"(module {exc.name!r} is not part of this installation).", file=sys.stderr)
            return 2
        raise
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - one clear line per error; --debug for the traceback
        code, text, known = _error_line(exc)
        if debug:
            import traceback

            traceback.print_exc()
        print(f"bertlab {args.command}: {text}", file=sys.stderr)
        if not known and not debug:
            print("  (an internal error: rerun with --debug for the traceback)", file=sys.stderr)
        return code


def _error_line(exc: BaseException) -> tuple[int, str, bool]:
    """(exit code, message, whether it is an error the kit reports on purpose) for an error that
    ended a command: UsageError exits 2, GraderFailure 1, anything else is an internal error (1)."""
    try:
        from grader.failures import GraderFailure, UsageError
    except ImportError:  # the student bundle: no grader
        return 1, f"{type(exc).__name__}: {exc}", False
    if isinstance(exc, UsageError):
        return 2, str(exc), True
    if isinstance(exc, GraderFailure):
        return 1, str(exc), True
    return 1, f"{type(exc).__name__}: {exc}", False


if __name__ == "__main__":
    sys.exit(main())
