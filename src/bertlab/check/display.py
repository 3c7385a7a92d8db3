"""How `bertlab check` shows a run: rich on a terminal, plain text otherwise (a CI log, NO_COLOR),
and HTML under a notebook cell (``html_summary``: what PlainDisplay.finish prints, as a page).
"""

from __future__ import annotations

import html
import os
import re
import sys
from pathlib import Path
from typing import Optional, Sequence

from bertlab.progress import format_progress
from bertlab.tasks import EXERCISE_TASKS
from bertlab.check.run import CheckRun, FAILED, NOT_RUN, NOT_STARTED, NO_TESTS, PASSED, TestResult
from bertlab.check.hints import hint_for, next_step



_MARK = {"passed": ".", "failed": "F", "skipped": "s", "not run": "-"}


def use_rich(stream) -> bool:
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def _mark(test: TestResult) -> str:
    return "N" if test.stub else _MARK.get(test.outcome, "F")


def heading(root: Path, tasks: Sequence[str], impl: str) -> str:
    """The check's first line: what it tests, on which code, where."""
    return f"bertlab check: public tests of {', '.join(tasks)} on {impl} in {root}"


def task_width(tasks: Sequence[str]) -> int:
    """The width of the task column: the longest task name (a course may add tasks with longer names
    than the kit's own), and at least the heading "task"."""
    return max(len(t) for t in [*tasks, "task"])


def verdict(run: CheckRun) -> str:
    """The check's last line: whether everything selected passes, and how long it took."""
    said = "all selected tasks pass" if run.ok else "not everything passes yet"
    return f"({said}; {run.seconds:.1f} s)"


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines() or [""])


def failure_details(run: CheckRun, task: str) -> tuple[str, list[str], str, str]:
    """(title, context lines, message, hint) of a task's first failure, for display."""
    report = run.reports[task]
    test = report.first_failure
    if test is None:
        return f"{task}: no public tests were collected for this task", [], "", ""
    context = [f"first failure: {test.name} ({test.file})"]
    if test.doc:
        context.append(f"it checks: {test.doc}")
    if test.where:
        context.append(f"your code: {test.where}")
    return f"{task}: {report.status}", context, test.message, hint_for(task, test, run.root)


class PlainDisplay:
    """Plain text for logs and pipes: one line of marks per task while running, then the summary."""

    def __init__(self, stream=None):
        self.out = stream or sys.stdout
        self._closed = False
        self._line_task: Optional[str] = None
        self._tests: dict[str, TestResult] = {}
        self._width = task_width(EXERCISE_TASKS)

    def _print(self, text: str = "", end: str = "\n") -> None:
        if self._closed:
            return
        try:
            self.out.write(text + end)
            self.out.flush()
        except BrokenPipeError:  # the reader left (`bertlab check | head`): finish the run silently
            self._closed = True
            if self.out is sys.stdout:
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())

    def start(self, root: Path, tasks: Sequence[str], impl: str) -> None:
        self._width = task_width(tasks)
        self._print(heading(root, tasks, impl))
        self._print("(. passed  F failed  N not implemented yet  s skipped)")

    def event(self, kind: str, event: dict) -> None:
        if kind == "collected":
            self._tests = {t["nodeid"]: t for t in event["tests"]}
        elif kind == "result":
            task = (self._tests.get(event["nodeid"]) or {}).get("task") or "?"
            if task != self._line_task:
                if self._line_task is not None:
                    self._print()
                self._print(f"{task:<{self._width}}  ", end="")
                self._line_task = task
            mark = "N" if event.get("stub") else _MARK.get(event.get("outcome"), "F")
            self._print(mark, end="")

    def finish(self, run: CheckRun, progress: Optional[dict], verbose: bool) -> None:
        if self._line_task is not None:
            self._print()
        self._print()
        for problem in run.problems:
            self._print("Problem: " + _indent(problem, "  ").lstrip())
            self._print()
        width = task_width(run.tasks)
        self._print(f"{'task':<{width}}  {'passed':>7}  status")
        for task in run.tasks:
            report = run.reports[task]
            self._print(f"{task:<{width}}  {f'{report.passed}/{report.total}':>7}  {report.status}")
        for task in run.tasks:
            report = run.reports[task]
            if verbose and report.tests:
                self._print()
                self._print(f"{task}: every test")
                for test in report.tests:
                    self._print(f"  {_mark(test)} {test.name}" + (f"  - {test.doc}" if test.doc else ""))
                    if verbose and test.outcome == "failed" and test is not report.first_failure:
                        self._print(_indent(test.message, "      "))
            if report.status == PASSED:
                continue
            title, context, message, hint = failure_details(run, task)
            self._print()
            self._print(title)
            for line in context:
                self._print("  " + line)
            if message:
                self._print(_indent(message, "    "))
            if hint:
                self._print(_indent("Hint: " + hint, "  "))
        if progress is not None:
            self._print()
            for line in format_progress(progress):
                self._print(line)
        self._print()
        self._print(next_step(run, progress))
        self._print(verdict(run))


