"""The instructor's way to change the kit's tasks, end to end in a copy of the kit (docs/authoring.md).

1. `bertlab new-task cosine_matrix`: right after it, the files changed outside the task's own new
   files are the registry and the page that lists every hidden test with its points
   (docs/hidden-suites.md), and the kit is consistent on the placeholder exercise.
2. The guide's worked example (docs/authoring-example/): the placeholder's pieces replaced with a real
   function. Still only those two changed outside the task's files; its public and hidden tests
   pass on the reference and fail on the stub; the audit catches its mutants in their own task; the
   reference gets the task's points in the sandbox and a mutant loses them there; the student bundle
   ships it; the kit's registry, stub and architecture tests pass in the copy.
3. `bertlab remove-task pooling` is refused (siamese uses pooling) and changes nothing.
4. `bertlab remove-task retrieval`: grading, the demo and the lesson still work, without the task, and
   the kit's own tests pass there (those written about retrieval are skipped with the reason).

One virtualenv holds the copy as an editable install (tests/venvs.py: the dependencies come from
this interpreter's environment). Minutes: marked slow.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from venvs import make_venv, ok, run  # noqa: E402

pytestmark = pytest.mark.slow

KIT = Path(__file__).resolve().parents[1]
EXAMPLE = KIT / "docs" / "authoring-example"
TASK = "cosine_matrix"
REGISTRY = "src/bertlab/tasks.py"
SUITES_DOC = "docs/hidden-suites.md"  # every hidden test with its points (tests/test_scoring.py)
SUMMARY = "every pairwise cosine of two sets of vectors"
START = ("Start with cosine_matrix in exercises/cosine_matrix.py: scale the rows of a and of b to length 1 "
         "(F.normalize), in float64, then one matrix product.")


def git(copy: Path, *args: str) -> str:
    return ok(run(["git", *args], cwd=copy)).stdout


def changed_outside(copy: Path, own: set[str]) -> list[str]:
    """Paths git reports as changed or new, less the task's own files."""
    lines = git(copy, "status", "--porcelain", "--untracked-files=all").splitlines()
    return sorted(line[3:] for line in lines if line[3:] not in own)


