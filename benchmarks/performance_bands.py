"""Repeatability of the performance task: the solutions and the correct variants of the bank, each
graded on the performance task alone RUNS times, each run in a fresh sandboxed process.

    python benchmarks/performance_bands.py [RUNS]

Prints one line per run: the ratio to the reference for each function that lost points ("ok" for
full points) and the points. The bands (grader/performance.py) should come out the same every run.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(KIT_ROOT))


def main(argv: list[str]) -> int:
    import torch

    from bertlab_grader.kit import reference_sources
    from bertlab_grader.course import read_submission_sources
    from bertlab_grader.mutants import load_bank
    from bertlab_grader.sandbox import Sandbox
    from bertlab_grader.scoring import run_hidden_suite, warm_up

    runs = int(argv[0]) if argv else 5
    torch.set_num_threads(1)
    solution = reference_sources()
    entries = [("solutions", solution)] + [(e.name, read_submission_sources(e.path)) for e in load_bank(kinds=("variant",))]
    sandbox = Sandbox(kit_root=KIT_ROOT)
    try:
        warm_up()
        for name, sources in entries:
            for _ in range(runs):
                with sandbox.session(dict(sources)) as impl:
                    result = run_hidden_suite(impl, student=name, tasks=["performance"])
                cells = []
                for test in result["tests"]:
                    ratio = re.search(r"took ([\d.]+)x", test["message"])
                    what = test["name"].removeprefix("test_").removesuffix("_speed")
                    shown = ratio.group(1) + "x" if ratio else ("ok" if test["outcome"] == "passed" else test["outcome"])
                    cells.append(f"{what}={shown}")
                print(f"{name:18s} {result['score']:4g}/10  " + "  ".join(cells), flush=True)
    finally:
        sandbox.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
