"""The house as docs/architecture.md draws it: rooms in layers, imports only downward, no cycles.

Every import of the kit's own modules is read from the source (``ast``: module-level and
function-level imports alike, relative ones resolved), so a lazy import inside a function counts as
much as one at the top of the file: a cycle through a function-level import is still a cycle.

``python tests/test_architecture.py`` prints the rooms, their layers, their sizes and every edge
between rooms.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: pyproject.toml's package-dir: package -> folder of the checkout ("" is the root of src/'s packages).
PACKAGE_DIR_MAP: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
    "tool"]["setuptools"]["package-dir"]
#: The two package roots: each package lies at its own name under them (bertlab_grader.x.y is
#: grader/bertlab_grader/x/y.py), so these two entries map a name onto the same name.
PACKAGE_ROOTS = {"bertlab": "src/bertlab", "bertlab_grader": "grader/bertlab_grader"}
#: The mapped folders: the only packages whose import name is not their path, listed on the page too.
MAPPED_FOLDERS = {package: folder for package, folder in PACKAGE_DIR_MAP.items()
                  if package and package not in PACKAGE_ROOTS}
#: Folder of the checkout -> the package it installs as, most specific first (docs/, shipped as pages
#: with no __init__.py, holds no module of the kit).
FOLDERS = {folder: package for package, folder in sorted(
    {**MAPPED_FOLDERS, **PACKAGE_ROOTS}.items(), key=lambda item: -len(item[1]))
    if (ROOT / folder / "__init__.py").is_file()}

#: The rooms, lowest first. A module may import from its own room and from rooms below it, never above.
ROOMS = [
    ("bertlab", "the student package: lesson code, `bertlab check`, the shared checks and mistakes"),
    ("bertlab.public_tests", "the public tests (tests/public/)"),
    ("bertlab_grader.solutions", "the reference solutions, with nbgrader's fences (solutions/)"),
    ("bertlab_grader.core", "where the kit's files are, nbgrader's fences, the grader's failures, the digest"),
    ("bertlab_grader.sandbox.inside", "the only kit code that runs inside bubblewrap: server and wire format"),
    ("bertlab_grader.sandbox", "the trusted side of the sandbox: launcher, remote proxy, malloc pin"),
    ("bertlab_grader.performance", "the performance task: timing protocol, quiet room, timing record"),
    ("bertlab_grader.hidden", "the hidden suites with points (tests/hidden/)"),
    ("bertlab_grader.mutants", "the mutant bank: recipes applied to the solutions"),
    ("bertlab_grader.grading", "grading one submission: suite run and results, hints, preflight"),
    ("bertlab_grader.cluster", "grading on a Dask cluster: the worker plugin, the task, the dispatcher"),
    ("bertlab_grader.course", "the nbgrader course: gradebook, results.json, submissions, worker pool, cohort run"),
    ("bertlab_grader.authoring", "stubs, the lesson notebook, the student bundle and its leak scan, the audit"),
    ("bertlab_grader.reporting", "after grading, for the instructor: the report, similar pairs"),
    ("bertlab_grader.export", "after grading, to other platforms: LMS files, the Gradescope archive and autograder"),
    ("bertlab_grader.commands", "`bertlab demo` and `bertlab doctor`"),
    ("bertlab_grader", "the instructor commands' registration (cli.py)"),
]
LAYER = {room: index for index, (room, _) in enumerate(ROOMS)}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("").as_posix()
    for folder, package in FOLDERS.items():
        if rel == folder or rel.startswith(folder + "/"):
            dotted = package + rel[len(folder):].replace("/", ".")
            return dotted.removesuffix(".__init__")
    raise ValueError(path)


def kit_modules() -> dict[str, Path]:
    """{module name: file} of every module of the two packages."""
    found = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" not in path.parts:
                found.setdefault(module_name(path), path)
    return found


def room_of(module: str) -> str:
    """The most specific room that holds ``module``."""
    best = ""
    for room in LAYER:
        if (module == room or module.startswith(room + ".")) and len(room) > len(best):
            best = room
    return best


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The kit modules that ``module`` imports: for ``from X import a``, ``X.a`` when that is a module,
    else ``X``; relative imports resolved against ``module``'s package."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def known(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [known(alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else known(base)
                       for alias in node.names]
        else:
            continue
        out.update(t for t in targets if t and t != module and room_of(t))
    return out


def import_graph() -> dict[str, set[str]]:
    modules = kit_modules()
    return {module: imports_of(module, path, modules) for module, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return [f"{module} ({room_of(module)}) imports {target} ({room_of(target)}), a room above it"
            for module, targets in sorted(graph.items()) for target in sorted(targets)
            if LAYER[room_of(target)] > LAYER[room_of(module)]]


def test_every_module_has_a_room():
    homeless = [module for module in kit_modules() if not room_of(module)]
    assert not homeless, f"modules in no room of ROOMS: {homeless}"


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles (function-level imports count too): " + "; ".join(
        " <-> ".join(component) for component in found)


def test_imports_only_go_down():
    upward = upward_imports(import_graph())
    assert not upward, "imports that point up (docs/architecture.md, 'Rooms and layers'):\n" + "\n".join(upward)


def test_the_sandboxed_server_imports_nothing_of_the_grader():
    """What runs beside student code is one folder: it may use the student package and itself only."""
    graph = import_graph()
    inside = [m for m in graph if room_of(m) == "bertlab_grader.sandbox.inside"]
    assert inside
    for module in inside:
        outside = {t for t in graph[module] if room_of(t) not in ("bertlab", "bertlab_grader.sandbox.inside")}
        assert not outside, f"{module} imports {sorted(outside)}: inside the sandbox they do not exist"


def test_each_package_root_holds_its_package_under_its_own_name():
    """``bertlab_grader.course.runner`` is ``grader/bertlab_grader/course/runner.py``: a reader (or a tool)
    who follows an import finds the file at the path the import names. So each root maps its package
    onto the folder of the same name, and holds nothing beside it that an import could not name."""
    assert PACKAGE_DIR_MAP[""] == "src" and (ROOT / "src" / "bertlab" / "__init__.py").is_file()
    assert PACKAGE_DIR_MAP["bertlab_grader"] == "grader/bertlab_grader"
    for root, package in (("src", "bertlab"), ("grader", "bertlab_grader")):
        beside = sorted(p.name for p in (ROOT / root).iterdir()
                        if p.suffix == ".py" or (p / "__init__.py").is_file() and p.name != package)
        assert beside == [], f"{root}/ holds {beside} beside {package}/: no import names them at their path"


def test_the_import_system_finds_every_module_at_its_path_in_the_checkout():
    """What the editable install's import system says, module by module: the file this test read."""
    import importlib.util

    from bertlab_grader.core.locations import CHECKOUT

    if CHECKOUT is None or CHECKOUT.resolve() != ROOT:
        pytest.skip("the kit is installed from elsewhere (not editable from this checkout)")
    for module, path in kit_modules().items():
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin, module
        assert Path(spec.origin).resolve() == path.resolve(), f"{module}: {spec.origin}, expected {path}"


