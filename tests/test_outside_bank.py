"""The outside bank (tests/outside_bank/), graded as one cohort the way an instructor grades.

The bank holds submissions written from the stub docstrings alone, by someone other than the author of
the reference solution, so it catches hidden tests tuned to the reference's way of doing things (the
mutant bank cannot: its entries are text swaps of the reference). Each entry is copied into
COURSE/submitted/<entry>/week7/ of a fresh nbgrader course, `bertlab grade COURSE` grades the whole
cohort once in the sandbox, and every entry is then held to its kind (tests/outside_bank/bank.toml):

    correct  full marks in every task outside performance
    wrong    loses points in its own task, full marks in every other task outside performance
    hostile  0 points in the task it attacks, full marks in every other task outside performance

A run that selects some entries only (`-k correct_`) grades those entries only (entries_to_grade).

The performance task is left out: it measures speed, and a slow but correct style may lose it. An
entry may name hidden tests it breaks (bank.toml's ``breaks``): those must lose all their points, and
the rest of its task is held as above.

The bank's files are never imported here (only read as text); the grader runs them in its sandbox.
``python tests/test_outside_bank.py [COURSE]`` (or tools/acceptance/outside_bank.sh) grades the bank
the same way and prints the table with a verdict per entry.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest

from bertlab.tasks import EXERCISE_FILES, EXERCISE_TASKS, exercise

KIT_ROOT = Path(__file__).resolve().parents[1]
BANK = Path(__file__).resolve().parent / "outside_bank"
ASSIGNMENT = "week7"
FILES = EXERCISE_FILES
TASKS = EXERCISE_TASKS  # the correctness tasks; performance is left out
KINDS = ("correct", "wrong", "hostile")
ENTRIES: dict[str, dict] = tomllib.loads((BANK / "bank.toml").read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------------
# the cohort: build, grade, judge (also used by the command-line entry point at the bottom)


def submission_sources(name: str) -> dict[str, str]:
    """file name -> text of the bank entry's full submission (a wrong or hostile entry's one file over
    the files of its correct base)."""
    spec = ENTRIES[name]
    sources = {}
    if spec["kind"] != "correct":
        sources.update(submission_sources(spec["base"]))
    sources.update({p.name: p.read_text(encoding="utf-8") for p in sorted((BANK / name).glob("*.py"))})
    return sources


def build_course(course: Path, names=tuple(ENTRIES)) -> None:
    """COURSE/submitted/<entry>/week7/*.py for every entry of the bank (or those named)."""
    for name in names:
        folder = course / "submitted" / name / ASSIGNMENT
        folder.mkdir(parents=True)
        for file_name, text in submission_sources(name).items():
            (folder / file_name).write_text(text, encoding="utf-8")


def grade(course: Path, timeout: float = 1800) -> subprocess.CompletedProcess:
    """`bertlab grade COURSE`, as an instructor runs it (default workers: one per core)."""
    return subprocess.run([sys.executable, "-m", "bertlab.cli", "grade", str(course)], capture_output=True,
                          text=True, cwd=KIT_ROOT, timeout=timeout)


def load_results(course: Path) -> dict[str, dict]:
    return {p.parent.parent.name: json.loads(p.read_text(encoding="utf-8"))
            for p in sorted(course.glob(f"autograded/*/{ASSIGNMENT}/results.json"))}


def points_by_task(result: dict) -> dict[str, tuple[float, float]]:
    """task -> (points earned, max points), summed over the task's hidden tests."""
    scores: dict[str, list[float]] = {}
    for test in result["tests"]:
        entry = scores.setdefault(test["task"], [0.0, 0.0])
        entry[0] += test["points"]
        entry[1] += test["max_points"]
    return {task: (got, most) for task, (got, most) in scores.items()}


def lost_tests(result: dict, task: str) -> list[str]:
    """'test_name (got/max): grader's message' for every test of ``task`` that lost points."""
    out = []
    for test in result["tests"]:
        if test["task"] == task and test["points"] < test["max_points"]:
            message = " ".join(test.get("message", "").split())
            message = message if len(message) <= 400 else message[:400] + " ..."
            out.append(f"{test['name']} ({test['points']:g}/{test['max_points']:g}) [{test['outcome']}]: {message}")
    return out


def expected_breaks(name: str) -> set[str]:
    """The hidden tests entry ``name`` must lose in full (bank.toml's ``breaks``). Its own only: an entry
    never takes a file that breaks tests from its base (test_bank_is_well_formed)."""
    return {test for tests in ENTRIES[name].get("breaks", {}).values() for test in tests}