@pytest.fixture(scope="module")
def kit_copy(tmp_path_factory):
    """(copy, env): the kit's files (tracked and new, as in this checkout) in a fresh git repository,
    installed editable in a venv of its own; env runs that venv's `bertlab` first."""
    root = tmp_path_factory.mktemp("authoring")
    copy = root / "kit"
    files = ok(run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=KIT)).stdout.split("\0")
    for name in filter(None, files):
        source = KIT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=kit", "-c", "user.email=kit@example.org",
                                                 "commit", "-qm", "the kit"]):
        git(copy, *args)
    venv_bin = make_venv(root / "venv", Path(sysconfig.get_paths()["purelib"]))
    ok(run([sys.executable, "-m", "pip", "--python", venv_bin / "python", "install", "--no-deps",
            "--no-build-isolation", "-e", copy], cwd=root, timeout=600))
    path = os.pathsep.join([str(venv_bin), str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return copy, {"PATH": path}


def bertlab(copy: Path, env: dict, *args: str, timeout: int = 900):
    return run(["bertlab", *args], cwd=copy, timeout=timeout, **env)


def pytest_in(copy: Path, env: dict, *args: str):
    return run(["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=copy, timeout=900, **env)


def own_files(copy: Path, task: str) -> set[str]:
    return {p for p in git(copy, "ls-files", "-co", "--exclude-standard").split() if task in Path(p).name}


@pytest.mark.tasks("cka", "pooling", "siamese", "retrieval")  # the worked example is the fifth; it removes retrieval
def test_new_task_then_the_worked_example_then_remove_task(kit_copy):
    copy, env = kit_copy

    # 1. new-task: the placeholder, and only the registry changed outside the task's files.
    done = ok(bertlab(copy, env, "new-task", TASK))
    assert f"Task {TASK} added" in done.stdout
    assert changed_outside(copy, own_files(copy, TASK)) == [SUITES_DOC, REGISTRY], done.stdout
    refused = bertlab(copy, env, "new-task", TASK)
    assert refused.returncode == 2 and "already a task" in refused.stderr and "Traceback" not in refused.stderr
    for bad in ("2fast", "class", "Cosine"):
        refused = bertlab(copy, env, "new-task", bad)
        assert refused.returncode == 2 and "cannot be a task name" in refused.stderr, refused.stderr

    placeholder = [f"tests/public/test_{TASK}.py", f"tests/hidden/test_hidden_{TASK}.py"]
    ok(pytest_in(copy, env, *placeholder))  # the reference passes (the kit's --impl reference)
    on_stub = pytest_in(copy, env, "--impl", "exercises", *placeholder)
    assert on_stub.returncode == 1 and " passed" not in on_stub.stdout.splitlines()[-1], on_stub.stdout[-2000:]
    audit = ok(bertlab(copy, env, "audit", "--only", TASK))
    assert "1/1 mutants caught in their own task only" in audit.stdout, audit.stdout

    # 2. The worked example: its pieces over the placeholder's, and the registry's two texts.
    for source in EXAMPLE.rglob("*"):
        if source.is_file() and source.name != "hidden-suites-section.md":  # (a section of a page: below)
            target = copy / source.relative_to(EXAMPLE)
            assert target.exists(), f"the worked example's {source.name} replaces a file new-task wrote"
            shutil.copy2(source, target)
    registry = (copy / REGISTRY).read_text()
    registry = registry.replace("REPLACE: what the function does, in a few words", SUMMARY)
    registry = registry.replace(f"Start with {TASK} in exercises/{TASK}.py: REPLACE with the first step to take.", START)
    (copy / REGISTRY).write_text(registry)
    # docs/hidden-suites.md: the section new-task wrote for the placeholder's tests, replaced by the
    # example's (one line per hidden test), and the page's total raised by the difference.
    doc = (copy / SUITES_DOC).read_text()
    section = re.search(rf"^### {TASK} \((\d+)\)\n.*?(?=^##)", doc, flags=re.M | re.S)
    example = (EXAMPLE / "hidden-suites-section.md").read_text()
    added = int(re.match(r"### \w+ \((\d+)\)", example).group(1)) - int(section.group(1))
    doc = doc[:section.start()] + example + doc[section.end():]
    total = re.search(r"^## Points per test \((\d+) in all\)$", doc, flags=re.M)
    doc = doc[:total.start(1)] + str(int(total.group(1)) + added) + doc[total.end(1):]
    (copy / SUITES_DOC).write_text(doc)
    ok(run(["python", "tools/build_exercises.py"], cwd=copy, **env))  # the stub from the new solution
    assert changed_outside(copy, own_files(copy, TASK)) == [SUITES_DOC, REGISTRY]

    tests = [f"tests/public/test_{TASK}.py", f"tests/hidden/test_hidden_{TASK}.py"]
    assert "5 passed" in ok(pytest_in(copy, env, *tests)).stdout
    on_stub = pytest_in(copy, env, "--impl", "exercises", *tests)
    assert "5 failed" in on_stub.stdout.splitlines()[-1], on_stub.stdout[-2000:]
    ok(pytest_in(copy, env, "tests/test_registry.py", "tests/test_stubs.py", "tests/test_architecture.py",
                 "tests/test_scoring.py"))
    audit = ok(bertlab(copy, env, "audit", "--only", "cosmat"))
    assert "2/2 mutants caught in their own task only; 1/1 variants with full marks; 0 problem(s)" in audit.stdout
    check = bertlab(copy, env, "check", "--task", TASK)
    assert TASK in check.stdout and "not started" in check.stdout, check.stdout[-2000:]

    graded = json.loads(ok(bertlab(copy, env, "grade-one", "solutions", "--json")).stdout)
    ours = [t for t in graded["tests"] if t["task"] == TASK]
    assert len(ours) == 3 and all(t["outcome"] == "passed" for t in ours), ours
    assert graded["score"] == graded["max_score"]
    mutant = copy.parent / "mutant"
    shutil.copytree(copy / "solutions", mutant, ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
    path = mutant / f"{TASK}.py"
    path.write_text(path.read_text().replace("    return unit_a @ unit_b.T", "    return unit_a @ b.to(torch.float64).T"))
    graded = json.loads(ok(bertlab(copy, env, "grade-one", str(mutant), "--json")).stdout)
    lost = {t["task"] for t in graded["tests"] if t["task"] != "performance" and t["points"] < t["max_points"]}
    assert lost == {TASK}, lost
    assert any(t.get("hint") and "normalise the rows of b" in t["hint"] for t in graded["tests"] if t["task"] == TASK)

    bundle = copy.parent / "bundle"
    ok(bertlab(copy, env, "release", str(bundle)))
    assert (bundle / "exercises" / f"{TASK}.py").is_file() and f"| {TASK} |" in (bundle / "README.md").read_text()
    assert not (bundle / "solutions").exists()

    # 3. A task another uses is refused, and nothing changes.
    before = git(copy, "status", "--porcelain", "--untracked-files=all")
    refused = bertlab(copy, env, "remove-task", "pooling")
    assert refused.returncode == 2 and "used by siamese" in refused.stderr, refused.stderr
    assert git(copy, "status", "--porcelain", "--untracked-files=all") == before

    # 4. Remove retrieval: grading and the demo go on without it.
    ok(bertlab(copy, env, "remove-task", "retrieval"))
    assert not (copy / "solutions" / "retrieval.py").exists() and not (copy / "exercises" / "retrieval.py").exists()
    graded = json.loads(ok(bertlab(copy, env, "grade-one", "solutions", "--json")).stdout)
    assert "retrieval" not in {t["task"] for t in graded["tests"]} and graded["score"] == graded["max_score"]
    demo = ok(bertlab(copy, env, "demo"))
    assert "retrieval" not in demo.stdout.split("Graded")[0] and "alice" in demo.stdout
    # The lesson runs on: the search steps say the task is not part of this course (tests/test_notebook.py
    # and tests/test_lesson_figures.py, written about the four tasks, are skipped in such a course).
    lesson = ok(run(["bertlab", "lesson", "--reference", "--quick"], cwd=copy, timeout=900, BERTLAB_FAST="1", **env))
    assert "task retrieval is not part of this course" in lesson.stdout, lesson.stdout[-3000:]
    # The kit's own tests: those about the removed task are skipped with the reason, the others pass.
    kit_tests = ok(pytest_in(copy, env, "-rs", "-m", "not slow", "tests/test_registry.py", "tests/test_stubs.py",
                             "tests/test_scoring.py::test_max_points_match_the_documented_table", "tests/test_docs.py",
                             "tests/test_segments.py", "tests/test_check.py::test_next_task_uses_this_run_then_the_"
                             "recorded_progress"))
    assert "written about task retrieval, which this course removed" in kit_tests.stdout, kit_tests.stdout[-3000:]
