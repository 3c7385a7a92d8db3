"""Grading on a Dask cluster (grader/bertlab_grader/cluster/, docs/cluster.md), with real processes over loopback.

The module starts `dask scheduler --host 127.0.0.1` and two `dask worker` processes (each under its
nanny, as an instructor would), grades courses there with `bertlab grade --scheduler`, and checks
what a cluster can do to a run: the demo cohort gets the local runner's grades, a worker killed
with SIGKILL mid-submission costs nothing (each submission recorded once), a worker whose bubblewrap
cannot start grades nothing and is named, a resubmission is regraded, an unreachable scheduler
changes nothing, and a scheduler killed mid-run leaves what finished recorded for a rerun on
`--cluster local:2` to complete. The local runner's grades come from the `demo` fixture (conftest.py).
"""

from __future__ import annotations

import json
import operator
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("distributed", reason="the cluster extra: pip install 'bertlab[cluster]'")

from bertlab.tasks import EXERCISE_FILES  # noqa: E402
from bertlab_grader.cluster import task as cluster_task  # noqa: E402
from bertlab_grader.commands.demo import build_demo_course  # noqa: E402
from bertlab_grader.course import gradebook, journal, runner  # noqa: E402
from bertlab_grader.course.results import grade_differences  # noqa: E402
from bertlab_grader.course.settings import CourseSettings  # noqa: E402

from dask_processes import CliCluster  # noqa: E402


@pytest.fixture(scope="module")
def cli_cluster(tmp_path_factory):
    cluster = CliCluster(tmp_path_factory.mktemp("dask"))
    try:
        cluster.add_worker("w1")
        cluster.add_worker("w2")
        cluster.wait_for_workers(2)
        yield cluster
    finally:
        cluster.close()


def _course(base: Path, students: list[str]) -> Path:
    """The demo course, only ``students`` left in it."""
    course = build_demo_course(base / "course")
    for folder in (course / "submitted").iterdir():
        if folder.name not in students:
            shutil.rmtree(folder)
    return course


def _results(course: Path) -> dict:
    return {p.parent.parent.name: json.loads(p.read_text()) for p in course.glob("autograded/*/week7/results.json")}


