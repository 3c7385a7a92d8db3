"""How much does the measured speed ratio of the same code move between fresh sandboxed processes, and
does a bigger timed call make it move less? (The performance task's repeatability: issue 11.)

    python benchmarks/timing_spread.py [--sessions 6] [--rows 512 2048]

For each batch size (rows of a [rows, 16, 128] ``masked_mean_pool`` input, as in
``test_masked_mean_pool_speed``) and each of three correct submissions (the reference, and the outside
bank's ``correct_gram`` and ``correct_literal``), times the submission against the reference with the
performance task's own protocol (``compare_speed``) in SESSIONS fresh sandboxed processes, one after
another, nothing else grading. Prints the range of the ratios and max/min: 1.00 would mean the same
ratio in every process. Never asserts a time.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(KIT_ROOT))

SUBMISSIONS = ("correct_gram", "correct_literal")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=6, help="fresh sandboxed processes per submission and size")
    parser.add_argument("--rows", type=int, nargs="+", default=[512, 2048], help="batch sizes to compare")
    args = parser.parse_args(argv)

    import torch

    from bertlab.implementations import load_implementation
    from bertlab_grader.course.submissions import read_submission_sources
    from bertlab_grader.core.locations import reference_sources
    from bertlab_grader.performance.timing import TimedInputs, compare_speed, reference_call, student_call
    from bertlab_grader.sandbox.launcher import Sandbox
    from bertlab_grader.grading.scoring import warm_up

    torch.set_num_threads(1)  # as in a grader worker and in the sandbox
    reference = load_implementation("reference")
    submissions = {"reference": reference_sources()}
    for name in SUBMISSIONS:
        submissions[name] = read_submission_sources(KIT_ROOT / "tests" / "outside_bank" / name)
    sandbox = Sandbox(kit_root=KIT_ROOT)
    try:
        warm_up()
        for rows in args.rows:
            def draw(n, rows=rows):  # inputs of their own for every call, as in the hidden test
                g = torch.Generator().manual_seed(501 + 1000 * n)
                hidden = torch.randn(rows, 16, 128, generator=g)
                mask = (torch.arange(16)[None, :] < torch.randint(1, 17, (rows, 1), generator=g)).long()
                return (hidden, mask), {}

            for name, sources in submissions.items():
                ratios, reference_ms = [], []
                for _ in range(args.sessions):
                    with sandbox.session(dict(sources)) as impl:
                        inputs = TimedInputs(draw)
                        timing, _, _ = compare_speed(
                            student_call(impl, impl.pooling.masked_mean_pool, inputs),
                            reference_call(impl, reference.pooling.masked_mean_pool, inputs))
                    ratios.append(timing.ratio)
                    reference_ms.append(1e3 * min(timing.reference))
                print(f"rows {rows:5d}  {name:16s} ratio {min(ratios):.2f}-{max(ratios):.2f} "
                      f"(max/min {max(ratios) / min(ratios):.2f}); reference call {min(reference_ms):.2f} ms",
                      flush=True)
    finally:
        sandbox.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
