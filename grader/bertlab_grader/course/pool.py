"""The worker pool: trusted grader workers forked from a warm fork server, each with one warm
sandbox, taking submissions in and sending results dicts out (the cohort run's engine).

Each worker's sandbox runs under its own unprivileged uid (RLIMIT_NPROC counts processes per uid:
with a shared one, one student's fork bomb would starve the other workers' students).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from multiprocessing import forkserver
from multiprocessing.connection import wait
from multiprocessing.reduction import DupFd
from pathlib import Path

from bertlab.tasks import EXERCISE_TASKS
from bertlab_grader.core.failures import MAX_ATTEMPTS, SUBMISSION_DEADLINE_S, RunStopped
from bertlab_grader.core.locations import KIT_ROOT
from bertlab_grader.course.schedule import Job, Schedule
from bertlab_grader.course.settings import CourseSettings
from bertlab_grader.course.submissions import SubmissionSources
from bertlab_grader.grading.segments import Part, preflight_share
from bertlab_grader.performance import gate as timing_gate
from bertlab_grader.performance import record as timing_record
from bertlab_grader.sandbox.bubblewrap import bubblewrap_status, require_isolation
from bertlab_grader.sandbox.template_process import StartedTemplate, TemplateCommand, TemplateHandoff, can_hand_off

SANDBOX_UID_BASE = 61000  # worker k's sandbox runs as uid 61000 + k (when the grader runs as root)


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


# ---------------------------------------------------------------------------------------------------
# Grading one submission (runs inside a trusted grader worker)


def _end_with_the_main_process() -> None:
    """Make this worker end the moment the main process is gone, however it went (SIGKILL included):
    otherwise it would grade on to the end of its submission, and its sandbox with it, for nobody.
    Its sandbox's bubblewrap dies with it (--die-with-parent), and everything inside with bubblewrap."""
    parent = mp.parent_process()  # the main process, also for a worker forked by the fork server
    if parent is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="bertlab-end-with-main", daemon=True).start()


