"""`bertlab new-task NAME` and `bertlab remove-task NAME`: a task is one unit of the kit's checkout.

new-task writes the task's pieces (Exercise.pieces: solution, public and hidden test, teaching,
mutants with a fingerprint, benchmark, concept page) from the templates in task_template/, with a
placeholder exercise (the norm of each row) so that the kit is green at once, then registers the task
in src/bertlab/tasks.py, adds the task's section to docs/hidden-suites.md (every hidden test with its
points) and to docs/hidden-checks.md (what students read), writes the stub (exercises/NAME.py) and
the student guide's task lists, and gives every whole-submission fixture of the kit its file for the
task (whole_submissions: the reference to the honest ones, the stub to the hostile one).
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
from bertlab_grader.core.fences import strip_fences
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


_TASK_HEADING = re.compile(r"^### (\w+) \((\d+)\)$", re.M)


def _with_total(text: str) -> str:
    """The page with "(N in all)" set to the sum of its task headings ("### pooling (22)"), as
    tests/test_scoring.py reads them: right whatever the figure said before."""
    match = _TOTAL.search(text)
    if match is None:
        return text
    total = sum(int(points) for _, points in _TASK_HEADING.findall(text))
    return text[:match.start(1)] + str(total) + text[match.end(1):]


def _suites_doc_with(text: str, name: str, tests: list[tuple[str, int]]) -> str:
    """The page with task ``name``'s section added before the performance task's, and the total raised."""
    anchor = f"### {PERFORMANCE} ("
    if anchor not in text:
        return text
    text = text.replace(anchor, _suites_doc_section(name, tests) + anchor, 1)
    return _with_total(text)


def _suites_doc_without(text: str, name: str) -> str:
    """The page without task ``name``'s section (up to the next ### or ## heading), the total summed anew."""
    section = re.search(rf"^### {re.escape(name)} \(\d+\)\n.*?(?=^##)", text, flags=re.M | re.S)
    if section is not None:
        text = text[:section.start()] + text[section.end():]
    return _with_total(text)


# ---------------------------------------------------------------------------------------------------
# docs/hidden-checks.md: what each task's hidden tests check beyond its public ones, for students

CHECKS_DOC = "docs/hidden-checks.md"


def _checks_doc_section_span(text: str, name: str) -> tuple[int, int] | None:
    """Where task ``name``'s section ("## name", up to the next "## " heading or the end) is."""
    section = re.search(rf"^## {re.escape(name)}\n.*?(?=^## |\Z)", text, flags=re.M | re.S)
    return section.span() if section else None


def _checks_doc_with(text: str, name: str, after: str, tests: list[tuple[str, int]]) -> str:
    """The page with a section for task ``name`` (its hidden tests in words, as the page names them)
    right after task ``after``'s; unchanged when the page has no section for ``after``."""
    span = _checks_doc_section_span(text, after)
    if span is None:
        return text
    rows = "".join(f"| {test.removeprefix('test_').replace('_', ' ')} | {points} | REPLACE: what it checks "
                   "beyond the public tests |\n" for test, points in tests)
    section = (f"## {name}\n\nWritten by `bertlab new-task {name}`: REPLACE with what the task's hidden tests "
               "check beyond its\npublic ones (students read this page before they hand in).\n\n"
               f"| hidden test | points | beyond the public tests |\n|---|---|---|\n{rows}\n")
    return text[:span[1]] + section + text[span[1]:]


def _checks_doc_without(text: str, name: str) -> str:
    span = _checks_doc_section_span(text, name)
    return text if span is None else text[:span[0]] + text[span[1]:]


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
    existing += [f"{folder}/{exercise.filename}" for folder in whole_submissions(root)
                 if (root / folder / exercise.filename).exists()]
    if existing:
        raise UsageError(f"{existing[0]} already exists: remove it (or pick another name) first; nothing was written.")
    registry = (root / REGISTRY).read_text(encoding="utf-8")
    if registry.count(_REGISTRY_END) != 1:
        raise UsageError(f"{REGISTRY}: cannot find the end of EXERCISES to add the task to; add it by hand "
                         "(docs/authoring.md, 'Add a task').")
    written = _write_pieces(root, pieces, name)
    (root / REGISTRY).write_text(registry.replace(_REGISTRY_END, "\n" + _registry_entry(exercise) + _REGISTRY_END),
                                 encoding="utf-8")
    written.append(REGISTRY)
    written += _add_to_pages(root, name, hidden_tests_with_points(root / pieces["hidden test"]))
    written += _regenerate(root)
    written += _add_to_fixtures(root, exercise)  # after the regeneration: the hostile ones get the stub
    out(f"Task {name} added: {len(written)} files written or changed.")
    for path in written:
        out(f"  {path}")
    out(f"Next: replace the placeholder (REPLACE in each file, the pages' sections included; the fixtures' "
        f"{exercise.filename} too), then `bertlab audit` and `python -m pytest -q -m {name}`. "
        "docs/authoring.md, 'Add a task', walks through it.")
    return written


