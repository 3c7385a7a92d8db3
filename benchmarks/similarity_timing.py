"""Timing of `bertlab similar` (grader/bertlab_grader/reporting/similarity.py) on synthetic cohorts. Prints figures;
asserts nothing.

    python benchmarks/similarity_timing.py [--students 100 2000 ...] [--seed 0] [--identical] [--check]
    python benchmarks/similarity_timing.py --sweep-k 15 20 25


Each cohort is written as an nbgrader course (submitted/<student>/week7/, outside the timing). Every
student's file of a task is drawn from the files that exist for it: the reference, the outside bank's
three correct styles, the red-team honest submission, the mutant bank's variants and mutants of that
task, and the released stub (about one file in ten, left out of the comparison as it should be). Each
drawn file is then edited as no two students would edit it alike: up to three of its lines deleted,
two neighbouring lines swapped, a line of the student's own added, so every file is tokenised (none
is a verbatim copy) and every pair of files drawn from the same one is a near copy, with a similarity
close to but below 1: many pairs the pre-screen cannot rule out at once, the costly case. With
``--identical`` the drawn files are kept as they are (many verbatim copies, tokenised once each).

Then ``compare_cohort`` is timed: reading the submissions, fingerprinting every file, the pre-screen
and the pairs compared in full; the printed breakdown is CPU time. With ``--check`` every cohort is
also compared without the pre-screen (``exhaustive=True``, every pair in full: minutes for a few
hundred students) and the two results are checked to be the same pairs with the same values. Wall time
and the process's CPU time (user + system) are printed; on a shared machine read the CPU time.

``--sweep-k`` prints, for each k-gram length instead, what docs/similarity.md gives as the reason for
k = 20: the similarity of a disguised copy to its original (cka.py: the planted copy of
tests/test_similarity.py; pooling.py: POOLING_COPY below), and the median and highest similarity of
the independently written files of that task (the reference, the outside bank's three styles, the
red-team honest submission).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(KIT_ROOT))

from bertlab.tasks import EXERCISE_FILES  # noqa: E402

ASSIGNMENT = "week7"


def file_pools() -> dict[str, list[str]]:
    """{filename: [texts a student's file of that task may be]}."""
    from bertlab_grader.mutants.bank import load_bank
    from bertlab_grader.core.locations import reference_sources as stripped_solutions

    tests = KIT_ROOT / "tests"
    folders = [tests / "outside_bank" / name for name in ("correct_literal", "correct_gram", "correct_batched")]
    folders.append(tests / "redteam_submissions" / "correct")
    pools = {name: [stripped_solutions()[name]] for name in EXERCISE_FILES}
    for folder in folders:
        for name in EXERCISE_FILES:
            pools[name].append((folder / name).read_text(encoding="utf-8"))
    for entry in load_bank():
        pools[entry.file].append((entry.path / entry.file).read_text(encoding="utf-8"))
    return pools


def edited(text: str, student: int, rng: random.Random) -> str:
    """``text`` as one student might have changed it: up to three lines deleted, two neighbouring
    lines swapped, a line of their own added (the file is only tokenised, so it need not run)."""
    lines = text.splitlines()
    for _ in range(rng.randint(0, 3)):
        code = [n for n, line in enumerate(lines) if line.strip()]
        if len(code) > 10:
            del lines[rng.choice(code)]
    if len(lines) > 2:
        n = rng.randrange(len(lines) - 1)
        lines[n], lines[n + 1] = lines[n + 1], lines[n]
    lines.append(f"STUDENT_{student} = {rng.randrange(10**6)}  # mine")
    return "\n".join(lines) + "\n"


def build_course(root: Path, students: int, seed: int, identical: bool = False) -> Path:
    """A course of ``students`` submissions drawn from :func:`file_pools` (see the module docstring)."""
    from bertlab_grader.authoring.stubs import expected_exercises

    rng = random.Random(seed)
    pools, stubs = file_pools(), expected_exercises()
    course = root / "course"
    for i in range(students):
        folder = course / "submitted" / f"s{i:04d}" / ASSIGNMENT
        folder.mkdir(parents=True)
        for name in EXERCISE_FILES:
            if rng.random() < 0.1:
                text = stubs[name]
            else:
                text = rng.choice(pools[name])
                text = text if identical else edited(text, i, rng)
            (folder / name).write_text(text, encoding="utf-8")
    return course


def _timed(module, name: str, spent: dict) -> None:
    """Wrap ``module.name`` so that the CPU time spent in it adds up in ``spent[name]``."""
    inner = getattr(module, name)

    def wrapper(*args, **kwargs):
        start = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.process_time() - start

    setattr(module, name, wrapper)


def time_cohort(students: int, seed: int, identical: bool = False, check: bool = False) -> dict:
    from unittest import mock

    from bertlab_grader.reporting import similarity

    spent: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bertlab-similar-") as tmp:
        course = build_course(Path(tmp), students, seed, identical)
        with mock.patch.object(similarity, "Fingerprint", similarity.Fingerprint), \
                mock.patch.object(similarity, "pair_bounds", similarity.pair_bounds), \
                mock.patch.object(similarity, "pair_similarity", similarity.pair_similarity):
            for name in ("Fingerprint", "pair_bounds", "pair_similarity"):
                _timed(similarity, name, spent)
            wall, cpu = time.perf_counter(), time.process_time()
            result = similarity.compare_cohort(course, ASSIGNMENT, top=10)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        row = {"students": students, "files": sum(t.compared for t in result.tasks),
               "pairs": sum(t.compared * (t.compared - 1) // 2 for t in result.tasks),
               "in_full": sum(t.compared_in_full for t in result.tasks), "wall_s": wall, "cpu_s": cpu,
               "tokenise_s": spent.get("Fingerprint", 0.0), "screen_s": spent.get("pair_bounds", 0.0),
               "exact_s": spent.get("pair_similarity", 0.0)}
        if check:
            start, cpu = time.perf_counter(), time.process_time()
            full = similarity.compare_cohort(course, ASSIGNMENT, top=10, exhaustive=True)
            row["all_pairs_wall_s"], row["all_pairs_cpu_s"] = time.perf_counter() - start, time.process_time() - cpu
            row["same"] = full.pairs() == result.pairs() and \
                [t.pairs_with_shared_code for t in full.tasks] == [t.pairs_with_shared_code for t in result.tasks]
    return row


#: tests/outside_bank/correct_literal/pooling.py disguised: names changed, its checks and its two
#: middle statements reordered, no comments.
POOLING_COPY = '''import torch


def masked_mean_pool(h: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """mean over real tokens"""
    if m.dim() != 2:
        raise ValueError(f"attention_mask must be [B, T], got {tuple(m.shape)}")
    if h.dim() != 3:
        raise ValueError(f"hidden_states must be [B, T, D], got {tuple(h.shape)}")
    if m.shape != h.shape[:2]:
        raise ValueError(f"mask {tuple(m.shape)} does not match hidden {tuple(h.shape)}")
    w = m.to(h.dtype).unsqueeze(-1)
    n = w.sum(dim=1).clamp(min=1)
    total = (h * w).sum(dim=1)
    return total / n
'''


def statement_lengths(sources: list[str]) -> str:
    """The quartiles of the filtered length (copydetect's filtered text) of the simple statements of
    ``sources``: assignments, returns, raises, calls; imports and docstrings aside."""
    import ast
    import statistics

    from copydetect.utils import filter_code

    compound = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For, ast.While, ast.With,
                ast.Try, ast.Import, ast.ImportFrom)
    lengths = []
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.stmt) or isinstance(node, compound):
                continue
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):  # a docstring
                continue
            filtered, _ = filter_code(ast.get_source_segment(source, node) + "\n", "statement.py", "python")
            lengths.append(len(filtered))
    q1, median, q3 = statistics.quantiles(lengths, n=4)
    return (f"filtered length of the {len(lengths)} simple statements of the reference and the outside "
            f"bank: quartiles {q1:.0f}, {median:.0f}, {q3:.0f} characters")


