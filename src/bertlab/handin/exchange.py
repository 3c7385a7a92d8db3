"""Handing in through nbgrader's exchange, for courses that run on JupyterHub.

`nbgrader submit` copies a folder named after the assignment into the course's exchange. It runs here
in the student's workspace, so it reads the nbgrader configuration the student has there
(``nbgrader_config.py`` in the workspace or in ``~/.jupyter``: the course id and the exchange's root),
and is pointed at a temporary folder holding exactly the checked files and the manifest
(``--Exchange.assignment_dir``). The instructor's `nbgrader collect` then puts them in
``submitted/<student>/<assignment>/``, where `bertlab grade` reads them.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Mapping

from ..errors import ReportedError, UsageError
from .manifest import MANIFEST_NAME

NO_COURSE = ("no nbgrader course is configured here: add the line c.CourseDirectory.course_id = \"<course>\" "
             "(the course id your instructor gives) to nbgrader_config.py in this folder or in ~/.jupyter, "
             "then run `bertlab submit --nbgrader` again; nothing was handed in.")
NO_NBGRADER = ("nbgrader is not installed here: `bertlab submit --nbgrader` is for a course's JupyterHub, where it "
               "is. Run `bertlab submit` and hand in the archive the way your instructor asks; nothing was handed in.")


# Run in the student's workspace: the course id nbgrader's own configuration gives (the same files
# `nbgrader submit` reads there: nbgrader_config.py in the folder, ~/.jupyter, /etc/jupyter).
_COURSE_ID = """
import json
from nbgrader.apps.submitapp import SubmitApp
app = SubmitApp()
app.initialize([])
print(json.dumps(app.coursedir.course_id))
"""


def configured_course(workspace_root: Path) -> str:
    """The nbgrader course id configured for the workspace ("" when none). UsageError without nbgrader."""
    if importlib.util.find_spec("nbgrader") is None:
        raise UsageError(NO_NBGRADER)
    proc = subprocess.run([sys.executable, "-c", _COURSE_ID], cwd=workspace_root, capture_output=True, text=True,
                          timeout=300)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise ReportedError(f"nbgrader could not read its configuration here: {_reason(proc.stdout + proc.stderr)}")


def _reason(output: str) -> str:
    """nbgrader's own reason, from its log: its last CRITICAL line, else its last ERROR line other than the
    closing "nbgrader submit failed", else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    critical = [line for line in lines if "CRITICAL" in line]
    errors = [line for line in lines if "ERROR" in line and not line.endswith("nbgrader submit failed")]
    return (critical or errors or lines or ["(no output)"])[-1].split("] ", 1)[-1]


def submit_to_exchange(workspace_root: Path, files: Mapping[str, bytes], manifest: dict, assignment: str) -> str:
    """Hand ``files`` and ``manifest`` in as ``assignment`` with `nbgrader submit`; returns what nbgrader
    said it did. UsageError where nothing is configured, ReportedError where nbgrader refused."""
    if not configured_course(workspace_root):
        raise UsageError(NO_COURSE)
    with tempfile.TemporaryDirectory(prefix="bertlab-handin-") as tmp:
        folder = Path(tmp) / assignment
        folder.mkdir()
        for name, data in files.items():
            (folder / name).write_bytes(data)
        (folder / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        proc = subprocess.run([sys.executable, "-m", "nbgrader", "submit", assignment,
                               f"--Exchange.assignment_dir={tmp}"],
                              cwd=workspace_root, capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    if "No course id specified" in output:
        raise UsageError(NO_COURSE)
    if proc.returncode != 0:
        raise ReportedError(f"nbgrader submit refused the hand-in (nothing was handed in): {_reason(output)}")
    said = [line.split("]", 1)[-1].strip() for line in output.splitlines() if "Submitted as" in line]
    return said[-1] if said else "handed in through nbgrader's exchange"
