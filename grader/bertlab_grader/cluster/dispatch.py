"""The main process's side of a cluster run: submissions out as plain data, results back as JSON text,
a bounded number in flight, every fault named and none of them a grade.

``ClusterGrading.results`` yields what the local pool yields (grader/bertlab_grader/course/pool.py):
``(submission, results dict, None)`` or ``(submission, None, cause)``, one per submission, in the
order they finish; the runner records each before it takes the next.

In flight: at most one submission per worker that can grade. Dask does not queue tasks that need a
resource: submitted all at once, 10,000 would be assigned to the workers there and then, and a worker
that joins later would get none of them.

Faults, and what each becomes:

- a worker killed in the middle of a submission: Dask runs the task again elsewhere; the main
  process records it once, when its one result arrives (the re-runs are counted in ``retried``);
- a submission that keeps killing workers: Dask's ``KilledWorker`` after ``allowed-failures``
  (this run's local cluster: one retry, as the local runner); not graded, with the cause;
- a worker whose set-up falls short (bubblewrap, the model, the preflight): it never holds the
  resource and grades nothing; it is named with the cause (``unfit``), and the run stops only when
  no worker can grade;
- the scheduler gone mid-run: ``RunStopped`` (what finished is recorded, the rest is not graded);
- a submission stranded by the scheduler: when the only worker holding the resource dies, Dask puts
  its task in "no-worker", and a worker that gets the resource later (``set_resources``, as every
  worker does once it is warm) does not wake it (seen with distributed 2026.8: only a worker that joins or
  changes status does). A submission in flight that no worker has started for ``STRANDED_S`` while a
  worker that can grade has nothing to do is sent again under a new key (counted in ``retried`` when
  it had started before).

Identical files, identical points: the main process holds the course's timing record. A submission
whose files were timed before carries that measurement to its worker; a second copy of files being
timed right now waits until the first comes back with its measurement.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time
import uuid
from typing import Iterable, Iterator, Optional

from bertlab_grader.cluster import task as cluster_task
from bertlab_grader.cluster import worker_setup
from bertlab_grader.core.digest import sources_digest
from bertlab_grader.core.failures import RunStopped

CENSUS_EVERY_S = 2.0       # how often the workers are asked what they can do
SCHEDULER_LOST_S = 15.0    # the client has not been connected for this long: the scheduler is gone
MAX_BOUNCES = 5            # a submission sent back this often by workers that turned out unfit: not graded
STRANDED_S = 6.0           # in flight, started by no worker this long while one that can grade is idle: sent again


def wait_for_workers_s() -> float:
    """How long a run (or the doctor) waits for a worker that can grade: BERTLAB_CLUSTER_WAIT_S, 300 s."""
    return float(os.environ.get("BERTLAB_CLUSTER_WAIT_S", 300))


class ClusterGrading:
    """One run's grading on the Dask cluster of ``client`` (grader/bertlab_grader/cluster/connect.py).

    ``hide``: the main host's paths a sandbox must not see (the course, the gradebook); a worker on
    the same host hides them, one elsewhere has none of them."""

    def __init__(self, client, assignment: str, hide: list[str], unsafe_no_sandbox: bool, quiet: bool = False):
        self.client, self.assignment, self.quiet = client, assignment, quiet
        self.plugin = worker_setup.GraderPlugin(assignment, hide, unsafe_no_sandbox)
        self.unfit: dict[str, str] = {}         # worker address -> why it cannot grade
        self.started: collections.Counter = collections.Counter()  # student -> gradings started
        self.registered = False
        self.run_id = uuid.uuid4().hex
        self._finished = threading.Event()

    # -- the workers -------------------------------------------------------------------------------

    def start(self) -> None:
        """Register the grader plugin: every worker starts warming up (in the background) now."""
        self.client.register_plugin(self.plugin)
        self.registered = True

    def close(self) -> None:
        """Take the plugin off the workers (each closes its sandbox) and count the gradings started."""
        if not self.registered:
            return
        self.registered = False
        try:
            for _, event in self.client.get_events(cluster_task.EVENT_TOPIC):
                if isinstance(event, dict) and event.get("run") == self.run_id:  # (the scheduler keeps every run's)
                    self.started[event.get("student")] += 1
        except Exception:  # noqa: BLE001 - the scheduler may be gone: the counts are only a report
            pass
        try:
            self.client.unregister_worker_plugin(worker_setup.PLUGIN_NAME)
        except Exception:  # noqa: BLE001 - the scheduler may be gone, and with it the workers' plugin
            pass

    @property
    def retried(self) -> list[str]:
        """Students whose grading started more than once (a worker died under it)."""
        return sorted(s for s, n in self.started.items() if n > 1 and s is not None)

    def census(self) -> dict[str, dict]:
        """{worker address: worker_setup.status() + "resource"} for every worker the scheduler knows."""
        info = self.client.scheduler_info(n_workers=-1)["workers"]
        statuses = self.client.run(worker_setup.status, on_error="return") if info else {}
        census = {}
        for address, worker in info.items():
            status = statuses.get(address)
            if not isinstance(status, dict):
                status = {"state": "none", "cause": None, "steps": [], "host": worker.get("host")}
            status["resource"] = worker.get("resources", {}).get(worker_setup.RESOURCE, 0)
            census[address] = status
        return census

    def _take_census(self) -> int:
        """Note the workers that cannot grade (printed once each); the number that can."""
        census = self.census()
        fit = 0
        for address, status in census.items():
            if status["state"] == worker_setup.UNFIT and address not in self.unfit:
                self.unfit[address] = status["cause"] or "its set-up failed"
                if not self.quiet:
                    print(f"Dask worker {address} ({status.get('host')}) cannot grade: {self.unfit[address]}",
                          file=sys.stderr)
            if status["state"] == worker_setup.READY and status["resource"] >= 1:
                fit += 1
        self._workers = census
        return fit

    def _no_worker_can_grade(self) -> bool:
        return bool(self._workers) and all(s["state"] in (worker_setup.UNFIT, worker_setup.CLOSED)
                                           for s in self._workers.values())

    # -- the submissions ---------------------------------------------------------------------------

    def results(self, submissions: Iterable, record=None) -> Iterator[tuple]:
        """Grade ``submissions`` (``course.submissions.Submission``) on the cluster; yield a
        (submission, result, None) or (submission, None, cause) for each. What is sent is each
        submission's files as the run read them (``Submission.sources``, read once in the main
        process); ``record``: the course's TimingRecord or None."""
        pending = collections.deque((s, 0) for s in submissions)
        in_flight: dict = {}                 # future -> (submission, bounces, digest)
        timed_now: set[str] = set()          # digests of files out for their first measurement
        held = collections.defaultdict(list)  # digest -> copies waiting for that measurement
        untimed: set[str] = set()            # digests whose grading timed nothing (their copies need not wait)
        known = record.all_known() if record is not None else {}
        fit, last_census, no_fit_since, lost_since = 0, 0.0, time.monotonic(), None
        unassigned_since: dict[str, float] = {}  # key of a future in flight -> since when no worker has it
        self._workers: dict = {}

        def top_up(fit: int) -> None:
            """Out: up to one per worker that can grade; copies of files being timed wait for it."""
            while pending and len(in_flight) < fit:
                submission, bounces = pending.popleft()
                sources = submission.sources()
                digest = sources_digest(sources)
                if digest in timed_now:
                    held[digest].append((submission, bounces))
                    continue
                kept = known.get(digest, {})
                if record is not None and not kept and digest not in untimed:
                    timed_now.add(digest)
                in_flight[self._submit(submission, sources, kept)] = (submission, bounces, digest)

        try:
            while pending or in_flight or held:
                now = time.monotonic()
                if now - last_census > CENSUS_EVERY_S or (not in_flight and fit == 0):
                    stranded = []
                    try:
                        fit = self._take_census()
                        stranded = self._stranded(in_flight, unassigned_since, now) if in_flight else []
                        lost_since = None
                    except Exception as exc:  # noqa: BLE001 - the scheduler is unreachable
                        lost_since = lost_since or now
                        if now - lost_since > SCHEDULER_LOST_S or self.client.status in ("closed", "closing"):
                            raise RunStopped(f"the Dask scheduler went away mid-run ({type(exc).__name__}: "
                                             f"{exc}); what finished is recorded, a rerun grades the rest") from exc
                    last_census = now
                    if fit:
                        no_fit_since = now
                    elif self._no_worker_can_grade():
                        causes = "; ".join(f"{a}: {c}" for a, c in sorted(self.unfit.items()))
                        raise RunStopped(f"no Dask worker can grade ({causes})")
                    elif now - no_fit_since > wait_for_workers_s():
                        raise RunStopped(f"no Dask worker able to grade for {wait_for_workers_s():g} s "
                                         "(BERTLAB_CLUSTER_WAIT_S): start workers (docs/cluster.md)")
                    for future in stranded:  # sent again (the module docstring says why)
                        submission, bounces, digest = in_flight.pop(future)
                        future.cancel()
                        future.release()
                        unassigned_since.pop(future.key, None)
                        in_flight[self._submit(submission, submission.sources(), known.get(digest, {}))] = \
                            (submission, bounces, digest)
                top_up(fit)
                if not in_flight:
                    time.sleep(0.5)
                    continue
                self._finished.wait(1.0)  # (set by the futures' callbacks; distributed.wait needs a default client)
                self._finished.clear()
                finished = []
                for future in [f for f in in_flight if f.done()]:
                    submission, bounces, digest = in_flight.pop(future)
                    if digest in timed_now:  # its copies go next, with whatever it measured
                        timed_now.discard(digest)
                        pending.extendleft(reversed(held.pop(digest, [])))
                    outcome = self._outcome(future)
                    future.release()
                    if outcome is None:  # the scheduler lost it: checked on the next census
                        pending.appendleft((submission, bounces))
                        last_census = 0.0
                        continue
                    if "unfit" in outcome:
                        if bounces + 1 >= MAX_BOUNCES:
                            finished.append((submission, None, f"no Dask worker could take it ({outcome['unfit']})"))
                        else:
                            pending.appendleft((submission, bounces + 1))
                        last_census = 0.0  # that worker has turned out unfit: look again
                        continue
                    if "grader_failure" in outcome:
                        finished.append((submission, None,
                                         f"{outcome['grader_failure']} (on Dask worker {outcome.get('worker')})"))
                        continue
                    measured = _plain_timings(outcome.get("measured"))
                    if record is not None and measured:
                        kept_now = record.for_submission(digest)
                        with kept_now.locked():
                            for name, entry in measured.items():
                                kept_now.put(name, entry["timing"], entry["measured_at"])
                        known.setdefault(digest, {}).update(measured)
                    elif not known.get(digest):
                        untimed.add(digest)
                    finished.append((submission, outcome["result"], None))
                # The next submissions go out first: the workers grade while this process records.
                top_up(fit)
                yield from finished
        finally:
            from distributed.client import ClosedClientError

            for future in in_flight:
                try:
                    future.cancel()
                except (RuntimeError, ClosedClientError):
                    # The client closed first: Ctrl-C (the run's exit stack closed it, and this generator
                    # is finalised later), or the scheduler went away and the client gave up reconnecting
                    # (the RunStopped above is what the run reports). Nothing is left to cancel.
                    break

    def _stranded(self, in_flight: dict, unassigned_since: dict, now: float) -> list:
        """The futures in flight that no worker has started for STRANDED_S while a worker that can
        grade has nothing to do (see the module docstring); ``unassigned_since`` is kept up to date."""
        processing = self.client.processing()  # {worker address: keys it is running or about to run}
        assigned = {key for keys in processing.values() for key in keys}
        idle = [a for a, s in self._workers.items()
                if s["state"] == worker_setup.READY and s["resource"] >= 1 and not processing.get(a)]
        stranded = []
        for future in in_flight:
            if future.done() or future.key in assigned:
                unassigned_since.pop(future.key, None)
            elif now - unassigned_since.setdefault(future.key, now) >= STRANDED_S and idle:
                stranded.append(future)
        return stranded

    def _submit(self, submission, sources: dict, known_timings: dict):
        payload = json.dumps({"student": submission.student, "assignment": self.assignment, "run": self.run_id,
                              "files": dict(sources), "known_timings": known_timings})
        key = f"bertlab-grade-{submission.student}-{uuid.uuid4().hex[:8]}"
        future = self.client.submit(cluster_task.grade_submission, payload, key=key, pure=False,
                                    resources={worker_setup.RESOURCE: 1})
        future.add_done_callback(lambda _: self._finished.set())
        return future

    def _outcome(self, future) -> Optional[dict]:
        """The worker's answer as plain data; {"grader_failure": ...} for a task that failed; None
        when the scheduler lost the task (the client lost its connection)."""
        if future.status == "finished":
            try:
                outcome = json.loads(future.result())
            except (TypeError, ValueError) as exc:
                return {"grader_failure": f"the worker's answer is not JSON ({exc})"}
            if not isinstance(outcome, dict) or not ({"result", "grader_failure", "unfit"} & outcome.keys()):
                return {"grader_failure": "the worker's answer is not a grading result"}
            return outcome
        if future.status == "error":
            exc = future.exception()
            if type(exc).__name__ == "KilledWorker":
                return {"grader_failure": f"its grading stopped every Dask worker it ran on (Dask's KilledWorker, "
                                          f"after distributed.scheduler.allowed-failures retries): {exc}"}
            return {"grader_failure": f"the Dask task failed: {type(exc).__name__}: {exc}"}
        return None


def _plain_timings(measured) -> dict:
    """The new measurements of an answer, kept only if they are plain numbers as the record keeps them."""
    if not isinstance(measured, dict):
        return {}
    plain = {}
    for name, entry in measured.items():
        timing = entry.get("timing") if isinstance(entry, dict) else None
        if isinstance(timing, dict) and isinstance(entry.get("measured_at"), str) and all(
                isinstance(timing.get(side), list) and all(isinstance(x, (int, float)) for x in timing[side])
                for side in ("reference", "student")):
            plain[str(name)] = {"measured_at": entry["measured_at"], "timing": timing}
    return plain