def placeholder_note(name: str, task: str) -> str:
    """What to do when the entry's file for ``task`` is still the one `bertlab new-task` copied into the
    bank (the reference of the placeholder exercise), written over since; "" otherwise."""
    filename = exercise(task).filename
    if "bertlab new-task" not in submission_sources(name).get(filename, ""):
        return ""
    owner = name if ENTRIES[name]["kind"] == "correct" else ENTRIES[name]["base"]
    return (f"\n    tests/outside_bank/{owner}/{filename} is still new-task's placeholder: write this entry's "
            f"{filename} from the stub's docstring, in the entry's own style, never from the reference "
            "(docs/authoring.md, 'Add a task')")


def problems(name: str, result: dict | None) -> list[str]:
    """Why entry ``name`` is not graded as its kind says (empty when it is)."""
    spec = ENTRIES[name]
    kind, target = spec["kind"], spec.get("task")
    if result is None:
        return [f"{name} ({kind}): no results.json: the grader did not grade it"]
    found = []
    breaks = expected_breaks(name)
    for test in result["tests"]:
        if test["name"] in breaks and test["points"] != 0:
            found.append(f"{name} ({kind}): {test['name']} got {test['points']:g}/{test['max_points']:g}, expected 0 "
                         "(bank.toml: this entry breaks it)")
    result = dict(result, tests=[t for t in result["tests"] if t["name"] not in breaks])
    scores = points_by_task(result)
    for task in TASKS:
        if task not in scores:
            found.append(f"{name} ({kind}): task {task} is missing from the results")
            continue
        got, most = scores[task]
        if task == target and kind == "wrong":
            if got >= most:
                found.append(f"{name} ({kind}, {spec['description']}): task {task} got {got:g}/{most:g}, expected "
                             f"fewer than {most:g} (the mistake went unnoticed)")
        elif task == target and kind == "hostile":
            if got != 0:
                found.append(f"{name} ({kind}, {spec['description']}): task {task} got {got:g}/{most:g}, expected "
                             f"0/{most:g} (points for form without substance)")
        elif got < most:
            why = "a correct submission" if kind == "correct" else f"the mistake belongs to {target}, not {task}"
            found.append(f"{name} ({kind}): task {task} got {got:g}/{most:g}, expected {most:g}/{most:g} ({why}); "
                         "lost in:\n      " + "\n      ".join(lost_tests(result, task)) + placeholder_note(name, task))
    if result.get("sandboxed") is not True:
        found.append(f"{name}: graded without the sandbox")
    return found


