"""The cluster dispatcher's rules (grader/bertlab_grader/cluster/dispatch.py), against a stand-in for Dask's client.

The real processes are in test_cluster.py. Here each rule gets a case of its own, in milliseconds: no
more in flight than workers that can grade; a copy of files being timed waits and then carries that
measurement; an answer from a worker that turned out unfit goes elsewhere; Dask's KilledWorker and
a grader failure are never grades; a worker's answer that is not a result is refused; a submission
that Dask stranded (no worker ever starts it) is sent again, and one a worker is running is not.
"""

from __future__ import annotations

import contextlib
import json
import signal
from pathlib import Path

import pytest

pytest.importorskip("distributed", reason="the cluster extra: pip install 'bertlab[cluster]'")

from bertlab_grader.cluster import worker_setup  # noqa: E402
from bertlab_grader.cluster.dispatch import ClusterGrading  # noqa: E402
from bertlab_grader.performance.record import TimingRecord  # noqa: E402

TIMING = {"reference": [0.001, 0.001], "student": [0.002, 0.002], "gave_up": False}


class KilledWorker(Exception):
    """Named as Dask's: the dispatcher recognises it by name."""


class FakeFuture:
    def __init__(self, client, payload, key):
        self.client, self.payload, self.key = client, json.loads(payload), key
        self.status, self._value, self._error = "pending", None, None
        self.on_worker = None  # the worker running it, while pending

    def finish(self, answer):
        if isinstance(answer, Exception):
            self.status, self._error = "error", answer
        else:
            self.status, self._value = "finished", json.dumps(answer)

    def done(self):
        return self.status != "pending"

    def result(self):
        return self._value

    def exception(self):
        return self._error

    def release(self):
        self.client.outstanding.remove(self)

    def cancel(self):
        self.status = "cancelled"

    def add_done_callback(self, fn):
        fn(self)


class FakeClient:
    """Workers that are all ready; ``answer(payload)`` decides what each submission gets back (None:
    it stays pending; the future being answered is ``outstanding[-1]``)."""

    status = "running"

    def __init__(self, answer, workers=2):
        self.answer, self.workers = answer, workers
        self.outstanding: list[FakeFuture] = []
        self.payloads: list[dict] = []
        self.most_in_flight = 0

    def register_plugin(self, plugin):
        pass

    def unregister_worker_plugin(self, name):
        pass

    def get_events(self, topic):
        return []

    def scheduler_info(self, n_workers=-1):
        return {"workers": {f"tcp://w{i}": {"host": "h", "resources": {worker_setup.RESOURCE: 1}}
                            for i in range(self.workers)}}

    def run(self, fn, on_error="return"):
        return {f"tcp://w{i}": {"state": worker_setup.READY, "cause": None, "steps": [], "host": "h"}
                for i in range(self.workers)}

    def processing(self):
        running = {f"tcp://w{i}": () for i in range(self.workers)}
        for future in self.outstanding:
            if future.status == "pending" and future.on_worker:
                running[future.on_worker] += (future.key,)
        return running

    def submit(self, fn, payload, key, **kwargs):
        future = FakeFuture(self, payload, key)
        self.outstanding.append(future)
        self.most_in_flight = max(self.most_in_flight, len(self.outstanding))
        self.payloads.append(future.payload)
        answer = self.answer(future.payload)
        if answer is not None:
            future.finish(answer)
        return future


class Submission:
    """A stand-in for course.submissions.Submission: a student and the files the run read once."""

    def __init__(self, student, files):
        self.student, self.path, self.files = student, student, files

    def sources(self):
        return self.files


def _result(student):
    return {"student": student, "assignment": "week7", "score": 1.0, "max_score": 1.0, "tests": []}


def _grade(client, submissions, record=None):
    grading = ClusterGrading(client, "week7", hide=[], unsafe_no_sandbox=False, quiet=True)
    return list(grading.results(submissions, record))


def test_no_more_in_flight_than_workers_that_can_grade():
    client = FakeClient(lambda p: {"result": _result(p["student"]), "measured": {}})
    got = _grade(client, [Submission(f"s{i}", {"cka.py": str(i)}) for i in range(7)])
    assert sorted(s.student for s, result, _ in got if result) == [f"s{i}" for i in range(7)]
    assert client.most_in_flight <= 2


def test_a_copy_of_files_being_timed_waits_and_carries_that_measurement(tmp_path):
    record = TimingRecord(tmp_path / "timings.json", "protocol")

    def answer(payload):
        measured = {} if payload["known_timings"] else {"masked_mean_pool": {"measured_at": "now", "timing": TIMING}}
        return {"result": _result(payload["student"]), "measured": measured}

    client = FakeClient(answer)
    same = {"pooling.py": "def masked_mean_pool(): ...\n"}
    got = _grade(client, [Submission("a", same), Submission("b", dict(same)), Submission("c", {"pooling.py": "x"})],
                 record)
    assert len([r for _, r, _ in got if r]) == 3
    first, second = [p for p in client.payloads if p["student"] in ("a", "b")]
    assert first["known_timings"] == {} and second["known_timings"]["masked_mean_pool"]["timing"] == TIMING, \
        "the copy was timed again instead of carrying the first measurement"
    assert record.all_known(), "the measurement was not kept in the course's record"