def sweep_k(values: list[int]) -> None:
    import statistics

    from bertlab_grader.reporting import similarity
    from bertlab_grader.core.locations import reference_sources as stripped_solutions

    sys.path.insert(0, str(KIT_ROOT / "tests"))
    from test_similarity import PLANTED_CKA  # the planted copy of outside_bank/correct_gram/cka.py

    tests = KIT_ROOT / "tests"
    outside = sorted((tests / "outside_bank").glob("correct_*/*.py"))
    print(statement_lengths([*stripped_solutions().values(), *(p.read_text(encoding="utf-8") for p in outside)]))
    cases = (("cka.py", "correct_gram", PLANTED_CKA), ("pooling.py", "correct_literal", POOLING_COPY))
    saved = similarity.K
    print(f"{'file':<11} {'k':>3}  {'disguised copy':>14}  {'independent: median':>19}  {'highest':>7}")
    try:
        for filename, original, copy in cases:
            independent = {"reference": stripped_solutions()[filename],
                           "redteam": (tests / "redteam_submissions" / "correct" / filename).read_text("utf-8"),
                           **{name: (tests / "outside_bank" / name / filename).read_text(encoding="utf-8")
                              for name in ("correct_literal", "correct_gram", "correct_batched")}}
            for k in values:
                similarity.K = k
                similarity.stub_boilerplate.cache_clear()
                boilerplate = similarity.stub_boilerplate(filename)
                prints = {name: similarity.Fingerprint(text, filename, boilerplate)
                          for name, text in independent.items()}
                copied = similarity.pair_similarity(prints[original],
                                                    similarity.Fingerprint(copy, filename, boilerplate))
                names = sorted(prints)
                alike = [similarity.pair_similarity(prints[a], prints[b])
                         for i, a in enumerate(names) for b in names[i + 1:]]
                print(f"{filename:<11} {k:>3}  {copied:>14.3f}  {statistics.median(alike):>19.3f}  "
                      f"{max(alike):>7.3f}")
    finally:
        similarity.K = saved
        similarity.stub_boilerplate.cache_clear()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, nargs="+", default=[100], help="cohort sizes (default: 100)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--identical", action="store_true", help="keep the drawn files as they are (verbatim copies)")
    parser.add_argument("--check", action="store_true",
                        help="also compare every pair in full (slow) and check both give the same pairs")
    parser.add_argument("--sweep-k", type=int, nargs="+", metavar="K",
                        help="instead: disguised copies against independently written files, for each k")
    args = parser.parse_args(argv)
    if args.sweep_k:
        sweep_k(args.sweep_k)
        return 0

    # Warm-up outside the timing: importing copydetect (it imports matplotlib) and fingerprinting the stubs.
    start = time.perf_counter()
    from bertlab_grader.reporting.similarity import stub_boilerplate

    for name in EXERCISE_FILES:
        stub_boilerplate(name)
    print(f"set-up (import copydetect, fingerprint the four stubs): {time.perf_counter() - start:.2f} s wall")
    print(f"{'students':>8}  {'files':>6}  {'pairs':>9}  {'in full':>7}  {'wall s':>7}  {'cpu s':>7}  "
          f"{'tokenise':>8}  {'screen':>7}  {'in full':>7}")
    for students in args.students:
        row = time_cohort(students, args.seed, args.identical, args.check)
        print(f"{row['students']:>8}  {row['files']:>6}  {row['pairs']:>9}  {row['in_full']:>7}  "
              f"{row['wall_s']:>7.2f}  {row['cpu_s']:>7.2f}  {row['tokenise_s']:>8.2f}  {row['screen_s']:>7.2f}  "
              f"{row['exact_s']:>7.2f}", flush=True)
        if args.check:
            print(f"{'':>8}  every pair in full: {row['all_pairs_wall_s']:.2f} s wall, {row['all_pairs_cpu_s']:.2f} s "
                  f"cpu; same pairs and values: {'yes' if row['same'] else 'NO'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
