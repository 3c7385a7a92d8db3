"""`bertlab doctor [COURSE]`: can this machine grade? One line per check, exit 1 on any failure.

Checks, in the order a failure would matter:
    bubblewrap   present, and able to create its namespaces (a real start, not a look for the binary)
    model        the packaged all-MiniLM-L6-v2 loads offline
    course       (with COURSE) the folder, submitted/, the assignment, folders holding no submission
    gradebook    (with COURSE) it can be opened and written
    preflight    the reference solution gets full marks in a real grading sandbox
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:  # (the course's modules are imported by the checks that need them: doctor starts fast)
    from bertlab_grader.course.settings import CourseSettings

OK, FAIL, SKIP = "ok", "FAIL", "skip"


def _check_bubblewrap() -> tuple[str, str]:
    from bertlab_grader.sandbox.bubblewrap import bubblewrap_status

    ok, why = bubblewrap_status()
    return (OK if ok else FAIL), why


def _check_model() -> tuple[str, str]:
    from bertlab.models import named_model

    start = time.monotonic()
    model = named_model("minilm")
    n = sum(p.numel() for p in model.parameters())
    return OK, f"all-MiniLM-L6-v2 loads offline ({n:,} parameters, {time.monotonic() - start:.1f} s)"


def _check_course(settings: CourseSettings) -> tuple[str, str]:
    from bertlab_grader.course.submissions import scan_submitted
    from bertlab_grader.course.preconditions import check_course_for_grading

    check_course_for_grading(settings)
    submissions, layout = scan_submitted(settings)
    text = f"{settings.root}: {len(submissions)} submission(s) of {settings.assignment}"
    if layout:
        text += f"; {len(layout)} folder(s) under submitted/ hold none (`bertlab grade` lists them)"
    return OK, text


def _check_gradebook(settings: CourseSettings) -> tuple[str, str]:
    from bertlab_grader.course.config import check_gradebook

    url = check_gradebook(settings)
    return OK, f"writable: {url}"


def _check_preflight() -> tuple[str, str]:
    from bertlab_grader.grading.prepared import PreparedGrader

    start = time.monotonic()
    with PreparedGrader.start() as grader:
        problem = grader.problem
    if problem is not None:
        return FAIL, f"the reference solution did not get full marks in the sandbox: {problem}"
    return OK, f"the reference solution gets full marks in the sandbox ({time.monotonic() - start:.0f} s)"


def _run(name: str, check: Callable[[], tuple[str, str]]) -> str:
    try:
        status, text = check()
    except Exception as exc:  # noqa: BLE001 - a failed check is a line, not a traceback
        status, text = FAIL, f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
    line = f"{status:<5} {name:<10} {text}"
    print(line, flush=True)
    return status


def run_doctor(settings: Optional[CourseSettings] = None, preflight: bool = True) -> int:
    """Print one line per check (the course's two only when ``settings`` names one); 0 when none
    failed, else 1."""
    statuses = [_run("bubblewrap", _check_bubblewrap), _run("model", _check_model)]
    if settings is not None:
        statuses.append(_run("course", lambda: _check_course(settings)))
        statuses.append(_run("gradebook", lambda: _check_gradebook(settings)))
    else:
        for name in ("course", "gradebook"):
            print(f"{SKIP:<5} {name:<10} no COURSE given (bertlab doctor COURSE checks it)")
    if not preflight:
        print(f"{SKIP:<5} {'preflight':<10} --no-preflight")
    elif statuses[0] == FAIL:
        print(f"{SKIP:<5} {'preflight':<10} needs bubblewrap")
        statuses.append(FAIL)
    else:
        statuses.append(_run("preflight", _check_preflight))
    failed = statuses.count(FAIL)
    print(f"{'all checks passed' if not failed else f'{failed} check(s) failed'}", file=sys.stderr)
    return 1 if failed else 0


def run_cluster_doctor(scheduler: str, assignment: str = "week7", wait_s: Optional[float] = None) -> int:
    """`bertlab doctor --scheduler ADDRESS`: set the grader up on every Dask worker of that scheduler,
    as a run would (bubblewrap, the model, a preflight), and print one line per worker; 0 when every
    worker can grade, 1 when one cannot or none is there. An unreachable scheduler, or no Dask
    distributed here, is a UsageError (2)."""
    from bertlab_grader.cluster import worker_setup
    from bertlab_grader.cluster.connect import dask_client
    from bertlab_grader.cluster.dispatch import ClusterGrading, wait_for_workers_s

    wait_s = wait_for_workers_s() if wait_s is None else wait_s
    start = time.monotonic()
    with dask_client(scheduler=scheduler) as client:
        grading = ClusterGrading(client, assignment, hide=[], unsafe_no_sandbox=False, quiet=True)
        grading.start()
        try:
            while True:  # until no worker is still warming up (or the wait is over)
                census = grading.census()
                warming = [a for a, s in census.items() if s["state"] in (worker_setup.WARMING, "none")]
                if census and not warming or time.monotonic() - start > wait_s:
                    break
                time.sleep(1.0)
        finally:
            grading.close()
    if not census:
        print(f"{FAIL:<5} {'workers':<10} the scheduler at {scheduler} has no workers: start some with "
              f"`dask worker {scheduler} --nthreads 1` (docs/cluster.md)", flush=True)
        return 1
    failed = 0
    for address, status in sorted(census.items()):
        ok = status["state"] == worker_setup.READY and status["resource"] >= 1
        if status["state"] in (worker_setup.WARMING, "none"):
            text = f"still setting up after {wait_s:g} s (BERTLAB_CLUSTER_WAIT_S)"
        elif ok:
            text = "; ".join(f"{name} {state}" for name, state, _ in status["steps"])
        else:
            text = status["cause"] or "its set-up failed"
        failed += not ok
        print(f"{OK if ok else FAIL:<5} {address} ({status.get('host')}): {text}", flush=True)
        for name, state, detail in status["steps"]:
            print(f"        {state:<4} {name:<10} {detail}", flush=True)
    print(f"{len(census) - failed} of {len(census)} Dask worker(s) can grade", file=sys.stderr)
    return 1 if failed else 0
