"""Generate the student stubs in exercises/ from the reference solutions.

Each exercise is written once, in solutions/, with nbgrader's fences. Here every
fenced block becomes the same two lines (a tool can count what is left, a student always sees the same
shape):

    # TODO: Implement for task <task>.
    raise NotImplementedYet("<task>", "<function>")

``bertlab.errors.NotImplementedYet`` is a NotImplementedError that carries the task and the function,
so the checker, the lesson and the grader say "not started" without reading its message (which stays
"<task>: implement <function> (see its docstring)"); the stub imports it after the module's own
imports. Signatures, type hints with shapes, docstrings and the code outside the fences are kept
verbatim. A fence at module level (private helpers) is replaced by a comment. `bertlab release` writes the
files into every bundle, and `python tools/build_exercises.py` into the checkout's exercises/; tests/test_stubs.py fails when the committed exercises/ is stale.
"""

from __future__ import annotations

import re
from pathlib import Path
import ast


from bertlab_grader.core.fences import BEGIN, END, FenceError
from bertlab_grader.core.locations import reference_sources
_DEF = re.compile(r"^(\s*)(?:async\s+)?(def|class)\s+(\w+)")
_BANNER = (
    "# Student version of task {task}, generated from the reference solution.\n"
    "# Replace each `raise NotImplementedYet(...)` with your code; run `bertlab check --task {task}`.\n"
)
_IMPORT = "from bertlab.errors import NotImplementedYet"


def _enclosing_name(lines: list[str], fence_index: int, fence_indent: int) -> str:
    """Dotted name (``Class.method`` or ``function``) of the def that contains line fence_index."""
    names, indent_limit = [], fence_indent
    for line in reversed(lines[:fence_index]):
        match = _DEF.match(line)
        if match and len(match.group(1)) < indent_limit:
            names.append(match.group(3))
            indent_limit = len(match.group(1))
            if indent_limit == 0:
                break
    return ".".join(reversed(names)) or "this part"


def make_stub(source: str, task: str) -> str:
    """The student version of one solution file's text."""
    lines = source.splitlines()
    out: list[str] = []
    inside_from = None
    for index, line in enumerate(lines):
        stripped = line.strip()
        if stripped == BEGIN:
            if inside_from is not None:
                raise FenceError(f"line {index + 1}: nested {BEGIN} (previous one on line {inside_from + 1})")
            inside_from = index
            indent = line[: len(line) - len(line.lstrip())]
            if indent:
                name = _enclosing_name(lines, index, len(indent))
                out.append(f"{indent}# TODO: Implement for task {task}.")
                out.append(f'{indent}raise NotImplementedYet("{task}", "{name}")')
            else:
                out.append(f"# (Task {task}: any helper functions you want can go here.)")
        elif stripped == END:
            if inside_from is None:
                raise FenceError(f"line {index + 1}: {END} without a matching {BEGIN}")
            inside_from = None
        elif inside_from is None:
            out.append(line)
    if inside_from is not None:
        raise FenceError(f"line {inside_from + 1}: {BEGIN} is never closed")
    text = _with_import("\n".join(out) + "\n")
    # The generated banner goes after the module docstring so `help(module)` still shows the lesson.
    docstring_end = _module_docstring_end(text)
    return text[:docstring_end] + "\n" + _BANNER.format(task=task) + text[docstring_end:]


def _with_import(text: str) -> str:
    """``text`` with the NotImplementedYet import, in a block of its own after the module's last
    top-level absolute import (relative ones, like siamese's ``.pooling``, come after it)."""
    if "raise NotImplementedYet(" not in text:
        return text
    body = ast.parse(text).body
    absolute = [node for node in body if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0)]
    if absolute:
        after = absolute[-1].end_lineno
    else:  # no import at all: after the module docstring
        after = body[0].end_lineno if body and isinstance(body[0], ast.Expr) else 0
    lines = text.splitlines()
    insert = ["", _IMPORT] if after else [_IMPORT, ""]
    return "\n".join(lines[:after] + insert + lines[after:]) + "\n"


def _module_docstring_end(text: str) -> int:
    """Character offset just after the module docstring (0 if there is none)."""
    tree = ast.parse(text)
    if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(getattr(tree.body[0], "value", None), ast.Constant):
        end_line = tree.body[0].end_lineno
        return len("\n".join(text.splitlines()[:end_line])) + 1
    return 0


def expected_exercises() -> dict[str, str]:
    """{filename: text} that a student's exercises/ starts as, generated from the reference solutions."""
    return {name: make_stub(text, name.removesuffix(".py")) for name, text in reference_sources(fenced=True).items()}


def build_exercises(out_dir: Path) -> list[Path]:
    """Write the stubs into ``out_dir``; returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in expected_exercises().items():
        path = out_dir / name
        path.write_text(text)
        written.append(path)
    return written
