"""Cohort benchmark: `bertlab grade` against plain sequential `nbgrader autograde`, same cohort, same run.

    python benchmarks/cohort_benchmark.py [--cohort distinct|copies] [--workers 2] [--baseline-n 10] [--no-floor | --only-floor] [--stages 4]

**The cohort.** By default (``--cohort distinct``) a class as it hands in: no two submissions alike.
Every mutant and every correct variant of the kit's bank, every entry of the outside bank (correct
code in other styles, wrong code found in other people's repositories, hostile code), a broken file
per task (a syntax error) and a few of the red team's cheap hostile submissions, each on the
reference's other files. ``--cohort copies`` is the older cohort, about 60% exact copies of the
solution: `bertlab grade` grades identical files once, so it says what copies cost ("copies graded
once"), not what a class costs.

**The three figures**, measured in the same run:
- `bertlab grade` (sandboxed, warm parallel workers), wall time with start-up, export and feedback;
- plain nbgrader: `nbgrader autograde` executing, one after the other, a notebook that imports the
  student's modules into its own kernel and runs the same hidden suites there (no sandbox; a fresh
  kernel, torch import and model load per student), on ``--baseline-n`` submissions spread over the
  cohort (it is slow); the ratio compares seconds per submission;
- the cohort's own compute floor: the same suites on the same submissions in one warm process, with
  no sandbox, no hints and nothing recorded (the hostile ones are left out of it: they would end this
  process; the floor is given per submission). Each call of a submission runs at most the grader's
  call limit and one that ran out is not made again, as in the sandbox (benchmarks/floor_limit.py):
  nothing else stops a Python loop over the memory test's corpus. One torch thread. It is
  given twice: the four correctness tasks alone, and with the performance task, timed in process
  (its pairs of calls are the suites' own work too). Times the workers: with 2 workers, a floor of F s
  per submission is F/2 s of wall time per submission.

**Where the time goes**, in the same run:
- the `bertlab grade` run in phases: start-up (to the first result recorded), grading, the main
  process's recording within it, and nbgrader's export and feedback after the last result;
- the real grader split by stage (``--stages K``, default every 4th submission): each graded in one
  warm sandbox as a worker grades it, one core, with the grader's own functions timed in this
  process: session starts, calls over the wire (the submission's compute included), the tests' own
  work, the performance task, hints and pytest's own run, per submission. Compare "total" with the
  floor per submission, one core.

**The projection** for 10,000 submissions on 16 and 64 worker cores and 100,000 on 256 (``projection``),
from this run's start-up, grading cost per submission and core, export and feedback per student and
core (split over the main host's ``--main-host-cores``), and the single writer's rate measured here on
SQLite and PostgreSQL (``--records``); each input is printed with where it was measured.

Prints seconds per submission, the ratio to plain nbgrader, the floor and the ratio to it, the phases,
the stages and the projection, and with --every-copy the time of grading each copy on its own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import nbformat

KIT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(KIT_ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # grading_floor.py

from bertlab_grader.core.locations import reference_sources  # noqa: E402

ASSIGNMENT = "week7"


def solution_copies(cohort: dict[str, dict[str, str]]) -> list[str]:
    """The students of ``cohort`` whose files are exactly the solutions (they must get full marks)."""
    solution = reference_sources()
    return [student for student, files in cohort.items() if files == solution]


# The red team's hostile submissions cheap enough for a cohort (no endless loop, fork bomb or memory hog):
# each file of theirs over the reference's others.
CHEAP_HOSTILE = ("exit_at_import", "exit_in_call", "always_equal", "fake_probe", "monkeypatch")


def distinct_cohort() -> tuple[dict[str, dict[str, str]], set[str]]:
    """(student -> {filename: source}, the hostile students): a class as it hands in, no two alike."""
    import importlib.util

    from bertlab.tasks import EXERCISE_FILES
    from bertlab_grader.mutants.bank import load_bank

    solution = reference_sources()
    cohort: dict[str, dict[str, str]] = {}
    for entry in load_bank():  # every mutant and variant: its one changed file over the reference
        cohort[entry.name] = {**solution, entry.file: (entry.path / entry.file).read_text()}
    spec = importlib.util.spec_from_file_location("outside_bank", KIT_ROOT / "tests" / "test_outside_bank.py")
    outside = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(outside)
    hostile = set()
    for name, entry in outside.ENTRIES.items():
        cohort[f"ob_{name}"] = {**solution, **outside.submission_sources(name)}
        if entry["kind"] == "hostile":
            hostile.add(f"ob_{name}")
    for name in EXERCISE_FILES:  # a file that does not parse, a different one per task
        cohort[f"broken_{name[:-3]}"] = {**solution, name: solution[name] + f"\ndef unfinished_{name[:-3]}(:\n"}
    for name in CHEAP_HOSTILE:
        folder = KIT_ROOT / "tests" / "redteam_submissions" / name
        cohort[f"rt_{name}"] = {**solution, **{p.name: p.read_text() for p in folder.glob("*.py")}}
        hostile.add(f"rt_{name}")
    texts = [json.dumps(files, sort_keys=True) for files in cohort.values()]
    assert len(set(texts)) == len(texts), "two submissions of the distinct cohort are alike"
    return cohort, hostile


def compute_floor(cohort: dict[str, dict[str, str]], hostile: set[str], workdir: Path) -> dict:
    """The hidden suites on each non-hostile submission, in this one warm process on one torch thread
    (no sandbox, no hints, nothing recorded), after a rehearsal; each call of a submission runs at most
    the grader's call limit, and one that ran out is not made again (floor_limit.py). The performance
    task runs too, in process (``compare_speed``'s pairs, the reference beside the submission): its
    seconds are counted apart, so the floor is given with and without it. Returns {"correctness_s",
    "performance_s" (per submission, one core), "measured", "stopped" (calls stopped at the limit)}."""
    import torch

    import floor_limit  # benchmarks/floor_limit.py (this folder is on sys.path)
    from bertlab.implementations import load_directory
    from bertlab.tasks import PERFORMANCE
    from bertlab_grader.grading.scoring import run_hidden_suite

    torch.set_num_threads(1)  # one core, as a grader worker: the floor is given per core
    counted = ["-p", "floor_limit"]
    run_hidden_suite(load_directory(_folder(workdir / "floor", "rehearsal", reference_sources())),
                     student="rehearsal", hints=False, extra_pytest_args=counted)
    floor_limit.STOPPED.clear()
    floor_limit.SECONDS.clear()
    measured, seconds, stopped = 0, 0.0, []
    for student, files in cohort.items():
        if student in hostile:
            continue
        folder = _folder(workdir / "floor", student, files)
        start = time.perf_counter()
        try:
            impl = load_directory(folder)
            floor_limit.limit_calls(impl)
            run_hidden_suite(impl, student=student, hints=False, extra_pytest_args=counted)
        except Exception:  # noqa: BLE001 - a file that does not import: the suites never run, as for a grader
            pass
        seconds += time.perf_counter() - start
        measured += 1
        stopped += [f"{student}: {name}" for name in floor_limit.STOPPED]
        floor_limit.STOPPED.clear()
    performance = floor_limit.SECONDS.get(PERFORMANCE, 0.0)
    return {"correctness_s": (seconds - performance) / max(measured, 1),
            "performance_s": performance / max(measured, 1), "measured": measured, "stopped": stopped}


def _folder(base: Path, student: str, files: dict[str, str]) -> Path:
    folder = base / student
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def build_cohort(n: int, seed: int = 0) -> dict[str, dict[str, str]]:
    """student -> {filename: source}: about 60% solution copies, 30% mutants, 10% broken."""
    rng = random.Random(seed)
    solution = reference_sources()
    from bertlab_grader.mutants.bank import load_bank

    mutants = [e.path / e.file for e in load_bank(kinds=("mutant",))]  # each mutant's one changed file
    cohort = {}
    for i in range(n):
        files = dict(solution)
        kind = rng.random()
        if kind < 0.3 and mutants:
            changed = rng.choice(mutants)
            files[changed.name] = changed.read_text()
        elif kind < 0.4:
            files[rng.choice(sorted(files))] = "def oops(:\n    pass\n"  # a syntax error
        cohort[f"s{i:03d}"] = files
    return cohort


def write_submissions(course: Path, cohort: dict, notebook: nbformat.NotebookNode | None = None) -> None:
    for student, files in cohort.items():
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (folder / name).write_text(text)
        if notebook is not None:
            nbformat.write(notebook, folder / f"{ASSIGNMENT}.ipynb")


def baseline_notebook(max_points: dict[str, float]) -> nbformat.NotebookNode:
    """An nbgrader notebook that grades the modules next to it, in its own kernel, with the hidden suites."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    setup = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(KIT_ROOT)!r})\n"
        "from bertlab.implementations import load_directory\n"
        "from bertlab_grader.grading.scoring import run_hidden_suite\n"
        "try:\n"
        "    result = run_hidden_suite(load_directory(os.getcwd()), student='student', assignment='week7')\n"
        "except Exception as exc:  # a module that does not import: no points anywhere\n"
        "    result = {'tests': []}\n"
        "def task_points(task):\n"
        "    return sum(t['points'] for t in result['tests'] if t['task'] == task)\n"
    )
    cell = nbformat.v4.new_code_cell(setup)
    cell.metadata["nbgrader"] = {"grade": False, "solution": False, "locked": True, "grade_id": "setup",
                                 "schema_version": 3}
    nb.cells.append(cell)
    for task, points in max_points.items():
        cell = nbformat.v4.new_code_cell(f"assert task_points({task!r}) == {points!r}, task_points({task!r})")
        cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "grade_id": task,
                                     "points": points, "schema_version": 3}
        nb.cells.append(cell)
    return nb