def format_table(results: dict[str, dict], names=tuple(ENTRIES)) -> str:
    """One row per entry (of those named): kind, target task, points per task (performance too, for the
    record), verdict."""
    header = f"{'entry':<28}{'kind':<9}{'target':<11}" + "".join(f"{t:>12}" for t in (*TASKS, "performance")) \
        + "  verdict"
    lines = [header, "-" * len(header)]
    for name in names:
        spec, result = ENTRIES[name], results.get(name)
        scores = points_by_task(result) if result else {}
        cells = "".join(f"{('%g/%g' % scores[t]) if t in scores else '-':>12}" for t in (*TASKS, "performance"))
        verdict = "ok" if not problems(name, result) else "FAIL"
        lines.append(f"{name:<28}{spec['kind']:<9}{spec.get('task', '-'):<11}{cells}  {verdict}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------
# the tests


def test_bank_is_well_formed():
    """Every entry has its kind, its folder and its files; the bank never borrows from the kit's solutions."""
    assert ENTRIES, "bank.toml lists no entries"
    for name, spec in ENTRIES.items():
        folder = BANK / name
        files = sorted(p.name for p in folder.glob("*.py"))
        assert spec.get("kind") in KINDS, f"{name}: kind must be one of {KINDS}, not {spec.get('kind')!r}"
        assert spec.get("description"), f"{name}: needs a one-line description"
        assert folder.is_dir(), f"{name}: no folder {folder.relative_to(KIT_ROOT)}"
        if spec["kind"] == "correct":
            assert files == sorted(FILES), f"{name}: a correct entry holds all of {FILES}, found {files}"
        else:
            assert spec.get("task") in TASKS, f"{name}: task must be one of {TASKS}, not {spec.get('task')!r}"
            assert len(files) == 1, f"{name}: a {spec['kind']} entry holds the one file with its mistake, found {files}"
            assert ENTRIES.get(spec.get("base"), {}).get("kind") == "correct", \
                f"{name}: base {spec.get('base')!r} must name a correct entry"
            taken = set(ENTRIES[spec["base"]].get("breaks", {})) - set(files)
            assert not taken, (f"{name}: takes {sorted(taken)} from {spec['base']}, which breaks hidden tests there: "
                               "the base's own grading holds that verdict already; take another correct entry "
                               "as base (bank.toml's header)")
        for file_name, text in submission_sources(name).items():
            assert "bertlab_grader" not in text and "NotImplementedYet" not in text, \
                f"{name}/{file_name} must be written without the kit's solutions or stubs' machinery"
    kinds = {spec["kind"] for spec in ENTRIES.values()}
    assert kinds == set(KINDS), f"the bank needs every kind; it has {sorted(kinds)}"


def entries_to_grade(items) -> list[str]:
    """The bank entries the session's selected tests of this module judge: every entry when the snapshot
    test (which compares the whole cohort) is selected, else those of the selected per-entry tests, so
    that `-k correct_` grades the three correct entries only (tests/test_task_authoring.py does)."""
    ours = [item for item in items if Path(str(item.path)).resolve() == Path(__file__).resolve()]
    if any(item.originalname == "test_outside_bank_grades_as_before_the_speed_work" for item in ours):
        return list(ENTRIES)
    chosen = {item.callspec.params["name"] for item in ours if hasattr(item, "callspec")}
    return [name for name in ENTRIES if name in chosen]


@pytest.fixture(scope="module")
def cohort(tmp_path_factory, request):
    """The bank graded once by `bertlab grade` (the entries the session's tests judge: entries_to_grade):
    {"results": entry -> results.json, "table": str}."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed: grading a cohort needs the real sandbox")
    course = tmp_path_factory.mktemp("outside_bank") / "course"
    names = entries_to_grade(request.session.items)
    build_course(course, names)
    proc = grade(course)
    results = load_results(course)
    assert proc.returncode == 0, (f"`bertlab grade` exited {proc.returncode}:\n{proc.stdout[-3000:]}\n"
                                  f"{proc.stderr[-3000:]}")
    table = format_table(results, names)
    print("\noutside bank, graded as a cohort:\n" + table)
    return {"results": results, "table": table}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ENTRIES))
def test_outside_bank_entry_graded_as_its_kind(cohort, name):
    found = problems(name, cohort["results"].get(name))
    assert not found, "\n  ".join([f"outside bank entry {name} is not graded as a {ENTRIES[name]['kind']} "
                                   "submission should be:", *found])


@pytest.mark.slow
def test_outside_bank_grades_as_before_the_speed_work(cohort):
    """Test by test (outcome, points, message, hint), the bank graded today as the kit graded it before
    grading was made faster (tests/grade_snapshots.py says what may differ, and why)."""
    from grade_snapshots import differences, load

    before = load("outside_bank")
    found = differences(before, cohort["results"])
    assert not found, (f"the outside bank's grades differ from kit {before['kit']}'s:\n  " + "\n  ".join(found))


# ---------------------------------------------------------------------------------------------------
# for instructors: python tests/test_outside_bank.py [COURSE]


def main(argv: list[str]) -> int:
    keep = Path(argv[0]).resolve() if argv else None
    if keep is not None and keep.exists() and any(keep.iterdir()):
        print(f"{keep} exists and is not empty; give a new folder", file=sys.stderr)
        return 2
    course = keep or Path(tempfile.mkdtemp(prefix="bertlab-outside-bank-")) / "course"
    build_course(course)
    print(f"grading {len(ENTRIES)} outside-bank submissions in {course} ...", file=sys.stderr)
    proc = grade(course)
    if proc.returncode != 0:
        print(proc.stdout[-3000:] + proc.stderr[-3000:], file=sys.stderr)
    results = load_results(course)
    print(format_table(results))
    failing = {name: problems(name, results.get(name)) for name in ENTRIES}
    failing = {name: found for name, found in failing.items() if found}
    for name, found in failing.items():
        print("\n" + "\n".join(found))
    print(f"\n{len(ENTRIES) - len(failing)} of {len(ENTRIES)} entries graded as their kind says; course: {course}")
    return 1 if failing or proc.returncode != 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
