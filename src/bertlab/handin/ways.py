"""The three ways a course takes a hand-in, each as the paragraph `bertlab submit` ends with.

The instructor picks one when releasing the bundle (``bertlab release OUT --hand-in WAY``); it is
written to the bundle's HAND-IN.md, where the instructor may edit it (a course's upload page, a
deadline). `bertlab submit` prints that file, or the default paragraph where there is none."""

from __future__ import annotations

from pathlib import Path

HAND_IN_FILE = "HAND-IN.md"

WAYS = {
    "upload": ("Hand in: upload {archive} on your course's page (your LMS assignment), as it is: do not unzip "
               "it or add files. You may run `bertlab submit` again and upload the new archive; the last "
               "upload counts."),
    "gradescope": ("Hand in: on Gradescope, open this assignment and upload {archive} as it is. The autograder "
                   "runs the hidden tests on it and shows your points task by task. You may resubmit; the "
                   "last submission counts."),
    "nbgrader": ("Hand in: run `bertlab submit --nbgrader` on your course's JupyterHub. It hands in the same files "
                 "through nbgrader's exchange (as `nbgrader submit` does), after the same check. You may hand "
                 "in again; the last submission counts."),
}
DEFAULT_WAY = "upload"


def hand_in_paragraph(workspace_root: Path, archive: str) -> str:
    """The paragraph the instructor set in the bundle (HAND-IN.md), else the default, naming ``archive``."""
    path = Path(workspace_root) / HAND_IN_FILE
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        text = ""
    return (text or WAYS[DEFAULT_WAY]).replace("{archive}", archive)