class RichDisplay:
    """For a terminal: a live progress bar per task, then a table and one panel per unfinished task."""

    _STYLE = {PASSED: "bold green", FAILED: "bold red", NOT_STARTED: "yellow", NOT_RUN: "magenta", NO_TESTS: "magenta"}

    def __init__(self, stream=None):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = Console(file=stream) if stream else Console()
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TextColumn("{task.fields[failed]}"), TimeElapsedColumn(),
                                 console=self.console, transient=True)
        self._bars: dict[str, int] = {}
        self._tests: dict[str, dict] = {}
        self._width = task_width(EXERCISE_TASKS)
        self._failed: dict[str, dict[str, int]] = {}

    def start(self, root: Path, tasks: Sequence[str], impl: str) -> None:
        from rich.text import Text

        self._width = task_width(tasks)
        self.console.print(Text.assemble(("bertlab check", "bold"), f": public tests of {', '.join(tasks)} "
                                         f"on {impl} in {root}"))
        self._collecting = self.progress.add_task("starting pytest", total=None, failed="")
        self.progress.start()

    def event(self, kind: str, event: dict) -> None:
        if kind == "collected":
            self.progress.remove_task(self._collecting)
            self._tests = {t["nodeid"]: t for t in event["tests"]}
            for task in EXERCISE_TASKS:
                count = sum(t["task"] == task for t in event["tests"])
                if count:
                    self._bars[task] = self.progress.add_task(f"{task:<{self._width}}", total=count, failed="")
                    self._failed[task] = {"failed": 0, "stub": 0}
        elif kind == "result":
            task = (self._tests.get(event["nodeid"]) or {}).get("task")
            if task in self._bars:
                counts = self._failed[task]
                if event.get("outcome") == "failed":
                    counts["stub" if event.get("stub") else "failed"] += 1
                shown = [f"[red]{counts['failed']} failing[/]"] if counts["failed"] else []
                shown += [f"[yellow]{counts['stub']} not implemented[/]"] if counts["stub"] else []
                self.progress.update(self._bars[task], advance=1, failed=" ".join(shown))

    def finish(self, run: CheckRun, progress: Optional[dict], verbose: bool) -> None:
        from rich import box
        from rich.panel import Panel
        from rich.table import Table
        from rich.text import Text

        self.progress.stop()
        for problem in run.problems:
            self.console.print(Panel(Text(problem), title="Problem", border_style="red"))
        table = Table(box=box.SIMPLE_HEAVY)
        table.add_column("task")
        table.add_column("passed", justify="right")
        table.add_column("status")
        table.add_column("first failure")
        for task in run.tasks:
            report = run.reports[task]
            first = report.first_failure
            status = Text(report.status, style=self._STYLE[report.status])
            table.add_row(task, f"{report.passed}/{report.total}", status, Text(first.name if first else ""))
        self.console.print(table)
        for task in run.tasks:
            report = run.reports[task]
            if verbose and report.tests:
                lines = Text()
                for test in report.tests:
                    style = "green" if test.outcome == "passed" else "yellow" if test.stub else "red"
                    lines.append(f"{_mark(test)} {test.name}", style=style)
                    lines.append((f"  - {test.doc}" if test.doc else "") + "\n")
                    if test.outcome == "failed" and test is not report.first_failure:
                        lines.append(_indent(test.message, "    ") + "\n", style="dim")
                self.console.print(Panel(lines, title=f"{task}: every test", border_style="dim"))
            if report.status == PASSED:
                continue
            title, context, message, hint = failure_details(run, task)
            if not message:
                self.console.print(Text(title, style=self._STYLE[report.status]))
                continue
            body = Text("\n".join(context) + "\n\n", style="dim")
            body.append(message)
            if hint:
                body.append("\n\nHint: ", style="bold cyan")
                body.append(hint)
            self.console.print(Panel(body, title=Text(title), title_align="left",
                                     border_style=self._STYLE[report.status].replace("bold ", "")))
        if progress is not None:
            self.console.print(Text("\n".join(format_progress(progress))))
        self.console.print(Text(next_step(run, progress), style="bold"))
        self.console.print(Text(verdict(run), style="dim"))


# ---------------------------------------------------------------------------------------------
# HTML, for a notebook cell (bertlab/check/notebook.py)
# ---------------------------------------------------------------------------------------------

# Mid-tone colours, readable on a light and on a dark notebook theme; the style is inline because
# Jupyter drops <style> blocks from the outputs of a notebook it does not trust.
_COLOUR = {PASSED: "#2e7d32", FAILED: "#c62828", NOT_STARTED: "#b26a00", NOT_RUN: "#8e24aa", NO_TESTS: "#8e24aa"}
_CELL = "padding: 0.15em 1em 0.15em 0; border: none; vertical-align: top"
# Monospace as in a terminal (the progress lines are columns); long lines wrap between words.
_PRE = ("white-space: pre-wrap; word-break: normal; overflow-wrap: break-word; font-family: monospace; "
        "font-size: 0.9em; margin: 0.3em 0; padding: 0; background: none")


