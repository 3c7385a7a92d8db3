"""`bertlab audit`: do the hidden suites catch every mutant, and spare every correct variant?

Every entry of the mutant bank (bertlab_grader/mutants) is graded with the hidden suites, in process
(the bank is our own, trusted code, so no sandbox is needed and a run costs seconds). Verdicts:

    mutant    caught     loses points in its own task and none in any other
              MISSED     loses nothing in its own task
              LEAKS      loses points in another task too (a mistake must cost points once)
    variant   ok         full marks in every correctness task
              WRONGED    loses points somewhere
    solutions ok         full marks;   stubs ok   no points at all

The performance task is left out by default (it measures speed, not correctness; a slow-but-correct
variant is meant to lose speed points there). With hints on, every mutant that carries a hint must
be recognised by grader/bertlab_grader/grading/hints.py, and no variant may get one; and no message or
hint a student would read may name a mistake the entry does not make (a "foreign diagnosis": the
hint column shows "ok/N", N the failing tests that carry a hint; the summary counts foreign
diagnoses and the mutants told their own mistake by name).

Exit code 0 iff every row is as expected.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

from bertlab.implementations import load_directory, load_implementation
from bertlab.tasks import EXERCISE_TASKS
from bertlab_grader.authoring.task_coverage import coverage_gaps
from bertlab_grader.core.points import POINTS_EPSILON
from bertlab.mistakes import find as find_mistake, named_in
from bertlab_grader.grading.hints import diagnose, remember_mutant_failures
from bertlab_grader.grading.scoring import attach_hints, run_hidden_suite, warm_up
from bertlab_grader.mutants.bank import Entry, load_bank


@dataclass
class Row:
    name: str
    kind: str          # mutant, variant, solutions, stubs
    task: str
    lost: dict = field(default_factory=dict)   # task -> points lost
    points: dict = field(default_factory=dict)  # task -> points earned
    hint: str = ""     # "", "ok", "none", "wrong", "unwanted"
    hints_shown: int = 0   # failing tests that carry a hint
    named_own: bool = False  # some message or hint names the entry's own mistake
    foreign: tuple = ()    # "test: mistake id" for each message or hint naming a mistake the entry does not make
    verdict: str = ""
    ok: bool = False
    seconds: float = 0.0
    error: str = ""


#: Mistakes whose texts describe the same slip, so that naming one for the other is no false blame: a
#: mutant's messages may name either. Kept short on purpose: every pair here is a message that cannot
#: tell the two apart and is right for both.
SAME_MISTAKE: dict[str, tuple[str, ...]] = {
    # Centering in place in the helper both functions share changes cka_matrix's inputs too: the
    # cka_matrix test that says so is right about this code.
    "cka_in_place_centering": ("cka_matrix_centers_in_place",),
}


@contextlib.contextmanager
def _loaded(entry_kind: str, path: Optional[Path]):
    """The implementation of one row, for as long as it is graded."""
    if entry_kind == "solutions":
        yield load_implementation("reference")
    elif entry_kind == "stubs":  # the untouched stubs, generated from the reference as release does
        from bertlab_grader.authoring.stubs import build_exercises

        with tempfile.TemporaryDirectory(prefix="bertlab-audit-stubs-") as folder:
            build_exercises(Path(folder))
            yield load_directory(Path(folder))
    else:
        yield load_directory(path)


def grade_row(name: str, kind: str, task: str, path: Optional[str], tasks: tuple, expected_hint: str,
              check_hints: bool) -> Row:
    """Grade one entry; the row of the audit table."""
    started = time.monotonic()
    row = Row(name, kind, task)
    try:
        with _loaded(kind, Path(path) if path else None) as impl:
            result = run_hidden_suite(impl, student=name, tasks=tasks, hints=False)
            if check_hints:
                _messages_and_hints(row, impl, result["tests"], kind)
            maxima: dict[str, float] = {}
            got: dict[str, float] = {}
            for t in result["tests"]:
                maxima[t["task"]] = maxima.get(t["task"], 0.0) + t["max_points"]
                got[t["task"]] = got.get(t["task"], 0.0) + t["points"]
            row.lost = {t: round(maxima[t] - got[t], 6) for t in maxima}
            row.points = {t: round(got[t], 6) for t in got}
            if check_hints:
                row.hint = _hint_status(impl, kind, task, expected_hint, tasks)
    except Exception as exc:  # noqa: BLE001 - a broken entry is a row, not a crash of the audit
        row.error = f"{type(exc).__name__}: {exc}"
    row.seconds = time.monotonic() - started
    judge(row)
    return row


def _messages_and_hints(row: Row, impl, tests: list[dict], kind: str) -> None:
    """Attach the hints a student would get (as grading does), then read every failing test's message
    and hint for the known mistakes they name (bertlab.mistakes.named_in): the entry's own (a mutant's
    name is its mistake's id) is a right diagnosis; any other mistake of a task is a foreign diagnosis,
    a message that blames a mistake this code does not make. Kinds of failure any task can show (a
    wrong shape, a missing ValueError) are not mistakes of a task and never count as foreign."""
    failing = [t for t in tests if t["outcome"] in ("failed", "error", "timeout")]
    if kind == "mutant":  # the audit graded this mutant already: hand its failures to the hints
        remember_mutant_failures(row.name, row.task, (t["name"] for t in failing if t["task"] == row.task))
    attach_hints(impl, tests)
    row.hints_shown = sum(1 for t in failing if t.get("hint"))
    foreign = []
    for t in failing:
        for mistake_id in named_in(f"{t.get('message') or ''}\n{t.get('hint') or ''}"):
            if find_mistake(mistake_id).task is None:
                continue
            if kind == "mutant" and mistake_id == row.name:
                row.named_own = True
            elif mistake_id not in SAME_MISTAKE.get(row.name, ()):
                foreign.append(f"{t['name']}: {mistake_id}")
            else:
                row.named_own = True
    row.foreign = tuple(dict.fromkeys(foreign))


def _hint_status(impl, kind: str, task: str, expected_hint: str, tasks: tuple) -> str:
    if kind == "mutant":
        if not expected_hint:
            return ""
        got = diagnose(impl, task)
        return "ok" if got == expected_hint else ("none" if got is None else "wrong")
    if kind in ("variant", "solutions"):
        unwanted = [t for t in tasks if t in EXERCISE_TASKS and diagnose(impl, t)]
        return "unwanted:" + ",".join(unwanted) if unwanted else "ok"
    return ""


def judge(row: Row) -> None:
    if row.error:
        row.verdict, row.ok = f"ERROR ({row.error[:80]})", False
        return
    lost_tasks = {t for t, v in row.lost.items() if v > POINTS_EPSILON}
    if row.kind == "mutant":
        others = sorted(lost_tasks - {row.task})
        if row.task not in lost_tasks:
            row.verdict = "MISSED"
        elif others:
            row.verdict = "LEAKS into " + ",".join(others)
        else:
            row.verdict = "caught"
    elif row.kind in ("variant", "solutions"):
        row.verdict = "ok" if not lost_tasks else "WRONGED in " + ",".join(sorted(lost_tasks))
    elif row.kind == "stubs":
        row.verdict = "ok" if not any(v > POINTS_EPSILON for v in row.points.values()) else "STUBS SCORE POINTS"
    hint_ok = row.hint in ("", "ok")
    row.ok = row.verdict in ("caught", "ok") and hint_ok and not row.foreign
    if not hint_ok:
        row.verdict += f" (hint {row.hint})"
    if row.foreign:
        row.verdict += f" (FOREIGN diagnosis: {'; '.join(row.foreign[:3])}{' ...' if len(row.foreign) > 3 else ''})"


def _init_worker() -> None:
    # A forked child must not touch the parent's OpenMP pool: one thread, set before any tensor op.

    torch.set_num_threads(1)


def _grade_job(job) -> Row:
    return grade_row(*job)


def format_table(rows: list[Row], tasks: tuple) -> str:
    # Columns as wide as their longest entry (a task added with `bertlab new-task` may have a long name).
    name_w = max([28] + [len(r.name) + 2 for r in rows])
    task_w = max([10] + [len(t) + 2 for t in tasks])
    head = (f"{'entry':<{name_w}}{'kind':<10}{'task':<{task_w}}" + "".join(f"{t:>{max(10, len(t) + 2)}}" for t in tasks)
            + f"  {'hint':<8}{'time':>7}  verdict")
    lines = [head, "-" * len(head)]
    for r in rows:
        cells = "".join(f"{('-' if r.lost.get(t, 0) <= POINTS_EPSILON else '-%g' % r.lost[t]) if t in r.lost else '?':>{max(10, len(t) + 2)}}"
                        for t in tasks)
        hint = f"{r.hint or ''}" + (f"/{r.hints_shown}" if r.hint else "")
        lines.append(f"{r.name:<{name_w}}{r.kind:<10}{r.task:<{task_w}}{cells}  {hint:<8}{r.seconds:>6.1f}s  {r.verdict}")
    return "\n".join(lines)


def jobs_for(entries: list[Entry], tasks: tuple, check_hints: bool, include_reference: bool) -> list[tuple]:
    jobs = []
    if include_reference:
        jobs.append(("solutions", "solutions", "all", None, tasks, "", check_hints))
        jobs.append(("stubs (generated)", "stubs", "all", None, tasks, "", False))
    for e in entries:
        jobs.append((e.name, e.kind, e.task, str(e.path), tasks, e.hint, check_hints))
    return jobs


def run_rows(jobs: list[tuple], workers: int) -> list[Row]:
    """Grade the jobs, in a fork pool when workers > 1 (the parent warms the caches first)."""
    warm_up()
    if any(job[6] for job in jobs):  # hints: fingerprint the bank once here, not once per worker
        from bertlab_grader.grading.hints import known_mistakes, reference_record
        from bertlab_grader.mutants.bank import FINGERPRINTS

        for task in FINGERPRINTS:
            reference_record(task)
            known_mistakes(task)
    if workers <= 1 or len(jobs) <= 1:
        return [_grade_job(job) for job in jobs]
    ctx = mp.get_context("fork")
    with ctx.Pool(workers, initializer=_init_worker, maxtasksperchild=8) as pool:
        return pool.map(_grade_job, jobs, chunksize=1)


def run_audit(only: Optional[str] = None, workers: Optional[int] = None, *, include_performance: bool = False,
              check_hints: bool = True, include_reference: bool = True, out=None) -> int:
    """Grade the bank (entries whose name contains ``only``); print the table; exit code."""
    out = out or sys.stdout
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    tasks = EXERCISE_TASKS + (("performance",) if include_performance else ())
    entries = load_bank(only)
    if not entries and only:
        print(f"bertlab audit: no bank entry name contains {only!r}.", file=sys.stderr)
        return 2
    workers = workers or min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2)
    started = time.monotonic()
    rows = run_rows(jobs_for(entries, tasks, check_hints, include_reference and only is None), workers)
    elapsed = time.monotonic() - started
    print(format_table(rows, tasks), file=out)
    gaps = coverage_gaps()
    if gaps:
        print("\nTasks the kit cannot fully grade or teach yet:\n" + "\n".join(f"  {g}" for g in gaps), file=out)
    bad = [r for r in rows if not r.ok] + gaps
    mutants = [r for r in rows if r.kind == "mutant"]
    variants = [r for r in rows if r.kind == "variant"]
    if check_hints:
        print(f"\nMessages: {sum(len(r.foreign) for r in rows)} foreign diagnosis(es) (a message or hint naming a "
              f"mistake the entry does not make) in {sum(bool(r.foreign) for r in rows)} entries; "
              f"{sum(r.named_own for r in mutants)}/{len(mutants)} mutants are told their own mistake by name"
              + (f" (not: {', '.join(r.name for r in mutants if not r.named_own)})" if not all(
                  r.named_own for r in mutants) else "") + ".", file=out)
    print(f"\n{sum(r.verdict == 'caught' for r in mutants)}/{len(mutants)} mutants caught in their own task only; "
          f"{sum(r.ok for r in variants)}/{len(variants)} variants with full marks; "
          f"{len(bad)} problem(s); {elapsed:.0f} s with {workers} worker(s).", file=out)
    return 0 if not bad else 1
