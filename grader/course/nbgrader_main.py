"""``python -m bertlab_grader.course.nbgrader_main ARGS``: nbgrader's own command line (``nbgrader ARGS``),
started a second sooner.

nbgrader imports nbformat, nbformat imports jsonschema, and jsonschema imports ``rfc3987_syntax`` when
it is installed (nbgrader's Jupyter dependencies install it) only to check the "iri" string formats,
which no notebook, gradebook or feedback of the kit uses. Building that module's grammar takes about
a second per process (measured: ``nbgrader export`` 2.2 s, 1.0 s without it), and every grading run
starts several nbgrader processes (the export and the feedback, gradebook.py). Marking the module
absent makes jsonschema skip those two formats, as it does where the module is not installed.
"""

from __future__ import annotations

import runpy
import sys


def skip_iri_formats() -> None:
    """Make this process's jsonschema skip the "iri" formats, as where ``rfc3987_syntax`` is not
    installed (no-op once it is imported). The instructor commands call it too: reading the course's
    nbgrader configuration imports nbgrader, and so nbformat and jsonschema, in their own process."""
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]  (None: "not installed")


if __name__ == "__main__":
    skip_iri_formats()
    sys.argv[0] = "nbgrader"
    runpy.run_module("nbgrader", run_name="__main__", alter_sys=True)
