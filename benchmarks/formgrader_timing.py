"""How long nbgrader's formgrader takes to show one graded submission (the student's code beside the
results) in a cohort of 100.

    python benchmarks/formgrader_timing.py [--students 100] [--repeat 5] [--keep DIR]

Nothing is graded: the course is built through ``bertlab_grader.course`` (config, gradebook) as
``bertlab grade`` leaves one (``init_course``, then ``record_result`` per student, which puts the
student's files into the graded notebook), each student handing in the kit's reference files with a
line of their own. Then formgrader (a Jupyter server with nbgrader's formgrader extension, on a free
local port, a random token, Jupyter's config and runtime folders in a temporary folder) is started and
one student's submission page is fetched: the first fetch, then the median of ``--repeat`` more; and,
when the system Chromium and Playwright are there, the page's load in headless Chromium.

Prints the figures; never asserts a time. tests/test_formgrader_review.py uses ``build_review_course``,
``formgrader`` and ``submission_url``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ASSIGNMENT = "week7"
START_TIMEOUT = 120.0  # seconds for the Jupyter server to answer (it imports every installed extension)


def reference_files() -> dict[str, str]:
    """The kit's reference solution, file by file (with nbgrader's fences, as in the kit): a realistic
    size for a handed-in file."""
    from bertlab_grader.core.locations import reference_sources

    return reference_sources(fenced=True)


def with_line(text: str, line: str, after: str) -> tuple[str, int]:
    """``text`` with ``line`` inserted after the first line that contains ``after`` (else first);
    returns the new text and the 1-based number of the inserted line."""
    lines = text.splitlines(keepends=True)
    at = next((i + 1 for i, existing in enumerate(lines) if after in existing), 0)
    lines.insert(at, line.rstrip("\n") + "\n")
    return "".join(lines), at + 1


def build_review_course(course: Path, files: dict[str, dict[str, str]], results: dict[str, dict],
                        max_points: dict[str, float]) -> None:
    """A course as ``bertlab grade`` leaves it: ``files`` ({student: {filename: text}}) handed in under
    submitted/, each student's result (``results``) recorded, which writes the graded notebook."""
    from bertlab_grader.course.config import init_course
    from bertlab_grader.course.gradebook import keep_gradebook_open, record_result
    from bertlab_grader.course.settings import CourseSettings

    settings = CourseSettings(course, ASSIGNMENT)
    init_course(settings, max_points)
    for student, sources in files.items():
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in sources.items():
            (folder / name).write_text(text, encoding="utf-8")
    with keep_gradebook_open(settings):
        for student in files:
            record_result(settings, results[student])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_up(base: str, token: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"formgrader exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.3)
    raise RuntimeError(f"formgrader did not answer within {START_TIMEOUT:g} s:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def formgrader(course: Path):
    """Run formgrader on ``course`` (``jupyter server`` with the formgrader extension, started in the
    course so nbgrader reads its nbgrader_config.py) on a free local port with a random token; yield
    ``(base_url, token)``; stop it (its whole process group) on exit."""
    token = secrets.token_hex(16)
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="bertlab-formgrader-") as tmp:
        env = {**os.environ, "JUPYTER_CONFIG_DIR": f"{tmp}/config", "JUPYTER_RUNTIME_DIR": f"{tmp}/runtime",
               "JUPYTER_DATA_DIR": f"{tmp}/data", "IPYTHONDIR": f"{tmp}/ipython"}
        cmd = [sys.executable, "-m", "jupyter_server", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               "--port-retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={course}"]
        # the formgrader extension on, whatever this environment's own Jupyter config enables
        Path(env["JUPYTER_CONFIG_DIR"]).mkdir()
        Path(env["JUPYTER_CONFIG_DIR"], "jupyter_server_config.json").write_text(json.dumps(
            {"ServerApp": {"jpserver_extensions": {"nbgrader.server_extensions.formgrader": True}}}))
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")  # (a container's root; Jupyter refuses root otherwise)
        log = Path(tmp) / "server.log"
        with log.open("w") as out:
            proc = subprocess.Popen(cmd, cwd=course, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # its own group: stopped with its children
        base = f"http://127.0.0.1:{port}"
        try:
            _wait_until_up(base, token, proc, log)
            yield base, token
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)


def submission_url(course: Path, base: str, token: str, student: str) -> str:
    """formgrader's page of ``student``'s graded notebook (Manual Grading > week7 > week7 > the student)."""
    from nbgrader.api import Gradebook

    from bertlab_grader.course.config import course_db_url

    with Gradebook(course_db_url(course)) as gb:
        submission_id = gb.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, student).id
    return f"{base}/formgrader/submissions/{submission_id}/?token={token}"


