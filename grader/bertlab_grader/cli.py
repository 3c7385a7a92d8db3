"""The instructor's `bertlab` commands, added to the student CLI through the ``bertlab.commands``
entry point (see bertlab/cli.py): demo, grade, grade-one, doctor, release, audit, then what comes after
grading: report, similar, export, gradescope.
(Kit developers regenerate the checkout's exercises/ with tools/build_exercises.py.)"""

from __future__ import annotations

import argparse
from pathlib import Path

from bertlab.tasks import EXERCISE_FILES
from bertlab.handin.ways import DEFAULT_WAY, WAYS


def _cmd_demo(args) -> int:
    from bertlab_grader.commands.demo import run_demo

    return run_demo(keep=args.keep, workers=args.workers, unsafe_no_sandbox=args.unsafe_no_sandbox)


def _cmd_release(args) -> int:
    from bertlab_grader.authoring.release import release

    release(Path(args.out), force=args.force, hand_in=args.hand_in)  # a ReleaseError is a UsageError: exit 2
    return 0


def _course_settings(args):
    """The course a command names, built once from its command line (--assignment, --db-url, and
    --unsafe-no-sandbox where the command has it)."""
    from bertlab_grader.course.settings import CourseSettings

    return CourseSettings(Path(args.course), args.assignment, getattr(args, "db_url", None),
                          getattr(args, "unsafe_no_sandbox", False))


def _cmd_grade(args) -> int:
    from bertlab.errors import UsageError
    from bertlab_grader.course.runner import RunOptions, grade_course

    options = RunOptions(workers=args.workers, regrade=tuple(args.regrade or ()), regrade_all=args.regrade_all,
                         retime=args.retime, scheduler=args.scheduler, cluster=args.cluster)
    if args.watch:
        if options.on_cluster:
            raise UsageError("--watch grades on this machine's warm workers: leave out --scheduler/--cluster "
                             "(a cluster is for batches; docs/cluster.md)")
        from bertlab_grader.course.watch import watch_course

        return watch_course(_course_settings(args), options)
    return grade_course(_course_settings(args), options)


def _cmd_grade_one(args) -> int:
    from bertlab_grader.course.grade_one import grade_one_command

    return grade_one_command(Path(args.submission), as_json=args.json, student=args.student,
                             unsafe_no_sandbox=args.unsafe_no_sandbox)


def _cmd_doctor(args) -> int:
    from bertlab_grader.commands.doctor import run_doctor

    if args.scheduler:
        from bertlab_grader.commands.doctor import run_cluster_doctor

        return run_cluster_doctor(args.scheduler, assignment=args.assignment)
    return run_doctor(_course_settings(args) if args.course else None, preflight=not args.no_preflight)


def _cmd_audit(args) -> int:
    from bertlab_grader.authoring.audit import run_audit

    return run_audit(only=args.only, workers=args.workers)


def _cmd_new_task(args) -> int:
    from bertlab_grader.authoring.task_files import new_task

    new_task(args.name, uses=tuple(args.uses or ()))  # a refused name is a UsageError: one line, exit 2
    return 0


def _cmd_remove_task(args) -> int:
    from bertlab_grader.authoring.task_files import remove_task

    remove_task(args.name)
    return 0


def _cmd_gradescope(args) -> int:
    from bertlab_grader.export.gradescope.archive import gradescope_command

    return gradescope_command(args.out, wheelhouse=args.wheelhouse, download=args.download,
                              kit_wheel_only=args.kit_wheel_only, python_version=args.python_version,
                              torch_version=args.torch, visibility=args.visibility,
                              require_sandbox=args.require_sandbox, force=args.force)


def _cmd_export(args) -> int:
    from bertlab_grader.export.lms import run_export

    return run_export(_course_settings(args), args.format, Path(args.out), Path(args.roster) if args.roster else None,
                      id_column=args.id_column, column=args.column)


def _grading_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--unsafe-no-sandbox", action="store_true",
                   help="grade WITHOUT bubblewrap isolation (student code can read and write what you can); "
                        "recorded in every results.json")