def run_baseline(cohort: dict, max_points: dict[str, float], workdir: Path) -> tuple[float, dict[str, float]]:
    """Seconds for `nbgrader autograde` over the cohort (sequential, one kernel per student), and the
    scores it gave (from `nbgrader export`), to check that the baseline really graded."""
    course = workdir / "nbgrader-course"
    (course / "source" / ASSIGNMENT).mkdir(parents=True)
    nb = baseline_notebook(max_points)
    nbformat.write(nb, course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    (course / "nbgrader_config.py").write_text(
        "c = get_config()\nc.CourseDirectory.root = %r\nc.ExecutePreprocessor.timeout = 600\n" % str(course))
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", ASSIGNMENT, "--force"],
                   cwd=course, check=True, capture_output=True)
    for student in cohort:
        subprocess.run([sys.executable, "-m", "nbgrader", "db", "student", "add", student], cwd=course,
                       check=True, capture_output=True)
    write_submissions(course, cohort, nb)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", ASSIGNMENT, "--force"], cwd=course,
                          capture_output=True, text=True)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
    subprocess.run([sys.executable, "-m", "nbgrader", "export", "--to=grades.csv"], cwd=course, check=True,
                   capture_output=True)
    import csv

    with open(course / "grades.csv", newline="") as handle:
        scores = {row["student_id"]: float(row["score"]) for row in csv.DictReader(handle)}
    return elapsed, scores


