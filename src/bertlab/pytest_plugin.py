"""The one seam between the test suites and the code under test (a pytest plugin: ``-p bertlab.pytest_plugin``).

Every test gets the implementation from the ``impl`` fixture:
    --impl exercises (default)   the student's exercises folder, found from the working directory
    --impl reference             the reference solutions (instructor kit only; the kit's own CI)
    --impl path/to/dir           a directory with cka.py, pooling.py, siamese.py, retrieval.py
When grading, the grader's plugin sets ``config.bertlab_impl`` to a sandboxed proxy instead.
Hidden tests compare with ``reference`` (their own conftest: always the reference, in process).

The public tests and the hidden suites each load this plugin from their own ``pytest.ini``.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from bertlab.implementations import load_implementation
from bertlab.tasks import GRADED_TASKS  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--impl", default="exercises",
                     help="code under test: 'exercises' (default: your exercises folder, found from the working "
                          "directory), 'reference' (instructor kit only), or a directory")


def pytest_configure(config):
    for task in GRADED_TASKS:
        config.addinivalue_line("markers", f"{task}: tests of task {task}")
    config.addinivalue_line("markers", "points(n): points a hidden test is worth")


def pytest_report_header(config):
    # Said first, every run: a learner in a checkout (whose pyproject says --impl reference) must
    # never mistake the reference passing for their own code passing.
    target = config.getoption("--impl")
    meaning = {"exercises": "your exercises folder", "reference": "the REFERENCE solutions, not your code"}
    return f"bertlab: code under test: --impl {target} ({meaning.get(target, 'the files in that folder')})"


@pytest.fixture(scope="session")
def impl(request):
    """The implementation under test (see the module docstring)."""
    injected = getattr(request.config, "bertlab_impl", None)
    if injected is not None:
        return injected

    return load_implementation(request.config.getoption("--impl"))


@pytest.fixture(scope="session")
def minilm():
    """(tokenizer, model) of the packaged all-MiniLM-L6-v2, loaded once per session. Do not modify it."""
    from bertlab.models import load_tokenizer, named_model

    return load_tokenizer("minilm"), named_model("minilm")
