"""`bertlab check` and `bertlab submit` from a notebook cell: ``bertlab.check("pooling")``,
``bertlab.check_all()``, ``bertlab.submit()`` (src/bertlab/check/notebook.py, src/bertlab/handin/notebook.py).

The cheap tests read the result on recorded events and call what needs no test run; the slow ones
execute a real notebook with nbclient in a workspace of its own and hand in from it.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bertlab.check.run import summarise_events
from bertlab.tasks import ASSIGNMENT, EXERCISE_FILES, EXERCISE_TASKS
from bertlab_grader.core.locations import REFERENCE_DIR

KIT_ROOT = Path(__file__).resolve().parents[1]


def python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


# ---------------------------------------------------------------------------------------------
# The calls, without a test run


@pytest.mark.parametrize("first", ["the package's module", "the call"])
def test_bertlab_check_is_the_package_and_a_call_whichever_is_imported_first(first, tmp_path):
    """`bertlab.check` is the bertlab.check package, callable: importing one of its modules first
    (which sets the attribute) and calling it first give the same object. `import bertlab` loads none
    of it, nor torch. Without a workspace, a call says so (the command's message, and the notebook's
    keyword for --dir) and raises nothing."""
    module_first = "import bertlab.check.run" if first == "the package's module" else ""
    done = python(f"""
        import sys
        import bertlab
        assert "bertlab.check" not in sys.modules and "torch" not in sys.modules, sorted(sys.modules)
        {module_first}
        result = bertlab.check("{EXERCISE_TASKS[0]}")
        import bertlab.check.run
        assert bertlab.check is sys.modules["bertlab.check"] and callable(bertlab.check)
        assert bertlab.check.run.run_public_tests and bertlab.check_all and bertlab.submit
        import json
        print(json.dumps([result.ok, repr(result), result._repr_html_()]))
    """, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    ok, text, page = json.loads(done.stdout)
    assert ok is False and "Traceback" not in done.stdout + done.stderr
    assert text.startswith("bertlab check: no exercises found") and 'directory="path/to/exercises"' in text
    assert "no exercises found" in page and 'directory="path/to/exercises"' in page  # quotes need no escape


def test_a_task_that_does_not_exist_is_named_with_the_ones_that_do():
    import bertlab

    result = bertlab.check("poolin")
    assert not result.ok and result.run is None
    assert "there is no task 'poolin'" in repr(result)
    for task in EXERCISE_TASKS:
        assert f'bertlab.check("{task}")' in repr(result)
    assert "&#x27;poolin&#x27;" not in result._repr_html_() and "poolin" in result._repr_html_()


# ---------------------------------------------------------------------------------------------
# What a result shows, on recorded events

FIRST, SECOND = EXERCISE_TASKS[0], EXERCISE_TASKS[1]
# A message with the characters HTML must escape, and a shape mistake (its hint: "Shapes first").
MESSAGE = "f(x) has shape [2, 1, 4]; expected [2, 4] <for a mask & a batch>."


def recorded_run():
    """A run of two tasks: the first passes its one test, the second fails two of three."""
    tests = [(FIRST, "test_a"), (SECOND, "test_b"), (SECOND, "test_c"), (SECOND, "test_d")]
    events = [{"event": "collected", "tests": [{"nodeid": f"test_{t}.py::{n}", "name": n, "task": t,
                                                "doc": f"what {n} checks"} for t, n in tests]}]
    outcomes = {"test_a": ("passed", ""), "test_b": ("failed", MESSAGE), "test_c": ("passed", ""),
                "test_d": ("failed", "another failure: 1 < 2 & 3 > 2")}
    for task, name in tests:
        outcome, message = outcomes[name]
        events.append({"event": "result", "nodeid": f"test_{task}.py::{name}", "outcome": outcome, "stub": False,
                       "message": message, "where": f"exercises/{task}.py:3 in f" if message else ""})
    events.append({"event": "finished", "exitstatus": 1})
    return summarise_events(KIT_ROOT, [FIRST, SECOND], events)


def result_of(run, verbose: bool = False, progress=None):
    from bertlab.check.display import heading
    from bertlab.check.notebook import CheckResult

    return CheckResult(run, progress, verbose, heading(KIT_ROOT, run.tasks, "exercises/"))


class _Tags(HTMLParser):
    """Every element opened is closed, in order (the void <br> aside)."""

    def __init__(self):
        super().__init__()
        self.open: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag != "br":
            self.open.append(tag)

    def handle_endtag(self, tag):
        if not self.open or self.open.pop() != tag:
            self.errors.append(tag)


def test_the_html_shows_the_table_the_escaped_message_the_hint_and_the_next_step():
    from bertlab.progress import empty_progress

    page = result_of(recorded_run(), progress=empty_progress())._repr_html_()
    tags = _Tags()
    tags.feed(page)
    assert tags.errors == [] and tags.open == [], (tags.errors, tags.open)
    rows = re.findall(r"<tr>(.*?)</tr>", page)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in rows[1:]]  # the heading row has <th>s
    assert cells == [[FIRST, "1/1", "passed", ""], [SECOND, "1/3", "failed", "test_b"]], cells
    assert re.search(r'<td style="[^"]*text-align: right[^"]*">1/3</td>', page)  # numbers right-aligned
    # The message as the test said it, escaped: no tag of the student's making reaches the page.
    assert html.escape(MESSAGE, quote=False) in page and "<for a mask" not in page
    assert "first failure: test_b (test_" in page and f"your code: exercises/{SECOND}.py:3 in f" in page
    assert "<b>Hint:</b> Shapes first" in page
    assert f"Progress: 0 of {len(EXERCISE_TASKS)} tasks passed" in page
    # The next step, as the call a notebook cell makes (the terminal's command is for the terminal).
    assert f'then run <code>bertlab.check("{SECOND}")</code>' in page and "--task" not in page
    assert "(not everything passes yet;" in page
    assert "another failure" not in page  # only the first failure, unless verbose


def test_verbose_lists_every_test_and_the_other_failures_escaped():
    page = result_of(recorded_run(), verbose=True)._repr_html_()
    for mark, name in ((".", "test_a"), ("F", "test_b"), (".", "test_c"), ("F", "test_d")):
        assert f"{mark} {name}  - what {name} checks" in page
    assert "another failure: 1 &lt; 2 &amp; 3 &gt; 2" in page


def test_the_plain_text_is_what_bertlab_check_prints_after_its_run():
    text = repr(result_of(recorded_run()))
    assert text.startswith(f"bertlab check: public tests of {FIRST}, {SECOND} on exercises/ in {KIT_ROOT}\n")
    assert re.search(rf"^{SECOND}\s+1/3\s+failed$", text, re.M), text
    assert f"{SECOND}: failed\n  first failure: test_b" in text and f"    {MESSAGE}\n  Hint: Shapes first" in text
    assert text.rstrip().splitlines()[-2].startswith(f"Next: fix task {SECOND}")


# ---------------------------------------------------------------------------------------------
# A real notebook: check cells in a workspace of their own


def workspace(folder: Path, files: dict[str, bytes]) -> Path:
    (folder / "exercises").mkdir(parents=True)
    for name, data in files.items():
        (folder / "exercises" / name).write_bytes(data)
    return folder


def reference_files() -> dict[str, bytes]:
    return {name: (REFERENCE_DIR / name).read_bytes() for name in EXERCISE_FILES}


def mutant_files(name: str) -> dict[str, bytes]:
    """The four files of a mutant of the bank: the reference with one realistic mistake."""
    from bertlab_grader.mutants.bank import load_bank

    [entry] = [e for e in load_bank(only=name, kinds=("mutant",)) if e.name == name]
    return {path.name: path.read_bytes() for path in entry.path.iterdir()}


def first_failure_message(output: str, task: str) -> str:
    """The message `bertlab check` prints under '<task>: failed' (indented by four spaces)."""
    block = output.split(f"\n{task}: failed\n", 1)[1]
    lines = []
    for line in block.splitlines():
        if line.startswith("    "):
            lines.append(line[4:])
        elif lines:
            break
    assert lines, output
    return "\n".join(lines)


def execute(cells: list[str], folder: Path):
    """A notebook of ``cells``, executed with a real kernel whose working directory is ``folder``."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    NotebookClient(notebook, timeout=600, kernel_name="python3", allow_errors=False,
                   resources={"metadata": {"path": str(folder)}}).execute()
    return notebook


