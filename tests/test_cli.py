"""The `bertlab` command's own behaviour, whatever the subcommand."""

from __future__ import annotations

import subprocess
import sys

# A subcommand that prints far more than a pipe holds (10 MB), so the reader's early exit is certain to
# reach the writer as a broken pipe.
CHATTY = """
import sys
from bertlab import cli
cli._cmd_lesson = lambda args: [print("x" * 99) for _ in range(100_000)] and 0
sys.exit(cli.main(["lesson"]))
"""


def test_a_reader_that_stops_early_is_not_an_error():
    """`bertlab similar COURSE | head`: head exits after its lines; bertlab must stop quietly, exit 0."""
    proc = subprocess.run(["bash", "-c", f'"$0" -c "$1" | head -n 2 >/dev/null; exit "${{PIPESTATUS[0]}}"',
                           sys.executable, CHATTY], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr  # no "BrokenPipeError", no "internal error" line
