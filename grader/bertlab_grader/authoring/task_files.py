"""`bertlab new-task NAME` and `bertlab remove-task NAME`: a task is one unit of the kit's checkout.

new-task writes the task's pieces (Exercise.pieces: solution, public and hidden test, teaching,
mutants with a fingerprint, benchmark, concept page) from the templates in task_template/, with a
placeholder exercise (the norm of each row) so that the kit is green at once, then registers the task
in src/bertlab/tasks.py, adds the task's section to docs/hidden-suites.md (every hidden test with its
points) and writes the stub (exercises/NAME.py).
remove-task takes the same files away again, with the task's files in the kit's fixtures, and
refuses a task that another task uses. Both refuse in one line, exit 2, before writing anything.
docs/authoring.md is the instructor's guide to both.
"""

from __future__ import annotations

import keyword
import re
import shutil
from pathlib import Path
import subprocess
import sys
import ast
import json
import tomllib

from bertlab.errors import UsageError
from bertlab.tasks import dependents, Exercise, EXERCISE_FILES, EXERCISE_TASKS, EXERCISES, PERFORMANCE
from bertlab_grader.authoring.notebook import NOTEBOOK_NAME, notebook_text
from bertlab_grader.authoring.stubs import expected_exercises
from bertlab_grader.core.locations import CHECKOUT

TEMPLATES = Path(__file__).resolve().parent / "task_template"
PLACEHOLDER = "TASKNAME"
#: role in Exercise.pieces -> the template it is written from.
TEMPLATE_OF = {
    "solution": "solution.py.tmpl",
    "public test": "public_test.py.tmpl",
    "hidden test": "hidden_test.py.tmpl",
    "teaching (idea, mistakes, probes)": "teaching.py.tmpl",
    "mutants and their fingerprint": "mutants.py.tmpl",
    "benchmark": "benchmark.py.tmpl",
    "concept page": "concept.md.tmpl",
}
REGISTRY = "src/bertlab/tasks.py"
_REGISTRY_END = "\n)\n\n#: The exercise tasks in the order students do them"


def _checkout() -> Path:
    if CHECKOUT is None:
        raise UsageError("run this in the kit's checkout, installed with `pip install -e .`: it edits the kit's "
                         "source files, which an installed kit does not have.")
    return CHECKOUT


def _check_new_name(name: str, uses: tuple[str, ...]) -> None:
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name):
        raise UsageError(f"{name!r} cannot be a task name: use a Python identifier in lower case "
                         "(letters, digits, _; starting with a letter), e.g. attention_weights.")
    if name in EXERCISE_TASKS or name == PERFORMANCE:
        raise UsageError(f"there is already a task {name!r}; the tasks are {', '.join(EXERCISE_TASKS)}.")
    clash = [t for t in EXERCISE_TASKS if name in t or t in name]
    if clash:
        # Every piece's path carries its task's name (tests/test_architecture.py), so one name inside
        # another would make `git ls-files '*<task>*'` list the other task's files too.
        raise UsageError(f"{name!r} contains, or is contained in, the task name {clash[0]!r}: pick a name that "
                         "does not, so that each task's files are told apart by name.")
    unknown = [u for u in uses if u not in EXERCISE_TASKS]
    if unknown:
        raise UsageError(f"--uses {unknown[0]}: no such task; the tasks are {', '.join(EXERCISE_TASKS)}.")


def _concept_page(root: Path, name: str) -> str:
    """docs/concepts/<n>-<name>.md, numbered after the last page."""
    numbers = [int(m.group(1)) for p in (root / "docs" / "concepts").glob("*.md")
               if (m := re.match(r"(\d+)", p.name))]
    return f"{max(numbers, default=0) + 1}-{name}.md"


def _registry_entry(exercise: Exercise) -> str:
    uses = f",\n             uses={exercise.uses!r}" if exercise.uses else ""
    return (f"    # Written by `bertlab new-task {exercise.name}`: REPLACE functions, summary and start with "
            "your task's.\n"
            f"    Exercise({exercise.name!r}, {exercise.module!r}, {exercise.functions!r}, {exercise.concept!r},\n"
            f"             summary={exercise.summary!r},\n"
            f"             start={exercise.start!r}{uses}),")