def test_the_mapped_folders_are_the_ones_the_page_lists():
    """pyproject.toml's package-dir is the one list of the folders whose import name is not their path;
    docs/architecture.md lists the same, and nothing else is mapped."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = page.split("### Import names and paths", 1)[1].split("\n#", 1)[0]
    listed = dict(re.findall(r"^\| `([\w/]+)/` \| `([\w.]+)` \|", section, re.M))
    assert listed == {folder: package for package, folder in MAPPED_FOLDERS.items()}, listed
    assert set(MAPPED_FOLDERS) == {"bertlab.public_tests", "bertlab_grader.solutions", "bertlab_grader.hidden",
                                   "bertlab_grader.kit_docs"}, "a new mapped folder needs a reason on the page"


def _top_level_names(path: Path) -> set[str]:
    """The names a module defines itself: functions, classes and assignments at its top level (inside
    an ``if`` or ``try`` there too), not the names it imports."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        for sub in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(sub.name)
            elif isinstance(sub, (ast.Assign, ast.AnnAssign)):
                for target in (sub.targets if isinstance(sub, ast.Assign) else [sub.target]):
                    names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def test_each_name_is_imported_from_the_module_that_defines_it():
    """No door: a module that passes on another module's names gives one concept two addresses, and
    callers drift between them (the course room had such a module, re-exporting 37 names, and most
    callers went around it). A package's ``__init__.py`` is no exception (bertlab.check's re-exported 20
    names, private ones among them, and the mutant bank's called itself a door)."""
    modules = kit_modules()
    defined = {name: _top_level_names(path) for name, path in modules.items()}
    passed_on = []
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules):
                continue
            passed_on += [f"{module} takes {alias.name} from {node.module}" for alias in node.names
                          if alias.name not in defined[node.module] and f"{node.module}.{alias.name}" not in modules]
    assert passed_on == [], "import each name from the module that defines it: " + "; ".join(passed_on)