def _text(text: str) -> str:
    """``text`` escaped for HTML (a message may hold <, > and &), with `code` spans as <code>."""
    return re.sub(r"`([^`\n]+)`", r"<code>\1</code>", html.escape(text, quote=False))


def _pre(text: str) -> str:
    return f'<pre style="{_PRE}">{html.escape(text, quote=False)}</pre>'


def _table(run: CheckRun) -> str:
    head = "".join(f'<th style="{_CELL}; text-align: {align}; border-bottom: 1px solid #999">{name}</th>'
                   for name, align in (("task", "left"), ("passed", "right"), ("status", "left"),
                                       ("first failure", "left")))
    rows = []
    for task in run.tasks:
        report = run.reports[task]
        first = report.first_failure
        rows.append(
            "<tr>"
            f'<td style="{_CELL}; text-align: left; font-family: monospace">{html.escape(task)}</td>'
            f'<td style="{_CELL}; text-align: right; font-family: monospace">{report.passed}/{report.total}</td>'
            f'<td style="{_CELL}; text-align: left; font-weight: bold; color: {_COLOUR[report.status]}">'
            f"{report.status}</td>"
            f'<td style="{_CELL}; text-align: left; font-family: monospace">'
            f"{html.escape(first.name) if first else ''}</td>"
            "</tr>")
    return (f'<table style="border-collapse: collapse; margin: 0.4em 0 0.6em 0">'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _every_test(run: CheckRun, task: str) -> str:
    """-v: every test of the task, marked as the plain text marks it, and the other failures' messages."""
    report = run.reports[task]
    lines = []
    for test in report.tests:
        lines.append(f"{_mark(test)} {test.name}" + (f"  - {test.doc}" if test.doc else ""))
        if test.outcome == "failed" and test is not report.first_failure:
            lines.append(_indent(test.message, "    "))
    listing = _pre("\n".join(lines))
    return (f'<details open style="margin: 0.4em 0"><summary>{html.escape(task)}: every test</summary>'
            f"{listing}</details>")


def _failure(run: CheckRun, task: str) -> str:
    """A task that does not pass: its first failure, what it checks, where, the message and the hint."""
    title, context, message, hint = failure_details(run, task)
    colour = _COLOUR[run.reports[task].status]
    parts = [f'<div style="font-weight: bold; color: {colour}">{html.escape(title)}</div>']
    if context:
        parts.append(f'<div style="opacity: 0.8">{"<br>".join(_text(line) for line in context)}</div>')
    if message:
        parts.append(_pre(message))
    if hint:
        parts.append(f"<div><b>Hint:</b> {_text(hint)}</div>")
    return (f'<div style="border-left: 4px solid {colour}; padding: 0.2em 0 0.2em 0.8em; margin: 0.6em 0">'
            f"{''.join(parts)}</div>")


#: How a notebook cell checks a task: the next step under a cell names this call, not the terminal's command.
NOTEBOOK_CHECK = '`bertlab.check("{task}")`'


def html_message(text: str, ok: bool) -> str:
    """One message as HTML, marked as a success or as a failure: what a notebook call says when it has no
    run to show (no exercises found), or what `bertlab submit` said."""
    return (f'<div style="border-left: 4px solid {_COLOUR[PASSED if ok else FAILED]}; padding: 0.2em 0 0.2em 0.8em">'
            f"{_pre(text)}</div>")


def html_summary(run: CheckRun, progress: Optional[dict], verbose: bool, first_line: str) -> str:
    """The summary PlainDisplay.finish prints, as HTML for a notebook cell: ``first_line`` (``heading``),
    any problem of the run, the table, each unfinished task's first failure with its hint, the recorded
    progress, the next step and the verdict. Every text from the run is escaped."""
    parts = [f'<div style="margin-bottom: 0.3em">{_text(first_line)}</div>']
    for problem in run.problems:
        parts.append(f'<div style="border-left: 4px solid {_COLOUR[FAILED]}; padding-left: 0.8em; margin: 0.4em 0">'
                     f"<b>Problem</b>{_pre(problem)}</div>")
    parts.append(_table(run))
    for task in run.tasks:
        if verbose and run.reports[task].tests:
            parts.append(_every_test(run, task))
        if run.reports[task].status != PASSED:
            parts.append(_failure(run, task))
    if progress is not None:
        parts.append(_pre("\n".join(format_progress(progress))))
    parts.append(f'<div style="font-weight: bold; margin-top: 0.5em">{_text(next_step(run, progress, how=NOTEBOOK_CHECK))}</div>')
    parts.append(f'<div style="opacity: 0.7">{html.escape(verdict(run))}</div>')
    return f'<div class="bertlab-check">{"".join(parts)}</div>'
