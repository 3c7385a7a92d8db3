"""The memory test's verdict, graded as a student is graded (in the sandbox), for the searches issue 41
names, on a quiet machine and beside a CPU burner on every core.

    python benchmarks/memory_verdicts.py            # quiet, then loaded (about 5 min)

Each search is a submission: the reference's files with its retrieval.py changed (a bank entry's, or
the reference's with a search of the kind named appended). Only `test_search_memory_stays_bounded` runs
(`-k`), through `bertlab_grader.grading.scoring.grade_sources`, once quiet and once beside one spinning
process per core. Prints, per search and run, its points and the test's message (the figures a failure
quotes: what the search held at each size and its growth a row), and how long the test took.

Must keep the points: the reference, sentence-transformers' `util.semantic_search` (var_ret_st_util),
one query's row at a time (var_ret_loop), a fixed-size block loop (var_ret_chunked). Must lose them:
the whole [Q, N] matrix with top-k (ret_no_blocking), with a stable argsort, and txtai's NumPy search
(the whole matrix, then an argsort of every row).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(KIT_ROOT))

# The whole-matrix search with a stable sort is the repeatability test's own (one definition); txtai's
# NumPy search is written here, with the same checks of its input.
sys.path.insert(0, str(KIT_ROOT / "tests"))
from test_grade_repeatability import FULL_MATRIX_STABLE_SORT  # noqa: E402

VALIDATE = '''
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError("top_k must be a positive integer")
    queries, corpus = torch.as_tensor(query_embeddings), torch.as_tensor(corpus_embeddings)
    if queries.dim() == 1:
        queries = queries.unsqueeze(0)
    if queries.dim() != 2 or corpus.dim() != 2 or queries.shape[1] != corpus.shape[1]:
        raise ValueError("expected queries [Q, D] or [D] and corpus [N, D] of the same D")
    k = min(top_k, corpus.shape[0])
'''

APPENDED = {
    "whole matrix + stable argsort": FULL_MATRIX_STABLE_SORT,
    "txtai's NumPy search": '''

def semantic_search(query_embeddings, corpus_embeddings, top_k=10):''' + VALIDATE + '''    import numpy as np

    scores = F.normalize(queries, dim=1).numpy() @ F.normalize(corpus, dim=1).numpy().T
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return torch.from_numpy(np.take_along_axis(scores, order, axis=1)), torch.from_numpy(order)
''',
}
BANK = ("var_ret_st_util", "var_ret_loop", "var_ret_chunked", "ret_no_blocking")
TEST = "test_search_memory_stays_bounded"


def submissions() -> dict[str, dict[str, str]]:
    from bertlab_grader.core.fences import strip_fences
    from bertlab_grader.core.locations import reference_sources
    from bertlab_grader.course.submissions import read_submission_sources
    from bertlab_grader.mutants.bank import load_bank

    reference = {name: strip_fences(text) for name, text in reference_sources().items()}
    found = {"the reference": reference}
    for entry in load_bank():
        if entry.name in BANK:
            found[entry.name] = dict(read_submission_sources(entry.path))
    for name, code in APPENDED.items():
        found[name] = dict(reference, **{"retrieval.py": reference["retrieval.py"] + code})
    return found


def grade_memory(sandbox, name: str, files: dict[str, str]) -> tuple[float, float, str, float]:
    from bertlab_grader.grading.scoring import grade_sources

    started = time.perf_counter()
    result = grade_sources(sandbox, files, name.replace(" ", "_"), "week7", tasks=("retrieval",), hints=False,
                           extra_pytest_args=("-k", TEST))
    test = next(t for t in result["tests"] if t["name"] == TEST)
    return test["points"], test["max_points"], " ".join(test.get("message", "").split()), time.perf_counter() - started


def main() -> int:
    from bertlab_grader.sandbox.launcher import Sandbox

    sources = submissions()
    sandbox = Sandbox()
    try:
        for load in ("quiet", "loaded"):
            burners = ([subprocess.Popen([sys.executable, "-c", "while True:\n    pass"])
                        for _ in range(os.cpu_count() or 1)] if load == "loaded" else [])
            try:
                for name, files in sources.items():
                    points, most, message, seconds = grade_memory(sandbox, name, files)
                    print(f"{load:7} {name:32} {points:g}/{most:g}  {seconds:5.1f} s  {message[:260]}", flush=True)
            finally:
                for process in burners:
                    process.kill()
                    process.wait()
    finally:
        sandbox.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
