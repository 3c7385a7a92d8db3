"""The docs show only commands that exist, and every command they show is run for real by a test.

Commands are taken from the fenced code blocks of docs/**/*.md, README.md and the student README that
`bertlab release` writes (plus, parsed only, `bertlab ...` in inline code). Each must parse with
`bertlab.cli.build_parser()`; each subcommand must be run by the test named in RUN_BY, which must
exist and must call that subcommand (by its name, or a function its dispatcher calls). Relative links
between the docs must resolve.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import re
import shlex
from pathlib import Path

import pytest

from bertlab.cli import build_parser
from bertlab_grader.authoring.bundle import STUDENT_README

KIT_ROOT = Path(__file__).resolve().parents[1]

# Subcommand -> the test that runs it ("path::function"; a fixture counts: it runs in its tests).
RUN_BY = {
    "check": "tests/test_check.py::test_check_on_untouched_stubs_shows_every_task_not_started_and_names_cka",
    "submit": "tests/test_handin.py::submit",
    "release": "tests/test_release.py::test_release_command_writes_refuses_and_replaces",
    "lesson": "tests/test_lesson_figures.py::test_lesson_command_runs_on_with_any_subset_of_tasks_done",
    "demo": "tests/conftest.py::demo",
    "grade": "tests/test_runner.py::test_grade_course",
    "grade-one": "tests/test_runner.py::test_grade_one_json",
    "audit": "tests/test_audit.py::test_audit",
    "doctor": "tests/test_grading_trust.py::test_doctor",
    "export": "tests/test_export.py::test_canvas_export_fills_a_new_column",
    "report": "tests/test_report.py::test_report_command_writes_the_default_page",
    "similar": "tests/test_similarity.py::test_cli_report_for_people",
    "gradescope": "tests/test_gradescope.py::autograder_zip",
    "new-task": "tests/test_task_authoring.py::test_new_task_then_the_worked_example_then_remove_task",
    "remove-task": "tests/test_task_authoring.py::test_new_task_then_the_worked_example_then_remove_task",
}
# Placeholders the docs use for values of a typed option.
PLACEHOLDERS = {"N": "2", "T": "cka"}


def doc_sources() -> dict[str, str]:
    docs = {str(p.relative_to(KIT_ROOT)): p.read_text() for p in sorted((KIT_ROOT / "docs").rglob("*.md"))}
    readme = KIT_ROOT / "README.md"
    if readme.exists():
        docs["README.md"] = readme.read_text()
    docs["<student README written by bertlab release>"] = STUDENT_README
    return docs


def code_block_lines(text: str):
    """(line number, line) of every line inside a fenced code block (fences may be indented)."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if fence is None and stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
        elif fence is not None and stripped.startswith(fence):
            fence = None
        elif fence is not None:
            yield number, line


