"""The notebooks bertlab puts into an nbgrader course.

- the source notebook ``source/<assignment>/<assignment>.ipynb``: a markdown introduction and one
  autograded grade cell per task (``grade=True, solution=False, grade_id=<task>``). Its cells hold
  comments only; the points come from the hidden suites that ``bertlab grade`` runs.
- the graded notebook ``autograded/<student>/<assignment>/<assignment>.ipynb``: the same cells, each grade
  cell carrying an output that lists the task's tests (name, outcome, points, message, hint).
  ``nbgrader generate_feedback`` turns it into the student's HTML.

Everything shown comes from the results dict (test names, outcomes, points, the student-visible
``message`` and ``hint``); every piece of text is HTML-escaped, because messages can quote student output.
No test source is read here.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

NBGRADER_SCHEMA_VERSION = 3
MAX_SHOWN_MESSAGE = 4000

_OUTCOME_STYLE = {"passed": "success", "failed": "danger", "error": "danger", "timeout": "warning"}
_OUTCOME_WORD = {"passed": "passed", "failed": "failed", "error": "error", "timeout": "timed out"}


def _fmt(x: float) -> str:
    return f"{float(x):g}"


def _grade_metadata(task: str, points: float, locked: bool) -> dict:
    return {
        "nbgrader": {
            "grade": True,
            "solution": False,
            "locked": locked,
            "grade_id": task,
            "points": float(points),
            "schema_version": NBGRADER_SCHEMA_VERSION,
        }
    }


def _grade_cell_source(task: str, points: float) -> str:
    return (
        f"# Task {task!r}: {_fmt(points)} points, awarded by the hidden tests that `bertlab grade` runs\n"
        "# against your .py files. Your feedback lists each test here: its outcome, the points it earned\n"
        "# and what it found."
    )


def _intro(assignment: str, max_points: Mapping[str, float]) -> str:
    rows = "\n".join(f"| `{t}` | {_fmt(p)} |" for t, p in max_points.items())
    total = _fmt(sum(max_points.values()))
    return (
        f"# {assignment}: graded tasks\n\n"
        "Your submission (`cka.py`, `pooling.py`, `siamese.py`, `retrieval.py`) is graded by automatic "
        "tests, one group per task. Each cell below is one task; in your feedback it lists every test of "
        "that task with its outcome, the points it earned and a message saying what it checked or found.\n\n"
        "| task | points |\n| --- | --- |\n"
        f"{rows}\n| **total** | **{total}** |\n"
    )


def build_source_notebook(assignment: str, max_points: Mapping[str, float]) -> nbformat.NotebookNode:
    """The instructor's source notebook: an introduction and one grade cell per task."""
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells.append(new_markdown_cell(_intro(assignment, max_points), id="bertlab-intro"))
    for task, points in max_points.items():
        nb.cells.append(new_code_cell(_grade_cell_source(task, points), id=f"bertlab-{task}",
                                      metadata=_grade_metadata(task, points, locked=False)))
    return nb


def _task_html(task: str, tests: Sequence[Mapping], score: float, max_score: float) -> str:
    esc = html.escape
    n_passed = sum(1 for t in tests if t.get("outcome") == "passed")
    counted = f"; {n_passed} of {len(tests)} tests passed" if tests else ""
    lines = [
        '<div class="bertlab-results">',
        f"<p><strong>{esc(task)}</strong>: {esc(_fmt(score))} / {esc(_fmt(max_score))} points{counted}.</p>",
    ]
    if not tests:
        lines.append("<p>No test of this task ran for your submission.</p>")
    else:
        lines.append('<table class="table table-condensed table-bordered">')
        lines.append("<thead><tr><th>test</th><th>outcome</th><th>points</th><th>message</th></tr></thead><tbody>")
        for t in tests:
            outcome = str(t.get("outcome", ""))
            message = str(t.get("message") or "")
            if len(message) > MAX_SHOWN_MESSAGE:
                message = message[:MAX_SHOWN_MESSAGE] + "\n... (message shortened)"
            hint = str(t.get("hint") or "")
            cell = f'<pre style="white-space: pre-wrap; margin: 0;">{esc(message)}</pre>' if message else ""
            if hint:
                cell += f"<p><strong>Hint:</strong> {esc(hint)}</p>"
            lines.append(
                f'<tr class="{_OUTCOME_STYLE.get(outcome, "")}">'
                f"<td><code>{esc(str(t.get('name', '')))}</code></td>"
                f"<td>{esc(_OUTCOME_WORD.get(outcome, outcome))}</td>"
                f"<td>{esc(_fmt(t.get('points', 0.0)))} / {esc(_fmt(t.get('max_points', 0.0)))}</td>"
                f"<td>{cell}</td></tr>")
        lines.append("</tbody></table>")
    lines.append("</div>")
    return "\n".join(lines)


def _task_text(task: str, tests: Sequence[Mapping], score: float, max_score: float) -> str:
    out = [f"{task}: {_fmt(score)} / {_fmt(max_score)} points"]
    for t in tests:
        outcome = _OUTCOME_WORD.get(str(t.get("outcome", "")), str(t.get("outcome", "")))
        out.append(f"  [{outcome}] {t.get('name', '')}  "
                   f"{_fmt(t.get('points', 0.0))}/{_fmt(t.get('max_points', 0.0))}")
        message = str(t.get("message") or "")
        if message:
            if len(message) > MAX_SHOWN_MESSAGE:
                message = message[:MAX_SHOWN_MESSAGE] + "\n... (message shortened)"
            out.extend("      " + line for line in message.splitlines())
        if t.get("hint"):
            out.append(f"      hint: {t['hint']}")
    return "\n".join(out)


def build_graded_notebook(assignment: str, max_points: Mapping[str, float],
                          result: Mapping) -> nbformat.NotebookNode:
    """The student's graded notebook: the source cells, each grade cell showing its task's tests."""
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells.append(new_markdown_cell(_intro(assignment, max_points), id="bertlab-intro"))
    by_task: dict[str, list] = {task: [] for task in max_points}
    for t in result.get("tests", []):
        by_task.setdefault(t["task"], []).append(t)
    for task, points in max_points.items():
        tests = by_task.get(task, [])
        score = sum(float(t.get("points", 0.0)) for t in tests)
        out = new_output("display_data", data={
            "text/html": _task_html(task, tests, score, points),
            "text/plain": _task_text(task, tests, score, points),
        })
        nb.cells.append(new_code_cell(_grade_cell_source(task, points), id=f"bertlab-{task}",
                                      metadata=_grade_metadata(task, points, locked=True),
                                      outputs=[out]))
    nbformat.validate(nb)
    return nb