def outputs(cell, kind: str) -> str:
    return "".join(o.get("data", {}).get(kind, "") for o in cell.outputs if o.output_type == "execute_result")


@pytest.mark.slow
@pytest.mark.tasks("pooling")
def test_check_cells_show_the_commands_first_failure_and_a_pass_and_record_progress(tmp_path, monkeypatch):
    """A notebook in a workspace whose pooling ignores the mask: its check cell shows, as HTML, the
    first failure `bertlab check --task pooling` prints there; then, in a workspace with the reference,
    the same call shows the task passing. Each check is recorded as the command records it, nothing
    is written beside the workspaces (Hypothesis's folder is in the kit's cache), and the kernel never
    imported the student's code."""
    task = "pooling"
    monkeypatch.setenv("BERTLAB_CACHE_DIR", str(tmp_path / "cache"))  # the kernel and the CLI inherit it
    failing = workspace(tmp_path / "failing", mutant_files("pool_mask_ignored"))
    passing = workspace(tmp_path / "passing", reference_files())
    environ = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    environ.pop("NO_COLOR", None)
    command = subprocess.run([sys.executable, "-m", "bertlab.cli", "check", "--task", task], cwd=failing,
                             env=environ, capture_output=True, text=True, timeout=600)
    assert command.returncode == 1, command.stdout + command.stderr
    message = first_failure_message(command.stdout, task)

    notebook = execute([
        f'import bertlab\nbertlab.check("{task}")',
        f'import os\nos.chdir({str(passing)!r})\nbertlab.check("{task}")',
        f"import sys\nsorted(name for name, module in sys.modules.items()\n"
        f"       if str(getattr(module, '__file__', None) or '').startswith({str(tmp_path)!r}))",
    ], failing / "exercises")
    failed_page, passed_page = outputs(notebook.cells[0], "text/html"), outputs(notebook.cells[1], "text/html")
    assert html.escape(message, quote=False) in failed_page, (message, failed_page)
    assert f"{task}: failed" in failed_page and "<b>Hint:</b>" in failed_page and ">Next: " in failed_page
    assert re.search(rf">{task}</td>.*?>0/\d+</td>.*?>failed</td>", failed_page)
    assert re.search(rf">{task}</td>.*?>(\d+)/\1</td>.*?>passed</td>", passed_page), passed_page
    assert "all selected tasks pass" in passed_page and f"{task}: failed" not in passed_page
    assert re.search(rf"^{task}\s+\d+/\d+\s+failed$", outputs(notebook.cells[0], "text/plain"), re.M)
    assert outputs(notebook.cells[2], "text/plain") == "[]"  # no student module in the kernel

    for folder, status in ((failing, "failed"), (passing, "passed")):
        recorded = json.loads((folder / ".bertlab" / "progress.json").read_text())
        assert recorded["tasks"][task]["status"] == status
        assert sorted(p.name for p in folder.iterdir()) == [".bertlab", "exercises"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "failing", "passing"]
    assert [p.name for p in (tmp_path / "cache").iterdir() if p.name.startswith("hypothesis-")]


