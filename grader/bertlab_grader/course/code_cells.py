"""The student's files in the graded notebook: one read-only, ungraded code cell per handed-in file.

``feedback.build_graded_notebook`` puts each task's file right after that task's results, so formgrader
(the instructor's page) and ``nbgrader generate_feedback`` (the student's page) show the code beside
the tests that judged it.

How the code is shown: the cell's source is one comment line naming the file
(``# exercises/cka.py as handed in, 57 lines``); the file itself is the cell's output, an HTML block
highlighted as Python by Pygments with the line numbers inline (and its text verbatim as text/plain).
Why not the file as the cell's source: nbconvert highlights a cell's source without line numbers
unless ``Highlight2HTML.extra_formatter_options`` is configured, and formgrader takes that setting
from wherever the instructor starts Jupyter, generate_feedback from the course's config; an output
carries its numbers in the notebook itself, the same on every page that shows it. The styles are
inline (Pygments' ``noclasses``) for the same reason: no page's stylesheet is needed.

A file that could not be read (``SubmissionSources.problems``) gets a one-line markdown note instead.
Everything a student wrote is escaped by Pygments (HTML) or kept as JSON text (text/plain); a
student's ``</script>`` or ``{{ }}`` is text on the page. Nothing here reads a test.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Mapping

from bertlab.tasks import EXERCISES, PERFORMANCE

#: Above this many characters a file is shown numbered but not coloured: Pygments' inline styles make
#: the HTML about ten times the text, and a submission may hold a megabyte (MAX_SOURCE_BYTES).
MAX_HIGHLIGHTED_CHARS = 200_000

# Cell metadata: read-only and kept in place in Jupyter; no "nbgrader" key, so no grade and no points.
_READ_ONLY = {"editable": False, "deletable": False}


def shown_path(filename: str) -> str:
    """The file as the student knows it in their kit: ``exercises/cka.py``."""
    return f"exercises/{filename}"


def files_of_task(task: str) -> tuple[str, ...]:
    """The handed-in files that ``task`` grades: its exercise's module (none for the performance
    task, which times the exercises' files, each shown beside its own task)."""
    if task == PERFORMANCE:
        return ()
    return tuple(e.filename for e in EXERCISES if e.name == task)


def _line_count(text: str) -> int:
    return len(text.splitlines())


def heading(filename: str, text: str) -> str:
    """The code cell's source: one comment line naming the file and its length."""
    n = _line_count(text)
    return f"# {shown_path(filename)} as handed in, {n} line{'' if n == 1 else 's'} (shown, not run, not graded)"


@functools.lru_cache(maxsize=1)
def _formatter():
    """Pygments' HTML formatter: inline styles, inline line numbers in grey, a <code> inside <pre>."""
    from pygments.formatters import HtmlFormatter
    from pygments.styles.default import DefaultStyle

    class _Style(DefaultStyle):
        line_number_color = "#888"
        line_number_background_color = "transparent"

    return HtmlFormatter(style=_Style, noclasses=True, linenos="inline", wrapcode=True)


def _plain_numbered_html(text: str) -> str:
    """A file too large to colour: escaped, numbered, in a <pre>."""
    width = len(str(_line_count(text)))
    lines = (f'<span style="color: #888">{n:>{width}}</span>  {html.escape(line)}'
             for n, line in enumerate(text.splitlines(), start=1))
    return f"<pre><code>{chr(10).join(lines)}\n</code></pre>"


@functools.lru_cache(maxsize=64)  # copies of one submission, and a re-recorded one, are highlighted once
def code_html(text: str) -> str:
    """``text`` as Python, highlighted, with line numbers; every character of it escaped (about 30 ms
    for the reference's files, 20 KiB: the biggest part of recording a result)."""
    if len(text) > MAX_HIGHLIGHTED_CHARS:
        body = _plain_numbered_html(text)
    else:
        from pygments import highlight
        from pygments.lexers import PythonLexer

        body = highlight(text, PythonLexer(stripnl=False, ensurenl=True), _formatter())
    # overflow: a long line scrolls inside the block instead of widening the page
    return f'<div class="bertlab-submitted-code" style="overflow-x: auto">{body}</div>'


def _cell_id(filename: str) -> str:
    return "bertlab-code-" + filename.removesuffix(".py")


# The graded notebook's cells, built as nbformat.v4's new_code_cell / new_markdown_cell / new_output
# build them, without their validation: each of those calls checks its cell against the notebook
# schema with jsonschema, which was a third of the time a cohort run spent recording a result. The
# cells' shape is this module's and feedback.py's, the same for every student, and the kit's tests
# validate the whole notebook (tests/test_course.py).

def new_code_cell(source: str, *, id: str, metadata: dict, outputs: list | None = None):
    from nbformat import NotebookNode

    return NotebookNode(id=id, cell_type="code", metadata=metadata, execution_count=None, source=source,
                        outputs=outputs or [])


def new_markdown_cell(source: str, *, id: str, metadata: dict | None = None):
    from nbformat import NotebookNode

    return NotebookNode(id=id, cell_type="markdown", source=source, metadata=metadata or {})


def new_display_output(data: dict):
    from nbformat import NotebookNode

    return NotebookNode(output_type="display_data", metadata={}, data=data)


def code_cell(filename: str, text: str):
    """The read-only, ungraded code cell that shows one handed-in file."""
    out = new_display_output({"text/html": code_html(text), "text/plain": text})
    return new_code_cell(heading(filename, text), id=_cell_id(filename),
                         metadata={**_READ_ONLY, "bertlab": {"file": shown_path(filename)}}, outputs=[out])


def unreadable_cell(filename: str, problem: str):
    """A one-line note for a file that could not be read as text (its reason, escaped)."""
    note = f"**{shown_path(filename)}** was handed in but cannot be shown: {html.escape(problem)}"
    return new_markdown_cell(note, id=_cell_id(filename),
                             metadata={**_READ_ONLY, "bertlab": {"file": shown_path(filename)}})


def file_cell(filename: str, sources: Mapping[str, str]):
    """The cell for one file of ``sources`` (a ``SubmissionSources``): the code, or the note saying
    why it could not be read."""
    problems = getattr(sources, "problems", {})
    if filename in problems:
        # the text there is a stand-in module that raises ImportError, not what the student wrote
        return unreadable_cell(filename, problems[filename])
    return code_cell(filename, sources[filename])


def cells_for_task(task: str, sources: Mapping[str, str] | None) -> list:
    """The cells that follow ``task``'s results: one per handed-in file of that task."""
    if not sources:
        return []
    return [file_cell(name, sources) for name in files_of_task(task) if name in sources]


def cells_for_other_files(tasks, sources: Mapping[str, str] | None) -> list:
    """Cells for the handed-in files no task in ``tasks`` grades (a task this course left out), after
    the task cells, so every file read is shown once."""
    if not sources:
        return []
    shown = {name for task in tasks for name in files_of_task(task)}
    return [file_cell(name, sources) for name in sources if name not in shown]
