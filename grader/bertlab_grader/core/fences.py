"""nbgrader's fences: the one definition of the lines that mark a solution, and of removing them.

Each exercise is written once, in ``solutions/``, with nbgrader's own markers around the parts a
student writes::

    ### BEGIN SOLUTION
    ...the reference's code...
    ### END SOLUTION

The stubs replace each fenced block (``authoring/stubs.py``), the grader and the mutant bank use the
solutions with the fence lines removed (``strip_fences``), and the bundle's leak scan looks for any
fence line and any line of a fenced body (``is_fence_line``, ``fenced_bodies``).
"""

from __future__ import annotations

from typing import Iterator

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
#: Every nbgrader fence, the hidden-tests pair included: none may reach a student.
ALL_FENCES = (BEGIN, END, "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")


class FenceError(ValueError):
    """The solution file's fences are unbalanced or nested."""


def strip_fences(source: str) -> str:
    """The solution text without its fence lines: a complete, plain implementation."""
    return "".join(line for line in source.splitlines(keepends=True) if line.strip() not in (BEGIN, END))


def is_fence_line(line: str) -> bool:
    """A line that is an nbgrader fence (also inside a notebook's JSON: quotes stripped)."""
    stripped = line.strip().lstrip("\"'").strip()
    return stripped.startswith(ALL_FENCES)


def fenced_bodies(source: str) -> Iterator[str]:
    """The lines between nbgrader's solution fences of one file."""
    inside = False
    for line in source.splitlines():
        if line.strip() == BEGIN:
            inside = True
        elif line.strip() == END:
            inside = False
        elif inside:
            yield line