def run_bertlab(cohort: dict, workers: int, workdir: Path, every_copy: bool = False,
                phases: dict | None = None) -> tuple[float, dict, int]:
    """Seconds for `bertlab grade` (worker start-up and the preflight included), the results, and the
    exit code (0: every submission graded; see docs/commands.md). ``every_copy``: grade each copy of
    the same files on its own, as if no two students handed in identical files. ``phases``, when
    given, is filled with the run's phases in wall seconds (``run_phases``)."""
    from bertlab_grader.course import results as course_results
    from bertlab_grader.course.runner import RunOptions, grade_course
    from bertlab_grader.course.settings import CourseSettings

    course = workdir / ("bertlab-course-every-copy" if every_copy else "bertlab-course")
    write_submissions(course, cohort)
    with contextlib.ExitStack() as stack:
        marks = stack.enter_context(_phase_marks()) if phases is not None else None
        start = time.monotonic()
        code = grade_course(CourseSettings(course, ASSIGNMENT),
                            RunOptions(workers=workers, quiet=True, grade_copies_once=not every_copy))
        elapsed = time.monotonic() - start
    if phases is not None:
        phases.update(run_phases(marks, start, elapsed))
    return elapsed, course_results.load_results(CourseSettings(course, ASSIGNMENT)), code


@contextlib.contextmanager
def _phase_marks():
    """While open, the main process's recording and its export-and-feedback are timed (the grader's
    own functions wrapped in this process; nothing of the grader changes): {"records": [(start, end)]
    of each result handed to the run's writer, "writes": [(start, end)] of everything the writer did
    (journal lines, gradebook batches), "export_feedback": [(start, end)]}, monotonic seconds."""
    from bertlab_grader.course import gradebook, journal

    marks: dict[str, list] = {"records": [], "writes": [], "export_feedback": []}
    originals = []

    def timed(owner, name: str, *keys: str):
        original = getattr(owner, name)
        originals.append((owner, name, original))

        def wrapper(*args, **kwargs):
            begun = time.monotonic()
            try:
                return original(*args, **kwargs)
            finally:
                for key in keys:
                    marks[key].append((begun, time.monotonic()))
        setattr(owner, name, wrapper)

    timed(journal.ResultWriter, "record", "records", "writes")
    timed(journal.ResultWriter, "flush", "writes")
    timed(journal.ResultWriter, "close", "writes")
    timed(gradebook, "export_and_feedback", "export_feedback")
    try:
        yield marks
    finally:
        for owner, name, original in reversed(originals):
            setattr(owner, name, original)


