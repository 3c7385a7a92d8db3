"""The notebooks bertlab puts into an nbgrader course.

- the source notebook ``source/<assignment>/<assignment>.ipynb``: a markdown introduction and one
  autograded grade cell per task (``grade=True, solution=False, grade_id=<task>``). Its cells hold
  comments only; the points come from the hidden suites that ``bertlab grade`` runs.
- the graded notebook ``autograded/<student>/<assignment>/<assignment>.ipynb``: the same cells, each grade
  cell carrying an output that lists the task's tests (name, outcome, points, message, hint), and
  after it the student's file for that task as a read-only, ungraded code cell (code_cells.py).
  formgrader shows it to the instructor; ``nbgrader generate_feedback`` turns it into the student's HTML.

Everything shown comes from the results dict (test names, outcomes, points, the student-visible
``message`` and ``hint``); the HTML comes from a Jinja2 template with autoescaping on, because messages
can quote student output.
No test source is read here.

Each graded notebook carries a stamp (``notebook_stamp``: a digest of what it was built from and of
the code that builds it) in its metadata, so that recording the same result again (every run re-syncs
the unchanged students' results into the gradebook) does not build and write the same notebook again:
with pygments' highlighting, about 50 ms a student, on the critical path of a late hand-in's run.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from bertlab.tasks import EXERCISE_FILES
from bertlab_grader.course import code_cells
from bertlab_grader.course.code_cells import new_code_cell, new_display_output, new_markdown_cell

if TYPE_CHECKING:  # nbformat is imported where a notebook is built: its jsonschema costs a second at import
    import nbformat

NBGRADER_SCHEMA_VERSION = 3
TEMPLATES = Path(__file__).parent / "templates"  # (this room's own data)
MAX_SHOWN_MESSAGE = 4000

_OUTCOME_STYLE = {"passed": "success", "failed": "danger", "error": "danger", "timeout": "warning"}
_OUTCOME_WORD = {"passed": "passed", "failed": "failed", "error": "error", "timeout": "timed out"}


def _earned_part(test: Mapping) -> bool:
    """A test that failed yet earned some of its points: a speed test on the points curve."""
    points, most = float(test.get("points") or 0.0), float(test.get("max_points") or 0.0)
    return test.get("outcome") == "failed" and 0.0 < points < most


def outcome_word(test: Mapping) -> str:
    """How a test's outcome reads to the student: "part (2.5 of 4 points)" for a test that earned part
    of its points (a speed test), not "failed"; otherwise the outcome's word."""
    if _earned_part(test):
        return f"part ({_fmt(test.get('points', 0.0))} of {_fmt(test.get('max_points', 0.0))} points)"
    return _OUTCOME_WORD.get(str(test.get("outcome", "")), str(test.get("outcome", "")))


def outcome_style(test: Mapping) -> str:
    return "warning" if _earned_part(test) else _OUTCOME_STYLE.get(str(test.get("outcome", "")), "")


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
        f"Your submission ({', '.join(f'`{name}`' for name in EXERCISE_FILES)}) is graded by automatic "
        "tests, one group per task. Each cell below is one task; in your feedback it lists every test of "
        "that task with its outcome, the points it earned and a message saying what it checked or found.\n\n"
        "| task | points |\n| --- | --- |\n"
        f"{rows}\n| **total** | **{total}** |\n"
    )


def build_source_notebook(assignment: str, max_points: Mapping[str, float]) -> nbformat.NotebookNode:
    """The instructor's source notebook: an introduction and one grade cell per task."""
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    nb = new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells.append(new_markdown_cell(_intro(assignment, max_points), id="bertlab-intro"))
    for task, points in max_points.items():
        nb.cells.append(new_code_cell(_grade_cell_source(task, points), id=f"bertlab-{task}",
                                      metadata=_grade_metadata(task, points, locked=False)))
    return nb


@functools.lru_cache(maxsize=1)
def _template():
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=False)
    return env.get_template("task_results.html.j2")


def _shortened(message: str) -> str:
    return message[:MAX_SHOWN_MESSAGE] + "\n... (message shortened)" if len(message) > MAX_SHOWN_MESSAGE else message


