"""The authoring guide's commands do what the guide says they do (docs/authoring.md).

The section "Change a hidden test's check or its message" ends with the commands an instructor runs
after changing a hidden test, each with a comment saying what it must show ("the reference: all
pass", "the stub: all fail", "the task's mutants are still caught"). Here they are read from the page
and run from the kit's root as written, so a command that stops working (as the form without
`-c pyproject.toml` did: it tested the stubs and reported 10 failures for the reference) fails here.
The sections "Add a task" and "Remove a task" are run end to end in a copy of the kit by
tests/test_task_authoring.py. The audit line costs about a minute: marked slow.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

KIT_ROOT = Path(__file__).resolve().parents[1]
GUIDE = KIT_ROOT / "docs" / "authoring.md"


def section_commands(heading: str) -> list[tuple[str, str]]:
    """(command, its comment) of every line of the fenced bash blocks of the guide's section ``heading``."""
    text = GUIDE.read_text(encoding="utf-8")
    section = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## )", text, flags=re.M | re.S)
    assert section, f"docs/authoring.md has no section '## {heading}'"
    found = []
    for block in re.findall(r"```bash\n(.*?)```", section.group(1), flags=re.S):
        for line in block.splitlines():
            command, _, comment = line.partition("#")
            if command.strip():
                found.append((command.strip(), comment.strip()))
    return found


def run(command: str) -> subprocess.CompletedProcess:
    argv = shlex.split(command)
    if argv[0] == "python":
        argv[0] = sys.executable
    elif argv[0] == "bertlab":
        argv = [sys.executable, "-m", "bertlab.cli", *argv[1:]]
    return subprocess.run(argv, cwd=KIT_ROOT, capture_output=True, text=True, timeout=900)


def test_the_commands_after_changing_a_hidden_test_show_what_the_guide_says():
    commands = section_commands("Change a hidden test's check or its message")
    assert [comment for _, comment in commands] == [
        "the reference: all pass", "the stub: all fail", "the task's mutants are still caught"], commands
    for command, comment in commands:
        done = run(command)
        last = (done.stdout.strip().splitlines() or [""])[-1]
        if comment == "the reference: all pass":
            assert done.returncode == 0 and " passed" in last and "failed" not in last, f"{command}\n{done.stdout[-2000:]}"
        elif comment == "the stub: all fail":
            assert done.returncode == 1 and " failed" in last and "passed" not in last, f"{command}\n{done.stdout[-2000:]}"
        else:
            assert done.returncode == 0 and "mutants caught in their own task only" in done.stdout, \
                f"{command}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
