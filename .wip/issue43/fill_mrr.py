"""Fill task mean_reciprocal_rank's pieces in the checkout in cwd (after `bertlab new-task mean_reciprocal_rank`),
from the files written by hand, kept beside this script in mrr-task-files.tgz (unpacked to a temporary folder).

    python .wip/issue43/fill_mrr.py      # from a fresh clone, after `bertlab new-task mean_reciprocal_rank`
"""
import re, shutil, subprocess, sys, tarfile, tempfile
from pathlib import Path
src, root = Path(tempfile.mkdtemp(prefix="mrr-task-")), Path(".")
with tarfile.open(Path(__file__).with_name("mrr-task-files.tgz")) as archive:
    archive.extractall(src, filter="data")
own = ["solutions/mean_reciprocal_rank.py", "tests/public/test_mean_reciprocal_rank.py",
       "tests/hidden/test_hidden_mean_reciprocal_rank.py", "grader/bertlab_grader/mutants/mean_reciprocal_rank.py",
       "src/bertlab/teaching/mean_reciprocal_rank.py", "benchmarks/test_bench_mean_reciprocal_rank.py",
       "docs/concepts/6-mean_reciprocal_rank.md", "tests/outside_bank/correct_literal/mean_reciprocal_rank.py",
       "tests/outside_bank/correct_gram/mean_reciprocal_rank.py", "tests/outside_bank/correct_batched/mean_reciprocal_rank.py",
       "tests/redteam_submissions/correct/mean_reciprocal_rank.py"]
for f in own:
    assert (root / f).exists(), f"new-task did not write {f}"
    shutil.copy2(src / f, root / f)
p = root / "src/bertlab/tasks.py"; s = p.read_text()
s = s.replace("    # Written by `bertlab new-task mean_reciprocal_rank`: REPLACE functions, summary and start with your task's.\n", "")
s = s.replace("summary='REPLACE: what the function does, in a few words'", "summary='one number for a set of rankings: the mean of 1 / rank'")
s = s.replace("start='Start with mean_reciprocal_rank in exercises/mean_reciprocal_rank.py: REPLACE with the first step to take.'",
              "start='Start with mean_reciprocal_rank in exercises/mean_reciprocal_rank.py: compare each row of ranked with its answer, then 1 / place of the first hit (0 for none).'")
assert "REPLACE" not in s
p.write_text(s)
for page, pattern in (("docs/hidden-suites.md", r"^### mean_reciprocal_rank \(\d+\)\n.*?(?=^### )"),
                      ("docs/hidden-checks.md", r"^## mean_reciprocal_rank\n.*?(?=^## )")):
    mine = re.search(pattern, (src / page).read_text(), flags=re.M | re.S).group(0)
    p = root / page; s = p.read_text()
    sec = re.search(pattern, s, flags=re.M | re.S)
    s = s[:sec.start()] + mine + s[sec.end():]
    if page.endswith("suites.md"):
        m = re.search(r"^## Points per test \((\d+) in all\)$", s, flags=re.M)
        s = s[:m.start(1)] + str(int(m.group(1)) + 1) + s[m.end(1):]  # the placeholder's 3 points, now 4
    p.write_text(s)
subprocess.run([sys.executable, "tools/build_exercises.py"], check=True)
# erin (the demo's hostile student) keeps the untouched stub: the new one.
shutil.copy2(root / "exercises/mean_reciprocal_rank.py", root / "grader/bertlab_grader/commands/demo_cohort/erin/mean_reciprocal_rank.py")
print("filled")