def test_no_file_imports_another_files_private_name():
    """A name with a leading underscore is its file's own business: a file that needs another's helper
    imports a public name, so a reader sees the seam; the kit's tests, benchmarks and tools included
    (runner.py once took ``_check_sandbox``, ``_pool_results`` and ``_context`` from pool.py;
    gradebook.py four names from config.py). An alias to a private name of one's own (``import x as
    _x``) is fine."""
    taken = []
    # The kit's modules, and its tests, benchmarks and tools (a test reaching for a helper is a seam too).
    others = [path for folder in ("tests", "benchmarks", "tools") for path in sorted((ROOT / folder).rglob("*.py"))
              if "__pycache__" not in path.parts]
    for path in [*kit_modules().values(), *others]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                taken += [f"{path.relative_to(ROOT)}:{node.lineno} takes {alias.name} from {'.' * node.level}{node.module}"
                          for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")]
    assert taken == [], "give the name a public spelling where it is defined: " + "; ".join(taken)


def test_the_ground_floor_names_no_room_above_it():
    """``core/locations.py`` says where the kit's top-level folders are (the packages pyproject.toml
    maps); a room above it keeps its own data in its own folder and names it there. A string of
    locations.py that spells the folder or the package of a room above core (``"course"``,
    ``"bertlab_grader.sandbox.inside"``) is that room's layout leaking down."""
    core = LAYER["bertlab_grader.core"]
    above = {room for room, layer in LAYER.items()  # (the mapped top-level folders are core's to name)
             if layer > core and room.startswith("bertlab_grader.") and room not in MAPPED_FOLDERS}
    folders = {room.split(".")[1] for room in above}
    path = ROOT / "grader/bertlab_grader/core/locations.py"
    named = sorted({node.value for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                    if isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and (node.value in folders or node.value in above
                         or any(node.value.startswith(f"{room}.") for room in above))})
    assert named == [], f"core/locations.py names rooms above it: {named}; name that data in its own room"


#: Where an import inside a function is the rule, not the exception (docs/architecture.md, "Imports"):
LATE_IMPORT_FOLDERS = {
    "grader/bertlab_grader/sandbox/inside/": "the sandboxed server imports in the order it confines itself",
    "src/bertlab/check/": "bertlab check answers a save in under a second: each step imports what it runs",
    "grader/bertlab_grader/mutants/": "a mutant's source is the mistake: its imports are part of it",
    "grader/bertlab_grader/commands/demo_cohort/": "the demo's submissions, written as students write",
    "solutions/": "the reference, as the stubs and the students see it",
    "tests/": "the public and hidden tests (a test imports what it tests where it tests it)",
}
LATE_IMPORT_FILES = {"cli.py": "each command's modules are imported when that command runs"}


def _function_level_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of each import inside a function, outside a ``try`` (an optional dependency)."""
    found = []

    def visit(node, in_function: bool, in_try: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)) and in_function and not in_try:
                modules = [a.name for a in child.names] if isinstance(child, ast.Import) else [child.module or ""]
                found.extend((child.lineno, m) for m in modules if not (isinstance(child, ast.ImportFrom) and child.level))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)),
                  in_try or isinstance(child, ast.Try))

    visit(ast.parse(path.read_text(encoding="utf-8")), False, False)
    return found


def test_the_standard_library_is_imported_at_the_top_of_each_file():
    """A file's first lines say what it depends on. An import inside a function is for what costs
    start-up time (torch, transformers, nbgrader, pytest, dask, and the kit modules that load them),
    or sits where that is the folder's rule (LATE_IMPORT_FOLDERS); the standard library costs
    nothing worth hiding, so it is always at the top."""
    late = []
    for module, path in kit_modules().items():
        rel = path.relative_to(ROOT).as_posix()
        if path.name in LATE_IMPORT_FILES or any(rel.startswith(folder) for folder in LATE_IMPORT_FOLDERS):
            continue
        late += [f"{rel}:{line} {name}" for line, name in _function_level_imports(path)
                 if name.split(".")[0] in sys.stdlib_module_names]
    assert late == [], "import these at the top of the file: " + ", ".join(late)


def test_pyproject_installs_every_package_of_the_checkout():
    """A folder with an __init__.py that pyproject.toml does not list would be missing from the wheel
    (setuptools installs exactly the packages named there)."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {module_name(init).removesuffix(".__init__") for folder in FOLDERS for init in (ROOT / folder).rglob("__init__.py")
             if "__pycache__" not in init.parts}
    assert found - listed == set(), f"packages pyproject.toml does not install: {sorted(found - listed)}"
    assert listed - found == {"bertlab_grader.kit_docs"}, f"listed but not in the checkout: {sorted(listed - found - {'bertlab_grader.kit_docs'})}"


def test_the_architecture_page_names_every_room():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [room for room, _ in ROOMS if f"`{room}`" not in page]
    assert not missing, f"docs/architecture.md does not name these rooms: {missing}"