def synthetic_cohort(n: int) -> tuple[dict, dict, dict]:
    """``n`` students' files (the reference, a line of their own in every file) and results (one
    failed test per task, naming the student's line), and the max points: (files, results, max_points)."""
    from bertlab.tasks import EXERCISE_TASKS, GRADED_TASKS, exercise

    base = reference_files()
    files, results = {}, {}
    for i in range(n):
        student = f"s{i:04d}"
        files[student], tests = {}, []
        for task in EXERCISE_TASKS:
            name = exercise(task).filename
            files[student][name], line = with_line(base[name], f"# {student} was here", "import")
            tests.append({"name": f"test_{task}_matches_reference", "task": task, "outcome": "failed",
                          "points": 0.0, "max_points": 4.0,
                          "message": f"raised ValueError (synthetic) in {name}, line {line}"})
            tests.append({"name": f"test_{task}_shape", "task": task, "outcome": "passed", "points": 1.0,
                          "max_points": 1.0, "message": ""})
        tests.append({"name": "test_speed", "task": "performance", "outcome": "passed", "points": 5.0,
                      "max_points": 5.0, "message": "took 1.1x the reference's time", "ratio": 1.1})
        results[student] = {"student": student, "assignment": ASSIGNMENT, "tests": tests,
                            "score": sum(t["points"] for t in tests), "max_score": sum(t["max_points"] for t in tests)}
    max_points = {task: 5.0 for task in EXERCISE_TASKS}
    if "performance" in GRADED_TASKS:
        max_points["performance"] = 5.0
    return files, results, max_points


def _fetch(url: str) -> tuple[float, int]:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        size = len(response.read())
    return time.perf_counter() - start, size


def _browser_loads(url: str, repeat: int) -> list[float] | None:
    """Seconds for headless Chromium to load the page (``load`` event), ``repeat`` times; None without
    Playwright or the system Chromium (never a browser Playwright downloads)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if chromium is None:
        return None
    times = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True)
        page = browser.new_page()
        for _ in range(repeat):
            start = time.perf_counter()
            page.goto(url, wait_until="load")
            times.append(time.perf_counter() - start)
        browser.close()
    return times


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", type=Path, default=None, help="build the course in DIR and keep it")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        root = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bertlab-fg-bench-")))
        course = root / "course"
        files, results, max_points = synthetic_cohort(args.students)
        start = time.perf_counter()
        build_review_course(course, files, results, max_points)
        built = time.perf_counter() - start
        print(f"course of {args.students} graded submissions built (init_course + record_result each): "
              f"{built:.1f} s")
        start = time.perf_counter()
        base, token = stack.enter_context(formgrader(course))
        print(f"formgrader started: {time.perf_counter() - start:.1f} s")
        student = sorted(files)[len(files) // 2]
        url = submission_url(course, base, token, student)
        first, size = _fetch(url)
        again = [_fetch(url)[0] for _ in range(args.repeat)]
        print(f"one submission's page ({student}, {size / 1024:.0f} KiB of HTML) served by formgrader: "
              f"first {first:.3f} s, then median {statistics.median(again):.3f} s of {args.repeat} "
              f"(min {min(again):.3f}, max {max(again):.3f})")
        loads = _browser_loads(url, args.repeat)
        if loads is None:
            print("headless Chromium: not measured (no Playwright or no system Chromium)")
        else:
            print(f"the same page loaded in headless Chromium: first {loads[0]:.3f} s, median "
                  f"{statistics.median(loads):.3f} s of {len(loads)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
