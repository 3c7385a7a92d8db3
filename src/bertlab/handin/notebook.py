"""`bertlab submit` in a notebook cell: ``bertlab.submit()``.

The command itself (command.py's ``submit``: a fresh copy of the files as they are saved, checked in a
fresh process, then packed), with what it prints caught and shown under the cell, and where the archive
went. A refusal (a file that does not import, no exercises found) is the command's own message, shown
as a failure: nothing was written, and an earlier archive is as it was. Nothing is raised for it.

otter-grader's counterpart is ``grader.export()``, which zips the notebook itself. Here the notebook
is not what is graded: the exercise files are, so they are what goes in, checked first, as the
command does; hence the command's name, not otter's.
"""

from __future__ import annotations

import html
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from bertlab.errors import ReportedError
from bertlab.tasks import ASSIGNMENT
from bertlab.workspace import find_workspace
from bertlab.check.display import html_message
from bertlab.handin.command import archive_destination, submit as submit_command


@dataclass
class SubmitResult:
    """One hand-in from a notebook: what the command said, and the archive it wrote (if any)."""

    said: str                       # the command's report, or its refusal
    archive: Optional[Path] = None  # where the archive went (None: refused, or handed in through nbgrader)
    refused: bool = False           # nothing was written

    @property
    def ok(self) -> bool:
        return not self.refused

    def __repr__(self) -> str:
        return self.said

    def _repr_html_(self) -> str:
        where = ('<div style="font-weight: bold; margin-top: 0.4em">Archive: '
                 f"<code>{html.escape(str(self.archive), quote=False)}</code></div>") if self.archive else ""
        return html_message(self.said, ok=not self.refused) + where


def submit(*, directory: Optional[Path] = None, out: Optional[Path] = None, anyway: bool = False,
           nbgrader: bool = False) -> SubmitResult:
    """``bertlab.submit()``: `bertlab submit` from a notebook cell. directory: the exercises folder
    (--dir; by default found from the notebook's folder); out: the archive (--out; by default
    <assignment>-submission.zip beside the exercises folder); anyway: pack files that do not import (--anyway);
    nbgrader: hand in through the course's nbgrader exchange (--nbgrader)."""
    said = io.StringIO()
    try:
        archive = None if nbgrader else archive_destination(out, find_workspace(directory).exercises, ASSIGNMENT)
        submit_command(directory=directory, out=archive, anyway=anyway, nbgrader=nbgrader, stream=said)
    except ReportedError as exc:  # the command's refusal: nothing was written
        refusal = f"bertlab submit: {exc}"
        if "--" in refusal:  # it names the command's options: say how a notebook passes them
            refusal += ("\nIn a notebook the options are keywords: --anyway is bertlab.submit(anyway=True), "
                        '--dir DIR is directory="DIR", --out PATH is out="PATH".')
        return SubmitResult(said.getvalue() + refusal, refused=True)
    return SubmitResult(said.getvalue().rstrip(), archive)
