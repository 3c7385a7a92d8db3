"""The hidden suites' points per task, kept on disk, so that `bertlab grade`'s main process knows them
without importing the suites.

A task is worth the sum of its hidden tests' ``@pytest.mark.points`` (``scoring.max_points_by_task``),
which only pytest's collection of the suites can tell: it imports them, and with them torch and
transformers (1.5 s of CPU). The main process of a run needs the totals before any worker reports
(the gradebook's grade cells, the zero of a refused hand-in), and it runs beside the workers' start-up
on the same cores: the grader workers collect the suites anyway. So the first process that collects
them keeps the totals here, and the next ones read them back (a JSON file, milliseconds):

    kept_max_points()   # == scoring.max_points_by_task(), read back once kept

The entry is the kit cache's own kind (``bertlab.cache.cached_json``), keyed on everything the totals
can depend on: the files of the hidden suites, of the student package (the task registry, the pytest
plugin) and of the grader's package (the scoring), by path, size and modification time, and the
versions of Python, pytest, torch and transformers. A change to any of them is another entry; a
damaged entry is collected again. The grader workers still collect the suites and score every test,
and the gradebook warns when a result's tests are worth other points than its grade cells
(course/gradebook.py).
"""

from __future__ import annotations

import functools
import sys
from importlib import metadata
from pathlib import Path

from bertlab.cache import cached_json, entry_path
from bertlab_grader.core.digest import folder_stamp

ENTRY = "max-points"  # the cache entry: max-points-<12 hex digits of points_key()>.json


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=None)
def points_key() -> dict:
    """What the points per task depend on (the module docstring), as the cache entry's key."""
    from bertlab_grader.core.locations import PACKAGE_DIR, STUDENT_PACKAGE_DIR, SUITES_DIR

    return {"python": sys.version, **{name: _version(name) for name in ("pytest", "torch", "transformers")},
            "files": [(str(f), folder_stamp(f)) for f in (SUITES_DIR, STUDENT_PACKAGE_DIR, PACKAGE_DIR)]}


def kept_file() -> Path:
    return entry_path(ENTRY, points_key())


def _collect() -> dict:
    from bertlab_grader.grading.scoring import max_points_by_task

    return {"totals": max_points_by_task()}


def kept_max_points() -> dict[str, float]:
    """task -> total points of its hidden tests, as ``scoring.max_points_by_task()`` gives them: read
    from the kit's cache, or collected (importing the suites) and kept there for the next process."""
    kept = cached_json(ENTRY, points_key(), _collect, label="the hidden tests' points per task",
                       depends_on="the hidden suites, the kit's packages and their libraries", verbose=False)
    return {str(task): float(points) for task, points in kept["totals"].items()}