def run_phases(marks: dict, start: float, elapsed: float) -> dict:
    """A `bertlab grade` run in phases (wall seconds): start-up (workers started, preflight, to the
    first result handed to the writer), grading (first to last result), recording (the main process's
    time in its writer: journal lines and gradebook batches, the last batch included), export and
    feedback (nbgrader's, after the last result)."""
    records, exports = marks["records"], marks["export_feedback"]
    first = records[0][0] if records else start + elapsed
    last = records[-1][1] if records else first
    return {"start_up_s": round(first - start, 2), "grading_s": round(last - first, 2),
            "recording_s": round(sum(end - begun for begun, end in marks["writes"]), 2),
            "export_feedback_s": round(sum(end - begun for begun, end in exports), 2),
            "results_recorded": len(records)}


def grader_stages(cohort: dict[str, dict[str, str]], every: int) -> dict:
    """The real grader split by stage, per submission: every ``every``-th submission of the cohort
    graded in one warm sandbox as a worker grades it (benchmarks/grading_floor.py's stopwatch over
    the grader's own functions), one core. Seconds per submission, averaged over those graded."""
    import torch

    import grading_floor as gf  # benchmarks/grading_floor.py
    from bertlab_grader.core.locations import KIT_ROOT as INSTALLED_KIT
    from bertlab_grader.grading import scoring
    from bertlab_grader.sandbox.launcher import Sandbox

    torch.set_num_threads(1)  # as a grader worker
    totals: dict[str, float] = defaultdict(float)
    graded = 0
    with gf.watched_grader() as (watch, by_task), contextlib.closing(Sandbox(kit_root=INSTALLED_KIT)) as sandbox:
        scoring.warm_up()
        scoring.grade_sources(sandbox, reference_sources(), "rehearsal", ASSIGNMENT)  # not counted
        for student in list(cohort)[::every]:
            watch.reset()
            by_task.clear()
            start = time.perf_counter()
            try:
                scoring.grade_sources(sandbox, dict(cohort[student]), student, ASSIGNMENT)
            except Exception:  # noqa: BLE001 - a grader failure: its time still counts, as in a run
                pass
            total = time.perf_counter() - start
            tests = sum(by_task.values())
            correctness = tests - by_task["performance"]
            totals["session start (fork + imports)"] += watch.seconds["session start"]
            totals["calls over the wire (their compute included)"] += watch.seconds["calls"]
            totals["the tests' own work"] += max(correctness - watch.seconds["calls"], 0.0)
            totals["performance task (timing, both sides)"] += by_task["performance"]
            totals["hints"] += watch.seconds["hints"]
            totals["pytest's own run"] += max(total - tests - watch.seconds["hints"] - watch.seconds["session start"], 0.0)
            totals["total"] += total
            graded += 1
    return {"submissions": graded, **{stage: round(seconds / max(graded, 1), 3) for stage, seconds in totals.items()}}


def writer_rates(result: dict, records: int, workdir: Path) -> dict[str, float]:
    """Results per second through the run's single writer (journaled, batched), ``records`` copies of
    ``result`` under new student ids into a fresh course: on SQLite, and on a throwaway PostgreSQL
    server where its binaries are installed (benchmarks/cluster_scale.py's measure)."""
    from cluster_scale import recording_rate  # benchmarks/cluster_scale.py

    rates = {"sqlite": round(recording_rate(result, records, None, workdir), 1)}
    sys.path.insert(0, str(KIT_ROOT / "tests"))
    from postgres_server import PostgresMissing, throwaway_postgres  # tests/postgres_server.py

    try:
        with throwaway_postgres(port=5497) as url:
            rates["postgresql"] = round(recording_rate(result, records, url, workdir), 1)
    except PostgresMissing as exc:
        print(f"PostgreSQL not measured: {exc}", file=sys.stderr)
    return rates


# The targets of the projection: (submissions, worker cores, at most seconds).
PROJECTED = ((10_000, 16, None), (10_000, 64, 600), (100_000, 256, 1800))