# ---------------------------------------------------------------------------------------------------
# docs/hidden-suites.md: every hidden test with its points, a section per task (tests/test_scoring.py)

SUITES_DOC = "docs/hidden-suites.md"
_TOTAL = re.compile(r"^## Points per test \((\d+) in all\)$", re.M)


def hidden_tests_with_points(path: Path) -> list[tuple[str, int]]:
    """(test name, points) of a hidden test file, in file order."""
    return [(name, int(points)) for points, name in
            re.findall(r"@pytest\.mark\.points\((\d+)\)\s*\ndef (test_\w+)\(", path.read_text(encoding="utf-8"))]


def _suites_doc_section(name: str, tests: list[tuple[str, int]]) -> str:
    rows = "".join(f"| `{test}` | {points} | REPLACE: what it checks |\n" for test, points in tests)
    return (f"### {name} ({sum(p for _, p in tests)})\n\n"
            f"Written by `bertlab new-task {name}`: REPLACE with what the task's hidden tests check.\n\n"
            f"| test | points | checks |\n| --- | --- | --- |\n{rows}\n")


def _with_total(text: str, delta: int) -> str:
    match = _TOTAL.search(text)
    if match is None:
        return text
    return text[:match.start(1)] + str(int(match.group(1)) + delta) + text[match.end(1):]


def _suites_doc_with(text: str, name: str, tests: list[tuple[str, int]]) -> str:
    """The page with task ``name``'s section added before the performance task's, and the total raised."""
    anchor = f"### {PERFORMANCE} ("
    if anchor not in text:
        return text
    text = text.replace(anchor, _suites_doc_section(name, tests) + anchor, 1)
    return _with_total(text, sum(p for _, p in tests))


def _suites_doc_without(text: str, name: str, removed_points: int) -> str:
    """The page without task ``name``'s section (up to the next ### or ## heading), the total lowered."""
    section = re.search(rf"^### {re.escape(name)} \(\d+\)\n.*?(?=^##)", text, flags=re.M | re.S)
    if section is not None:
        text = text[:section.start()] + text[section.end():]
    return _with_total(text, -removed_points)


def new_task(name: str, uses: tuple[str, ...] = (), out=print) -> list[str]:
    """Write task ``name``'s pieces and register it; returns the paths written or changed."""
    root = _checkout()
    _check_new_name(name, tuple(uses))
    exercise = Exercise(name, name, (name,), _concept_page(root, name),
                        summary="REPLACE: what the function does, in a few words",
                        start=f"Start with {name} in exercises/{name}.py: REPLACE with the first step to take.",
                        uses=tuple(uses))
    pieces = exercise.pieces()
    existing = [path for role, path in pieces.items() if role in TEMPLATE_OF and (root / path).exists()]
    if existing:
        raise UsageError(f"{existing[0]} already exists: remove it (or pick another name) first; nothing was written.")
    registry = (root / REGISTRY).read_text(encoding="utf-8")
    if registry.count(_REGISTRY_END) != 1:
        raise UsageError(f"{REGISTRY}: cannot find the end of EXERCISES to add the task to; add it by hand "
                         "(docs/authoring.md, 'Add a task').")
    written = []
    for role, template in TEMPLATE_OF.items():
        path = root / pieces[role]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text((TEMPLATES / template).read_text(encoding="utf-8").replace(PLACEHOLDER, name), encoding="utf-8")
        written.append(pieces[role])
    (root / REGISTRY).write_text(registry.replace(_REGISTRY_END, "\n" + _registry_entry(exercise) + _REGISTRY_END),
                                 encoding="utf-8")
    written.append(REGISTRY)
    doc = root / SUITES_DOC
    if doc.is_file():
        tests = hidden_tests_with_points(root / pieces["hidden test"])
        doc.write_text(_suites_doc_with(doc.read_text(encoding="utf-8"), name, tests), encoding="utf-8")
        written.append(SUITES_DOC)
    written += _regenerate(root)
    out(f"Task {name} added: {len(written)} files written or changed.")
    for path in written:
        out(f"  {path}")
    out(f"Next: replace the placeholder (REPLACE in each file), then `bertlab audit` and "
        f"`python -m pytest -q -m {name}`. docs/authoring.md, 'Add a task', walks through it.")
    return written


