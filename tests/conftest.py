"""The one seam between tests and the code under test.

Every test gets the implementation from the ``impl`` fixture:
    pytest                       -> solutions/ (the kit's own CI)
    pytest --impl exercises      -> the student's exercises/ (what `bertlab check` runs)
    pytest --impl path/to/dir    -> a directory with cka.py, pooling.py, siamese.py, retrieval.py
When grading, the grader's plugin sets ``config.bertlab_impl`` to a sandboxed proxy instead.
Hidden tests compare with ``reference`` (always solutions/, in process).
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from bertlab.tasks import GRADED_TASKS as TASKS  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--impl", default="solutions",
                     help="code under test: 'solutions' (default), 'exercises', or a directory")


def pytest_configure(config):
    for task in TASKS:
        config.addinivalue_line("markers", f"{task}: tests of task {task}")
    config.addinivalue_line("markers", "points(n): points a hidden test is worth")


@pytest.fixture(scope="session")
def impl(request):
    """The implementation under test (see the module docstring)."""
    injected = getattr(request.config, "bertlab_impl", None)
    if injected is not None:
        return injected
    from bertlab.implementations import load_implementation

    return load_implementation(request.config.getoption("--impl"))


@pytest.fixture(scope="session")
def minilm():
    """(tokenizer, model) of the packaged all-MiniLM-L6-v2, loaded once per session. Do not modify it."""
    from bertlab.models import load_tokenizer, named_model

    return load_tokenizer("minilm"), named_model("minilm")
