"""The instructor's way to change the kit's tasks, end to end in a copy of the kit (docs/authoring.md).

Every shell command of the guide's sections "Add a task" and "Remove a task" is read from the page
and run in the copy, in the guide's order, and must show what its comment says (GUIDE_CHECKS pairs
each command with its check, so a command changed on the page fails here until its check follows):

1. `bertlab new-task cosine_matrix`: right after it, the files changed outside the task's own new
   files are the registry and the three pages that list every task (docs/hidden-suites.md,
   docs/hidden-checks.md, docs/student-guide.md), the kit is consistent on the placeholder exercise,
   and the parts of the kit's whole-submission tests that decide it pass (whole_submission_checks).
2. The guide's worked example (docs/authoring-example/): the placeholder's pieces replaced with a real
   function, the fixtures' files included. Still only those four changed outside the task's files; its
   public and hidden tests pass on the reference and fail on the stub; the audit catches its mutants in
   their own task; the reference gets the task's points in the sandbox and a mutant loses them there;
   the student bundle ships it; the kit's registry, stub, architecture and page tests pass in the copy;
   the section "Use the new task in the lesson" works as written (its cells, run on the reference, print
   the matrix; on the stub, they name the task to write).
3. `bertlab remove-task retrieval`: grading, the demo (held to tests/test_demo.py's checks) and the
   lesson still work, without the task, the kit's own tests pass there (those written about retrieval
   are skipped with the reason), and so do the whole-submission tests, the outside bank's correct
   entries graded with the example's files. `bertlab remove-task pooling` is refused (siamese uses
   pooling) and changes nothing.

One virtualenv holds the copy as an editable install (tests/venvs.py: the dependencies come from
this interpreter's environment). Minutes (11 on a busy two-core machine): the walk is marked slow. Of
its time, the whole-submission checks take about two (see whole_submission_checks).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from venvs import make_venv, ok, run  # noqa: E402

KIT = Path(__file__).resolve().parents[1]
GUIDE = KIT / "docs" / "authoring.md"
EXAMPLE = KIT / "docs" / "authoring-example"
#: The example's sections of the pages that list every task (not files of their own in the kit).
EXAMPLE_SECTIONS = {"hidden-suites-section.md": "docs/hidden-suites.md", "hidden-checks-section.md": "docs/hidden-checks.md"}
TASK = "cosine_matrix"
REGISTRY = "src/bertlab/tasks.py"
SUITES_DOC = "docs/hidden-suites.md"  # every hidden test with its points (tests/test_scoring.py)
#: What new-task changes outside the task's own files (the registry and the pages that list every task).
CHANGED_BY_NEW_TASK = sorted([REGISTRY, SUITES_DOC, "docs/hidden-checks.md", "docs/student-guide.md"])
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
    return run(["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=copy, timeout=1800, **env)


def own_files(copy: Path, task: str) -> set[str]:
    return {p for p in git(copy, "ls-files", "-co", "--exclude-standard").split() if task in Path(p).name}


# ---------------------------------------------------------------------------------------------------
# The guide's commands, and what each must show


def guide_section(heading: str) -> str:
    text = GUIDE.read_text(encoding="utf-8")
    section = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## )", text, flags=re.M | re.S)
    assert section, f"docs/authoring.md has no section '## {heading}'"
    return section.group(1)


def guide_commands(heading: str) -> list[tuple[str, str]]:
    """(command, comment) of each command of the fenced bash blocks of the guide's section ``heading``,
    in order; a line that is only a comment (what the command above prints) is that command's comment."""
    found: list[tuple[str, str]] = []
    for block in re.findall(r"```bash\n(.*?)```", guide_section(heading), flags=re.S):
        for line in filter(str.strip, block.splitlines()):
            if line.lstrip().startswith("#"):
                command, comment = found.pop()
                found.append((command, (comment + " " + line.lstrip("# ")).strip()))
            else:
                command, _, comment = line.partition(" # ")
                found.append((command.strip(), comment.strip()))
    return found