def bertlab_argv(command: str) -> list[str] | None:
    """argv after `bertlab` for one shell command, or None when it does not run bertlab."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return None
    if words[:1] == ["$"]:
        words = words[1:]
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):  # VAR=value bertlab ...
        words = words[1:]
    if not words or words[0] != "bertlab":
        return None
    return [PLACEHOLDERS.get(w, w) for w in words[1:]]


def fenced_commands() -> list[tuple[str, list[str]]]:
    """('file:line', argv) of every bertlab command in a fenced code block."""
    found = []
    for name, text in doc_sources().items():
        pending, start = "", 0
        for number, line in code_block_lines(text):
            if not pending:
                start = number
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            for part in re.split(r"&&|\|\||;|\|", pending + line):
                argv = bertlab_argv(part)
                if argv is not None:
                    found.append((f"{name}:{start}", argv))
            pending = ""
    return found


def inline_commands() -> list[tuple[str, list[str]]]:
    """('file', argv) of `bertlab ...` in inline code; [optional] brackets dropped, messages skipped."""
    found = []
    for name, text in doc_sources().items():
        for span in re.findall(r"(?<!`)`(bertlab [^`\n]+)`(?!`)", text):
            words = span.replace("[", " ").replace("]", " ").split()
            if len(words) > 1 and words[1].endswith(":"):  # an error message quoted in the docs
                continue
            found.append((name, [PLACEHOLDERS.get(w, w) for w in words[1:]]))
    return found


def parse_error(argv: list[str]) -> str | None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            build_parser().parse_args(argv)
        except SystemExit as exc:
            return err.getvalue().strip() or f"exit {exc.code}"
    return None


FENCED = fenced_commands()


def test_the_docs_show_commands():
    shown = {argv[0] for _, argv in FENCED if argv}
    assert {"check", "release", "grade", "grade-one", "demo", "audit", "lesson"} <= shown, shown


@pytest.mark.parametrize("where, argv", FENCED, ids=[f"{w} bertlab {' '.join(a)}" for w, a in FENCED])
def test_every_fenced_command_parses(where, argv):
    assert argv, f"{where}: `bertlab` without a subcommand"
    error = parse_error(argv)
    assert error is None, f"{where}: `bertlab {' '.join(argv)}` does not parse:\n{error}"


def test_every_inline_command_names_a_real_subcommand_and_options():
    # Prose names commands without their arguments ("`bertlab release` refuses ..."), so only the
    # subcommand and its options are checked here.
    subcommands = _subparsers().choices
    bad = []
    for where, argv in inline_commands():
        if not argv or argv[0] not in subcommands:
            bad.append(f"{where}: `bertlab {' '.join(argv)}`: no such subcommand")
            continue
        known = subcommands[argv[0]]._option_string_actions
        bad += [f"{where}: `bertlab {' '.join(argv)}`: no option {w}" for w in argv[1:]
                if w.startswith("-") and w not in known]
    assert not bad, "\n".join(bad)


def _subparsers():
    return next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")


def test_every_subcommand_is_documented():
    shown = {argv[0] for _, argv in FENCED if argv}
    missing = sorted(set(_subparsers().choices) - shown)
    assert not missing, f"no doc shows these commands in a code block: {missing}"


def dispatch_names(subcommand: str) -> set[str]:
    """The subcommand itself and every function its cli handler calls (e.g. run_check, release)."""
    handler = _subparsers().choices[subcommand].get_default("func")
    tree = ast.parse(inspect.getsource(handler))
    called = {node.func.id if isinstance(node.func, ast.Name) else node.func.attr
              for node in ast.walk(tree) if isinstance(node, ast.Call)
              and isinstance(node.func, (ast.Name, ast.Attribute))}
    return {subcommand} | (called - {"print", "Path", "int", "str", "bool", "float"})


@pytest.mark.parametrize("subcommand", sorted({argv[0] for _, argv in FENCED if argv}))
def test_every_documented_command_is_run_by_a_test(subcommand):
    assert subcommand in RUN_BY, f"`bertlab {subcommand}` is in the docs but RUN_BY names no test that runs it"
    path, name = RUN_BY[subcommand].split("::")
    source_file = KIT_ROOT / path
    assert source_file.is_file(), f"`bertlab {subcommand}`: {path} does not exist"
    tree = ast.parse(source_file.read_text())
    functions = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    assert name in functions, f"`bertlab {subcommand}`: {path} has no function {name}"
    body = ast.get_source_segment(source_file.read_text(), functions[name])
    # The test calls the command (its name as a string, e.g. main(["release", ...])) or its dispatcher.
    mentioned = {n for n in dispatch_names(subcommand)
                 if re.search(rf"[\"']{re.escape(n)}[\"']|\b{re.escape(n)}\(", body)}
    assert mentioned, (f"{RUN_BY[subcommand]} does not run `bertlab {subcommand}`: it mentions none of "
                       f"{sorted(dispatch_names(subcommand))}")


# "four tasks", "the four files", "all four stubs": a count that `bertlab remove-task` or `new-task` would
# make wrong. Pages say "the tasks", "every task", "the task files" instead (docs/authoring.md).
_TASK_COUNT = re.compile(r"\b(?:two|three|four|five|six|seven|eight)\s+(?:small\s+)?"
                         r"(?:tasks|exercises|stubs|exercise files|task files)\b"
                         r"|\b(?:your|the|all)\s+(?:three|four|five|six)\s+files\b", re.I)  # "the two files": a pair


def test_no_page_counts_the_tasks_in_words():
    pages = sorted((KIT_ROOT / "docs").rglob("*.md")) + [KIT_ROOT / "README.md"]
    found = [f"{page.relative_to(KIT_ROOT)}: {match.group(0)!r}" for page in pages
             for match in _TASK_COUNT.finditer(page.read_text(encoding="utf-8"))]
    assert not found, ("pages that count the tasks in words (stale once a task is added or removed; say "
                       "'the tasks' or 'every task'):\n  " + "\n  ".join(found))
    assert _TASK_COUNT.search("Hand in your four files") and not _TASK_COUNT.search("the two files side by side")


def test_links_between_docs_resolve():
    broken = []
    for path in sorted((KIT_ROOT / "docs").rglob("*.md")) + [KIT_ROOT / "README.md"]:
        if not path.exists():
            continue
        for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            if not (path.parent / target.split("#")[0]).exists():
                broken.append(f"{path.relative_to(KIT_ROOT)} -> {target}")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_nothing_refers_to_files_outside_the_repo():
    """The contract lives in docs/: no tracked file names the design notes the kit was started from."""
    import subprocess

    outside = ["SPEC" + ".md", "DESIGN" + ".md", "../" + "shared/"]
    tracked = subprocess.run(["git", "ls-files"], cwd=KIT_ROOT, capture_output=True, text=True, check=True)
    hits = []
    for name in tracked.stdout.splitlines():
        path = KIT_ROOT / name
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        hits += [f"{name}: {word}" for word in outside if word in text]
    assert not hits, f"references to files outside the repo: {hits}"


def student_commands() -> list[str]:
    """The commands of the student bundle's `bertlab`: those the student CLI adds, no plugin."""
    import argparse

    from bertlab.cli import add_student_commands

    sub = argparse.ArgumentParser().add_subparsers()
    add_student_commands(sub)
    return list(sub.choices)


def test_pages_that_list_the_bundles_commands_list_them_all():
    # "lists only `check` and `lesson`" outlived the day `submit` joined them: every sentence that says
    # which commands the student bundle has names exactly the student CLI's commands.
    listed = re.compile(r"(?:has only|lists only|student commands \()((?:\s*`[a-z-]+`,?(?:\s*and)?)+)")
    want = sorted(student_commands())
    found = 0
    for page, text in doc_sources().items():
        for match in listed.finditer(" ".join(text.split())):
            found += 1
            assert sorted(re.findall(r"`([a-z-]+)`", match.group(1))) == want, \
                f"{page}: {match.group(0)!r} should name the student commands {want}"
    assert found >= 4  # README, instructor guide, troubleshooting, architecture, commands
