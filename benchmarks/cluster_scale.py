"""Grading on a Dask cluster, measured and projected (docs/cluster.md, "Scale"). Prints figures; asserts nothing.

    python benchmarks/cluster_scale.py [--n 100] [--records 10000] [--skip-postgres]
    python benchmarks/cluster_scale.py --only-recording [RESULTS.json] [--records 10000]   # item 2 alone

In one run, on this machine:

1. the same cohort (benchmarks/cohort_benchmark.py's mix: solution copies, bank mutants, broken files)
   graded three ways, each in a fresh course: the local runner with 2 workers, `--cluster local:2`,
   and a CLI `dask scheduler` with two CLI `dask worker`s; the three wall times (start-up, preflight,
   export and feedback included) and each cluster's ratio to the local runner (goal: within 10%);
   the grades of the three, compared submission by submission;
2. the main process's recording throughput: ``--records`` results of the real shape (one results.json
   of the cohort, under new student ids) recorded into a fresh gradebook, as the runner records them
   (the run's writer, grader/bertlab_grader/course/journal.py: each result journaled and synced, the gradebook and
   the files written in batches, one filesystem sync at the end, all of it timed), on SQLite and on
   PostgreSQL (goal: 200 per second). ``--only-recording`` measures only this, with the demo's
   result for dave (47 tests, 40 failing with messages, 37 hints) unless a results.json is named;
3. Dask's own cost per submission: a task that does no grading, with a payload of a submission's size,
   sent and taken back one worker's worth at a time, as the dispatcher does;
4. from those figures, the projected wall time of 10,000 submissions on 16, 64 and 256 worker cores:
   grading per core (this run's warm per-submission cost on the CLI cluster) divided across the cores,
   plus Dask's overhead, bounded below by the single writer's recording time (goal: at most 5
   minutes on 64).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(KIT_ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cohort_benchmark import ASSIGNMENT, build_cohort, write_submissions  # noqa: E402
from dask_processes import CliCluster  # noqa: E402  (tests/dask_processes.py)


def _grade(cohort: dict, workdir: Path, name: str, **where) -> tuple[float, dict, object, dict]:
    """Wall seconds, results, summary, and the run's phases: {"start_up_s" (to the first recorded
    result), "warm_s_per_submission" (first to last result), "export_feedback_s" (after the last)}."""
    from bertlab_grader.course import runner
    from bertlab_grader.course.results import load_results
    from bertlab_grader.course.settings import CourseSettings

    course = workdir / name
    write_submissions(course, cohort)
    recorded: list[float] = []
    real_record = runner.record_result

    def timed_record(*args, **kwargs):
        real_record(*args, **kwargs)
        recorded.append(time.monotonic())

    runner.record_result = timed_record
    start = time.monotonic()
    try:
        summary = runner.run_course(CourseSettings(course, ASSIGNMENT), runner.RunOptions(quiet=True, **where))
    finally:
        runner.record_result = real_record
    end = time.monotonic()
    phases = {"start_up_s": round(recorded[0] - start, 1),
              "warm_s_per_submission": round((recorded[-1] - recorded[0]) / max(len(recorded) - 1, 1), 3),
              "export_feedback_s": round(end - recorded[-1], 1)}
    return end - start, load_results(CourseSettings(course, ASSIGNMENT)), summary, phases


def dask_overhead(address: str, payload_bytes: int, tasks: int = 200, in_flight: int = 2) -> float:
    """Seconds per task of Dask's round trip alone (``task.echo``), ``in_flight`` at a time."""
    from distributed import Client

    from bertlab_grader.cluster import task

    payload = json.dumps({"files": "x" * payload_bytes})
    with Client(address, set_as_default=False) as client:
        # The echo needs no grader: no resource restriction, so the plugin is not needed here.
        client.submit(task.echo, payload, pure=False).result()  # warm the path once
        start = time.monotonic()
        futures = []
        for _ in range(tasks):
            futures.append(client.submit(task.echo, payload, pure=False))
            if len(futures) >= in_flight:
                futures.pop(0).result()
        for f in futures:
            f.result()
        return (time.monotonic() - start) / tasks * in_flight  # per task, per worker slot


