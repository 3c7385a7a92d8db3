"""Identical submissions, identical grades: the same few submissions graded many times over, within
one cohort and across runs, with the grader's workers busy.

    python benchmarks/repeat_grading.py [--copies 20] [--runs 2] [--workers 2] [--no-record]

The first run builds a course holding COPIES copies of every probe submission and grades it with
`bertlab grade` (sandboxed, WORKERS parallel graders); each later run grades the same course again, as
`bertlab grade --regrade-all` does. As `bertlab grade` does, the copies of a submission share one
speed measurement (grader/bertlab_grader/performance/record.py). With --no-record the grader keeps no record: every
grading of every copy measures its speed afresh (and each run starts from a fresh course), which shows
the spread of the measurement itself. The probe submissions: the reference, the two
correct-but-slower variants of the bank (var_pool_loop, var_ret_loop: the half band), and the
correct submissions of the outside bank (tests/outside_bank/correct_*: written apart from the kit).

Prints, per submission and task, every distinct point total seen over all copies and runs (one
value each is the goal in every correctness task: "spread 0"), and per performance test the range of
measured time ratios. Exit code 0 iff every submission got identical points in every correctness task
and performance points within 0.1 a speed test (results.SPEED_POINTS_SPREAD: the speed points follow
each measurement's ratio on a continuous curve).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(KIT_ROOT))

ASSIGNMENT = "week7"
OUTSIDE_BANK = KIT_ROOT / "tests" / "outside_bank"
VARIANTS = ("var_pool_loop", "var_ret_loop")


def probe_submissions() -> dict[str, dict[str, str]]:
    """name -> {filename: source} of every submission whose grades must repeat."""
    from bertlab_grader.core.locations import reference_sources
    from bertlab_grader.mutants.bank import load_bank

    found = {"reference": reference_sources()}
    for entry in load_bank(kinds=("variant",)):
        if entry.name in VARIANTS:
            found[entry.name] = {p.name: p.read_text() for p in sorted(entry.path.glob("*.py"))}
    for folder in sorted(OUTSIDE_BANK.glob("correct_*")):
        found[folder.name] = {p.name: p.read_text() for p in sorted(folder.glob("*.py"))}
    return found


def grade_once(submissions: dict, copies: int, workers: int, workdir: Path, record: bool) -> tuple[float, dict]:
    from bertlab_grader.course.results import load_results
    from bertlab_grader.course.runner import RunOptions, grade_course
    from bertlab_grader.course.settings import CourseSettings

    course = workdir / "course"
    regrade = course.exists() and record  # later runs regrade the same course, as --regrade-all does
    if not regrade:
        shutil.rmtree(course, ignore_errors=True)
        for name, files in submissions.items():
            for i in range(copies):
                folder = course / "submitted" / f"{name}--{i:02d}" / ASSIGNMENT
                folder.mkdir(parents=True)
                for filename, text in files.items():
                    (folder / filename).write_text(text)
    start = time.monotonic()
    # grade_copies_once=False: every copy is graded (and, without the record, timed) on its own; that
    # spread is what this benchmark measures.
    code = grade_course(CourseSettings(course, ASSIGNMENT),
                        RunOptions(workers=workers, quiet=True, regrade_all=regrade, keep_timings=record,
                                   grade_copies_once=False))
    elapsed = time.monotonic() - start
    if code != 0:
        raise SystemExit(f"bertlab grade exited {code}: not every submission was graded")
    return elapsed, load_results(CourseSettings(course, ASSIGNMENT))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=20, help="copies of each submission per cohort")
    parser.add_argument("--runs", type=int, default=2, help="cohorts graded one after the other")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-record", action="store_true",
                        help="keep no timing record: every grading measures afresh (the protocol's own spread)")
    args = parser.parse_args(argv)

    submissions = probe_submissions()
    points = defaultdict(lambda: defaultdict(set))     # name -> task -> {points}
    ratios = defaultdict(lambda: defaultdict(list))    # name -> test -> [ratio]
    seconds = []
    workdir = Path(tempfile.mkdtemp(prefix="bertlab-repeat-"))
    try:
        for _ in range(args.runs):
            elapsed, results = grade_once(submissions, args.copies, args.workers, workdir, not args.no_record)
            seconds.append(round(elapsed, 1))
            for student, result in results.items():
                name = student.rsplit("--", 1)[0]
                by_task = defaultdict(float)
                for test in result["tests"]:
                    by_task[test["task"]] += test["points"]
                    if "ratio" in test:
                        ratios[name][test["name"]].append(test["ratio"])
                for task, total in by_task.items():
                    points[name][task].add(round(total, 3))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    graded = args.copies * args.runs
    report = {"copies_per_cohort": args.copies, "runs": args.runs, "workers": args.workers,
              "timing_record": not args.no_record,
              "gradings_per_submission": graded, "seconds_per_run": seconds, "submissions": {}}
    from bertlab_grader.course.results import SPEED_POINTS_SPREAD

    identical = True
    for name in submissions:
        tasks = {task: sorted(values) for task, values in sorted(points[name].items())}
        spread = {task: round(max(v) - min(v), 3) for task, v in tasks.items()}
        # Correctness tasks: the same points exactly. Performance: the speed points follow each grading's
        # own measured ratio on a continuous curve, so the goal there is SPEED_POINTS_SPREAD a test.
        speed_tests = max(len(ratios[name]), 1)
        identical &= all(s == 0 if task != "performance" else s <= SPEED_POINTS_SPREAD * speed_tests + 1e-9
                         for task, s in spread.items())
        report["submissions"][name] = {
            "points": {task: v[0] if len(v) == 1 else v for task, v in tasks.items()},
            "spread": spread,
            "ratio_range": {test.removeprefix("test_").removesuffix("_speed"): [min(r), max(r)]
                            for test, r in sorted(ratios[name].items())},
        }
    report["identical_points_everywhere"] = identical
    print(json.dumps(report, indent=1))
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