def projection(phases: dict, n: int, workers: int, writer: dict[str, float], export_cores: int,
               main_host_cores: int) -> dict:
    """N submissions on C worker cores (``PROJECTED``), from this run's measured figures:

      start-up (workers warm up and preflight in parallel: the same on any number of cores)
    + N x the grading cost per submission and core / C, but never faster than the single writer
      records them (its slower database)
    + N x export and feedback per student and core / the main host's cores (``main_host_cores``:
      the export and the feedback are split over that many nbgrader processes, gradebook.py's
      ``export_and_feedback``; on a cluster the main host grades nothing, so its cores are free).

    The grading cost per submission and core is this run's grading wall time x its workers / its
    submissions. It is an upper bound for a cluster's worker: here the main process (the writer, the
    scan) shares the workers' cores. A timing no longer stops the other workers (issue 44), so more
    cores per host do not add idle time. The export and feedback per student and core is this run's
    export-and-feedback wall time x the cores its nbgrader processes could keep busy (``export_cores``:
    the processes it ran side by side, at most this host's cores) / its students. Dask's own overhead per submission (a
    few ms: benchmarks/cluster_scale.py) is not in it."""
    per_core = phases["grading_s"] * workers / max(n, 1)
    per_record = 1 / min(writer.values())
    export_per_core = phases["export_feedback_s"] * export_cores / max(n, 1)
    figures = {"inputs": {
        "start_up_s": [phases["start_up_s"], "this run: worker start-up and preflight, to the first result"],
        "grading_s_per_submission_per_core": [round(per_core, 3),
                                              f"this run: grading wall time x {workers} workers / {n}"],
        "writer_s_per_result": [round(per_record, 5), "this run: the slower database's rate (writer_results_per_s)"],
        "export_feedback_s_per_student_per_core": [
            round(export_per_core, 4),
            f"this run: export and feedback wall time x {export_cores} cores / {n}"],
        "main_host_cores": [main_host_cores, "assumed (--main-host-cores)"]}}
    for submissions, cores, goal in PROJECTED:
        grading = max(submissions * per_core / cores, submissions * per_record)
        export = submissions * export_per_core / main_host_cores
        total = round(phases["start_up_s"] + grading + export, 1)
        figures[f"{submissions}_on_{cores}_cores"] = {
            "start_up_s": phases["start_up_s"], "grading_s": round(grading, 1), "export_feedback_s": round(export, 1),
            "total_s": total, "total_min": round(total / 60, 1),
            **({"goal_min": goal / 60, "met": total <= goal} if goal else {})}
    return figures


