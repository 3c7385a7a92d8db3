"""The hidden suites' points per task, kept on disk (grader/bertlab_grader/grading/kept_points.py): read
back, they are the totals the suites' collection gives, and reading them imports neither torch nor
pytest (`bertlab grade`'s main process runs beside the workers' start-up on the same cores)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = ("import json, sys\n"
         "from bertlab_grader.grading.kept_points import kept_file, kept_max_points\n"
         "totals = kept_max_points()\n"
         "print(json.dumps({'totals': totals, 'file': str(kept_file()),\n"
         "                  'imported': sorted(m for m in ('torch', 'pytest') if m in sys.modules)}))\n")


def _probe(cache) -> dict:
    env = {**os.environ, "BERTLAB_CACHE_DIR": str(cache)}
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # (4 s or more: the fast loop stays under 5 minutes, docs/architecture.md)
def test_kept_points_are_the_collected_ones_and_read_back_without_torch_or_pytest(tmp_path):
    from bertlab_grader.grading.scoring import max_points_by_task

    first = _probe(tmp_path)
    assert first["totals"] == max_points_by_task(), "kept totals differ from the suites' collection"
    assert first["imported"] == ["pytest", "torch"], "the first process collects the suites"
    again = _probe(tmp_path)
    assert again["totals"] == first["totals"]
    assert again["imported"] == [], "reading the kept totals imported torch or pytest"

    with open(first["file"], "w", encoding="utf-8") as handle:  # a damaged file: collected again
        handle.write('{"cka": "twenty"')
    repaired = _probe(tmp_path)
    assert repaired["totals"] == first["totals"] and repaired["imported"] == ["pytest", "torch"]
    assert _probe(tmp_path) == again, "the repaired entry is not read back"


def test_the_fingerprint_changes_with_the_hidden_suites(monkeypatch, tmp_path):
    """Another hidden suite (a file added) is another cache entry: stale totals are never read."""
    import shutil

    from bertlab_grader.core import locations
    from bertlab_grader.grading import kept_points

    suites = tmp_path / "hidden"
    shutil.copytree(locations.SUITES_DIR, suites, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(locations, "SUITES_DIR", suites)
    kept_points.points_key.cache_clear()
    try:
        before = kept_points.kept_file()
        kept_points.points_key.cache_clear()
        (suites / "test_hidden_extra.py").write_text("def test_more():\n    pass\n")
        assert kept_points.kept_file() != before
    finally:
        kept_points.points_key.cache_clear()