def _write_pieces(root: Path, pieces: dict[str, str], name: str) -> list[str]:
    """Each piece new-task writes, from its template with the task's name filled in; the paths."""
    written = []
    for role, template in TEMPLATE_OF.items():
        path = root / pieces[role]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text((TEMPLATES / template).read_text(encoding="utf-8").replace(PLACEHOLDER, name), encoding="utf-8")
        written.append(pieces[role])
    return written


def _add_to_pages(root: Path, name: str, tests: list[tuple[str, int]]) -> list[str]:
    """The task's section in the pages that list every task's hidden tests; the pages changed."""
    changed = []
    doc = root / SUITES_DOC
    if doc.is_file():
        doc.write_text(_suites_doc_with(doc.read_text(encoding="utf-8"), name, tests), encoding="utf-8")
        changed.append(SUITES_DOC)
    checks = root / CHECKS_DOC
    if checks.is_file():
        # After the last task's section (EXERCISE_TASKS is the registry as it was before this task).
        text = checks.read_text(encoding="utf-8")
        with_section = _checks_doc_with(text, name, EXERCISE_TASKS[-1], tests)
        if with_section != text:
            checks.write_text(with_section, encoding="utf-8")
            changed.append(CHECKS_DOC)
    return changed


def _regenerate(root: Path) -> list[str]:
    """What derives from the registry and the solutions in files: the stubs and the lesson notebook.

    Runs in a fresh interpreter, so that it reads the registry as it now is on disk."""
    script = ("from bertlab_grader.authoring.task_files import regenerate_in_process\n"
              "print('\\n'.join(regenerate_in_process()))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "(no output)"
        raise UsageError(f"the task's files are written, but regenerating the stubs and the student guide's "
                         f"task lists failed: {last}")
    return [line for line in done.stdout.splitlines() if line]


def regenerate_in_process() -> list[str]:
    """Rewrite exercises/ (the stubs and the notebook) and the student guide's task lists from the
    registry and the solutions; the changed paths."""
    root = _checkout()
    changed = []
    for page, text in stale_task_lists(root).items():
        (root / page).write_text(text, encoding="utf-8")
        changed.append(page)
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
# docs/student-guide.md: the task table and the list of concept pages, generated from the registry

STUDENT_GUIDE = "docs/student-guide.md"
#: The line each generated block of the student guide starts with; the block ends with "<!-- /{name} -->".
BLOCK_START = ("<!-- {name}: generated from src/bertlab/tasks.py by bertlab new-task and remove-task; after "
               "an edit there, run python tools/build_exercises.py -->")


def _what_to_write(exercise: Exercise, solution: Path) -> str:
    """The student's share of a task for the table: `f(its parameters without a default)` for a
    function of the reference, `Name` for a class (or a name the reference does not define)."""
    tree = ast.parse(solution.read_text(encoding="utf-8")) if solution.is_file() else ast.Module(body=[])
    defined = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    shown = []
    for name in exercise.functions:
        node = defined.get(name)
        if node is None:
            shown.append(f"`{name}`")
            continue
        positional = node.args.posonlyargs + node.args.args
        required = positional[:len(positional) - len(node.args.defaults)]
        shown.append(f"`{name}({', '.join(arg.arg for arg in required)})`")
    return ", ".join(shown)


def task_table(root: Path, exercises: tuple[Exercise, ...] = EXERCISES) -> str:
    """The guide's "The tasks" block: the order to work in (which task uses which), then one row per task."""
    uses = [f"{e.name} uses your {' and '.join(e.uses)}" for e in exercises if e.uses]
    order = "Work in this order" + (f" ({'; '.join(uses)})." if uses else ".")
    rows = "".join(f"| {e.name} | `exercises/{e.filename}` | {_what_to_write(e, root / 'solutions' / e.filename)} "
                   f"| {e.summary} |\n" for e in exercises)
    return f"{order}\n\n| task | file | you write | what it is for |\n| --- | --- | --- | --- |\n{rows}"


def concept_list(root: Path, exercises: tuple[Exercise, ...] = EXERCISES) -> str:
    """The guide's list of each task's concept page, by the page's title."""
    items = []
    for e in exercises:
        page = root / "docs" / "concepts" / e.concept
        lines = page.read_text(encoding="utf-8").splitlines() if page.is_file() else []
        title = next((line[2:].strip() for line in lines if line.startswith("# ")), e.concept)
        items.append(f"- task {e.name}: [{title}](concepts/{e.concept})\n")
    return "Each task's concept page says more than the paragraphs below:\n\n" + "".join(items)


#: block name -> what writes its content.
GENERATED_BLOCKS = {"tasks": task_table, "concepts": concept_list}


def student_guide_text(text: str, root: Path) -> str:
    """``text`` (the student guide) with each generated block rewritten from the registry; a block
    the page does not have is left out."""
    for name, content in GENERATED_BLOCKS.items():
        block = re.compile(rf"^<!-- {name}: .*? -->\n.*?^<!-- /{name} -->$", re.M | re.S)
        fresh = f"{BLOCK_START.format(name=name)}\n{content(root)}<!-- /{name} -->"
        text = block.sub(lambda _: fresh, text, count=1)
    return text


def stale_task_lists(root: Path) -> dict[str, str]:
    """{page, relative to root: its text now} for each page whose generated task lists the registry has
    changed (none in a checkout without the page)."""
    page = root / STUDENT_GUIDE
    if not page.is_file():
        return {}
    text = page.read_text(encoding="utf-8")
    fresh = student_guide_text(text, root)
    return {STUDENT_GUIDE: fresh} if fresh != text else {}


# ---------------------------------------------------------------------------------------------------
# The kit's whole-submission fixtures: folders its own tests grade or run as one student's hand-in

OUTSIDE_BANK = "tests/outside_bank"
FIXTURE_FOLDERS = ("tests/redteam_submissions", "grader/bertlab_grader/commands/demo_cohort")
#: The whole submissions of FIXTURE_FOLDERS that are right in every task (the red team's honest student,
#: tests/redteam_submissions/README.md); the others there (the demo's erin) are hostile in every task.
HONEST_FIXTURES = ("tests/redteam_submissions/correct",)


def whole_submissions(root: Path) -> dict[str, bool]:
    """{folder, relative to root: honest} of every whole submission among the fixtures: the outside
    bank's correct entries (honest; its wrong and hostile entries hold one file and take the others
    from their base) and each folder of FIXTURE_FOLDERS that holds a file for every registered task
    (honest if in HONEST_FIXTURES; the red team's hostile entries hold only the files they attack)."""
    found = {}
    bank = root / OUTSIDE_BANK / "bank.toml"
    if bank.is_file():
        for entry, spec in tomllib.loads(bank.read_text(encoding="utf-8")).items():
            if spec.get("kind") == "correct":
                found[f"{OUTSIDE_BANK}/{entry}"] = True
    for folder in FIXTURE_FOLDERS:
        for submission in sorted(p for p in (root / folder).glob("*") if p.is_dir()):
            if all((submission / filename).is_file() for filename in EXERCISE_FILES):
                relative = f"{folder}/{submission.name}"
                found[relative] = relative in HONEST_FIXTURES
    return found


def _add_to_fixtures(root: Path, exercise: Exercise) -> list[str]:
    """The new task's file in every whole submission: the reference (fences stripped) in an honest one,
    so that it keeps full marks; the untouched stub in a hostile one, which so earns nothing in the new
    task either. The paths written."""
    reference = strip_fences((root / "solutions" / exercise.filename).read_text(encoding="utf-8"))
    stub = (root / "exercises" / exercise.filename).read_text(encoding="utf-8")
    written = []
    for folder, honest in whole_submissions(root).items():
        (root / folder / exercise.filename).write_text(reference if honest else stub, encoding="utf-8")
        written.append(f"{folder}/{exercise.filename}")
    return written


# ---------------------------------------------------------------------------------------------------
# remove-task

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
    """Remove task ``name``: its pieces, its registry entry, its sections of the pages that list every
    task, its files in the kit's fixtures and its tests in the grade snapshots; the paths removed or changed."""
    root = _checkout()
    exercise = _check_removable(name)
    registry = _registry_without((root / REGISTRY).read_text(encoding="utf-8"), name)
    pieces = exercise.pieces()
    tests = set().union(*(_test_names(root / path) for role, path in pieces.items() if "test" in role and "public" not in role))
    changed = _remove_from_pages(root, name, pieces)
    for role, path in pieces.items():
        if role != "stub":  # the stub goes with the regeneration below
            changed += _delete(root, root / path)
    changed += _unlink_concept_page(root, exercise.concept)
    (root / REGISTRY).write_text(registry, encoding="utf-8")
    changed.append(REGISTRY)
    about, removed = _remove_from_fixtures(root, exercise)
    changed += removed
    changed += _remove_from_snapshots(root, name, tests, about)
    changed += _regenerate(root)
    changed = list(dict.fromkeys(changed))  # (a page unlinked, then regenerated, is listed once)
    out(f"Task {name} removed: {len(changed)} files removed or changed.")
    for path in changed:
        out(f"  {path}")
    out("Next: `bertlab audit`, then `python -m pytest -q`. docs/authoring.md, 'Remove a task', says what else "
        "to reread (the pages that describe the tasks).")
    return changed


def _delete(root: Path, path: Path) -> list[str]:
    """Delete a file or a folder; [its path relative to root], or [] when there was nothing."""
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    else:
        return []
    return [str(path.relative_to(root))]


def _remove_from_pages(root: Path, name: str, pieces: dict[str, str]) -> list[str]:
    """Task ``name``'s sections out of docs/hidden-suites.md (its speed test's line too, with the totals)
    and docs/hidden-checks.md; the pages changed."""
    changed = []
    doc = root / SUITES_DOC
    if doc.is_file():
        speed = root / pieces.get("speed test (task performance)", "-")
        text = _suites_doc_without(doc.read_text(encoding="utf-8"), name)
        for test, points in (hidden_tests_with_points(speed) if speed.is_file() else []):
            # The performance task's own table loses the task's speed test, and its heading the points.
            text = re.sub(rf"^\| `{test}` \|.*\n", "", text, flags=re.M)
            heading = re.search(rf"^### {PERFORMANCE} \((\d+)\)$", text, flags=re.M)
            if heading is not None:
                text = text[:heading.start(1)] + str(int(heading.group(1)) - points) + text[heading.end(1):]
        doc.write_text(_with_total(text), encoding="utf-8")
        changed.append(SUITES_DOC)
    checks = root / CHECKS_DOC
    if checks.is_file() and _checks_doc_section_span(checks.read_text(encoding="utf-8"), name):
        checks.write_text(_checks_doc_without(checks.read_text(encoding="utf-8"), name), encoding="utf-8")
        changed.append(CHECKS_DOC)
    return changed


def _unlink_concept_page(root: Path, concept: str) -> list[str]:
    """Every link to the removed concept page, in docs/ and the README, made plain words (a link to
    it would break: tests/test_docs.py); the pages changed."""
    changed = []
    for page in sorted((root / "docs").rglob("*.md")) + [root / "README.md"]:
        if page.is_file():
            text = page.read_text(encoding="utf-8")
            unlinked = _without_links_to(text, concept)
            if unlinked != text:
                page.write_text(unlinked, encoding="utf-8")
                changed.append(str(page.relative_to(root)))
    return changed


def _remove_from_fixtures(root: Path, exercise: Exercise) -> tuple[set[str], list[str]]:
    """The task out of the kit's fixtures, as new-task put it in (whole_submissions): each whole
    submission loses the task's file, and an outside-bank entry about the task goes whole.
    (The outside-bank entries removed, the paths removed or changed.)"""
    changed = []
    bank_toml, about = root / OUTSIDE_BANK / "bank.toml", set()
    if bank_toml.is_file():
        about = {entry for entry, spec in tomllib.loads(bank_toml.read_text(encoding="utf-8")).items()
                 if spec.get("task") == exercise.name}
        for entry in sorted(about):
            changed += _delete(root, root / OUTSIDE_BANK / entry)
        if about:
            bank_toml.write_text(_bank_toml_without(bank_toml.read_text(encoding="utf-8"), about), encoding="utf-8")
            changed.append(str(bank_toml.relative_to(root)))
    for folder in (OUTSIDE_BANK, *FIXTURE_FOLDERS):
        for path in sorted((root / folder).glob(f"**/{exercise.filename}")):
            changed += _delete(root, path)
    return about, changed


def _remove_from_snapshots(root: Path, name: str, tests: set[str], about: set[str]) -> list[str]:
    """The task's tests, and the removed outside-bank entries, out of the grade snapshots; the files changed."""
    changed = []
    for path in sorted((root / SNAPSHOTS).glob("*.json")):
        snapshot = json.loads(path.read_text(encoding="utf-8"))
        snapshot["grades"] = {student: {t: v for t, v in grades.items() if v["task"] != name and t not in tests}
                              for student, grades in snapshot["grades"].items() if student not in about}
        snapshot["ratios"] = {student: {t: v for t, v in ratios.items() if t not in tests}
                              for student, ratios in snapshot.get("ratios", {}).items() if student not in about}
        path.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        changed.append(str(path.relative_to(root)))
    return changed