def _regenerate(root: Path) -> list[str]:
    """What derives from the registry and the solutions in files: the stubs and the lesson notebook.

    Runs in a fresh interpreter, so that it reads the registry as it now is on disk."""
    script = ("from bertlab_grader.authoring.task_files import regenerate_in_process\n"
              "print('\\n'.join(regenerate_in_process()))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "(no output)"
        raise UsageError(f"the task's files are written, but regenerating the stubs failed: {last}")
    return [line for line in done.stdout.splitlines() if line]


def regenerate_in_process() -> list[str]:
    """Rewrite exercises/ (the stubs and the notebook) from the registry and the solutions; the changed paths."""
    root = _checkout()
    changed = []
    exercises = root / "exercises"
    wanted = {**expected_exercises(), NOTEBOOK_NAME: notebook_text()}
    for name, text in wanted.items():
        path = exercises / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(f"exercises/{name}")
    for path in sorted(exercises.glob("*.py")):
        if path.name not in EXERCISE_FILES and path.name != "__init__.py":
            path.unlink()
            changed.append(f"exercises/{path.name}")
    return changed


# ---------------------------------------------------------------------------------------------------
# remove-task

OUTSIDE_BANK = "tests/outside_bank"
FIXTURE_FOLDERS = ("tests/redteam_submissions", "grader/bertlab_grader/commands/demo_cohort")
SNAPSHOTS = "tests/fixtures/grade_snapshots"


def _check_removable(name: str) -> Exercise:
    if name not in EXERCISE_TASKS:
        raise UsageError(f"there is no task {name!r}; the tasks are {', '.join(EXERCISE_TASKS)}.")
    users = dependents(name)
    if users:
        raise UsageError(f"task {name} is used by {', '.join(users)}: remove {' and '.join(users)} first "
                         f"(or its `uses` of {name} in src/bertlab/tasks.py); nothing was changed.")
    if len(EXERCISES) == 1:
        raise UsageError(f"{name} is the kit's only task; nothing was changed.")
    return next(e for e in EXERCISES if e.name == name)


def _test_names(path: Path) -> set[str]:
    return set(re.findall(r"^def (test_\w+)\(", path.read_text(encoding="utf-8"), re.M)) if path.is_file() else set()


def _registry_without(text: str, name: str) -> str:
    """tasks.py's text without the Exercise entry of ``name`` (and the comment lines right above it)."""
    lines = text.splitlines(keepends=True)
    for node in ast.walk(ast.parse(text)):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Exercise" and node.args
                and isinstance(node.args[0], ast.Constant) and node.args[0].value == name):
            start, end = node.lineno - 1, node.end_lineno  # the entry's lines, then its trailing comma
            while start > 0 and lines[start - 1].lstrip().startswith("#"):
                start -= 1
            return "".join(lines[:start] + lines[end:])
    raise UsageError(f"src/bertlab/tasks.py: no Exercise({name!r}, ...) entry to remove; edit it by hand.")


def _bank_toml_without(text: str, entries: set[str]) -> str:
    """bank.toml's text without the [entry] sections named."""
    out, skipping = [], False
    for line in text.splitlines(keepends=True):
        header = re.match(r"\[([^\]]+)\]\s*$", line)
        if header:
            skipping = header.group(1) in entries
        if not skipping:
            out.append(line)
    return "".join(out)


def _without_links_to(text: str, page: str) -> str:
    """``text`` with every Markdown link to ``page`` (in any folder, with any #anchor) replaced by its words."""
    return re.sub(rf"\[([^\]]+)\]\((?:[^)\s]*/)?{re.escape(page)}(?:#[^)\s]*)?\)", r"\1", text)