def recording_rate(result: dict, records: int, db_url: str | None, workdir: Path) -> float:
    """Results recorded per second into a fresh gradebook, as the runner records them: through the
    run's writer (journaled, batched), from the first result to the writer closed (the last batch
    written, the course's files synced, the journal removed)."""
    from bertlab_grader.course import journal
    from bertlab_grader.course import config as course_config, gradebook as course_gradebook, results as course_results
    from bertlab_grader.course.settings import CourseSettings
    from bertlab_grader.grading.scoring import max_points_by_task

    course = workdir / f"recording-{'postgres' if db_url else 'sqlite'}"
    (course / "submitted").mkdir(parents=True)
    settings = CourseSettings(course, ASSIGNMENT, db_url)
    course_config.init_course(settings, max_points=max_points_by_task())
    start = time.monotonic()
    with course_gradebook.keep_gradebook_open(settings), journal.ResultWriter(settings) as writer:
        for i in range(records):
            writer.record({**result, "student": f"r{i:05d}"})
    rate = records / (time.monotonic() - start)
    recorded = course_results.load_results(CourseSettings(course, ASSIGNMENT))
    if len(recorded) != records:
        raise SystemExit(f"recorded {len(recorded)} results.json of {records}: the writer lost some")
    return rate


def demo_result() -> dict:
    """A result of the real shape: the demo's dave (tests/fixtures/grade_snapshots/demo.json), 47 tests,
    40 of them failing with a message, 37 with a hint."""
    grades = json.loads((KIT_ROOT / "tests" / "fixtures" / "grade_snapshots" / "demo.json").read_text())["grades"]
    tests = []
    for name, snapshot in grades["dave"].items():
        test = {"name": name, **{k: v for k, v in snapshot.items() if v is not None and k != "scored"}}
        if snapshot.get("scored") is False:  # a speed test: the snapshot leaves its machine-dependent
            test.update(outcome="passed", points=test["max_points"], message="")  # points out; full here
        tests.append(test)
    return {"student": "dave", "assignment": ASSIGNMENT, "score": sum(t["points"] for t in tests),
            "max_score": sum(t["max_points"] for t in tests), "tests": tests,
            "submission_digest": "sha256:" + "0" * 64, "sandboxed": True}


def bank_cohort() -> dict[str, dict[str, str]]:
    """Every entry of the kit's bank (mutants and correct variants) as a submission: the reference
    with the entry's one file changed."""
    from bertlab_grader.core.locations import reference_sources
    from bertlab_grader.mutants.bank import load_bank

    cohort = {}
    for entry in load_bank():
        files = dict(reference_sources())
        files[entry.file] = (entry.path / entry.file).read_text()
        cohort[f"{entry.kind}-{entry.name}"] = files
    return cohort


def _show(report: dict, **figures) -> None:
    """Keep ``figures`` in the report and print them at once (stderr), so a later failure loses none."""
    report.update(figures)
    print(json.dumps(figures), file=sys.stderr, flush=True)


