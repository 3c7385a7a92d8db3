"""The compute floor of one grading, and where the real grader spends its time beside it.

    python benchmarks/grading_floor.py [--repeats 5] [--json OUT.json]

**The floor**: the hidden suites' four correctness tasks run on the reference solutions in this one
warm process: no sandbox, no wire, no hints, no performance timing, nothing recorded. It is what the
suites' own arithmetic costs (MiniLM forwards, reference outputs, the checks) plus pytest's own run,
and no grader can grade a correct submission for less.

**The real grader**: the same submission (the solutions' files) graded as a cohort worker grades it,
in one warm bubblewrap sandbox (the template already started, MiniLM and the reference data loaded),
with the performance task, the hints and the recording into a gradebook, split by stage:

    session start    forking the submission's process and importing its four modules
    calls            requests over the wire into the submission's process (its own compute included)
    tests' own work  the rest of the correctness tests: the reference outputs, the checks
    performance      the performance task (timing, both sides)
    hints            probing the failing tasks for a known mistake (none for the solutions)
    pytest           pytest's own run: collection, fixtures, reports
    recording        the gradebook, the graded notebook and results.json (bertlab_grader.course)

A mutant (one hinted mistake per task) is graded the same way, for the hints' cost.
Every figure is a median over ``--repeats`` gradings, after one rehearsal that is not counted.
The stages are measured by wrapping the grader's own functions in this process; nothing of the
grader is changed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(KIT_ROOT))

from bertlab.tasks import EXERCISE_TASKS as CORRECTNESS  # noqa: E402  (the correctness tasks, from the registry)
MUTANT = "pool_divide_by_length"  # a hinted mistake: its hint is looked for and found
RUNNING = {"task": None}  # the task of the hidden test running now (set by the recorder below)


class Stopwatch:
    """Seconds spent inside wrapped functions, by stage (re-entrant calls are counted once)."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._depth: dict[str, int] = defaultdict(int)

    def wrap(self, owner, name: str, stage) -> None:
        """Count the time in ``owner.name`` under ``stage`` (a name, or a function giving one)."""
        original = getattr(owner, name)
        watch = self

        def timed(*args, **kwargs):
            nonlocal stage_now
            if not watch._depth[name]:
                stage_now = stage() if callable(stage) else stage
            watch._depth[name] += 1
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                watch._depth[name] -= 1
                if watch._depth[name] == 0:
                    watch.seconds[stage_now] += time.perf_counter() - start
                    watch.calls[stage_now] += 1

        stage_now = None
        setattr(owner, name, timed)

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()


def _durations_recorder(scoring, by_task: dict):
    """A subclass of the scoring room's pytest plugin that also sums each test's duration by task."""

    class Recorder(scoring._Recorder):
        def pytest_runtest_logstart(self, nodeid, location):
            RUNNING["task"] = self.entries.get(nodeid, {}).get("task")

        def pytest_runtest_logfinish(self, nodeid, location):
            RUNNING["task"] = None

        def pytest_runtest_logreport(self, report):
            entry = self.entries.get(report.nodeid)
            if entry is not None:
                by_task[entry["task"]] += report.duration

    return Recorder


def floor(repeats: int) -> dict:
    """The correctness suites on the reference, in this process."""
    from bertlab.implementations import load_implementation
    from bertlab_grader.grading import scoring

    reference = load_implementation("reference")
    by_task: dict[str, float] = defaultdict(float)
    original = scoring._Recorder
    scoring._Recorder = _durations_recorder(scoring, by_task)
    try:
        scoring.run_hidden_suite(reference, student="rehearsal", tasks=CORRECTNESS, hints=False)
        totals, tests = [], []
        for _ in range(repeats):
            by_task.clear()
            start = time.perf_counter()
            result = scoring.run_hidden_suite(reference, student="floor", tasks=CORRECTNESS, hints=False)
            totals.append(time.perf_counter() - start)
            tests.append(sum(by_task.values()))
            assert result["score"] == result["max_score"], "the reference lost points in process"
    finally:
        scoring._Recorder = original
    total, in_tests = statistics.median(totals), statistics.median(tests)
    return {"total_s": total, "tests_s": in_tests, "pytest_s": total - in_tests}


@contextlib.contextmanager
def watched_grader():
    """(stopwatch, seconds by task) over the real grader's own functions, wrapped in this process:
    session starts, calls over the wire (in hints, in the performance task, elsewhere) and hints by
    stage; each hidden test's duration by task. Used here and by cohort_benchmark.py's stage split."""
    from bertlab_grader.grading import scoring
    from bertlab_grader.sandbox import session as session_module

    watch = Stopwatch()
    by_task: dict[str, float] = defaultdict(float)
    watch.wrap(session_module.Session, "_spawn", "session start")
    watch.wrap(session_module.Session, "_await_ready", "session start")
    watch.wrap(session_module.Session, "_exchange",
               lambda: ("calls in hints" if watch._depth["attach_hints"] else
                        "calls in performance" if RUNNING["task"] == "performance" else "calls"))
    watch.wrap(scoring, "attach_hints", "hints")
    original = scoring._Recorder
    scoring._Recorder = _durations_recorder(scoring, by_task)
    try:
        yield watch, by_task
    finally:
        scoring._Recorder = original


