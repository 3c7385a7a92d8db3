"""A grade is a function of the files alone (issue 41): submissions chosen to sit near every old gate and
edge of the grader are graded three times, quietly, then beside a CPU burner on every core, then quietly
again; every correctness task gets identical points in every run, and every speed test points within 0.1.

The submissions:
- ``full_matrix_stable_sort``: the whole [Q, N] cosine matrix, then a stable argsort of every row (the tie
  rule the docstring asks for). It took about 0.2 s on the memory test's small corpus, where the old
  memory test stopped measuring: it must lose the memory points in every run;
- ``var_ret_float64`` (the bank's): float64 scores in query blocks, stable sorts; about 0.2 s there too, and
  bounded memory: it must keep the memory points in every run;
- ``var_cka_gram`` (the bank's): CKA by the n x n Gram matrices, measured at 2.2x to 2.5x the reference's
  time, near the old 2x band edge;
- ``var_pool_einsum`` (the bank's): pooling measured at 1.7x to 2.2x, on the old 2x band edge;
- ``var_cka_hsic`` (the bank's): CKA through an n x n centering matrix, measured at 20x to 20.6x, on the
  old 20x band edge.

The ratios above were measured by the wall clock. Since each side is timed by its process's CPU time,
var_pool_einsum measures 1.2x to 1.3x and var_cka_hsic about 16x: no longer on an edge, they stay as
code whose points must not move with the load.

Only the retrieval and performance tasks are graded (the others hold no time-dependent point).

"Quiet" means no burner of this test's own: in the whole suite (``-n auto``) the other worker's tests
run beside all three runs, so the three see different loads, and the burners add one on every core to
the second. Run the module alone (``python -m pytest -q tests/test_grade_repeatability.py``) for a
truly quiet first and third run.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")]

FULL_MATRIX_STABLE_SORT = '''

def semantic_search(query_embeddings, corpus_embeddings, top_k=10):
    """Every cosine at once, then a stable argsort of each [N] row (ties by ascending index)."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError("top_k must be a positive integer")
    queries, corpus = torch.as_tensor(query_embeddings), torch.as_tensor(corpus_embeddings)
    if queries.dim() == 1:
        queries = queries.unsqueeze(0)
    if queries.dim() != 2 or corpus.dim() != 2 or queries.shape[1] != corpus.shape[1]:
        raise ValueError("expected queries [Q, D] or [D] and corpus [N, D] of the same D")
    dtype = torch.float64 if torch.float64 in (queries.dtype, corpus.dtype) else torch.float32
    scores = F.normalize(queries.to(dtype), dim=1) @ F.normalize(corpus.to(dtype), dim=1).T
    order = torch.argsort(scores, dim=1, descending=True, stable=True)[:, :min(top_k, corpus.shape[0])]
    return scores.gather(1, order), order
'''

VARIANTS = ("var_ret_float64", "var_cka_gram", "var_pool_einsum", "var_cka_hsic")
MEMORY_TEST = "test_search_memory_stays_bounded"
#: How far apart a speed test's points may lie in the three runs: issue 41's bar. By the wall clock a
#: long call lost more to the burner than the reference's short one (a woken process gets the CPU at
#: once for a few milliseconds), and the 4-point search test moved by up to 0.19; each side is now
#: timed by the CPU time its sandboxed process used (grader/bertlab_grader/performance/timing.py,
#: ``_CpuClocks``), measured (2026-12-04) within 0.09 of each other quiet and loaded; but CI then saw
#: the full-matrix search at 5.06x and 6.10x (0.11 apart): its process and the reference's sat on
#: different CPUs. Both are now pinned to one CPU while timed (``_on_one_core``): 6.10x to 6.23x.
SPEED_SPREAD = 0.1


def submissions() -> dict[str, dict[str, str]]:
    from bertlab_grader.core.fences import strip_fences
    from bertlab_grader.core.locations import reference_sources
    from bertlab_grader.course.submissions import read_submission_sources
    from bertlab_grader.mutants.bank import load_bank

    reference = {name: strip_fences(text) for name, text in reference_sources().items()}
    found = {"full_matrix_stable_sort": dict(reference, **{"retrieval.py": reference["retrieval.py"]
                                                           + FULL_MATRIX_STABLE_SORT})}
    for entry in load_bank(kinds=("variant",)):
        if entry.name in VARIANTS:
            found[entry.name] = dict(read_submission_sources(entry.path))
    assert set(found) == {"full_matrix_stable_sort", *VARIANTS}
    return found


def burners() -> list[subprocess.Popen]:
    """One process spinning on every core, at the grader's own priority."""
    import os

    return [subprocess.Popen([sys.executable, "-c", "while True:\n    pass"]) for _ in range(os.cpu_count() or 1)]


def grade_all(sandbox, sources: dict[str, dict[str, str]]) -> dict[str, dict[str, dict]]:
    from bertlab_grader.grading.scoring import grade_sources

    graded = {}
    for name, files in sources.items():
        result = grade_sources(sandbox, files, name, "week7", tasks=("retrieval", "performance"), hints=False)
        graded[name] = {t["name"]: t for t in result["tests"]}
    return graded


def test_the_same_files_get_the_same_points_quiet_and_busy():
    from bertlab_grader.sandbox.launcher import Sandbox

    sources = submissions()
    runs = []
    sandbox = Sandbox()
    try:
        runs.append(grade_all(sandbox, sources))
        spinning = burners()
        try:
            runs.append(grade_all(sandbox, sources))
        finally:
            for process in spinning:
                process.kill()
                process.wait()
        runs.append(grade_all(sandbox, sources))
    finally:
        sandbox.close()

    for name in sources:
        print(f"{name}: " + " | ".join(
            ", ".join(f"{test} {t['points']:g}" + (f" ({t['ratio']}x)" if "ratio" in t else "")
                      for test, t in sorted(run[name].items()) if t["task"] == "performance" or test == MEMORY_TEST)
            for run in runs))
    for name in sources:
        for test in runs[0][name]:
            points = [run[name][test]["points"] for run in runs]
            if runs[0][name][test]["task"] == "performance":
                assert max(points) - min(points) <= SPEED_SPREAD + 1e-9, (name, test, points)
                assert min(points) > 0, (name, test, points, "a right answer earns speed points")
            else:
                assert len(set(points)) == 1, (name, test, points, [run[name][test]["message"] for run in runs])
        memory = [run[name][MEMORY_TEST]["points"] for run in runs]
        expected = 0.0 if name == "full_matrix_stable_sort" else runs[0][name][MEMORY_TEST]["max_points"]
        assert memory == [expected] * 3, (name, memory, [run[name][MEMORY_TEST]["message"] for run in runs])