def _recording_only(sample: dict, args) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="bertlab-cluster-scale-"))
    report: dict = {"records": args.records, "tests_per_result": len(sample["tests"])}
    try:
        _show(report, recorded_per_s_sqlite=round(recording_rate(sample, args.records, None, workdir), 1))
        if not args.skip_postgres:
            from postgres_server import throwaway_postgres

            with throwaway_postgres(port=5498) as url:
                _show(report, recorded_per_s_postgres=round(recording_rate(sample, args.records, url, workdir), 1))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(report, indent=1))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100, help="submissions in the cohort")
    parser.add_argument("--records", type=int, default=10000, help="results recorded for the throughput figure")
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--skip-bank", action="store_true", help="do not grade the bank locally and on local:2")
    parser.add_argument("--only-recording", metavar="RESULTS.json", nargs="?", const="", default=None,
                        help="measure only the recording throughput, with this results.json as the shape "
                             "(none named: the demo's result for dave)")
    args = parser.parse_args(argv)
    if args.only_recording is not None:
        sample = json.loads(Path(args.only_recording).read_text()) if args.only_recording else demo_result()
        return _recording_only(sample, args)
    from bertlab_grader.course.results import grade_differences

    cohort = build_cohort(args.n)
    workdir = Path(tempfile.mkdtemp(prefix="bertlab-cluster-scale-"))
    report: dict = {"submissions": args.n, "cores": len(os.sched_getaffinity(0))}
    try:
        local_s, local, _, local_phases = _grade(cohort, workdir, "local", workers=2)
        _show(report, local_runner_2_workers_s=round(local_s, 1), local_phases=local_phases, local_graded=len(local))
        lc_s, lc, lc_summary, lc_phases = _grade(cohort, workdir, "local-cluster", cluster="local:2")
        _show(report, cluster_local_2_s=round(lc_s, 1), cluster_local_2_over_local=round(lc_s / local_s, 3),
              cluster_local_2_phases=lc_phases, cluster_local_2_graded=len(lc),
              cluster_local_2_not_graded=len(lc_summary.not_graded),
              grade_differences_local_vs_cluster_local_2=grade_differences(local, lc))
        cli = CliCluster(workdir)
        try:
            cli.add_worker("w0")
            cli.add_worker("w1")
            cli.wait_for_workers(2)
            cli_s, cli_results, cli_summary, cli_phases = _grade(cohort, workdir, "cli-cluster",
                                                                 scheduler=cli.address)
            _show(report, cli_scheduler_2_workers_s=round(cli_s, 1), cli_cluster_over_local=round(cli_s / local_s, 3),
                  cli_phases=cli_phases, cli_graded=len(cli_results), cli_not_graded=len(cli_summary.not_graded),
                  grade_differences_local_vs_cli=grade_differences(local, cli_results))
            sizes = [len(json.dumps(files)) for files in cohort.values()]
            _show(report, dask_overhead_s_per_submission=round(dask_overhead(cli.address, sum(sizes) // len(sizes)), 4))
        finally:
            cli.close()
        if not args.skip_bank:
            bank = bank_cohort()
            bank_local_s, bank_local, _, _ = _grade(bank, workdir, "bank-local", workers=2)
            bank_cluster_s, bank_cluster, _, _ = _grade(bank, workdir, "bank-cluster", cluster="local:2")
            _show(report, bank={"entries": len(bank), "local_s": round(bank_local_s, 1),
                                "cluster_local_2_s": round(bank_cluster_s, 1),
                                "graded": [len(bank_local), len(bank_cluster)],
                                "grade_differences": grade_differences(bank_local, bank_cluster)})
        sample = next(iter(local.values()))
        _show(report, recorded_per_s_sqlite=round(recording_rate(sample, args.records, None, workdir), 1))
        if not args.skip_postgres:
            from postgres_server import throwaway_postgres

            with throwaway_postgres(port=5498) as url:
                _show(report, recorded_per_s_postgres=round(recording_rate(sample, args.records, url, workdir), 1))
        # Projection for 10,000 submissions on C worker cores, from this run's CLI cluster:
        #   its start-up (workers warm up and preflight in parallel: the same on any number of cores)
        # + 10,000 x its warm cost per submission and core / C (Dask's overhead is inside that figure)
        #   but never faster than the single writer records them
        # + the export and feedback, which run on the main host: its per-submission cost x 10,000.
        per_core = cli_phases["warm_s_per_submission"] * 2
        writer = 1 / min(v for k, v in report.items() if k.startswith("recorded_per_s"))
        export_per = cli_phases["export_feedback_s"] / args.n
        projection = {}
        for cores in (16, 64, 256):
            grading = max(10000 * per_core / cores, 10000 * writer)
            projection[cores] = {"grading_s": round(cli_phases["start_up_s"] + grading, 1),
                                 "with_export_and_feedback_s": round(cli_phases["start_up_s"] + grading
                                                                     + 10000 * export_per, 1)}
        report["warm_s_per_submission_per_core"] = round(per_core, 3)
        report["projected_10000_submissions"] = projection
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
