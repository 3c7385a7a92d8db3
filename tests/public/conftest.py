"""Public-suite plumbing: one task marker per test, and a teaching message for unimplemented stubs."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertlab.assertions import not_implemented_message

from bertlab.tasks import EXERCISE_TASKS  # noqa: E402
_HERE = Path(__file__).parent


def _task_of(item) -> str | None:
    tasks = [m.name for m in item.iter_markers() if m.name in EXERCISE_TASKS]
    return tasks[0] if len(tasks) == 1 else None


def pytest_collection_modifyitems(config, items):
    # `bertlab check --task T` selects with -m T and the grader scores by task: a public test with no
    # task marker (or two) would be run for the wrong task or never; refuse to run such a suite.
    for item in items:
        if _HERE in Path(str(item.path)).parents:
            tasks = [m.name for m in item.iter_markers() if m.name in EXERCISE_TASKS]
            if len(tasks) != 1:
                raise pytest.UsageError(f"{item.nodeid} must carry exactly one task marker of "
                                        f"{EXERCISE_TASKS}; it has {tasks or 'none'}.")


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    # A stub still raising NotImplementedError is not a bug to debug: say which task is left and
    # where to start, instead of a traceback into the test's helpers.
    try:
        return (yield)
    except NotImplementedError as exc:
        # `from None`: the stub's own traceback adds nothing to the message.
        raise pytest.fail.Exception(not_implemented_message(_task_of(pyfuncitem), exc), pytrace=False) from None