def _progress(label: str, value) -> None:
    """A stage's figure as soon as it is measured (the whole run takes a quarter of an hour)."""
    print(f"[cohort_benchmark] {label}: {value}", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cohort", choices=("distinct", "copies"), default="distinct",
                        help="distinct: the bank's submissions, no two alike (default); copies: --n submissions, "
                             "about 60%% copies of the solution")
    parser.add_argument("--n", type=int, default=100, help="submissions in the copies cohort")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--baseline-n", type=int, default=10, choices=range(1, 10**6), metavar="K", help="submissions graded by the nbgrader baseline")
    parser.add_argument("--no-floor", action="store_true", help="do not measure the cohort's compute floor")
    parser.add_argument("--only-floor", action="store_true",
                        help="measure only the cohort's floor (correctness and performance apart), nothing else")
    parser.add_argument("--stages", type=int, default=4, metavar="K",
                        help="split the real grader by stage on every K-th submission, one warm sandbox (0: no split)")
    parser.add_argument("--records", type=int, default=2000, metavar="N",
                        help="results recorded to measure the single writer on SQLite and PostgreSQL, for the "
                             "10,000-submission projection (0: no projection)")
    parser.add_argument("--main-host-cores", type=int, default=16, metavar="K",
                        help="the main host's cores in the projection: its export and feedback are split over them")
    parser.add_argument("--keep", action="store_true", help="keep the course folders")
    parser.add_argument("--every-copy", action="store_true",
                        help="also grade the cohort with every copy graded on its own (bertlab grade grades "
                             "identical files once), and print that time too")
    args = parser.parse_args(argv)

    from bertlab_grader.grading.scoring import max_points_by_task

    if args.cohort == "distinct":
        cohort, hostile = distinct_cohort()
    else:
        cohort, hostile = build_cohort(args.n), set()
    n = len(cohort)
    workdir = Path(tempfile.mkdtemp(prefix="bertlab-cohort-"))
    if args.only_floor:  # the floor alone (a quarter of an hour on this cohort), no grading run
        try:
            floor = compute_floor(cohort, hostile, workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        print(json.dumps({"cohort": args.cohort, "submissions": n,
                          "floor_correctness_seconds_per_submission_one_core": round(floor["correctness_s"], 3),
                          "floor_performance_seconds_per_submission_one_core": round(floor["performance_s"], 3),
                          "floor_submissions_measured": floor["measured"],
                          "floor_calls_stopped_at_call_limit": floor["stopped"]}, indent=1))
        return 0
    try:
        phases: dict = {}
        ours, results, exit_code = run_bertlab(cohort, args.workers, workdir, phases=phases)
        _progress("bertlab grade", f"{ours:.1f} s for {n}, phases {phases}")
        every_copy = run_bertlab(cohort, args.workers, workdir, every_copy=True) if args.every_copy else None
        # the baseline's sample: spread over the cohort (mutants, variants, outside bank, broken), not its head
        step = max(1, n // args.baseline_n)
        sample = [s for s in list(cohort)[::step] if s not in hostile][: args.baseline_n]
        baseline_cohort = {s: cohort[s] for s in sample}
        theirs, their_scores = run_baseline(baseline_cohort, max_points_by_task(), workdir)
        _progress("nbgrader", f"{theirs:.1f} s for {len(baseline_cohort)}")
        floor = None if args.no_floor else compute_floor(cohort, hostile, workdir)
        _progress("floor", floor)
        stages = grader_stages(cohort, args.stages) if args.stages else None
        _progress("stages", stages)
        writer = writer_rates(next(iter(results.values())), args.records, workdir) if args.records else None
        _progress("writer", writer)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    per_ours, per_theirs = ours / n, theirs / max(len(baseline_cohort), 1)
    copies = solution_copies(cohort)
    report = {
        "cohort": args.cohort, "submissions": n, "workers": args.workers,
        "distinct_submissions": len({json.dumps(files, sort_keys=True) for files in cohort.values()}),
        "bertlab_seconds": round(ours, 1), "bertlab_seconds_per_submission": round(per_ours, 3),
        "bertlab_submissions_per_minute": round(n / ours * 60, 1),
        "nbgrader_submissions": len(baseline_cohort), "nbgrader_seconds": round(theirs, 1),
        "nbgrader_seconds_per_submission": round(per_theirs, 3),
        "nbgrader_graded": len(their_scores),  # the baseline really graded: a score for each of its sample
        "throughput_ratio": round(per_theirs / per_ours, 2),
        "graded": len(results), "bertlab_exit_code": exit_code,
        # Speed is part of the score: a copy of the solutions losing points would mean unfair timing.
        "solution_copies_with_full_marks": "%d of %d" % (
            sum(results[s]["score"] == results[s]["max_score"] for s in copies), len(copies)),
    }
    report["bertlab_run_phases"] = phases
    if writer:
        report["writer_results_per_s"] = writer
        from bertlab_grader.course.gradebook import feedback_parts
        from bertlab_grader.course.pool import default_workers

        # the export beside the feedback's parts (as the runner splits them), on at most this host's cores
        export_cores = min(1 + feedback_parts(sorted(results), default_workers()), default_workers())
        report["projection"] = projection(phases, n, args.workers, writer, export_cores, args.main_host_cores)
    if stages is not None:
        report["grader_stages_per_submission_one_core"] = stages
    if floor is not None:
        report["floor_submissions_measured"] = floor["measured"]
        report["floor_calls_stopped_at_call_limit"] = floor["stopped"]
        # one core's floor per submission; its wall time with as many workers as the grader had
        for name, seconds in (("correctness", floor["correctness_s"]),
                              ("all_tasks", floor["correctness_s"] + floor["performance_s"])):
            report[f"floor_{name}_seconds_per_submission_one_core"] = round(seconds, 3)
            report[f"floor_{name}_wall_seconds_per_submission"] = round(seconds / args.workers, 3)
            report[f"bertlab_over_floor_{name}"] = round(per_ours / (seconds / args.workers), 2)
    if every_copy is not None:
        seconds, every_results, _ = every_copy
        report["every_copy_graded_seconds"] = round(seconds, 1)
        report["every_copy_graded_throughput_ratio"] = round(per_theirs / (seconds / n), 1)
        # Grading each copy on its own must give each the same points as grading the files once.
        report["every_copy_graded_same_points"] = all(every_results[s]["score"] == results[s]["score"] for s in cohort)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