def test_every_package_of_the_checkout_is_on_the_architecture_page():
    """A room or a room's sub-folder that the page does not mention is one a contributor finds only
    by reading the imports: each package is either a room of the page's table or named there as a
    folder (``handin/``, ``gradescope/``)."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    packages = sorted({module_name(init).removesuffix(".__init__") for folder in FOLDERS
                       for init in (ROOT / folder).rglob("__init__.py") if "__pycache__" not in init.parts})
    missing = [p for p in packages if f"`{p}`" not in page and f"`{p.rsplit('.', 1)[-1]}/" not in page]
    assert not missing, f"docs/architecture.md names neither the room nor the folder of: {missing}"


#: A file or folder named in backticks on the page: a name with an extension of the kit's files, or a folder (ends in /).
_NAMED_PATH = re.compile(r"`([A-Za-z_.<][\w./<>-]*(?:\.(?:py|md|json|toml|txt|ipynb|ini|j2|sh)|/))`")


def _named_path_exists(named: str, files: list[str]) -> bool:
    """``named`` as the page writes it: from the checkout's root (``grader/bertlab_grader/course/runner.py``), as an
    installed import path (``bertlab/fileio.py``: pyproject's package-dir), within a room
    (``gradescope/archive.py``) or a bare file name in its room's row (``pool.py``)."""
    candidates = [named]
    for folder, package in FOLDERS.items():  # installed paths back to the checkout's folders
        installed = package.replace(".", "/") + "/"
        if named.startswith(installed):
            candidates.append(folder + "/" + named[len(installed):])
    if any((ROOT / c).exists() for c in candidates):
        return True
    if "/" not in named.rstrip("/"):
        return any(Path(f).name == named for f in files) or any(f"/{named}" in f"/{f}" for f in files)
    return any(f"/{f}".endswith("/" + named) or f"/{named}" in f"/{f}" for f in files)


def test_every_path_the_architecture_page_names_exists():
    """The page is read as a map: a file or folder it names that is not in the checkout sends a
    contributor looking for nothing. ``<task>`` stands for each task of the registry (the timed ones
    for a speed test)."""
    import subprocess

    from bertlab.tasks import EXERCISES

    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    missing = []
    for named in sorted(set(_NAMED_PATH.findall(page))):
        tasks = [e.name for e in EXERCISES if e.timed or "_speed" not in named]
        for path in ([named.replace("<task>", t) for t in tasks] if "<task>" in named else [named]):
            if not _named_path_exists(path, files):
                missing.append(path)
    assert not missing, f"docs/architecture.md names files or folders that are not in the checkout: {missing}"


def test_every_piece_of_every_task_is_where_the_registry_says_and_carries_its_name():
    """One task, one name: stub, solution, public and hidden test, teaching, mutants, benchmark and
    concept page all exist and all have the task's name in their path."""
    import subprocess

    from bertlab.tasks import EXERCISES

    # Tracked and new files alike: a task just added by `bertlab new-task` is not committed yet.
    tracked = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                             text=True).stdout.split()
    for task in EXERCISES:
        pieces = task.pieces()
        missing = [f"{role}: {path}" for role, path in pieces.items() if not (ROOT / path).is_file()]
        assert not missing, f"task {task.name}: the registry (bertlab/tasks.py) names missing pieces: {missing}"
        unnamed = [path for path in pieces.values() if task.name not in path]
        assert not unnamed, f"task {task.name}: pieces whose path does not say {task.name!r}: {unnamed}"
        if tracked:  # a checkout (an unpacked sdist has no git)
            named = {path for path in tracked if task.name in Path(path).name}
            assert set(pieces.values()) <= named, sorted(set(pieces.values()) - named)


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def report() -> str:
    graph = import_graph()
    modules = kit_modules()
    by_room = defaultdict(list)
    for module, path in modules.items():
        by_room[room_of(module)].append(path)
    out = ["layer  room                              files  lines  largest file"]
    for room, _ in ROOMS:
        paths = by_room[room]
        largest = max(paths, key=lines) if paths else None
        out.append(f"{LAYER[room]:>5}  {room:<32}  {len(paths):>5}  {sum(map(lines, paths)):>5}  "
                   + (f"{largest.relative_to(ROOT)} ({lines(largest)})" if largest else ""))
    edges = defaultdict(set)
    for module, targets in graph.items():
        for target in targets:
            if room_of(target) != room_of(module):
                edges[room_of(module)].add(room_of(target))
    out.append("")
    out += [f"{room} -> {', '.join(sorted(edges[room], key=LAYER.get))}" for room, _ in ROOMS if edges[room]]
    out.append("")
    out.append(f"{len(cycles(graph))} cycles, {len(upward_imports(graph))} upward imports, "
               f"{sum(1 for p in modules.values() if lines(p) > 500)} files over 500 lines")
    return "\n".join(out)


if __name__ == "__main__":
    print(report())
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
