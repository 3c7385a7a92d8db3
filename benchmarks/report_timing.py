"""How long `bertlab report` takes for a synthetic cohort of 100 and of 2,000 students.

    python benchmarks/report_timing.py [--sizes 100 2000] [--keep DIR] [--similar]

Nothing is graded: each course is built through ``bertlab_grader.course`` (config, gradebook) as ``bertlab grade`` leaves
one (``init_course``, ``record_result`` per student, ``export_grades`` for grades.csv, and the run
summary ``course/summary.py``'s ``write_last_run`` keeps), from synthetic results over the real hidden tests' names
and points, with the named mistakes of ``bertlab.mistakes`` and performance ratios. A few students
are left ungraded by "the grader", and one folder under submitted/ holds no submission.

Prints, per size: the time to write the report (wall and this process's CPU time), the page's size,
and, with --similar, the similarity section's own time (``similar_pairs``; without --similar the
report is written with ``--no-similar``, since the synthetic files are not code worth comparing).
Never asserts a time. ``build_course`` is also how tests/test_report.py builds its course.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(KIT_ROOT))

ASSIGNMENT = "week7"

# outcome of a test that does not pass, by kind of student slip
_NOT_PASSED = (("failed", 0.75), ("error", 0.2), ("timeout", 0.05))


def real_layout() -> dict[str, list[tuple[str, float]]]:
    """task -> [(hidden test name, points)], collected from the kit's hidden suites (a few seconds)."""
    from bertlab_grader.grading.scoring import points_by_test

    return points_by_test()


def synthetic_result(student: str, layout: dict[str, list[tuple[str, float]]], rng: random.Random) -> dict:
    """A plausible results.json for one student: an ability drawn per student, per task a chance of a
    named mistake (``bertlab.mistakes``, put on that task's failing tests as the kit's hints are) and
    per performance test a time ratio (only a right answer is timed, as in the kit)."""
    from bertlab.mistakes import of_task
    from bertlab_grader.performance.timing import points_fraction

    ability = rng.betavariate(4, 1.6)
    tests = []
    for task, entries in layout.items():
        mistakes = of_task(task)
        mistake = rng.choice(mistakes) if mistakes and rng.random() > ability else None
        for name, points in entries:
            if task == "performance":
                if rng.random() < 0.15 * (1.2 - ability):
                    tests.append({"name": name, "task": task, "outcome": "failed", "points": 0.0,
                                  "max_points": points, "message": "the result on the timing input was wrong"})
                    continue
                ratio = round(rng.lognormvariate(0.4 + 1.2 * (1 - ability), 0.8), 3)
                fraction = points_fraction(ratio)
                tests.append({"name": name, "task": task, "outcome": "passed" if fraction else "failed",
                              "points": points * fraction, "max_points": points, "ratio": ratio,
                              "message": f"took {ratio:.1f}x the reference's time"})
                continue
            passes = rng.random() < (0.55 + 0.45 * ability) * (0.7 if mistake else 1.0)
            if passes:
                tests.append({"name": name, "task": task, "outcome": "passed", "points": points,
                              "max_points": points, "message": ""})
                continue
            outcome = rng.choices([o for o, _ in _NOT_PASSED], [w for _, w in _NOT_PASSED])[0]
            test = {"name": name, "task": task, "outcome": outcome, "points": 0.0, "max_points": points,
                    "message": f"synthetic {outcome}"}
            if mistake is not None and outcome == "failed":
                test["hint"] = mistake.hint
            tests.append(test)
    return {"student": student, "assignment": ASSIGNMENT, "tests": tests}