def _task_html(task: str, tests: Sequence[Mapping], score: float, max_score: float) -> str:
    """One task's table for the feedback page (grader/bertlab_grader/course/templates/task_results.html.j2, autoescaped)."""
    rows = [{"name": str(t.get("name", "")),
             "outcome": outcome_word(t), "style": outcome_style(t),
             "points": _fmt(t.get("points", 0.0)), "max_points": _fmt(t.get("max_points", 0.0)),
             "message": _shortened(str(t.get("message") or "")), "hint": str(t.get("hint") or "")}
            for t in tests]
    return _template().render(task=task, tests=rows, score=_fmt(score), max_score=_fmt(max_score),
                              n_passed=sum(1 for t in tests if t.get("outcome") == "passed"))


def _task_text(task: str, tests: Sequence[Mapping], score: float, max_score: float) -> str:
    out = [f"{task}: {_fmt(score)} / {_fmt(max_score)} points"]
    for t in tests:
        outcome = outcome_word(t)
        out.append(f"  [{outcome}] {t.get('name', '')}  "
                   f"{_fmt(t.get('points', 0.0))}/{_fmt(t.get('max_points', 0.0))}")
        message = str(t.get("message") or "")
        if message:
            message = _shortened(message)
            out.extend("      " + line for line in message.splitlines())
        if t.get("hint"):
            out.append(f"      hint: {t['hint']}")
    return "\n".join(out)


STAMP_KEY = "bertlab_built_from"  # the graded notebook's metadata entry that holds its notebook_stamp


@functools.lru_cache(maxsize=1)
def _builder_digest() -> str:
    """The code that builds a graded notebook: this file, code_cells.py, and the versions of nbformat
    and pygments (an upgrade of the kit or of either changes every stamp)."""
    import nbformat
    import pygments

    digest = hashlib.sha256(f"{nbformat.__version__} {pygments.__version__}".encode())
    for module_file in (__file__, code_cells.__file__):
        digest.update(Path(module_file).read_bytes())
    return digest.hexdigest()


def notebook_stamp(assignment: str, max_points: Mapping[str, float], result: Mapping,
                   sources: Mapping[str, str] | None) -> str:
    """A digest of everything ``build_graded_notebook(assignment, max_points, result, sources)``
    depends on: equal stamps, the same notebook."""
    # (Orders kept where the notebook follows them: the tasks' cells, the files'.)
    shown = None if sources is None else [list(sources.items()), sorted(getattr(sources, "problems", {}).items())]
    text = json.dumps([_builder_digest(), assignment, list(max_points.items()), result, shown], sort_keys=True,
                      default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def stamp_of(path: Path) -> str | None:
    """The ``notebook_stamp`` a graded notebook on disk was built with (None: no notebook, or none)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))["metadata"].get(STAMP_KEY)
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        return None


def build_graded_notebook(assignment: str, max_points: Mapping[str, float],
                          result: Mapping, sources: Mapping[str, str] | None = None,
                          stamp: str | None = None) -> nbformat.NotebookNode:
    """The student's graded notebook: the source cells, each grade cell showing its task's tests and
    followed by the student's file for that task (``sources``, a ``SubmissionSources``; none when not
    given), then any other file handed in. Its metadata holds its ``notebook_stamp`` (``stamp``: that
    stamp, when the caller has already worked it out)."""
    from nbformat.v4 import new_notebook

    nb = new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.metadata[STAMP_KEY] = stamp or notebook_stamp(assignment, max_points, result, sources)
    nb.cells.append(new_markdown_cell(_intro(assignment, max_points), id="bertlab-intro"))
    by_task: dict[str, list] = {task: [] for task in max_points}
    for t in result.get("tests", []):
        by_task.setdefault(t["task"], []).append(t)
    for task, points in max_points.items():
        tests = by_task.get(task, [])
        score = sum(float(t.get("points", 0.0)) for t in tests)
        out = new_display_output({
            "text/html": _task_html(task, tests, score, points),
            "text/plain": _task_text(task, tests, score, points),
        })
        nb.cells.append(new_code_cell(_grade_cell_source(task, points), id=f"bertlab-{task}",
                                      metadata=_grade_metadata(task, points, locked=True),
                                      outputs=[out]))
        nb.cells.extend(code_cells.cells_for_task(task, sources))
    nb.cells.extend(code_cells.cells_for_other_files(max_points, sources))
    # (Not validated here, nor cell by cell (code_cells.new_code_cell says why): its shape is this
    # function's, the same for every student; tests/test_course.py validates it.)
    return nb
