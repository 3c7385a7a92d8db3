"""Repeatability of the performance task: the solutions, the correct variants of the bank and the
correct submissions of the outside bank (tests/outside_bank/correct_*), each graded on the performance
task alone RUNS times, each run in a fresh sandboxed process.

    python benchmarks/performance_bands.py [RUNS] [NAME-SUBSTRING]

Prints one line per run: the points and the measured time ratio to the reference for each function.
The points follow the ratio on a continuous curve (grader/bertlab_grader/performance/timing.py,
points_fraction), so they should come out within 0.1 of each other every run, whatever the ratio; a
cohort run moreover keeps its first measurement (grader/bertlab_grader/performance/record.py); this
script keeps none.
"""

from __future__ import annotations

import sys
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(KIT_ROOT))


def main(argv: list[str]) -> int:
    import torch

    from bertlab_grader.core.locations import reference_sources
    from bertlab_grader.course.submissions import read_submission_sources
    from bertlab_grader.mutants.bank import load_bank
    from bertlab_grader.sandbox.launcher import Sandbox
    from bertlab_grader.grading.scoring import run_hidden_suite, warm_up

    runs = int(argv[0]) if argv else 5
    only = argv[1] if len(argv) > 1 else ""
    torch.set_num_threads(1)
    solution = reference_sources()
    entries = [("solutions", solution)] + [(e.name, read_submission_sources(e.path)) for e in load_bank(kinds=("variant",))]
    entries += [(p.name, read_submission_sources(p)) for p in sorted((KIT_ROOT / "tests" / "outside_bank").glob("correct_*"))]
    entries = [(name, sources) for name, sources in entries if only in name]
    sandbox = Sandbox(kit_root=KIT_ROOT)
    try:
        warm_up()
        for name, sources in entries:
            for _ in range(runs):
                with sandbox.session(dict(sources)) as impl:
                    result = run_hidden_suite(impl, student=name, tasks=["performance"])
                cells = []
                for test in result["tests"]:
                    what = test["name"].removeprefix("test_").removesuffix("_speed")
                    shown = f"{test['ratio']:.2f}x" if "ratio" in test else test["outcome"]
                    cells.append(f"{what}={shown}")
                print(f"{name:18s} {result['score']:4g}/10  " + "  ".join(cells), flush=True)
    finally:
        sandbox.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