# ---------------------------------------------------------------------------------------------
# Handing in


def stub_files() -> dict[str, bytes]:
    return {name: (KIT_ROOT / "exercises" / name).read_bytes() for name in EXERCISE_FILES}


def test_submit_refuses_a_file_that_does_not_import_and_keeps_the_earlier_archive(tmp_path, monkeypatch):
    import bertlab

    files = stub_files()
    broken = EXERCISE_FILES[1]
    files[broken] += b"\ndef oops(:\n"
    root = workspace(tmp_path / "work", files)
    archive = root / f"{ASSIGNMENT}-submission.zip"
    archive.write_bytes(b"an earlier hand-in")
    monkeypatch.chdir(root / "exercises")
    result = bertlab.submit()
    assert result.refused and not result.ok and result.archive is None
    assert f"{broken}, line {len(files[broken].splitlines())}: SyntaxError" in result.said, result.said
    assert "nothing was written" in result.said and "bertlab.submit(anyway=True)" in result.said
    assert "Traceback" not in result.said
    assert archive.read_bytes() == b"an earlier hand-in"
    page = result._repr_html_()
    assert "#c62828" in page and "SyntaxError" in page and "Archive:" not in page


@pytest.mark.slow
def test_submit_packs_the_saved_files_and_says_where_the_archive_went(tmp_path, monkeypatch):
    import bertlab

    root = workspace(tmp_path / "work", stub_files())
    monkeypatch.setenv("BERTLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(root / "exercises")
    result = bertlab.submit()
    archive = root / f"{ASSIGNMENT}-submission.zip"
    assert result.ok and result.archive == archive.resolve(), result.said
    with zipfile.ZipFile(archive) as packed:
        assert sorted(packed.namelist()) == sorted([*EXERCISE_FILES, "MANIFEST.json"])
        assert packed.read(EXERCISE_FILES[0]) == (root / "exercises" / EXERCISE_FILES[0]).read_bytes()
    assert result.said.count("does not pass yet") == len(EXERCISE_TASKS)  # the stubs: packed, with a warning
    page = result._repr_html_()
    assert f"Archive: <code>{html.escape(str(archive.resolve()))}</code>" in page and "#2e7d32" in page
