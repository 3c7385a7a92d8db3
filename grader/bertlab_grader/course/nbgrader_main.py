"""``python -m bertlab_grader.course.nbgrader_main ARGS``: nbgrader's own command line (``nbgrader ARGS``),
started a second sooner.

nbgrader imports nbformat, nbformat imports jsonschema, and jsonschema imports ``rfc3987_syntax`` when
it is installed (nbgrader's Jupyter dependencies install it) only to check the "iri" string formats,
which no notebook, gradebook or feedback of the kit uses. Building that module's grammar takes about
a second per process (measured: ``nbgrader export`` 2.2 s, 1.0 s without it), and every grading run
starts several nbgrader processes (the export and the feedback, gradebook.py). Marking the module
absent makes jsonschema skip those two formats, as it does where the module is not installed.

``--bertlab-args-file=PATH`` (first) adds the arguments listed in PATH (a JSON list of strings) after
the others. The feedback of a large class is split over processes by the students each one leaves
out (gradebook.py, ``export_and_feedback``), and that list, as one command-line argument, outgrows
the 128 KiB Linux allows an argument (10,000 students of 14-character ids: 137 KB per process).

``--bertlab-feedback-record=DIR`` (first, before ``--bertlab-args-file``): ``generate_feedback``
renders only the pages whose inputs changed since they were last rendered, and keeps what it rendered
in DIR (feedback_record.py says what a page's inputs are).
"""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path


def skip_iri_formats() -> None:
    """Make this process's jsonschema skip the "iri" formats, as where ``rfc3987_syntax`` is not
    installed (no-op once it is imported). The instructor commands call it too: reading the course's
    nbgrader configuration imports nbgrader, and so nbformat and jsonschema, in their own process."""
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]  (None: "not installed")


ARGS_FILE = "--bertlab-args-file="
FEEDBACK_RECORD = "--bertlab-feedback-record="


def expand_args_file(argv: list[str]) -> list[str]:
    """``argv`` without a leading ``--bertlab-args-file=PATH``, and the arguments PATH lists after the
    rest (nbgrader's subcommand must come first)."""
    if len(argv) > 1 and argv[1].startswith(ARGS_FILE):
        with open(argv[1][len(ARGS_FILE):], encoding="utf-8") as handle:
            extra = json.load(handle)
        if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
            raise SystemExit(f"{argv[1]}: expected a JSON list of strings")
        return [argv[0], *argv[2:], *extra]
    return argv


def take_feedback_record(argv: list[str]) -> tuple[list[str], str | None]:
    """``argv`` without a leading ``--bertlab-feedback-record=DIR``, and DIR (None without one)."""
    if len(argv) > 1 and argv[1].startswith(FEEDBACK_RECORD):
        return [argv[0], *argv[2:]], argv[1][len(FEEDBACK_RECORD):]
    return argv, None


def main() -> None:
    skip_iri_formats()
    argv, record = take_feedback_record(sys.argv)
    sys.argv = expand_args_file(argv)
    sys.argv[0] = "nbgrader"
    keep = None
    if record is not None:
        from bertlab_grader.course.feedback_record import keep_unchanged_feedback

        keep = keep_unchanged_feedback(Path(record))
    try:
        runpy.run_module("nbgrader", run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        if stop.code not in (0, None):
            raise
    if keep is not None:  # (nbgrader finished without an error: what it rendered is kept)
        keep()


if __name__ == "__main__":
    main()