def _bertlab(*args, timeout=900) -> subprocess.CompletedProcess:
    bertlab = Path(sys.executable).with_name("bertlab")
    return subprocess.run([str(bertlab), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def _assert_local_grades(cluster_results: dict, demo) -> None:
    local = {s: demo["results"][s] for s in cluster_results}
    differences = grade_differences(local, cluster_results)
    real = [d for d in differences if not d.startswith("speed scatter:")]
    assert not real, "the cluster graded differently from the local runner:\n  " + "\n  ".join(real)
    for line in differences:  # allowed (docs/cluster.md), but shown
        print(line)


# ---------------------------------------------------------------------------------------------------
# Without a cluster


@pytest.mark.slow  # (over 10 s: the fast loop leaves it to the whole suite)
def test_an_unreachable_scheduler_is_one_line_exit_2_and_changes_nothing(tmp_path):
    course = _course(tmp_path, ["alice"])
    before = sorted(str(p.relative_to(course)) for p in course.rglob("*"))
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = _bertlab("grade", course, "--scheduler", f"tcp://127.0.0.1:{port}", timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("bertlab grade:")]
    assert len(lines) == 1 and f"tcp://127.0.0.1:{port}" in lines[0] and "nothing was changed" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(str(p.relative_to(course)) for p in course.rglob("*")) == before, "the course changed"


# The kit's own command line, in a process where Dask's distributed cannot be imported (as without the
# cluster extra): None in sys.modules makes every import of it fail.
WITHOUT_DISTRIBUTED = ("import sys; sys.modules['distributed'] = None; from bertlab.cli import main; "
                       "sys.exit(main(sys.argv[1:]))")


@pytest.mark.parametrize("command", [["grade", "--cluster", "local:2"], ["grade", "--scheduler", "tcp://127.0.0.1:9"],
                                     ["doctor", "--scheduler", "tcp://127.0.0.1:9"]], ids=" ".join)
def test_without_the_cluster_extra_a_cluster_command_says_what_to_install_and_changes_nothing(tmp_path, command):
    course = _course(tmp_path, ["alice"])
    before = sorted(str(p.relative_to(course)) for p in course.rglob("*"))
    args = [command[0], *([str(course)] if command[0] == "grade" else []), *command[1:]]
    proc = subprocess.run([sys.executable, "-c", WITHOUT_DISTRIBUTED, *args], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"bertlab {command[0]}: grading on a cluster needs Dask distributed: pip install 'bertlab[cluster]'" \
        in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    assert sorted(str(p.relative_to(course)) for p in course.rglob("*")) == before, "the course changed"


def test_a_cluster_spec_that_is_not_local_n_is_a_usage_error(tmp_path):
    course = _course(tmp_path, ["alice"])
    proc = _bertlab("grade", course, "--cluster", "local:zero", timeout=120)
    assert proc.returncode == 2 and "local:N" in proc.stderr, proc.stderr


# ---------------------------------------------------------------------------------------------------
# A CLI scheduler and two CLI workers


@pytest.mark.slow
def test_the_demo_cohort_on_two_cli_workers_gets_the_local_runners_grades(cli_cluster, demo, tmp_path):
    course = build_demo_course(tmp_path / "course")
    proc = _bertlab("grade", course, "--scheduler", cli_cluster.address, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "on the Dask cluster at" in proc.stderr
    results = _results(course)
    assert sorted(results) == sorted(demo["results"]), "not every demo student was graded"
    assert all(r["sandboxed"] for r in results.values())
    _assert_local_grades(results, demo)


@pytest.mark.slow
def test_a_worker_killed_mid_submission_costs_nothing_and_nothing_is_recorded_twice(cli_cluster, demo, tmp_path,
                                                                                    monkeypatch):
    students = ["alice", "bob", "carol", "dave"]
    course = _course(tmp_path, students)
    recorded: list[str] = []
    real_record = gradebook.record_results

    def counting(settings, entries, **kwargs):  # the run's writer records in batches through it
        recorded.extend(e["result"]["student"] for e in entries)
        return real_record(settings, entries, **kwargs)

    monkeypatch.setattr(gradebook, "record_results", counting)
    killed: dict = {}
    with cli_cluster.client() as client:  # the scheduler keeps the events of earlier runs
        seen = {e.get("run") for _, e in client.get_events(cluster_task.EVENT_TOPIC)}

    def kill_the_first_busy_worker():
        with cli_cluster.client() as client:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                events = [e for _, e in client.get_events(cluster_task.EVENT_TOPIC) if e["run"] not in seen]
                if events:
                    event = events[0]
                    # At once: the event marks the start of a grading, and a warm worker grades a
                    # submission in about a second (a 1 s pause here let it finish first).
                    pid = client.run(os.getpid, workers=[event["worker"]])[event["worker"]]
                    os.kill(pid, signal.SIGKILL)
                    killed.update(event, pid=pid)
                    return
                time.sleep(0.1)

    killer = threading.Thread(target=kill_the_first_busy_worker, daemon=True)
    killer.start()
    summary = runner.run_course(CourseSettings(course), runner.RunOptions(scheduler=cli_cluster.address, quiet=True))
    killer.join(30)
    assert killed, "no grading started"
    assert summary.not_graded == {}, summary.format()
    assert sorted(summary.graded) == students
    assert sorted(recorded) == students, f"recorded: {sorted(recorded)} (each student once)"
    assert summary.retried == [killed["student"]], summary.format()
    print(f"SIGKILL trial: killed worker pid {killed['pid']} grading {killed['student']}; graded "
          f"{len(summary.graded)}, started again {summary.retried}, not graded {len(summary.not_graded)}, "
          f"recorded twice {len(recorded) - len(set(recorded))}")
    _assert_local_grades(_results(course), demo)
    cli_cluster.wait_for_workers(2)  # its nanny started it again


async def _offer_test_resource(amount, dask_worker=None):
    await dask_worker.set_resources(**{"bertlab-test": amount})


@pytest.mark.slow
def test_dask_does_not_wake_a_stranded_task_when_a_worker_gets_its_resource_so_the_dispatcher_resends_it(cli_cluster):
    """Why grader/bertlab_grader/cluster/dispatch.py sends a stranded submission again: on real Dask, a task that needs
    a resource nobody holds waits in "no-worker", and a worker offering that resource later (as every
    warm grader does, and as the other worker did in CI after the only warm one was killed) does not
    start it. A new task under a new key does start."""
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this module
    with cli_cluster.client() as client:
        worker = sorted(client.scheduler_info()["workers"])[0]
        client.run(_offer_test_resource, 0)  # every worker has the resource, none of it (a grader warming up)
        stranded = client.submit(operator.neg, 3, key="bertlab-test-stranded", pure=False, resources={"bertlab-test": 1})
        try:
            time.sleep(1.0)
            client.run(_offer_test_resource, 1, workers=[worker])
            time.sleep(3.0)
            if stranded.done():
                pytest.fail(f"Dask now starts a stranded task once a worker offers its resource ({stranded.status}): "
                            "the dispatcher's STRANDED_S resend could go (it does no harm meanwhile)")
            assert not any(stranded.key in keys for keys in client.processing().values())
            again = client.submit(operator.neg, 3, key="bertlab-test-again", pure=False, resources={"bertlab-test": 1})
            assert again.result(timeout=30) == -3
        finally:
            stranded.cancel()
            client.run(_offer_test_resource, 0)
            cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


@pytest.mark.slow
def test_a_resubmission_is_regraded_on_the_cluster_and_identical_files_get_identical_points(cli_cluster, tmp_path):
    course = _course(tmp_path, ["alice", "carol"])
    first = _bertlab("grade", course, "--scheduler", cli_cluster.address)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    for name in EXERCISE_FILES:  # carol hands in alice's files
        shutil.copy(course / "submitted" / "alice" / "week7" / name, course / "submitted" / "carol" / "week7" / name)
    second = _bertlab("grade", course, "--scheduler", cli_cluster.address)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert "graded: 1 (carol)" in second.stdout and "of them graded again" in second.stdout, second.stdout
    assert "unchanged since last grading (skipped): 1" in second.stdout
    results = _results(course)
    alice = [(t["name"], t["points"]) for t in results["alice"]["tests"]]
    carol = [(t["name"], t["points"]) for t in results["carol"]["tests"]]
    assert carol == alice, "identical files got different points (the timing record is the main process's)"


@pytest.mark.slow
def test_a_worker_whose_bubblewrap_cannot_start_grades_nothing_and_is_named(cli_cluster, tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "bwrap").write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    (fake / "bwrap").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ.get('PATH', '')}"}
    cli_cluster.add_worker("no-bwrap", env=env)
    try:
        cli_cluster.wait_for_workers(3)
        doctor = _bertlab("doctor", "--scheduler", cli_cluster.address, timeout=600)
        assert doctor.returncode == 1, doctor.stdout + doctor.stderr
        bad = [line for line in doctor.stdout.splitlines() if line.startswith("FAIL")]
        good = [line for line in doctor.stdout.splitlines() if line.startswith("ok ")]
        assert len(bad) == 1 and "bubblewrap" in bad[0] and "Permission denied" in bad[0], doctor.stdout
        assert len(good) == 2, doctor.stdout
        assert "2 of 3 Dask worker(s) can grade" in doctor.stderr

        course = _course(tmp_path, ["alice", "bob"])
        proc = _bertlab("grade", course, "--scheduler", cli_cluster.address)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert "Dask workers that could not grade (they graded nothing): 1" in proc.stdout, proc.stdout
        assert "bubblewrap" in proc.stdout.split("Dask workers that could not grade")[1]
        assert sorted(_results(course)) == ["alice", "bob"]
        last_run = json.loads((course / ".bertlab" / "last-run-week7.json").read_text())
        assert len(last_run["unfit_workers"]) == 1
    finally:
        cli_cluster.stop_worker("no-bwrap")


@pytest.mark.slow
def test_ctrl_c_keeps_every_finished_result_and_half_writes_nothing(cli_cluster, tmp_path):
    course = _course(tmp_path, ["alice", "bob", "carol", "dave"])
    bertlab = Path(sys.executable).with_name("bertlab")
    # (SIGINT as a terminal's Ctrl-C delivers it: a shell's background job, as CI may run this suite
    # in, starts its children with SIGINT ignored, and Python then never raises KeyboardInterrupt.)
    proc = subprocess.Popen([str(bertlab), "grade", str(course), "--scheduler", cli_cluster.address],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 600

    def finished() -> bool:  # a result journaled (the run's writer writes it with its batch, or on Ctrl-C)
        for path in journal.journal_paths(CourseSettings(course, "week7")):
            try:
                if journal.read_entries(path):
                    return True
            except FileNotFoundError:  # the run finished and removed it just now
                pass
        return bool(list(course.glob("autograded/*/week7/results.json")))

    while not finished() and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert "interrupted" in err and "Traceback" not in err, err[-2000:]
    results = _results(course)  # every one of them whole (json.loads would raise on half a file)
    assert results, "the result that finished before Ctrl-C is lost"
    left = [p for p in course.rglob("*") if p.name.startswith(".") and p.suffix in (".tmp", ".part")]
    assert not left, f"half-written files: {left}"
    from nbgrader.api import Gradebook

    from bertlab_grader.course.config import course_db_url

    with Gradebook(course_db_url(course)) as gb:
        in_gradebook = sorted(s.student.id for s in gb.assignment_submissions("week7"))
    # (results.json is written last: a result is complete once it exists; the next run regrades the rest)
    assert set(results) <= set(in_gradebook), "a results.json without its gradebook entry"


@pytest.mark.slow
def test_the_scheduler_gone_mid_run_keeps_what_finished_and_a_local_cluster_grades_the_rest(cli_cluster, demo,
                                                                                           tmp_path, monkeypatch):
    # (Last in the module: it kills the module's scheduler.)
    students = ["alice", "bob", "carol", "dave"]
    course = _course(tmp_path, students)
    real_record = journal.ResultWriter.record

    def record_then_kill(writer, result, **kwargs):  # the first result journaled, the scheduler goes
        real_record(writer, result, **kwargs)
        if cli_cluster.scheduler.poll() is None:
            os.kill(cli_cluster.scheduler.pid, signal.SIGKILL)

    monkeypatch.setattr(journal.ResultWriter, "record", record_then_kill)
    summary = runner.run_course(CourseSettings(course), runner.RunOptions(scheduler=cli_cluster.address, quiet=True))
    monkeypatch.undo()
    assert summary.exit_code == 1 and summary.stopped and "scheduler" in summary.stopped, summary.format()
    assert summary.graded, "the result recorded before the scheduler went away is lost"
    assert sorted(summary.graded + list(summary.not_graded)) == students, summary.format()
    assert sorted(_results(course)) == sorted(summary.graded)

    rest = _bertlab("grade", course, "--cluster", "local:2")
    assert rest.returncode == 0, rest.stdout[-2000:] + rest.stderr[-2000:]
    assert f"graded: {len(summary.not_graded)} " in rest.stdout, rest.stdout
    assert f"unchanged since last grading (skipped): {len(summary.graded)}" in rest.stdout
    assert sorted(_results(course)) == students
    _assert_local_grades(_results(course), demo)
    assert not [p for p in Path(tempfile.gettempdir()).glob("bertlab-dask-*")], \
        "the local cluster's local_directory was left behind"
