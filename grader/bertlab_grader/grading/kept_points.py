"""The hidden suites' points per task, kept on disk, so that `bertlab grade`'s main process knows them
without importing the suites.

A task is worth the sum of its hidden tests' ``@pytest.mark.points`` (``scoring.max_points_by_task``),
which only pytest's collection of the suites can tell: it imports them, and with them torch and
transformers (1.5 s of CPU). The main process of a run needs the totals before any worker reports
(the gradebook's grade cells, the zero of a refused hand-in), and it runs beside the workers' start-up
on the same cores: the grader workers collect the suites anyway. So the first process that collects
them keeps the totals here, and the next ones read them back (a JSON file, milliseconds):

    kept_max_points()   # == scoring.max_points_by_task(), read back once kept

The file's name holds a fingerprint of everything the totals can depend on: the files of the hidden
suites, of the student package (the task registry, the pytest plugin) and of the grader's package
(the scoring), by path, size and modification time, and the versions of Python, pytest, torch and
transformers. A change to any of them is another file. A file that cannot be read is ignored and the
totals collected again. The grader workers still collect the suites and score every test, and the
gradebook warns when a result's tests are worth other points than its grade cells
(course/gradebook.py).
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from importlib import metadata
from pathlib import Path

from bertlab.fileio import atomic_write_text
from bertlab_grader.core.digest import folder_stamp

KEPT_NAME = "max-points"  # cache entry: max-points-<12 hex digits of the fingerprint>.json


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=None)
def points_fingerprint() -> str:
    """12 hex digits that change with anything the points per task depend on (the module docstring)."""
    from bertlab_grader.core.locations import PACKAGE_DIR, STUDENT_PACKAGE_DIR, SUITES_DIR

    inputs = {"python": sys.version, **{name: _version(name) for name in ("pytest", "torch", "transformers")},
              "files": [(str(f), folder_stamp(f)) for f in (SUITES_DIR, STUDENT_PACKAGE_DIR, PACKAGE_DIR)]}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:12]


def kept_file() -> Path:
    from bertlab.cache import cache_root

    return cache_root() / f"{KEPT_NAME}-{points_fingerprint()}.json"


def _read(path: Path) -> dict[str, float] | None:
    try:
        totals = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(totals, dict) or not all(isinstance(v, (int, float)) for v in totals.values()):
        return None
    return {str(task): float(points) for task, points in totals.items()}


def kept_max_points() -> dict[str, float]:
    """task -> total points of its hidden tests, as ``scoring.max_points_by_task()`` gives them: read
    from the kept file, or collected (importing the suites) and kept for the next process."""
    path = kept_file()
    totals = _read(path)
    if totals is None:
        from bertlab_grader.grading.scoring import max_points_by_task

        totals = max_points_by_task()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            for older in path.parent.glob(f"{KEPT_NAME}-*.json"):  # one kit's totals at a time
                older.unlink(missing_ok=True)
            atomic_write_text(path, json.dumps(totals, indent=1) + "\n")
        except OSError:
            pass  # (a read-only cache: collected again next time)
    return dict(totals)
