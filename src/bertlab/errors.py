"""The errors the kit raises on purpose, each with the exit status a command ends with.

A command that meets one of these prints its message as one line (no traceback unless ``--debug``):
``UsageError`` (2) is the user's to fix and changed nothing; ``ReportedError`` (1) is any other
failure the kit explains itself (the grader's ``GraderFailure`` is one). ``NotImplementedYet`` is what
an exercise stub raises: it carries the task and the function, so the checker, the lesson and the
grader can say "not started" without reading the message (``unfinished`` finds it behind another
exception). Through the grading sandbox it arrives as a plain NotImplementedError (the sandbox rebuilds
builtin exceptions only), with the same message.
"""

from __future__ import annotations

from typing import Optional


class ReportedError(Exception):
    """A failure the kit explains in its message; the command exits with ``exit_code``."""

    exit_code = 1


class UsageError(ReportedError):
    """A mistake in how a command was called or in the files it was pointed at; nothing was changed."""

    exit_code = 2


class NotImplementedYet(NotImplementedError):
    """Raised by an exercise stub: ``task``'s ``function`` has not been written yet.

    A subclass of NotImplementedError, so ``except NotImplementedError`` still catches it.
    """

    def __init__(self, task: str, function: str):
        self.task = task
        self.function = function
        super().__init__(f"{task}: implement {function} (see its docstring)")

    def __reduce__(self):  # rebuilt from its fields (e.g. when it crosses a process boundary)
        return (type(self), (self.task, self.function))


def unfinished(exc: Optional[BaseException], depth: int = 8) -> Optional[NotImplementedError]:
    """The NotImplementedError that ``exc`` is, or was raised from or while handling (a test that
    turns a stub's exception into its own message keeps it as the context), else None.

    A stub's is a NotImplementedYet (``.task``, ``.function``); a plain NotImplementedError (raised
    by a student's own code, or rebuilt by the sandbox) has neither: read them with ``getattr``.
    """
    seen = 0
    while exc is not None and seen < depth:
        if isinstance(exc, NotImplementedError):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None
