"""Follow results through `bertlab grade`'s main process and count what they meet on the way.

    python tools/submission_path.py [N]

Grades N submissions (default 1) of a throwaway course with the kit's own ``run_course``, with one
thing replaced: the worker pool hands back a ready result for each submission at once (no sandbox,
no hidden suites), so what is counted is the main process's path from a result's arrival to its
results.json and the end of the run: the gradebook, the writer, the files, the summary. Export and
feedback (nbgrader subprocesses) are left out. Prints one JSON line:

    validations   calls of results.validate_result (a result's check) during the run
    gate_waits    entries into the timing gate (performance/gate.py: waits for a worker's timing)
    functions     distinct kit functions called from the first result on
    calls         their calls
    files         kit files they are in
    hops, distinct_hops
                  calls from one kit file into another, and the distinct (caller file, callee file) pairs

then the kit files, one a line. docs/architecture.md ("One submission's path") says what the path is.
"""

from __future__ import annotations

import collections
import contextlib
import json
import sys
import tempfile
from pathlib import Path

from bertlab.tasks import EXERCISE_FILES
from bertlab_grader.course import gradebook as course_gradebook, results as course_results, runner
from bertlab_grader.course.settings import CourseSettings
from bertlab_grader.grading.scoring import max_points_by_task
from bertlab_grader.performance import gate as timing_gate

KIT_FOLDERS = ("/bertlab_grader/", "/bertlab/")


def _kit_file(filename: str) -> str | None:
    """``filename`` relative to its package's folder, or None outside the kit (and its hidden suites)."""
    for folder in KIT_FOLDERS:
        if folder in filename and "/hidden/" not in filename:
            return folder.strip("/") + "/" + filename.split(folder, 1)[1]
    return None


def trace(n: int) -> tuple[dict, list[str]]:
    max_points = max_points_by_task()
    course = Path(tempfile.mkdtemp(prefix="bertlab-path-")) / "course"
    for i in range(n):
        folder = course / "submitted" / f"s{i:03d}" / "week7"
        folder.mkdir(parents=True)
        for name in EXERCISE_FILES:  # files that differ: copies would be graded once
            (folder / name).write_text(f"# submission {i}\n")

    def ready_results(todo, *args, **kwargs):
        for s in todo:
            yield s, course_results.error_result(s.student, "week7", "graded", max_points), None

    counts = collections.Counter()
    real_validate, real_working = course_results.validate_result, timing_gate.working

    def counted_validate(result):
        counts["validations"] += 1
        return real_validate(result)

    @contextlib.contextmanager
    def counted_working():
        counts["gate_waits"] += 1
        with real_working():
            yield

    steps, hops = collections.Counter(), collections.Counter()
    tracing = False

    def profile(frame, event, arg):
        if event != "call" or not tracing:
            return
        callee = _kit_file(frame.f_code.co_filename)
        if callee is None:
            return
        steps[(callee, frame.f_code.co_name)] += 1
        caller = _kit_file(frame.f_back.f_code.co_filename) if frame.f_back else None
        if caller is not None and caller != callee:
            hops[(caller, callee)] += 1

    real_record = runner.record_result

    def record_traced(*args, **kwargs):  # the path starts where the first result arrives
        nonlocal tracing
        tracing = True
        return real_record(*args, **kwargs)

    replaced = {(runner, "pool_results"): ready_results, (runner, "start_workers"): lambda *a, **k: [],
                (runner, "start_fork_server"): lambda: None, (runner, "check_sandbox"): lambda *a: None,
                (runner, "record_result"): record_traced,
                (course_gradebook, "export_and_feedback"): lambda *a, **k: (course / "grades.csv", course),
                (course_results, "validate_result"): counted_validate, (timing_gate, "working"): counted_working}
    saved = {key: getattr(*key) for key in replaced}
    for (module, name), value in replaced.items():
        setattr(module, name, value)
    sys.setprofile(profile)
    try:
        summary = runner.run_course(CourseSettings(course, "week7"), runner.RunOptions(quiet=True))
    finally:
        sys.setprofile(None)
        for (module, name), value in saved.items():
            setattr(module, name, value)
    if len(summary.graded) != n:
        raise SystemExit(f"only {len(summary.graded)} of {n} recorded:\n{summary.format()}")
    files = sorted({f for f, _ in steps})
    figures = {"submissions": n, "validations": counts["validations"], "gate_waits": counts["gate_waits"],
               "functions": len(steps), "calls": sum(steps.values()), "files": len(files),
               "hops": sum(hops.values()), "distinct_hops": len(hops)}
    return figures, files


if __name__ == "__main__":
    figures, files = trace(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    print(json.dumps(figures))
    print("\n".join(files))