def build_course(course: Path, n: int, *, seed: int = 0, layout=None, not_graded: int | None = None,
                 students: list[str] | None = None, refused: dict[str, str] | None = None) -> dict:
    """Build a graded-looking course of ``n`` students (ids ``s0000``... or ``students``) in ``course``.

    The last ``not_graded`` students (default: 1 in 50, at least 1) hand in files but "the grader failed"
    on them: no results.json, a cause in the run summary. ``refused`` ({student: why}) adds submissions
    recorded as the kit records a refused zip (``course.error_result``: zero). One folder,
    ``submitted/zz-loose-files``, holds files in the wrong place (a layout problem). Returns
    {"results": {student: result}, "not_graded": {student: cause}, "layout": [LayoutProblem]}.
    """
    from bertlab_grader.course.results import error_result
    from bertlab_grader.course.gradebook import export_grades, keep_gradebook_open, record_result
    from bertlab_grader.course.config import init_course
    from bertlab_grader.course.summary import RunSummary, write_last_run
    from bertlab_grader.course.settings import CourseSettings
    from bertlab_grader.course.submissions import scan_submitted

    rng = random.Random(seed)
    layout = layout or real_layout()
    students = students or [f"s{i:04d}" for i in range(n)]
    if not_graded is None:
        not_graded = max(1, n // 50)
    graded, failed = students[:len(students) - not_graded], students[len(students) - not_graded:]
    for student in students:
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cka.py").write_text(f"# {student}\nimport torch\n", encoding="utf-8")
    loose = course / "submitted" / "zz-loose-files"
    loose.mkdir(parents=True, exist_ok=True)
    (loose / "cka.py").write_text("# handed in without the week7/ folder\n", encoding="utf-8")

    max_points = {task: sum(p for _, p in entries) for task, entries in layout.items()}
    settings = CourseSettings(course, ASSIGNMENT)
    init_course(settings, max_points)
    results = {}
    with keep_gradebook_open(settings):
        for student in graded:
            results[student] = synthetic_result(student, layout, rng)
            record_result(settings, results[student])
        for student, why in (refused or {}).items():
            (course / "submitted" / student).mkdir(parents=True, exist_ok=True)
            (course / "submitted" / student / f"{ASSIGNMENT}.zip").write_bytes(b"not a zip")
            results[student] = error_result(student, ASSIGNMENT, why, max_points)
            record_result(settings, results[student])
    export_grades(settings)

    causes = {s: f"the sandbox could not start: bwrap: synthetic failure #{i}\n(second line of the cause)"
              for i, s in enumerate(failed)}
    problems = scan_submitted(CourseSettings(course, ASSIGNMENT))[1]  # the loose folder, as `bertlab grade` finds it
    summary = RunSummary(graded=list(graded) + list(refused or {}), not_graded=dict(causes), layout=problems)
    write_last_run(CourseSettings(course, ASSIGNMENT), summary)
    return {"results": results, "not_graded": causes, "layout": problems}


def _measure(call):
    wall, cpu = time.perf_counter(), time.process_time()
    value = call()
    return value, time.perf_counter() - wall, time.process_time() - cpu


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 2000])
    parser.add_argument("--keep", type=Path, default=None, help="build the courses in DIR and keep them")
    parser.add_argument("--similar", action="store_true", help="also time the similar-pairs section")
    args = parser.parse_args(argv)
    from bertlab_grader.reporting.report import write_report

    layout = real_layout()
    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep or Path(tmp)
        for n in args.sizes:
            course = base / f"course-{n}"
            _, build_wall, build_cpu = _measure(lambda: build_course(course, n, seed=n, layout=layout))
            print(f"{n} students: course built in {build_wall:.1f} s (not part of the figure)", flush=True)
            (path, context), wall, cpu = _measure(lambda: write_report(course, ASSIGNMENT, similar=False))
            # a second run: the first pays the imports (nbformat, jinja2, nbgrader's course module)
            _, wall2, cpu2 = _measure(lambda: write_report(course, ASSIGNMENT, similar=False))
            print(f"  report (--no-similar): first {wall:.2f} s wall, {cpu:.2f} s CPU; again {wall2:.2f} s wall, "
                  f"{cpu2:.2f} s CPU; page {path.stat().st_size / 1024:.0f} KiB; "
                  f"{context['n']} graded, {context['not_graded']['count']} not graded", flush=True)
            if args.similar:
                from bertlab_grader.reporting.similarity import similar_pairs

                pairs, wall, cpu = _measure(lambda: similar_pairs(course, ASSIGNMENT, top=10))
                print(f"  similar_pairs: {wall:.2f} s wall, {cpu:.2f} s CPU, {len(pairs)} pairs", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
