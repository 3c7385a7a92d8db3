"""The instructor's `bertlab` commands, added to the student CLI through the ``bertlab.commands``
entry point (see bertlab/cli.py): demo, grade, grade-one, doctor, release, audit.
(Kit developers regenerate the checkout's exercises/ with tools/build_exercises.py.)"""

from __future__ import annotations

import argparse
from pathlib import Path


def _cmd_demo(args) -> int:
    from bertlab_grader.demo import run_demo

    return run_demo(keep=args.keep, workers=args.workers, unsafe_no_sandbox=args.unsafe_no_sandbox)


def _cmd_release(args) -> int:
    from bertlab_grader.release import release

    release(Path(args.out), force=args.force)  # a ReleaseError is a UsageError: one line, exit 2
    return 0


def _cmd_grade(args) -> int:
    from bertlab_grader.runner import grade_course

    return grade_course(Path(args.course), assignment=args.assignment, workers=args.workers, db_url=args.db_url,
                        regrade=args.regrade or (), regrade_all=args.regrade_all,
                        unsafe_no_sandbox=args.unsafe_no_sandbox)


def _cmd_grade_one(args) -> int:
    from bertlab_grader.runner import grade_one_command

    return grade_one_command(Path(args.submission), as_json=args.json, student=args.student,
                             unsafe_no_sandbox=args.unsafe_no_sandbox)


def _cmd_doctor(args) -> int:
    from bertlab_grader.doctor import run_doctor

    return run_doctor(Path(args.course) if args.course else None, assignment=args.assignment, db_url=args.db_url,
                      preflight=not args.no_preflight)


def _cmd_audit(args) -> int:
    from bertlab_grader.audit import run_audit

    return run_audit(only=args.only, workers=args.workers)


def _grading_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--unsafe-no-sandbox", action="store_true",
                   help="grade WITHOUT bubblewrap isolation (student code can read and write what you can); "
                        "recorded in every results.json")


def register(sub) -> None:
    """Add the instructor commands to the `bertlab` sub-command parser ``sub``."""
    p = sub.add_parser("demo", help="[instructor] grade the embedded demo cohort end to end (offline) and print "
                                    "the gradebook")
    p.add_argument("--keep", metavar="DIR", help="build the demo course in DIR and keep it (default: a temp dir)")
    p.add_argument("--workers", type=int, default=None, help="parallel graders (default: number of cores)")
    _grading_flags(p)
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("grade", help="[instructor] grade every COURSE/submitted/<student>/<assignment>/ (resumable)")
    p.add_argument("course", help="nbgrader course directory")
    p.add_argument("--assignment", default="week7")
    p.add_argument("--workers", type=int, default=None, help="parallel graders (default: number of cores)")
    p.add_argument("--db-url", default=None, help="gradebook SQLAlchemy URL (default: the course's nbgrader config)")
    p.add_argument("--regrade", nargs="+", metavar="ID", help="grade these students again even if unchanged")
    p.add_argument("--regrade-all", action="store_true", help="grade every submission again")
    _grading_flags(p)
    p.set_defaults(func=_cmd_grade)

    p = sub.add_parser("grade-one", help="[instructor] grade one submission directory")
    p.add_argument("submission", help="directory with cka.py, pooling.py, siamese.py, retrieval.py")
    p.add_argument("--json", action="store_true", help="print results.json to stdout")
    p.add_argument("--student", default=None, help="student id to record (default: the directory name)")
    _grading_flags(p)
    p.set_defaults(func=_cmd_grade_one)

    p = sub.add_parser("doctor", help="[instructor] check that this machine can grade: bubblewrap, the model, "
                                      "the course, the gradebook, a preflight")
    p.add_argument("course", nargs="?", default=None, help="also check this nbgrader course folder")
    p.add_argument("--assignment", default="week7")
    p.add_argument("--db-url", default=None, help="gradebook SQLAlchemy URL (default: the course's nbgrader config)")
    p.add_argument("--no-preflight", action="store_true", help="skip grading the reference in the sandbox (~20 s)")
    p.set_defaults(func=_cmd_doctor)

    p = sub.add_parser("release", help="[instructor] write the student bundle (no solutions, hidden tests or mutants)")
    p.add_argument("out", help="output directory")
    p.add_argument("--force", action="store_true",
                   help="replace an earlier bundle at OUT (refused while it holds a student's changes)")
    p.set_defaults(func=_cmd_release)

    p = sub.add_parser("audit", help="[instructor] grade the mutant bank and the correct variants with the hidden suites")
    p.add_argument("--only", default=None, help="only mutants whose name contains this")
    p.add_argument("--workers", type=int, default=None)
    p.set_defaults(func=_cmd_audit)
