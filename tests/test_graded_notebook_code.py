"""The student's files in the graded notebook (grader/bertlab_grader/course/code_cells.py, feedback.build_graded_notebook,
submissions.submitted_sources), and the file and line a failed check names (bertlab.assertions.raised_where).

Fast: notebooks are built in memory, no gradebook and no nbgrader command; formgrader's own page is
tests/test_formgrader_review.py's.
"""

from __future__ import annotations

import html
import json
import re
import zipfile
from pathlib import Path

import nbformat
import pytest

from bertlab.tasks import EXERCISE_FILES, EXERCISE_TASKS, GRADED_TASKS, PERFORMANCE, exercise
from bertlab_grader.course import code_cells, submissions
from bertlab_grader.course.feedback import build_graded_notebook
from bertlab_grader.course.settings import CourseSettings
from bertlab_grader.course.submissions import SubmissionSources, list_submissions, read_submission_sources

KIT_ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENT = "week7"
MAX_POINTS = {task: 10.0 for task in GRADED_TASKS}
HOSTILE = ('x = "</script><script>alert(1)</script>"\n'
           "y = '{{ 7*7 }} {% raw %} <b>bold</b> &amp; $x^2$'\n"
           "# \u2028 caf\u00e9 \x1b[31m\n")


def _source(task: str, n_lines: int) -> str:
    """A file for ``task`` whose every line is distinctive: ``v_<task>_<i> = <i>``."""
    return "".join(f"v_{task}_{i} = {i}\n" for i in range(1, n_lines + 1))


def _sources(**override) -> SubmissionSources:
    files = SubmissionSources({exercise(t).filename: _source(t, 3 + k) for k, t in enumerate(EXERCISE_TASKS)})
    files.update(override)
    return files


def _result(student: str = "amy") -> dict:
    tests = [{"name": f"test_{task}", "task": task, "outcome": "failed", "points": 0.0, "max_points": 10.0,
              "message": f"{task} went wrong"} for task in GRADED_TASKS]
    return {"student": student, "assignment": ASSIGNMENT, "score": 0.0, "max_score": 10.0 * len(GRADED_TASKS),
            "tests": tests}


def _notebook(sources, result=None):
    nb = build_graded_notebook(ASSIGNMENT, MAX_POINTS, result or _result(), sources)
    # what the kit writes and nbgrader reads back, checked against nbformat's schema
    nb = nbformat.reads(nbformat.v4.writes(nb), as_version=4)
    nbformat.validate(nb)
    return nb


def _file_cells(nb) -> dict[str, tuple[int, object]]:
    """{shown path: (index, cell)} of the cells that show a handed-in file."""
    return {c.metadata["bertlab"]["file"]: (i, c) for i, c in enumerate(nb.cells) if "bertlab" in c.metadata}


def _grade_index(nb, task: str) -> int:
    return next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == task)


# ------------------------------------------------------------------------------------------------
# the code cells


def test_each_task_file_is_a_read_only_ungraded_code_cell_right_after_its_task():
    sources = _sources()
    nb = _notebook(sources)
    cells = _file_cells(nb)
    assert sorted(cells) == sorted(f"exercises/{name}" for name in EXERCISE_FILES)
    for task in EXERCISE_TASKS:
        index, cell = cells[f"exercises/{exercise(task).filename}"]
        assert index == _grade_index(nb, task) + 1, f"{task}'s file is not right after its results"
        assert cell.cell_type == "code"
        assert cell.metadata["editable"] is False and cell.metadata["deletable"] is False
        assert "nbgrader" not in cell.metadata  # no grade cell: no points, nothing for formgrader to score
        text = sources[exercise(task).filename]
        n = len(text.splitlines())
        assert cell.source == (f"# exercises/{exercise(task).filename} as handed in, {n} lines "
                               "(shown, not run, not graded)")
        (out,) = cell.outputs
        assert out.data["text/plain"] == text  # verbatim
    # the performance task times the exercises' files: none follows it, and the grade cells are unchanged
    after_performance = nb.cells[_grade_index(nb, PERFORMANCE) + 1:]
    assert not any("bertlab" in c.metadata for c in after_performance)
    assert [c.metadata["nbgrader"]["grade_id"] for c in nb.cells if "nbgrader" in c.metadata] == list(MAX_POINTS)


