"""The README's set-up is what CI runs: its two commands, verbatim, in a fresh virtualenv.

README.md's "Set-up" section holds exactly two fenced bash blocks of one command each: command 1
installs everything (the system packages, torch's CPU build, the kit) and runs the demo, command 2 runs
the tests. .ci/run must make a fresh virtualenv (under /tmp, or in a git-ignored folder), activate it,
then run command 1 and command 2, each as a line of its own, in that order; and nothing else in it may
install anything (a package that only CI installs is a test that fails on the README's machine).
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

KIT_ROOT = Path(__file__).resolve().parents[1]
INSTALLS = re.compile(r"\b(apt-get|apt|pip|pip3|conda|uv)\b.*\binstall\b|\bpython3? -m pip\b")


def setup_commands() -> list[str]:
    """The fenced bash blocks of README.md's "Set-up" section, one command each."""
    text = (KIT_ROOT / "README.md").read_text()
    match = re.search(r"^## Set-up\b.*?$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, 'README.md has no "## Set-up" section'
    blocks = re.findall(r"^```bash\n(.*?)^```", match.group(1), re.M | re.S)
    commands = []
    for block in blocks:
        lines = [line.strip() for line in block.splitlines() if line.strip() and not line.strip().startswith("#")]
        assert len(lines) == 1, f"a Set-up block must hold one command, not {lines}"
        commands.append(lines[0])
    assert len(commands) == 2, f"README's Set-up must have two commands (install, test), found {commands}"
    return commands


def ci_lines() -> list[str]:
    """.ci/run's commands: its lines without comments and blank lines, stripped."""
    lines = (KIT_ROOT / ".ci" / "run").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def _index(lines: list[str], command: str, what: str) -> int:
    assert command in lines, f".ci/run does not run the README's {what} verbatim, as a line of its own:\n  {command}"
    assert lines.count(command) == 1, f".ci/run runs the README's {what} more than once"
    return lines.index(command)


def test_readme_setup_is_two_commands_install_then_test():
    install, test = setup_commands()
    words = shlex.split(install.replace("&&", " && "))
    assert "apt-get" in words and "install" in words, install
    assert "torch==2.13.0" in words and install.index("pip install torch==2.13.0") < install.index("pip install -e"), \
        "torch's CPU build must be installed first and pinned, before the kit"
    assert test == "python -m pytest -q -n auto"  # (the whole suite, on every core)


def test_ci_runs_the_readme_commands_verbatim_in_a_fresh_virtualenv():
    install, test = setup_commands()
    lines = ci_lines()
    first, second = _index(lines, install, "command 1 (install)"), _index(lines, test, "command 2 (tests)")
    assert first < second, ".ci/run must install (command 1) before it runs the tests (command 2)"

    made = [(i, m.group(1)) for i, line in enumerate(lines)
            if (m := re.fullmatch(r"python3? -m venv (?:--clear )?(\S+)", line))]
    assert len(made) == 1, f".ci/run must make one fresh virtualenv (python3 -m venv DIR), found {made}"
    at, venv = made[0]
    activated = [i for i, line in enumerate(lines) if line in (f". {venv}/bin/activate", f"source {venv}/bin/activate")]
    assert activated, f".ci/run must activate its virtualenv: . {venv}/bin/activate"
    assert at < activated[0] < first, ".ci/run must make and activate the virtualenv before command 1"
    if not venv.startswith("/tmp/"):
        ignored = subprocess.run(["git", "check-ignore", "-q", venv], cwd=KIT_ROOT)
        if ignored.returncode == 128:
            pytest.skip("not a git checkout: cannot tell whether the virtualenv's folder is ignored")
        assert ignored.returncode == 0, f".ci/run's virtualenv {venv} is neither under /tmp nor git-ignored"


def test_ci_installs_nothing_the_readme_does_not():
    install, _ = setup_commands()
    extra = [line for line in ci_lines() if line != install and INSTALLS.search(line)]
    assert not extra, f".ci/run installs outside the README's command 1 (add it there instead): {extra}"
