"""`bertlab submit`: copy the hand-in into a fresh folder, check that copy, then pack exactly it.

What is checked is what is handed in: the files are read once, into memory; the import check and the
public tests run on a copy written from those bytes, each in a fresh process; the archive (or the
exchange) gets the same bytes, with their sha256 in the manifest.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional, TextIO

from ..version import __version__
from ..check.run import PASSED, run_public_tests
from ..errors import UsageError
from ..tasks import ASSIGNMENT, EXERCISE_TASKS, EXERCISES
from ..workspace import find_workspace
from .archive import write_archive
from .files import handin_files
from .manifest import MANIFEST_NAME, build_manifest
from .ways import hand_in_paragraph

IMPORT_CHECK_TIMEOUT_S = 300  # importing torch on a slow laptop, and the student's own module-level code


def default_archive(exercises: Path, assignment: str = ASSIGNMENT) -> Path:
    """``<assignment>-submission.zip`` beside the exercises folder."""
    return Path(exercises).resolve().parent / f"{assignment}-submission.zip"


def _import_errors(folder: Path, names: list[str]) -> dict[str, str]:
    """{file: "where: error"} from a fresh interpreter importing each of ``names`` in ``folder``."""
    try:
        proc = subprocess.run([sys.executable, "-m", "bertlab.handin.imports", str(folder), *names],
                              capture_output=True, text=True, timeout=IMPORT_CHECK_TIMEOUT_S, cwd=folder)
    except subprocess.TimeoutExpired:
        return {"(all files)": f"importing them did not finish within {IMPORT_CHECK_TIMEOUT_S} s: look for "
                               "code at module level that never ends"}
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):  # the process died: a module called os._exit, or the interpreter crashed
        return {"(all files)": f"importing them stopped the interpreter (exit status {proc.returncode}): "
                               "look for code at module level that exits"}


def archive_destination(out: Optional[Path], exercises: Path, assignment: str) -> Path:
    """Where the archive goes: ``--out`` (a .zip), else ``default_archive``."""
    if out is None:
        return default_archive(exercises, assignment)
    destination = Path(out).expanduser().resolve()
    if destination.suffix != ".zip":
        raise UsageError(f"--out {out}: the archive must be a .zip file (e.g. --out {assignment}-submission.zip)")
    return destination


def _files_do(errors: dict[str, str]) -> str:
    return f"{', '.join(errors)} {'does' if len(errors) == 1 else 'do'}"


def _refusal(errors: dict[str, str]) -> str:
    # "cka.py, line 75: ..." where the error is in the file itself; "cka.py: helpers.py, line 3: ..." else
    lines = "\n".join(f"  {error}" if error.startswith(f"{name}, line") else f"  {name}: {error}"
                      for name, error in errors.items())
    return (f"{_files_do(errors)} not import, so nothing was written (an earlier archive is as it was):\n"
            f"{lines}\nFix them (`bertlab check` shows the same errors), or hand them in as they are with --anyway.")


def submit(directory: Optional[Path] = None, out: Optional[Path] = None, anyway: bool = False,
           nbgrader: bool = False, assignment: str = ASSIGNMENT, stream: TextIO = sys.stdout) -> int:
    """Check a copy of the hand-in and pack it; returns 0 (a task that fails is the student's choice to
    hand in: a warning). UsageError (exit 2, nothing written) for a file that does not import."""
    workspace = find_workspace(directory)
    tasks, helpers = handin_files(workspace.exercises)
    names = tasks + helpers
    files = {name: (workspace.exercises / name).read_bytes() for name in names}
    destination = None if nbgrader else archive_destination(out, workspace.exercises, assignment)
    if nbgrader:  # before the check: a course not configured is said at once
        from .exchange import NO_COURSE, configured_course

        if not configured_course(workspace.root):
            raise UsageError(NO_COURSE)
    print(f"Checking a fresh copy of {', '.join(names)} (from {workspace.exercises}) ...", file=stream, flush=True)
    with tempfile.TemporaryDirectory(prefix="bertlab-submit-") as tmp:
        copy = Path(tmp) / "exercises"
        copy.mkdir()
        for name, data in files.items():
            (copy / name).write_bytes(data)
        errors = _import_errors(copy, names)
        if errors and not anyway:
            raise UsageError(_refusal(errors))
        run = run_public_tests(Path(tmp), list(EXERCISE_TASKS), impl=str(copy))
    checked = {task: run.reports[task].as_record() for task in EXERCISE_TASKS if task in run.reports}
    manifest = build_manifest(files, checked, __version__)

    for e in EXERCISES:
        record = checked.get(e.name, {"status": "not run", "passed": 0, "total": 0})
        note = "" if record["status"] == PASSED else "   (handed in as it is: it does not pass yet)"
        print(f"  {e.name:<10} {record['status']:<12} {record['passed']}/{record['total']}{note}", file=stream)
    for problem in run.problems:
        print(f"  note: {problem}", file=stream)
    if errors:
        print(f"  packed with --anyway although {_files_do(errors)} not import", file=stream)
    if helpers:  # the grader loads the task files only (grader/bertlab_grader/course/submissions.py): say so now
        print(f"  warning: {', '.join(helpers)} packed, but the grader loads only the task files "
              f"({', '.join(tasks)}): move what they import from {', '.join(helpers)} into them", file=stream)

    if nbgrader:
        from .exchange import submit_to_exchange

        said = submit_to_exchange(workspace.root, files, manifest, assignment)
        print(f"Handed in through nbgrader's exchange: {said}.", file=stream)
        return 0
    write_archive(destination, files, manifest)
    print(f"Wrote {destination} ({len(files)} file(s) and {MANIFEST_NAME}: each file's sha256, each task's "
          "check, the time).", file=stream)
    print("", file=stream)
    print(hand_in_paragraph(workspace.root, destination.name), file=stream)
    return 0
