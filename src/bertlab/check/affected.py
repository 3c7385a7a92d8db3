"""Which tasks a changed file of the exercises folder affects, for `bertlab check --watch`.

A task's tests call its own exercise module (the public tests use ``impl.<task>`` only), and that
module may import others of the folder: siamese.py imports ``.pooling``, and a student may add a
helper module that several tasks import. So a task is affected by a change to its own file and to
every file of the folder its file imports, directly or through another one. The imports are read
from the source (``ast``), never by importing it: the watcher must not run the student's code.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterable, Sequence

from bertlab.tasks import EXERCISES


def local_imports(source: str, local: set[str]) -> set[str]:
    """The modules of ``local`` (the folder's module names) that ``source`` imports: ``from .pooling
    import x``, ``from . import pooling``, ``import pooling``, ``from pooling import x``. A file
    that does not parse imports nothing (its own task's check shows the SyntaxError)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.module:
                found.add(node.module.split(".")[0])
            if node.level and not node.module:  # from . import pooling, helpers
                found.update(alias.name for alias in node.names)
    return found & local


def import_graph(folder: Path, gone: Iterable[str] = ()) -> dict[str, set[str]]:
    """{module: the folder's modules it imports directly} for every ``*.py`` of ``folder``; an import
    of a module of ``gone`` (just deleted) counts too."""
    files = {path.stem: path for path in Path(folder).glob("*.py")}
    local = set(files) | set(gone)
    graph = {}
    for name, path in files.items():
        try:
            source = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            source = ""
        graph[name] = local_imports(source, local) - {name}
    return graph


def uses(graph: dict[str, set[str]], module: str) -> set[str]:
    """``module`` and every module of the folder it imports, directly or not."""
    seen, stack = set(), [module]
    while stack:
        name = stack.pop()
        if name not in seen:
            seen.add(name)
            stack.extend(graph.get(name, ()))
    return seen


def affected_tasks(changed: Iterable[str], folder: Path, tasks: Sequence[str]) -> list[str]:
    """The tasks of ``tasks`` (in lesson order) whose check may change after ``changed`` (file names
    such as ``"pooling.py"``, deleted ones included) changed in the exercises ``folder``."""
    changed_modules = {Path(name).stem for name in changed if name.endswith(".py")}
    graph = import_graph(folder, gone=changed_modules)
    return [e.name for e in EXERCISES if e.name in tasks and uses(graph, e.module) & changed_modules]