def guide_python_blocks(heading: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", guide_section(heading), flags=re.S)


def passes(count: int):
    def check(done):
        last = done.stdout.strip().splitlines()[-1]
        assert done.returncode == 0 and f"{count} passed" in last and "failed" not in last, done.stdout[-2000:]
    return check


def fails(count: int):
    def check(done):
        last = done.stdout.strip().splitlines()[-1]
        assert done.returncode == 1 and f"{count} failed" in last and "passed" not in last, done.stdout[-2000:]
    return check


def shows(text: str):
    def check(done):
        assert done.returncode == 0 and text in done.stdout, f"expected {text!r}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    return check


def succeeds(done):
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def full_marks_with_the_task(done):
    """`bertlab grade-one` without --json: the gradebook has the task's column, with points graded and
    all earned (as the total), and no test is listed as not passed (each such test gets a line
    "  [outcome] task/test: message")."""
    assert done.returncode == 0 and TASK in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    assert not [line for line in done.stdout.splitlines() if line.startswith("  [")], done.stdout[-3000:]
    header, _, row = done.stdout.splitlines()[:3]
    cells = dict(zip(header.split(), row.split()))
    for column in (TASK, "total"):
        got, _, most = cells[column].partition("/")
        assert float(most) > 0 and got == most, f"{column}: {cells[column]}\n{done.stdout[-2000:]}"


def refused(message: str):
    def check(done):
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
    return check


def resolves_as_whole_submission_tests(done):
    """The stand-in for the full run of the whole-submission tests (tens of minutes on a busy
    machine): the command's options resolve and it collects the three modules; whole_submission_checks
    runs the parts of them that decide the question."""
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for module in ("tests/test_outside_bank.py::", "tests/test_redteam.py::", "tests/test_demo.py::"):
        assert module in done.stdout, f"{module} collected nothing:\n{done.stdout[-2000:]}"


PYTEST_TASK_TESTS = f"python -m pytest -q tests/public/test_{TASK}.py tests/hidden/test_hidden_{TASK}.py"
WHOLE_SUBMISSION_TESTS = "python -m pytest -q tests/test_outside_bank.py tests/test_redteam.py tests/test_demo.py"
REFUSAL = ("bertlab remove-task: task pooling is used by siamese: remove siamese first (or its `uses` of pooling in "
           "src/bertlab/tasks.py); nothing was changed.")
#: Each command of the guide's "Add a task" and "Remove a task" sections, in the guide's order: the
#: command and its comment as the page gives them, and the check of what the comment says.
GUIDE_CHECKS = {
    "new task": [
        (f"bertlab new-task {TASK}", "add --uses pooling for a task whose code imports another's", shows(f"Task {TASK} added")),
    ],
    "on the placeholder": [
        (PYTEST_TASK_TESTS, "4 passed", passes(4)),
        (f"bertlab audit --only {TASK}", "1/1 mutants caught in their own task only; 1/1 variants with full marks",
         shows("1/1 mutants caught in their own task only; 1/1 variants with full marks")),
        ("bertlab grade-one solutions", f"full marks, a {TASK} column included", full_marks_with_the_task),
    ],
    "check it": [
        (PYTEST_TASK_TESTS, "5 passed", passes(5)),
        (f"{PYTEST_TASK_TESTS} --impl exercises", "5 failed", fails(5)),
        ("bertlab audit --only cosmat", "2/2 mutants caught in their own task only; 1/1 variants with full marks",
         shows("2/2 mutants caught in their own task only; 1/1 variants with full marks")),
        ("bertlab grade-one solutions", f"full marks, {TASK} included", full_marks_with_the_task),
        ("python -m pytest -q tests/test_registry.py tests/test_stubs.py tests/test_architecture.py tests/test_scoring.py "
         "tests/test_task_pages.py", "", succeeds),
        (WHOLE_SUBMISSION_TESTS, "the whole submissions: several minutes", resolves_as_whole_submission_tests),
    ],
    "remove": [
        ("bertlab remove-task retrieval", "", shows("Task retrieval removed")),
        ("bertlab remove-task pooling", REFUSAL, refused(REFUSAL)),
    ],
}


def run_guide_command(copy: Path, env: dict, command: str) -> subprocess.CompletedProcess:
    argv = shlex.split(command)
    if command == WHOLE_SUBMISSION_TESTS:
        argv += ["--collect-only", "-p", "no:cacheprovider"]  # (resolves_as_whole_submission_tests)
    return run(argv, cwd=copy, timeout=1800, **env)


def run_guide_commands(copy: Path, env: dict, part: str) -> None:
    """Run the guide's commands of ``part`` in the copy, in order, each against its check (the cheap
    test below holds the page to GUIDE_CHECKS)."""
    for command, _, check in GUIDE_CHECKS[part]:
        check(run_guide_command(copy, env, command))


def test_the_guide_s_commands_are_the_ones_checked_here():
    """The page and GUIDE_CHECKS give the same commands with the same comments, in the same order: a
    command or a promise changed on the page fails here until its check follows."""
    add = [(c, says) for part in ("new task", "on the placeholder", "check it") for c, says, _ in GUIDE_CHECKS[part]]
    assert guide_commands("Add a task") == add, "docs/authoring.md's 'Add a task' commands are not the ones checked here"
    remove = [(c, says) for c, says, _ in GUIDE_CHECKS["remove"]]
    assert guide_commands("Remove a task") == remove, "docs/authoring.md's 'Remove a task' commands are not the ones checked here"
    assert len(guide_python_blocks("Use the new task in the lesson")) == 2  # lesson_cell_checks runs both


# ---------------------------------------------------------------------------------------------------
# The kit's whole-submission tests, and the lesson's cell


def whole_submission_checks(copy: Path, env: dict, grade_bank: bool) -> None:
    """The parts of the kit's whole-submission tests (docs/authoring.md, "The kit's whole submissions")
    that decide whether a task added or removed left them green, run in the copy.

    The full runs are too slow to make twice here: the outside bank alone (fifteen submissions graded
    in the sandbox) took 14.7 minutes on a busy two-core machine. What decides it: every fixture holds a
    file for every registered task, and no other (each module's cheap test); one session of the red
    team's honest submission in the sandbox, which imports every one of its files. With ``grade_bank``,
    the outside bank's correct entries graded as a cohort and held to their kind (`-k correct_` grades
    those three only: test_outside_bank.entries_to_grade): new-task writes no other file there (the
    wrong and hostile entries take theirs from their base). The walk grades them once, after
    remove-task, when they hold the worked example's files and no longer the removed task's; right after
    new-task their new file is the reference, which `bertlab grade-one solutions` grades. The demo is
    graded once too, by demo_checks after remove-task (a cohort with the example's task and without the
    removed one). The checks here took about two minutes in all on that machine (87 s of it grading the
three correct entries), the demo's checks seconds beyond the demo's own run."""
    for args in (["tests/test_outside_bank.py", "-k", "well_formed or correct_" if grade_bank else "well_formed"],
                 ["tests/test_redteam.py::test_the_honest_submission_hands_in_every_task",
                  "tests/test_redteam.py::test_system_v_shared_memory_does_not_carry_over_to_the_next_student",
                  "tests/test_demo.py::test_erin_hands_in_a_file_for_every_task"]):
        done = ok(pytest_in(copy, env, *args))
        print(f"in the copy: {' '.join(args)}: {done.stdout.strip().splitlines()[-1]}")  # (with -s: what it took)


#: tests/test_demo.py's own checks of the cohort, on a course `bertlab demo --keep` graded in the copy (its
#: `demo` fixture would first build and install a wheel of the copy: minutes more for nothing new here).
DEMO_CHECKS = """\
import json, sys
from pathlib import Path
sys.path.insert(0, "tests")
import test_demo
course = Path(sys.argv[1])
results = {p.parent.parent.name: json.loads(p.read_text()) for p in course.glob("autograded/*/week7/results.json")}
demo = {"course": course, "results": results}
test_demo.test_demo_scores_follow_the_cohort(demo)
test_demo.test_demo_grades_as_before_the_speed_work(demo)
test_demo.test_demo_gradebook_and_feedback(demo)
"""


def demo_checks(copy: Path, env: dict) -> subprocess.CompletedProcess:
    """`bertlab demo --keep COURSE` in the copy, then test_demo's checks of the cohort on it; the demo's run.

    The course lies outside pytest's temporary folder: at the end of the session tests/conftest.py checks
    every results.json there against this checkout's registry, and the copy's has other tasks."""
    with tempfile.TemporaryDirectory(prefix="bertlab-authoring-demo-") as folder:
        course = Path(folder) / "course"
        demo = ok(bertlab(copy, env, "demo", "--keep", str(course), timeout=1800))
        ok(run(["python", "-c", DEMO_CHECKS, course], cwd=copy, **env))
    return demo


#: What the lesson's first cells define that the guide's cell uses (as the lesson's source does).
LESSON_SETUP = """\
import torch
from bertlab import datasets, lesson
from bertlab.lesson import require, student_code
from bertlab.models import load_tokenizer, named_model
impl = lesson.load_lesson_implementation()
pooling = lesson.task_module(impl, "pooling")
tokenizer, model = load_tokenizer("minilm"), named_model("minilm")
"""


def lesson_cell_checks(copy: Path, env: dict, work: Path) -> None:
    """The guide's lesson cells, after the lesson's set-up: on the reference they print the [4, 4]
    matrix of cosines (1 on the diagonal); on the reference with the task's stub, the line naming the task."""
    script = LESSON_SETUP + "\n".join(guide_python_blocks("Use the new task in the lesson"))
    done = ok(run(["python", "-c", script], cwd=copy, BERTLAB_IMPL="reference", **env))
    rows = [line for line in done.stdout.splitlines() if line.lstrip(" [").startswith(("1.", "0.", "-0."))]
    assert len(rows) == 4 and rows[0].startswith("[[1.") and "Skipped" not in done.stdout, done.stdout
    stub = work / "stub"
    shutil.copytree(copy / "solutions", stub, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(copy / "exercises" / f"{TASK}.py", stub / f"{TASK}.py")
    done = ok(run(["python", "-c", script], cwd=copy, BERTLAB_IMPL=str(stub), **env))
    assert f"task {TASK} is not implemented yet" in done.stdout and "[[" not in done.stdout, done.stdout


# ---------------------------------------------------------------------------------------------------
# The walk through the guide


def concept_page(copy: Path) -> Path:
    """The concept page new-task wrote for the task: numbered after the tasks the kit has (6- in the
    stock kit of four; a kit with a task of its instructor's own already gives the next number)."""
    page, = (copy / "docs" / "concepts").glob(f"*-{TASK}.md")
    return page


def apply_worked_example(copy: Path, env: dict) -> None:
    """The example's pieces over the placeholder's (the fixtures' files too), its sections in the pages,
    the registry's two texts, then the stub and the student guide's lists from them."""
    for source in EXAMPLE.rglob("*"):
        if source.is_file() and source.name not in EXAMPLE_SECTIONS:
            target = copy / source.relative_to(EXAMPLE)
            if source.parent.name == "concepts":  # numbered after the kit's tasks: 6- in the stock kit
                target = concept_page(copy)
            assert target.exists(), f"the worked example's {source.relative_to(EXAMPLE)} replaces a file new-task wrote"
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
    # docs/hidden-checks.md: the placeholder's section, replaced by the example's.
    checks = (copy / "docs" / "hidden-checks.md").read_text()
    section = re.search(rf"^## {TASK}\n.*?(?=^## )", checks, flags=re.M | re.S)
    (copy / "docs" / "hidden-checks.md").write_text(checks[:section.start()] + (EXAMPLE / "hidden-checks-section.md").read_text()
                                                    + checks[section.end():])
    ok(run(["python", "tools/build_exercises.py"], cwd=copy, **env))  # the stub and the student guide's lists


@pytest.mark.slow
@pytest.mark.tasks("cka", "pooling", "siamese", "retrieval")  # the worked example is the fifth; it removes retrieval
def test_new_task_then_the_worked_example_then_remove_task(kit_copy):
    copy, env = kit_copy
    # 1. new-task: the placeholder; outside the task's files, only the registry and the pages that list tasks.
    run_guide_commands(copy, env, "new task")
    assert changed_outside(copy, own_files(copy, TASK)) == CHANGED_BY_NEW_TASK
    guide_table = (copy / "docs" / "student-guide.md").read_text()
    assert f"| {TASK} | `exercises/{TASK}.py` | `{TASK}(x)` |" in guide_table and f"concepts/{concept_page(copy).name}" in guide_table
    refused_again = bertlab(copy, env, "new-task", TASK)
    assert refused_again.returncode == 2 and "already a task" in refused_again.stderr, refused_again.stderr
    for bad in ("2fast", "class", "Cosine"):
        refused(f"{bad!r} cannot be a task name")(bertlab(copy, env, "new-task", bad))

    run_guide_commands(copy, env, "on the placeholder")
    on_stub = pytest_in(copy, env, "--impl", "exercises", f"tests/public/test_{TASK}.py", f"tests/hidden/test_hidden_{TASK}.py")
    fails(4)(on_stub)
    ok(pytest_in(copy, env, "tests/test_scoring.py::test_max_points_match_the_documented_table", "tests/test_task_pages.py",
                 "tests/test_docs.py"))
    whole_submission_checks(copy, env, grade_bank=False)

    # 2. The worked example: its pieces over the placeholder's, then the guide's checks.
    apply_worked_example(copy, env)
    assert changed_outside(copy, own_files(copy, TASK)) == CHANGED_BY_NEW_TASK
    assert f"| {SUMMARY} |" in (copy / "docs" / "student-guide.md").read_text()
    run_guide_commands(copy, env, "check it")
    check = bertlab(copy, env, "check", "--task", TASK)
    assert TASK in check.stdout and "not started" in check.stdout, check.stdout[-2000:]

    # (the guide's `bertlab grade-one solutions` above gave the reference full marks, the task's column too)
    mutant = copy.parent / "mutant"
    shutil.copytree(copy / "solutions", mutant, ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
    path = mutant / f"{TASK}.py"
    path.write_text(path.read_text().replace("    return unit_a @ unit_b.T", "    return unit_a @ b.to(torch.float64).T"))
    graded = json.loads(ok(bertlab(copy, env, "grade-one", str(mutant), "--json")).stdout)
    lost = {t["task"] for t in graded["tests"] if t["task"] != "performance" and t["points"] < t["max_points"]}
    assert lost == {TASK}, lost
    assert any(t.get("hint") and "normalise the rows of b" in t["hint"] for t in graded["tests"] if t["task"] == TASK)
    lesson_cell_checks(copy, env, copy.parent)

    bundle = copy.parent / "bundle"
    ok(bertlab(copy, env, "release", str(bundle)))
    assert (bundle / "exercises" / f"{TASK}.py").is_file() and f"| {TASK} |" in (bundle / "README.md").read_text()
    assert not (bundle / "solutions").exists()

    # 3. Remove retrieval: grading, the demo and the lesson go on without it; pooling is refused.
    before = None
    for command, _, check in GUIDE_CHECKS["remove"]:
        if command.endswith("pooling"):
            before = git(copy, "status", "--porcelain", "--untracked-files=all")
        check(run_guide_command(copy, env, command))
    assert git(copy, "status", "--porcelain", "--untracked-files=all") == before, "a refused remove-task changed files"
    refused("there is no task 'retrieval'")(bertlab(copy, env, "remove-task", "retrieval"))  # (nothing changes either)
    assert git(copy, "status", "--porcelain", "--untracked-files=all") == before
    assert not (copy / "solutions" / "retrieval.py").exists() and not (copy / "exercises" / "retrieval.py").exists()
    assert "| retrieval | `exercises/retrieval.py` |" not in (copy / "docs" / "student-guide.md").read_text()
    graded = json.loads(ok(bertlab(copy, env, "grade-one", "solutions", "--json")).stdout)
    assert "retrieval" not in {t["task"] for t in graded["tests"]} and graded["score"] == graded["max_score"]
    demo = demo_checks(copy, env)
    assert "retrieval" not in demo.stdout.split("Graded")[0] and "alice" in demo.stdout
    whole_submission_checks(copy, env, grade_bank=True)
    # The lesson runs on: the search steps say the task is not part of this course (tests/test_notebook.py
    # and tests/test_lesson_figures.py, written about the four tasks, are skipped in such a course).
    lesson = ok(run(["bertlab", "lesson", "--reference", "--quick"], cwd=copy, timeout=900, BERTLAB_FAST="1", **env))
    assert "task retrieval is not part of this course" in lesson.stdout, lesson.stdout[-3000:]
    # The kit's own tests: those about the removed task are skipped with the reason, the others pass.
    kit_tests = ok(pytest_in(copy, env, "-rs", "-m", "not slow", "tests/test_registry.py", "tests/test_stubs.py",
                             "tests/test_scoring.py::test_max_points_match_the_documented_table", "tests/test_docs.py",
                             "tests/test_task_pages.py", "tests/test_segments.py",
                             "tests/test_check.py::test_next_task_uses_this_run_then_the_recorded_progress"))
    assert "written about task retrieval, which this course removed" in kit_tests.stdout, kit_tests.stdout[-3000:]