def real(repeats: int, files: dict, student: str, course: Path) -> dict:
    """One submission through the real grader, stage by stage (medians over ``repeats``)."""
    from bertlab_grader.core.locations import KIT_ROOT as INSTALLED_KIT
    from bertlab_grader.course import gradebook as course_gradebook
    from bertlab_grader.course.settings import CourseSettings
    from bertlab_grader.grading import scoring
    from bertlab_grader.sandbox.launcher import Sandbox

    rows = []
    with watched_grader() as (watch, by_task), contextlib.closing(Sandbox(kit_root=INSTALLED_KIT)) as sandbox:
        scoring.warm_up()
        settings = CourseSettings(course, "week7")
        with course_gradebook.keep_gradebook_open(settings):
            for i in range(repeats + 1):
                watch.reset()
                by_task.clear()
                start = time.perf_counter()
                result = scoring.grade_sources(sandbox, dict(files), f"{student}{i}", "week7")
                graded = time.perf_counter()
                course_gradebook.record_result(settings, result)
                end = time.perf_counter()
                if i == 0:
                    continue  # the rehearsal: first-run costs are not counted
                # The performance task's calls are part of its own stage, not of "calls".
                tests = sum(by_task.values())
                rows.append({
                    "session start": watch.seconds["session start"],
                    "calls": watch.seconds["calls"],
                    "tests": tests,
                    "performance": by_task["performance"],
                    "hints": watch.seconds["hints"],
                    "graded": graded - start,
                    "recording": end - graded,
                    "calls_n": watch.calls["calls"],
                    "score": result["score"],
                })
    return {key: statistics.median(r[key] for r in rows) for key in rows[0]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    import torch

    from bertlab_grader.course import config as course_config, gradebook as course_gradebook
    from bertlab_grader.course.settings import CourseSettings
    from bertlab_grader.core.locations import reference_sources
    from bertlab_grader.course.submissions import read_submission_sources
    from bertlab_grader.grading.scoring import max_points_by_task, warm_up
    from bertlab_grader.mutants.bank import load_bank

    torch.set_num_threads(1)  # as a grader worker
    warm_up()
    figures = {"floor": floor(args.repeats)}
    mutant = next(e for e in load_bank(kinds=("mutant",)) if e.name == MUTANT)
    with tempfile.TemporaryDirectory(prefix="bertlab-floor-") as tmp:
        course = Path(tmp) / "course"
        (course / "submitted").mkdir(parents=True)
        course_config.init_course(CourseSettings(course, "week7"), max_points=max_points_by_task())
        figures["solutions"] = real(args.repeats, reference_sources(), "s", course)
        figures["mutant"] = real(args.repeats, read_submission_sources(mutant.path), "m", course)
    _print(figures, args.repeats)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


def _print(figures: dict, repeats: int) -> None:
    fl = figures["floor"]
    print(f"\nThe floor: the four correctness tasks on the reference, in process (median of {repeats})")
    print(f"  {fl['total_s']:6.2f} s  ({fl['tests_s']:.2f} s in the tests, {fl['pytest_s']:.2f} s pytest's own run)\n")
    print(f"The real grader, one warm sandbox, per submission (median of {repeats} gradings each)\n")
    print("| stage | solutions s | x floor | mutant " + MUTANT + " s |")
    print("| --- | ---: | ---: | ---: |")
    for kind in ("solutions", "mutant"):
        r = figures[kind]
        correctness = r["tests"] - r["performance"]
        r["own work"] = max(correctness - r["calls"], 0.0)
        r["pytest"] = max(r["graded"] - r["tests"] - r["hints"] - r["session start"], 0.0)
        r["total"] = r["graded"] + r["recording"]
    rows = [("session start (fork + imports)", "session start"), ("calls over the wire (their compute included)", "calls"),
            ("the tests' own work", "own work"), ("performance task (timing)", "performance"), ("hints", "hints"),
            ("pytest's own run", "pytest"), ("recording (gradebook, notebook, results.json)", "recording"),
            ("**total**", "total")]
    for label, key in rows:
        s, m = figures["solutions"][key], figures["mutant"][key]
        print(f"| {label} | {s:.3f} | {s / fl['total_s']:.2f} | {m:.3f} |")
    s = figures["solutions"]
    print(f"\ncalls per submission: {s['calls_n']:.0f}; without the performance task the grader costs "
          f"{(s['total'] - s['performance']) / fl['total_s']:.2f}x the floor; with it {s['total'] / fl['total_s']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