def _worker_main(conn, settings: CourseSettings, slot: int, gate=None, timings: str | None = None,
                 preflight_tasks: tuple[str, ...] = EXERCISE_TASKS, template=None) -> None:
    """A trusted grader worker: one warm sandbox, a preflight, then submissions in, results out.

    Jobs from the main process: (student, path, None) grades a whole submission; (student, path,
    part) one part of a submission graded in segments (a ``Part``'s JSON, grader/bertlab_grader/grading/segments.py).
    Messages to the main process: ("ready", preflight problem or None), ("fatal", cause),
    ("result", results dict), ("part", a ``PartResult``'s JSON), ("grader_failure", cause).
    Each worker's sandbox runs under its own unprivileged uid, because RLIMIT_NPROC counts processes
    per uid: with a shared uid, one student's fork bomb would starve the other workers' students.
    ``settings``: the course (its sandbox hides the course and the gradebook; the instructor's sandbox
    choice). ``gate`` (bertlab_grader.performance.gate.TimingGate): everything but the performance task's timings is
    work; a timing has the machine to itself.
    ``timings``: the course's timing record (grader/bertlab_grader/performance/record.py), or None to keep none: each
    distinct submission is timed once, and identical files reuse that measurement.
    ``preflight_tasks``: this worker's share of the preflight (grading/segments.py, ``preflight_share``).
    ``template``: its sandbox's template, which the main process started for it (``start_template``),
    or None to start one here.
    """
    # Ctrl-C in the terminal reaches the whole process group: the main process decides what stops
    # (it records what was graded, then stops the workers); a worker stopped by it mid-job would only
    # print a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Imported here, in the worker: the main process never imports pytest or the sandbox's client.
    from bertlab_grader.grading.prepared import PreparedGrader

    import torch

    _end_with_the_main_process()
    torch.set_num_threads(1)  # one core per worker: N workers share the machine without oversubscribing
    timing_gate.install(gate, slot)
    try:
        record = (timing_record.TimingRecord(Path(timings), timing_record.protocol_digest())
                  if timings is not None else None)
        # MiniLM and the reference data are loaded while the sandbox's template warms up
        # (PreparedGrader.start runs warm_up); the fork server imported the code for both.
        grader = PreparedGrader.start(settings.assignment, settings.hidden_paths, SANDBOX_UID_BASE + slot,
                                      settings.unsafe_no_sandbox, preflight_tasks, template)
    except Exception as exc:  # noqa: BLE001 - whatever stops a worker from starting is the grader's
        conn.send(("fatal", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", grader.problem))
    with grader:
        while True:
            job = conn.recv()
            if job is None:
                break
            student, files, part = job
            try:
                sources = SubmissionSources(files)
                if part is None:
                    conn.send(("result", grader.grade(sources, student, timings=record)))
                else:
                    done = grader.grade(sources, student, Part.from_json(part), timings=record)
                    conn.send(("part", done.to_json()))
            except Exception as exc:  # noqa: BLE001 - a grader failure or a grader bug: never the student's
                conn.send(("grader_failure", f"{type(exc).__name__}: {exc}"))


def start_template(settings: CourseSettings, slot: int) -> StartedTemplate | None:
    """Start the sandbox's template of worker ``slot`` in this process, now, to hand it to the worker
    (sandbox/template_process.py); None where that cannot be done (no bubblewrap, no pidfds): the
    worker then starts its own.

    Why: a worker exists only once the fork server has imported torch and the hidden suites (4 s of one
    core), and its template then takes as long again to import torch and load the models. Started
    here, the templates warm up on the other core during those imports (a plain run of one new hand-in
    on 2 cores, traced: 18.6 s to 21.6 s instead of 24.1 s, the cores idle 3.4 s instead of 8.1 s). The worker checks that the template is the one it would
    start (``Sandbox._adopt``). bwrap dies with the thread that started it (--die-with-parent): call
    this from the main thread. ``_Worker.kill`` ends it."""
    if not bubblewrap_status()[0] or not can_hand_off():
        return None
    try:
        return TemplateCommand(KIT_ROOT, settings.hidden_paths, True, SANDBOX_UID_BASE + slot).start()
    except OSError:
        return None  # (the worker starts its own, and reports in its own words what stops it)


class _SentHandoff:
    """A ``TemplateHandoff`` as a worker's argument: its control socket, log and pidfd cross as file
    descriptors, which multiprocessing duplicates into the worker as it starts it (the rest is plain
    values); the worker receives a ``TemplateHandoff`` again."""

    def __init__(self, handoff: TemplateHandoff):
        self.handoff = handoff

    def __reduce__(self):
        h = self.handoff
        return (_handoff_arrived, (h.control, DupFd(h.log.fileno()), DupFd(h.pidfd), h.pid, h.key, h.spawned_at))


def _handoff_arrived(control, log, pidfd, pid: int, key: tuple, spawned_at: float) -> TemplateHandoff:
    return TemplateHandoff(control, os.fdopen(log.detach(), "w+b"), pid, key, spawned_at, pidfd.detach())


class _Worker:
    """Main-process handle of one grader worker process. ``template``: its sandbox's template, which
    this process started for it (``start_template``; None: the worker starts its own)."""

    def __init__(self, ctx, settings: CourseSettings, slot: int, gate=None, timings: str | None = None,
                 preflight_tasks: tuple[str, ...] = EXERCISE_TASKS, template: StartedTemplate | None = None):
        self.settings, self.slot, self.gate, self.timings = settings, slot, gate, timings
        self.preflight_tasks = preflight_tasks
        self.template = template  # (kept to end and reap its process once the worker is gone)
        handoff = template.hand_off() if template is not None else None
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main,
                                   args=(child, settings, slot, gate, timings, preflight_tasks,
                                         None if handoff is None else _SentHandoff(handoff)),
                                   daemon=True)
        try:
            self.process.start()
        except BaseException:
            if template is not None:
                template.end()
            raise
        finally:
            child.close()
            if handoff is not None:
                handoff.close()  # (the worker holds its own copies now)
        self.ready = False
        self.job: Job | None = None
        self.started = 0.0

    def give(self, job: Job):
        self.job, self.started = job, time.monotonic()
        # The files as the run read them when it took their digest (Submission.sources), not read again
        # here: what is graded is what is recorded.
        self.conn.send((job.submission.student, dict(job.submission.sources()),
                        None if job.part is None else job.part.to_json()))

    def stop(self):
        try:
            self.conn.send(None)
        except (OSError, ValueError):
            pass

    def kill(self):
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        if self.template is not None:  # the worker closed it, unless it died: either way it ends here
            self.template.end()
        if self.gate is not None:  # it may have died working or timing: the others must not wait for it
            self.gate.forget(self.slot)


def worker_context():
    """Grader workers are forked from a fork server that imported ``bertlab_grader.course.worker_preload`` (torch,
    transformers' BERT code, the hidden suites: about 4 s of CPU) once, instead of each worker paying
    for it on a shared core. The fork server is a fresh interpreter, not a copy of this process, and nothing in it
    has started a thread pool (see grader/bertlab_grader/course/worker_preload.py). Set BERTLAB_WORKER_START=spawn to give
    each worker a fresh interpreter of its own instead."""
    if os.environ.get("BERTLAB_WORKER_START", "forkserver") == "spawn" or "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["bertlab_grader.course.worker_preload"])
    return ctx


def start_fork_server() -> None:
    """Start the workers' fork server now: its imports (torch, transformers' BERT code, the hidden
    suites: seconds of one core) then runs while this process still prepares the run, and ``start_workers`` forks from a
    server that is warm sooner. Nothing happens with BERTLAB_WORKER_START=spawn."""
    if worker_context().get_start_method() == "forkserver":
        forkserver.ensure_running()


def start_workers(n: int, settings: CourseSettings, timings: Path | None = None) -> list[_Worker]:
    """Start ``n`` grader workers for the course of ``settings`` now; they warm up (seconds) while the
    caller prepares the course.
    They share one TimingGate (grader/bertlab_grader/performance/gate.py), which this process joins as well, and
    the timing record at ``timings`` (grader/bertlab_grader/performance/record.py; None: keep none)."""
    ctx = worker_context()
    gate = timing_gate.TimingGate(ctx, n)
    timing_gate.install(gate, timing_gate.NO_ONE)
    where = str(timings) if timings is not None else None
    # Every template first: the first worker's start waits for the fork server's imports.
    templates = [start_template(settings, slot) for slot in range(n)]
    # The pool shares the preflight out: together the workers grade the reference on every task.
    return [_Worker(ctx, settings, slot, gate, where, preflight_share(slot, n), templates[slot])
            for slot in range(n)]


STARTED = ("ready", "fatal")  # what a worker says once, when its start-up and preflight are over


def take_start_message(w: _Worker, kind: str, payload) -> None:
    """Take a worker's start-up message: ready for jobs, or RunStopped (it could not start, or the
    reference lost points in its sandbox: no student may be graded)."""
    if kind == "fatal":
        raise RunStopped(f"a grader worker could not start: {payload}")
    if payload is not None:
        from bertlab_grader.grading.preflight import explain

        raise RunStopped(explain(payload))
    w.ready = True


def died_while_starting(w: _Worker) -> RunStopped:
    w.process.join(1)
    return RunStopped(f"a grader worker died while starting (exit code {w.process.exitcode})")


def wait_until_ready(pool: list[_Worker]) -> None:
    """Wait until every worker of ``pool`` has started and passed its preflight (seconds to tens of
    seconds after ``start_workers``). `bertlab grade --watch` says it is watching only then, so that
    the first hand-in is graded by warm workers instead of waiting through their start-up. Raises
    RunStopped when a worker cannot start, fails its preflight, or dies while starting; the caller
    stops the pool."""
    while not all(w.ready for w in pool):
        waiting = [w for w in pool if not w.ready]
        ready = wait([w.conn for w in waiting] + [w.process.sentinel for w in waiting])
        for w in waiting:
            message = None
            if w.conn in ready:  # (readable: a message, or the end of the pipe)
                try:
                    message = w.conn.recv()
                except (EOFError, OSError):
                    raise died_while_starting(w) from None
            if message is not None:
                take_start_message(w, *message)
            elif w.process.sentinel in ready:
                raise died_while_starting(w)


def pool_results(submissions, pool: list[_Worker], keep_workers: bool = False,
                 part_seconds: dict[str, float] | None = None):
    """Yield (submission, result, None) or (submission, None, grader failure cause) as the grader
    workers of ``pool`` finish; a worker that dies is replaced and its job tried once more.
    The last submissions are graded in parts on several workers at once (``course/schedule.py``).
    Raises RunStopped when a worker cannot start or fails its preflight. The workers are asked to stop
    at the end (the caller then waits for them: ``stop_workers``), unless ``keep_workers`` (`bertlab grade --watch`: the same warm workers grade the next
    hand-in; they are stopped all the same when this stops early, by an exception or an interrupt).
    ``part_seconds``: how long each part of a split submission last took (``Schedule``), updated
    in place."""
    ctx = worker_context()
    schedule = Schedule(submissions, len(pool), part_seconds)
    try:
        while schedule or any(w.job for w in pool):
            for w in pool:
                if w.ready and w.job is None and schedule:
                    w.give(schedule.take())
            ready = wait([w.conn for w in pool] + [w.process.sentinel for w in pool], timeout=1.0)
            for i, w in enumerate(list(pool)):
                died = w.process.sentinel in ready and not w.conn.poll()
                overdue = w.job is not None and time.monotonic() - w.started > SUBMISSION_DEADLINE_S
                if w.conn in ready and w.conn.poll():
                    try:
                        kind, payload = w.conn.recv()
                    except (EOFError, OSError):
                        died = True
                    else:
                        if kind in STARTED:
                            take_start_message(w, kind, payload)
                        else:
                            outcome = schedule.finished(w.job, kind, payload, time.monotonic() - w.started)
                            w.job = None
                            if schedule:  # the next job first: the worker grades while we record this one
                                w.give(schedule.take())
                            if outcome is not None:
                                yield outcome
                if died or overdue:
                    if w.job is not None:
                        job = w.job
                        why = (f"grading took longer than {SUBMISSION_DEADLINE_S:g} s "
                               "(BERTLAB_SUBMISSION_DEADLINE_S)" if overdue
                               else "the grader worker stopped unexpectedly")
                        if job.attempt < MAX_ATTEMPTS and not overdue:
                            schedule.retry(job)
                        else:
                            outcome = schedule.finished(job, "grader_failure", why)
                            if outcome is not None:
                                yield outcome
                    elif not w.ready:
                        raise died_while_starting(w)
                    w.kill()
                    pool[i] = _Worker(ctx, w.settings, w.slot, w.gate, w.timings, w.preflight_tasks,
                                      start_template(w.settings, w.slot))
    except BaseException:
        stop_workers(pool)
        raise
    if not keep_workers:
        stop_workers(pool, wait=False)  # (the caller waits for them: course/runner.py)


def stop_workers(pool: list[_Worker], wait: bool = True) -> None:
    """Ask every worker to finish (its sandbox closes), then make sure each is gone; with ``wait``
    False only ask (a worker asked to stop grades nothing more, closes its sandbox and exits: the
    caller goes on meanwhile, and makes sure later, with ``wait``)."""
    for w in pool:
        w.stop()
    if not wait:
        return

    for w in pool:
        w.process.join(10)
        w.kill()
    if pool:
        timing_gate.install(None, timing_gate.NO_ONE)


def check_sandbox(settings: CourseSettings) -> None:
    """Refuse at once, before any worker starts, when bubblewrap cannot isolate student code (unless
    the instructor named --unsafe-no-sandbox)."""
    require_isolation(settings.unsafe_no_sandbox)
