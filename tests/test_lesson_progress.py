"""The lesson's progress table (src/bertlab/lesson.py: _task_states, progress_report) for a task the
lesson has no call for: one an instructor added with `bertlab new-task` (docs/authoring.md, "Use the
new task in the lesson"). Its functions are read, not run: "not implemented: NAME" while one still
holds the stub's NotImplementedYet, "written" after that; never "raises ValueError: unknown task".
"""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from bertlab import lesson
from bertlab.tasks import EXERCISE_TASKS, Exercise, exercise

NEW = Exercise("cosine_matrix", "cosine_matrix", ("cosine_matrix",), "6-cosine_matrix.md")

STUB = '''
from bertlab.errors import NotImplementedYet


def cosine_matrix(a, b):
    """Every pairwise cosine."""
    raise NotImplementedYet("cosine_matrix", "cosine_matrix")
'''

WRITTEN = '''
import torch.nn.functional as F


def cosine_matrix(a, b):
    """Every pairwise cosine."""
    return F.normalize(a.double(), dim=1) @ F.normalize(b.double(), dim=1).T
'''


def _module(folder: Path, source: str):
    """A module imported from a file (inspect.getsource reads the file)."""
    path = folder / "cosine_matrix.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(f"probe_{abs(hash(source))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def course_with_new_task(monkeypatch):
    """The lesson's registry with NEW added, and _call_once's known tasks all running."""
    tasks = (*EXERCISE_TASKS, NEW.name)
    monkeypatch.setattr(lesson, "EXERCISE_TASKS", tasks)
    monkeypatch.setattr(lesson, "exercise", lambda name: NEW if name == NEW.name else exercise(name))
    real_call_once = lesson._call_once

    def call_once(task, impl):
        if task in EXERCISE_TASKS:
            return None  # the kit's own tasks: what their branches do is tested by the notebook's run
        return real_call_once(task, impl)

    monkeypatch.setattr(lesson, "_call_once", call_once)
    return tasks


def test_a_stub_of_a_task_without_a_call_is_not_implemented(course_with_new_task, tmp_path, monkeypatch):
    impl = SimpleNamespace(name="yours", cosine_matrix=_module(tmp_path, STUB))
    monkeypatch.setattr(lesson, "task_module", lambda impl, task: getattr(impl, task))
    assert lesson.task_status(impl)[NEW.name] == "not implemented: cosine_matrix"
    report = lesson.progress_report(impl)
    assert "Next: task cosine_matrix" in report and "implement cosine_matrix" in report, report


def test_a_written_task_without_a_call_is_written(course_with_new_task, tmp_path, monkeypatch):
    impl = SimpleNamespace(name="yours", cosine_matrix=_module(tmp_path, WRITTEN))
    monkeypatch.setattr(lesson, "task_module", lambda impl, task: getattr(impl, task))
    status = lesson.task_status(impl)
    assert status[NEW.name] == "written", status
    report = lesson.progress_report(impl)
    assert "Every task is written" in report and "Next:" not in report, report