def test_the_html_is_python_highlighted_with_every_line_numbered():
    task = EXERCISE_TASKS[0]
    text = _source(task, 12)
    page = code_cells.code_html(text)
    # every line's number, in order, each just before that line's code
    numbers = [int(n) for n in re.findall(r'<span style="[^"]*color: #888[^"]*">\s*(\d+)</span>', page)]
    assert numbers == list(range(1, 13))
    for i in (1, 9, 12):
        assert re.search(rf">\s*{i}</span>\s*(<span[^>]*>)?v_{task}_{i}\b", page), f"line {i} is not numbered"
    # Pygments' colours, inline (no stylesheet needed on formgrader's or the feedback's page)
    assert 'style="color: #666"' in page or 'style="color: #666666"' in page  # the number literals
    assert "class=" in page and "<pre" in page


def test_a_large_file_is_numbered_and_escaped_without_colours():
    text = "a = '<i>'\n" * (code_cells.MAX_HIGHLIGHTED_CHARS // 10 + 1)
    page = code_cells.code_html(text)
    assert "&lt;i&gt;" in page and "<i>" not in page
    assert re.search(r">\s*1</span>  a = ", page) and f">{len(text.splitlines())}</span>" in page


def test_hostile_text_is_escaped_and_kept_verbatim():
    sources = _sources(**{EXERCISE_FILES[0]: HOSTILE})
    nb = _notebook(sources)
    _, cell = _file_cells(nb)[f"exercises/{EXERCISE_FILES[0]}"]
    page = cell.outputs[0].data["text/html"]
    assert "<script>" not in page and "</script>" not in page and "<b>" not in page
    assert "&lt;/script&gt;" in page and "&lt;b&gt;" in page
    # the text, tags stripped and entities decoded, is the student's, character for character
    shown = html.unescape(re.sub(r"<[^>]+>", "", page))
    for line in HOSTILE.splitlines():
        assert line in shown
    assert cell.outputs[0].data["text/plain"] == HOSTILE
    assert "{{ 7*7 }}" in shown and "49" not in shown  # no template evaluated it


def test_an_unreadable_file_gets_a_one_line_note(tmp_path):
    name = EXERCISE_FILES[0]
    (tmp_path / name).write_bytes(b"x = '\xff\xfe'\n")
    (tmp_path / EXERCISE_FILES[1]).write_text("ok = 1\n")
    sources = read_submission_sources(tmp_path)
    assert name in sources.problems
    nb = _notebook(sources)
    cells = _file_cells(nb)
    _, note = cells[f"exercises/{name}"]
    assert note.cell_type == "markdown" and len(note.source.splitlines()) == 1
    assert "cannot be shown" in note.source and "not UTF-8" in note.source
    assert "ImportError" not in note.source  # the stand-in module the grader imported is not shown as code
    _, ok = cells[f"exercises/{EXERCISE_FILES[1]}"]
    assert ok.cell_type == "code" and ok.outputs[0].data["text/plain"] == "ok = 1\n"


def test_no_files_no_code_cells():
    assert not _file_cells(_notebook(None))
    assert len(_file_cells(_notebook(_sources()))) == len(EXERCISE_FILES)


def test_a_file_whose_task_the_course_leaves_out_follows_the_task_cells():
    left_out = EXERCISE_TASKS[0]
    max_points = {t: p for t, p in MAX_POINTS.items() if t != left_out}
    result = _result()
    result["tests"] = [t for t in result["tests"] if t["task"] != left_out]
    nb = build_graded_notebook(ASSIGNMENT, max_points, result, _sources())
    nbformat.validate(nb)
    index, _ = _file_cells(nb)[f"exercises/{exercise(left_out).filename}"]
    assert index == len(nb.cells) - 1 and index > _grade_index(nb, PERFORMANCE)


def test_no_hidden_test_source_reaches_the_code_cells(tmp_path):
    """The cells show the exercise files only: a copy of a hidden suite in the hand-in folder, and the
    kit's hidden suites themselves, never reach the notebook."""
    folder = tmp_path / "course" / "submitted" / "amy" / ASSIGNMENT
    folder.mkdir(parents=True)
    for name, text in _sources().items():
        (folder / name).write_text(text)
    hidden = sorted((KIT_ROOT / "tests" / "hidden").glob("test_hidden_*.py"))
    assert hidden, "the kit's hidden suites are missing"
    (folder / hidden[0].name).write_text(hidden[0].read_text())
    sources = submissions.submitted_sources(CourseSettings(tmp_path / "course", ASSIGNMENT), "amy")
    written = nbformat.v4.writes(_notebook(sources))
    for suite in hidden:
        distinctive = [line.strip() for line in suite.read_text().splitlines() if len(line.strip()) > 40]
        leaked = [line for line in distinctive if json.dumps(line)[1:-1] in written or line in written]
        assert not leaked, f"{suite.name} reached the graded notebook: {leaked[:3]}"


# ------------------------------------------------------------------------------------------------
# where recording a result finds the files


def test_recording_finds_a_folder_and_an_extracted_zip(tmp_path):
    course = tmp_path / "course"
    folder = course / "submitted" / "amy" / ASSIGNMENT
    folder.mkdir(parents=True)
    (folder / EXERCISE_FILES[0]).write_text("amy = 1\n")
    (course / "submitted" / "bo").mkdir()
    with zipfile.ZipFile(course / "submitted" / "bo" / f"{ASSIGNMENT}.zip", "w") as zf:
        zf.writestr(f"wrapped/{EXERCISE_FILES[0]}", "bo = 2\n")
    settings = CourseSettings(course, ASSIGNMENT)
    assert submissions.submitted_sources(settings, "bo") is None  # not extracted yet: never here
    list_submissions(settings)  # as `bertlab grade` does: extracts into the staging folder
    assert submissions.submitted_sources(settings, "amy") == {EXERCISE_FILES[0]: "amy = 1\n"}
    assert submissions.submitted_sources(settings, "bo") == {EXERCISE_FILES[0]: "bo = 2\n"}
    assert submissions.submitted_sources(settings, "nobody") is None


# ------------------------------------------------------------------------------------------------
# the file and line in a failed check's message


def _student_error(traceback: str):
    from bertlab_grader.sandbox.remote import student_exception

    return student_exception({"type": "ValueError", "builtin": "ValueError", "message": "bad centering",
                              "traceback": traceback})


def test_a_check_names_the_student_file_and_line_that_raised():
    from bertlab.assertions import call_on_valid_input, expect_value_error, raised_where

    cka, pooling = EXERCISE_FILES[0], EXERCISE_FILES[1]
    exc = _student_error(f'  File "{pooling}", line 3, in helper\n    x()\n'
                         f'  File "{cka}", line 48, in linear_cka\n    raise ValueError("bad centering")\n')
    assert raised_where(exc) == f" in {cka}, line 48"

    def raise_it():
        raise exc

    with pytest.raises(pytest.fail.Exception) as failed:
        call_on_valid_input(raise_it, "linear_cka(X, Y)", "this input is valid", "Fix it.")
    assert str(failed.value.msg) == (f"linear_cka(X, Y) raised ValueError (bad centering) in {cka}, line 48, "
                                     "but this input is valid. Fix it.")
    other = RuntimeError("boom")
    other.student_traceback = f'  File "{cka}", line 7, in f\n'
    with pytest.raises(pytest.fail.Exception) as failed:
        expect_value_error(lambda: (_ for _ in ()).throw(other), "f(bad)", "bad is bad")
    assert f"raised RuntimeError (boom) in {cka}, line 7; expected ValueError" in str(failed.value.msg)


def test_no_kit_file_and_no_local_exception_is_named():
    from bertlab.assertions import raised_where

    assert raised_where(ValueError("local")) == ""  # bertlab check's own run: no sandbox frames
    kit = _student_error('  File "/opt/kit/src/bertlab/models.py", line 4, in load\n'
                         '  File "models.py", line 4, in load\n  File "torch/functional.py", line 9, in f\n')
    assert raised_where(kit) == ""
