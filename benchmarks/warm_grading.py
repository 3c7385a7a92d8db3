"""Seconds per submission in one warm grader: the solutions, every mutant of the bank (hints
included) and a submission with a syntax error, graded one after the other through one sandbox.

    python benchmarks/warm_grading.py

Start-up (the sandbox template, MiniLM, the reference data) and one rehearsal submission are not
counted; what is printed is the cost of one more submission once a cohort grader is warm.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(KIT_ROOT))


def main() -> int:
    import torch

    from bertlab_grader.course.submissions import read_submission_sources
    from bertlab_grader.mutants.bank import load_bank
    from bertlab_grader.core.locations import reference_sources
    from bertlab_grader.sandbox.launcher import Sandbox
    from bertlab_grader.grading.scoring import run_hidden_suite, warm_up

    torch.set_num_threads(1)  # as a grader worker
    solution = reference_sources()
    broken = dict(solution, **{"siamese.py": "def oops(:\n    pass\n"})
    entries = ([("solutions", solution)] + [(e.name, read_submission_sources(e.path)) for e in load_bank(kinds=("mutant",))]
               + [("syntax error in siamese.py", broken)])
    sandbox = Sandbox(kit_root=KIT_ROOT)
    try:
        warm_up()
        with sandbox.session(dict(solution)) as impl:  # the rehearsal: first-run costs are not counted
            run_hidden_suite(impl, student="rehearsal")
        rows = []
        for name, sources in entries:
            start = time.perf_counter()
            with sandbox.session(dict(sources)) as impl:
                result = run_hidden_suite(impl, student="bench")
            rows.append((time.perf_counter() - start, name, result["score"]))
    finally:
        sandbox.close()
    for seconds, name, score in sorted(rows, reverse=True)[:5]:
        print(f"{seconds:6.2f} s  {name:28s} {score:g}/100")
    seconds = [r[0] for r in rows]
    print(f"{len(rows)} submissions: mean {statistics.mean(seconds):.2f} s, median {statistics.median(seconds):.2f} s, "
          f"solutions {rows[0][0]:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
