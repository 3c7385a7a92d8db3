"""Count what a contributor meets in the kit's code: imports inside functions, and long signatures.

    python tools/house_figures.py [ROOT]

ROOT is a checkout (default: this one), so the same count can be made of an earlier commit
(``git worktree add /tmp/old REV`` and ``python tools/house_figures.py /tmp/old``). Reads the files
only; imports nothing of them. Prints one JSON object:

    imports, imports_inside_functions, share_inside
                  import statements in the kit's Python (the student and instructor packages, the
                  reference solutions, the public and hidden suites), and those inside a function
    longest_course_signature
                  the course room's (grader/bertlab_grader/course/) function with the most
                  parameters (self and cls not counted): "file:function", and the count
    functions_taking
                  how many of the kit's functions take a parameter of each name: the values the
                  course settings object (course/settings.py) carries
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

KIT_FOLDERS = ("src/bertlab", "grader", "solutions", "tests/public", "tests/hidden")
COURSE_ROOM = ("grader/bertlab_grader/course", "grader/course")  # where it lies now, and before issue 34
SETTINGS_VALUES = ("assignment", "db_url", "unsafe_no_sandbox")


def _python_files(root: Path, folders) -> list[Path]:
    return sorted(p for folder in folders if (root / folder).is_dir() for p in (root / folder).rglob("*.py"))


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = function.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    return [n for n in names if n not in ("self", "cls")]


def _functions(tree: ast.AST):
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def figures(root: Path) -> dict:
    imports = inside = 0
    taking = dict.fromkeys(SETTINGS_VALUES, 0)
    for path in _python_files(root, KIT_FOLDERS):
        tree = ast.parse(path.read_text(), str(path))
        in_functions = {id(node) for f in _functions(tree) for node in ast.walk(f)
                        if isinstance(node, (ast.Import, ast.ImportFrom))}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                imports += 1
                inside += id(node) in in_functions
        for function in _functions(tree):
            for name in set(_parameters(function)) & set(SETTINGS_VALUES):
                taking[name] += 1
    longest = ("", -1)
    for path in _python_files(root, COURSE_ROOM):
        for function in _functions(ast.parse(path.read_text(), str(path))):
            count = len(_parameters(function))
            if count > longest[1]:
                longest = (f"{path.relative_to(root)}:{function.name}", count)
    return {"imports": imports, "imports_inside_functions": inside,
            "share_inside": round(inside / imports, 3) if imports else None,
            "longest_course_signature": list(longest), "functions_taking": taking}


if __name__ == "__main__":
    print(json.dumps(figures(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])))