def remove_task(name: str, out=print) -> list[str]:
    """Remove task ``name``: its pieces, its registry entry, its files in the kit's fixtures and its tests
    in the grade snapshots; the paths removed or changed."""
    root = _checkout()
    exercise = _check_removable(name)
    registry = _registry_without((root / REGISTRY).read_text(encoding="utf-8"), name)
    pieces = exercise.pieces()
    tests = set().union(*(_test_names(root / path) for role, path in pieces.items() if "test" in role and "public" not in role))
    changed = []

    def delete(path: Path) -> None:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        else:
            return
        changed.append(str(path.relative_to(root)))

    doc = root / SUITES_DOC
    if doc.is_file():
        hidden, speed = (root / pieces["hidden test"], root / pieces.get("speed test (task performance)", "-"))
        text = _suites_doc_without(doc.read_text(encoding="utf-8"), name,
                                   sum(p for _, p in hidden_tests_with_points(hidden)) if hidden.is_file() else 0)
        for test, points in (hidden_tests_with_points(speed) if speed.is_file() else []):
            # The performance task's own table loses the task's speed test, and its heading the points.
            text, rows = re.subn(rf"^\| `{test}` \|.*\n", "", text, flags=re.M)
            heading = re.search(rf"^### {PERFORMANCE} \((\d+)\)$", text, flags=re.M)
            if heading is not None:
                text = text[:heading.start(1)] + str(int(heading.group(1)) - points) + text[heading.end(1):]
            text = _with_total(text, -points)
        doc.write_text(text, encoding="utf-8")
        changed.append(SUITES_DOC)
    for role, path in pieces.items():
        if role != "stub":  # the stub goes with the regeneration below
            delete(root / path)
    for page in sorted((root / "docs").rglob("*.md")) + [root / "README.md"]:
        # A link to the removed concept page would break (tests/test_docs.py): its words stay, unlinked.
        if page.is_file():
            text = page.read_text(encoding="utf-8")
            unlinked = _without_links_to(text, exercise.concept)
            if unlinked != text:
                page.write_text(unlinked, encoding="utf-8")
                changed.append(str(page.relative_to(root)))
    (root / REGISTRY).write_text(registry, encoding="utf-8")
    changed.append(REGISTRY)
    # Fixtures: whole submissions lose the task's file; an outside-bank entry about the task goes whole.
    bank_toml, about = root / OUTSIDE_BANK / "bank.toml", set()
    if bank_toml.is_file():
        about = {entry for entry, spec in tomllib.loads(bank_toml.read_text(encoding="utf-8")).items()
                 if spec.get("task") == name}
        for entry in sorted(about):
            delete(root / OUTSIDE_BANK / entry)
        if about:
            bank_toml.write_text(_bank_toml_without(bank_toml.read_text(encoding="utf-8"), about), encoding="utf-8")
            changed.append(str(bank_toml.relative_to(root)))
    for folder in (OUTSIDE_BANK, *FIXTURE_FOLDERS):
        for path in sorted((root / folder).glob(f"**/{exercise.filename}")):
            delete(path)
    for path in sorted((root / SNAPSHOTS).glob("*.json")):
        snapshot = json.loads(path.read_text(encoding="utf-8"))
        snapshot["grades"] = {student: {t: v for t, v in grades.items() if v["task"] != name and t not in tests}
                              for student, grades in snapshot["grades"].items() if student not in about}
        snapshot["ratios"] = {student: {t: v for t, v in ratios.items() if t not in tests}
                              for student, ratios in snapshot.get("ratios", {}).items() if student not in about}
        path.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        changed.append(str(path.relative_to(root)))
    changed += _regenerate(root)
    out(f"Task {name} removed: {len(changed)} files removed or changed.")
    for path in changed:
        out(f"  {path}")
    out("Next: `bertlab audit`, then `python -m pytest -q`. docs/authoring.md, 'Remove a task', says what else "
        "to reread (the pages that describe the tasks).")
    return changed
