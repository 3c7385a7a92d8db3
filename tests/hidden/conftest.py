"""Hidden-suite plumbing: the ``reference`` fixture and a guard that every test is scoreable.

``impl`` (src/bertlab/pytest_plugin.py, the plugin every run of these suites loads) is the code under test: solutions, a directory, or, while grading, the
sandboxed proxy. ``reference`` is always the kit's solutions, in this process: every expected value
in these suites is computed by it on the same inputs, never typed in.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bertlab.tasks import GRADED_TASKS  # noqa: E402
_HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="package", autouse=True)
def _one_torch_thread():
    """The hidden suites run on one torch thread, as the sandboxed server does (fair timing for the
    performance task; much faster than two threads on shared cores). Restored after this package."""
    from bertlab_grader.performance.timing import one_torch_thread

    with one_torch_thread():
        yield


@pytest.fixture(scope="session")
def reference():
    """The reference implementation (solutions/), loaded in process."""
    from bertlab.implementations import load_implementation

    return load_implementation("reference")


def pytest_collection_modifyitems(config, items):
    # Tasks run in gradebook order, the performance timing last: the grader grades them in this
    # order, one segment of tasks after another (grader/bertlab_grader/grading/segments.py).
    order = {task: index for index, task in enumerate(GRADED_TASKS)}
    items[:] = sorted(items, key=lambda item: min((order[m.name] for m in item.iter_markers() if m.name in order),
                                                  default=len(order)))
    # The grader scores by task and by points: a hidden test without exactly one task marker and
    # one points(n) marker would be scored wrongly or not at all, so refuse to run such a suite.
    for item in items:
        if _HERE not in Path(str(item.path)).resolve().parents:
            continue
        tasks = [m.name for m in item.iter_markers() if m.name in GRADED_TASKS]
        points = [m for m in item.iter_markers(name="points")]
        if len(tasks) != 1 or len(points) != 1 or len(points[0].args) != 1 or not points[0].args[0] > 0:
            raise pytest.UsageError(f"{item.nodeid} must carry exactly one task marker of {GRADED_TASKS} "
                                    f"and one @pytest.mark.points(n) with n > 0; it has tasks {tasks}, "
                                    f"points {[m.args for m in points]}.")