def register(sub) -> None:
    """Add the instructor commands to the `bertlab` sub-command parser ``sub``."""
    from bertlab_grader.course.nbgrader_main import skip_iri_formats

    skip_iri_formats()  # a second sooner wherever a command reads the course's nbgrader configuration
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
    p.add_argument("--retime", action="store_true",
                   help="time every submission graded now again, instead of reusing the speed measured "
                        "for identical files (COURSE/.bertlab/timings-<assignment>.json)")
    p.add_argument("--watch", action="store_true",
                   help="after grading what is pending, keep the workers warm and grade each new or changed "
                        "hand-in seconds after it arrives, until Ctrl-C")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="ADDRESS", default=None,
                       help="grade on the Dask workers of this scheduler (tcp://HOST:PORT or tls://...; "
                            "pip install 'bertlab[cluster]'; docs/cluster.md)")
    where.add_argument("--cluster", metavar="local:N", default=None,
                       help="start a local Dask cluster of N worker processes for this run (127.0.0.1 only)")
    _grading_flags(p)
    p.set_defaults(func=_cmd_grade)

    p = sub.add_parser("grade-one", help="[instructor] grade one submission directory")
    p.add_argument("submission", help=f"directory with {', '.join(EXERCISE_FILES)}")
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
    p.add_argument("--scheduler", metavar="ADDRESS", default=None,
                   help="instead, check every Dask worker of this scheduler (bubblewrap, the model, a preflight) "
                        "and name each one that cannot grade")
    p.set_defaults(func=_cmd_doctor)

    p = sub.add_parser("release", help="[instructor] write the student bundle (no solutions, hidden tests or mutants)")
    p.add_argument("out", help="output directory")
    p.add_argument("--force", action="store_true",
                   help="replace an earlier bundle at OUT (refused while it holds a student's changes)")
    p.add_argument("--hand-in", choices=sorted(WAYS), default=DEFAULT_WAY,
                   help="how students hand in, written to the bundle's HAND-IN.md, which `bertlab submit` prints: "
                        "upload (the archive on an LMS page; the default), gradescope, or nbgrader (the exchange)")
    p.set_defaults(func=_cmd_release)

    p = sub.add_parser("audit", help="[instructor] grade the mutant bank and the correct variants with the hidden suites")
    p.add_argument("--only", default=None, help="only mutants whose name contains this")
    p.add_argument("--workers", type=int, default=None)
    p.set_defaults(func=_cmd_audit)

    p = sub.add_parser("new-task", help="[instructor] add a task to the kit's checkout: its pieces from templates "
                                        "(a placeholder exercise), registered (docs/authoring.md)")
    p.add_argument("name", help="the task's name, a lower-case Python identifier (e.g. attention_weights)")
    p.add_argument("--uses", action="append", metavar="TASK",
                   help="a task whose module the new task's code imports (repeatable)")
    p.set_defaults(func=_cmd_new_task)

    p = sub.add_parser("remove-task", help="[instructor] remove a task from the kit's checkout: its pieces, its "
                                           "registry entry, its files in the fixtures (docs/authoring.md)")
    p.add_argument("name", help="the task to remove")
    p.set_defaults(func=_cmd_remove_task)

    p = sub.add_parser("gradescope", help="[instructor] write a Gradescope autograder zip that grades uploads with "
                                          "the hidden suites (installs offline from its wheels)")
    p.add_argument("out", metavar="OUT.zip", help="the autograder archive to write")
    p.add_argument("--wheelhouse", metavar="DIR", default=None,
                   help="wheels for Gradescope's image (CPython 3.10, manylinux x86_64, torch's CPU build); "
                        "default: a folder in your cache, filled by --download")
    p.add_argument("--download", action="store_true",
                   help="first download into the wheelhouse what it lacks (needs the internet; once)")
    p.add_argument("--kit-wheel-only", action="store_true",
                   help="carry only the kit's wheel: for an image whose Python already has the dependencies")
    p.add_argument("--visibility", default="visible", choices=("visible", "after_due_date", "after_published", "hidden"),
                   help="when students see the tests and the score (default: visible)")
    p.add_argument("--require-sandbox", action="store_true",
                   help="never grade without bubblewrap: where the container forbids it, nothing is graded")
    p.add_argument("--python-version", default=None, help="Gradescope's python3 (default: 3.10, Ubuntu 22.04's)")
    p.add_argument("--torch", default=None, metavar="VERSION", help="torch's CPU build to install (default: the "
                                                                    "README's pin)")
    p.add_argument("--force", action="store_true", help="replace OUT.zip if it exists")
    p.set_defaults(func=_cmd_gradescope)

    p = sub.add_parser("export", help="[instructor] write the gradebook's grades as a Canvas or Moodle import file, "
                                      "or a plain CSV with one column per task")
    p.add_argument("course", help="nbgrader course directory, graded by `bertlab grade`")
    p.add_argument("--format", required=True, metavar="canvas|moodle|plain",
                   help="canvas: fill a column of a Canvas gradebook export; moodle: a file for Moodle's "
                        "'Import grades from CSV'; plain: student, total, max, one column per task")
    p.add_argument("--roster", metavar="ROSTER.csv", default=None,
                   help="the LMS's CSV export (Canvas gradebook, Moodle grades); needed for canvas and moodle")
    p.add_argument("--out", metavar="FILE.csv", required=True, help="the file to write (never the roster)")
    p.add_argument("--assignment", default="week7")
    p.add_argument("--id-column", default=None, metavar="NAME",
                   help="the roster column holding the course's student ids (default: 'SIS Login ID' for canvas, "
                        "'Email address' for moodle, 'student' for plain)")
    p.add_argument("--column", default=None, metavar="NAME",
                   help="the LMS column to fill (default: the assignment name)")
    p.add_argument("--db-url", default=None, help="gradebook SQLAlchemy URL (default: the course's nbgrader config)")
    p.set_defaults(func=_cmd_export)

    p = sub.add_parser("similar", help="[instructor] the most similar pairs of submissions per task (stub code "
                                       "ignored): evidence to look at, not proof")
    p.add_argument("course", help="nbgrader course directory")
    p.add_argument("--assignment", default="week7")
    p.add_argument("--top", type=int, default=10, metavar="N", help="pairs shown per task (default: 10)")
    p.add_argument("--json", action="store_true", help="print a JSON list of {task, a, b, similarity}")
    p.set_defaults(func=_cmd_similar)

    p = sub.add_parser("report", help="[instructor] write the cohort report: one self-contained HTML page "
                                      "(totals, tasks, hidden tests, named mistakes, ratios, not graded, similar pairs)")
    p.add_argument("course", help="nbgrader course directory, graded by `bertlab grade`")
    p.add_argument("--assignment", default="week7")
    p.add_argument("--out", metavar="PAGE.html", default=None,
                   help="where to write the page (default: COURSE/report-<assignment>.html)")
    p.add_argument("--no-similar", action="store_true",
                   help="leave out the similar-pairs section (its most expensive part: minutes for 2,000 students)")
    p.set_defaults(func=_cmd_report)


def _cmd_similar(args) -> int:
    from bertlab_grader.reporting.similarity import similar_command

    return similar_command(_course_settings(args), top=args.top, as_json=args.json)


def _cmd_report(args) -> int:
    from bertlab_grader.reporting.report import report_command

    return report_command(_course_settings(args), out=Path(args.out) if args.out else None,
                          similar=not args.no_similar)
