"""No process outlives its run: a grading run leaves no grader worker, bubblewrap or sandboxed server
behind, whether it ends on its own or is killed (SIGKILL, SIGTERM) in the middle of a submission.

Followed through the run's own process tree, which a kill hands over to init, and counted on the
whole machine before and after: every grading process that init has adopted (tests/processes.py), so a
second run going on beside the test (another session, an instructor's grading) is not taken for one
this test's runs left behind.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from processes import Descendants, orphaned_grading_processes
from bertlab.tasks import EXERCISE_FILES

STUBS = {name: (Path(__file__).resolve().parents[1] / "exercises" / name).read_text()
         for name in EXERCISE_FILES}
ERIN = Path(__file__).resolve().parents[1] / "grader" / "bertlab_grader" / "commands" / "demo_cohort" / "erin"

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def _submit(course: Path, student: str, files: dict[str, str]) -> None:
    folder = course / "submitted" / student / "week7"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)


def _grade(course: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bertlab.cli", "grade", str(course), "--workers", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _follow_until(proc: subprocess.Popen, tree: Descendants, done, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        tree.look()
        time.sleep(0.1)
    tree.look()


@pytest.mark.slow  # (over 10 s: the fast loop leaves it to the whole suite)
def test_a_grading_run_leaves_no_process_behind_when_it_ends_or_is_killed(tmp_path):
    course = tmp_path / "course"
    _submit(course, "s1", STUBS)
    before = orphaned_grading_processes()

    # 1. A run that ends on its own.
    proc = _grade(course)
    tree = Descendants(proc.pid)
    _follow_until(proc, tree, lambda: proc.poll() is not None)
    assert proc.returncode == 0, proc.stderr.read()[-3000:]
    assert any("bertlab_sandbox.server" in cmd for cmd in tree.seen.values()), "no sandbox was seen: nothing tested"
    assert not tree.left_over(), "after `bertlab grade` ended:\n" + "\n".join(tree.left_over(0))

    # 2. Killed while a submission is being graded (erin's cka.py takes its whole import limit).
    for sig in (signal.SIGKILL, signal.SIGTERM):
        student = f"erin_{sig.name.lower()}"
        _submit(course, student, {p.name: p.read_text() for p in ERIN.glob("*.py")})
        proc = _grade(course)
        tree = Descendants(proc.pid)
        # The worker up, and a sandboxed child serving erin (a job forked by the template).
        _follow_until(proc, tree, lambda: sum("bertlab_sandbox.server" in c for c in tree.seen.values()) >= 4
                      or proc.poll() is not None)
        time.sleep(1.0)
        tree.look()
        assert proc.poll() is None, "the run ended before it could be killed: nothing tested"
        proc.send_signal(sig)
        proc.wait(30)
        left = tree.left_over(grace_s=10.0)
        assert not left, f"after {sig.name} of `bertlab grade`, still running:\n" + "\n".join(left)

    deadline = time.monotonic() + 10
    while orphaned_grading_processes() - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not orphaned_grading_processes() - before, "grader or sandbox processes were left on the machine"