def test_a_worker_that_turned_out_unfit_sends_the_submission_elsewhere():
    answers = iter([{"unfit": "preflight: short of full marks", "worker": "tcp://w0"}])

    def answer(payload):
        return next(answers, {"result": _result(payload["student"]), "measured": {}})

    client = FakeClient(answer)
    got = _grade(client, [Submission("a", {"cka.py": "1"})])
    assert [(s.student, r is not None, cause) for s, r, cause in got] == [("a", True, None)]
    assert len(client.payloads) == 2


@pytest.mark.parametrize("answer, expected", [
    (KilledWorker("tcp://w0 died 2 times"), "KilledWorker"),
    ({"grader_failure": "SandboxError: the sandbox died", "worker": "tcp://w1"}, "SandboxError"),
    ({"nonsense": 1}, "not a grading result"),
])
def test_faults_are_never_grades(answer, expected):
    client = FakeClient(lambda p: answer)
    got = _grade(client, [Submission("a", {"cka.py": "1"})])
    assert len(got) == 1 and got[0][1] is None and expected in got[0][2], got


@contextlib.contextmanager
def _fails_after(seconds: int, why: str):
    def fail(signum, frame):
        raise AssertionError(why)

    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def quick_census(monkeypatch):
    from bertlab_grader.cluster import dispatch

    monkeypatch.setattr(dispatch, "CENSUS_EVERY_S", 0.0)
    monkeypatch.setattr(dispatch, "STRANDED_S", 0.0)


def test_a_submission_no_worker_ever_starts_is_sent_again(quick_census):
    """Dask leaves a task in "no-worker" when the only worker that held the resource died, and does not
    wake it when another worker gets the resource later (tests/test_cluster.py shows it on real Dask)."""
    first: list = []

    def answer(payload):
        if not first:  # the first one is stranded: pending, and on no worker
            first.append(client.outstanding[-1])
            return None
        return {"result": _result(payload["student"]), "measured": {}}

    client = FakeClient(answer)
    with _fails_after(30, "the stranded submission was never sent again: the run waits for it for ever"):
        got = _grade(client, [Submission("a", {"cka.py": "1"})])
    assert [(s.student, r is not None) for s, r, _ in got] == [("a", True)], "graded once, after it was sent again"
    assert len(client.payloads) == 2 and first[0].status == "cancelled", "the stranded task was not replaced"
    assert client.payloads[0]["files"] == client.payloads[1]["files"]


@pytest.mark.slow  # (4 s or more: the fast loop stays under 5 minutes, docs/architecture.md)
def test_a_submission_a_worker_is_running_is_not_sent_again(quick_census):
    running: list = []
    real_processing = FakeClient.processing

    def answer(payload):
        future = client.outstanding[-1]
        future.on_worker = "tcp://w0"  # a long grading: it finishes after a few censuses
        running.append(future)
        return None

    client = FakeClient(answer)
    looks = []

    def processing():
        looks.append(1)
        if len(looks) == 5:
            running[0].finish({"result": _result("a"), "measured": {}})
        return real_processing(client)

    client.processing = processing
    got = _grade(client, [Submission("a", {"cka.py": "1"})])
    assert [(s.student, r is not None) for s, r, _ in got] == [("a", True)]
    assert len(client.payloads) == 1, "a submission a worker was grading was sent again"


def test_a_scheduler_gone_mid_run_stops_the_run_even_when_the_client_has_closed(quick_census, monkeypatch):
    """The scheduler dies while submissions are in flight, and Dask's client gives up reconnecting and
    closes: the run stops with its own message (RunStopped: what finished is recorded), not with the
    client's error about the futures it can no longer cancel (CI saw that race once)."""
    from distributed.client import ClosedClientError

    from bertlab_grader.core.failures import RunStopped

    client = FakeClient(lambda payload: None)  # every submission stays in flight
    looks: list = []
    real_info = FakeClient.scheduler_info

    def scheduler_info(n_workers=-1):
        looks.append(1)
        if len(looks) > 1:  # the scheduler is gone, and the client closed itself
            client.status = "closed"
            raise OSError("Connection refused")
        return real_info(client, n_workers)

    def cancel(self):
        raise ClosedClientError("Client is closed. Can't send cancel-keys message.")

    client.scheduler_info = scheduler_info
    monkeypatch.setattr(FakeFuture, "cancel", cancel)
    with _fails_after(30, "the run went on waiting for a scheduler that is gone"), \
            pytest.raises(RunStopped, match="scheduler went away"):
        _grade(client, [Submission("a", {"cka.py": "1"}), Submission("b", {"cka.py": "2"})])
