"""The lesson notebook: generated from grader/bertlab_grader/authoring/notebook.py, committed without outputs, and executed
top to bottom (nbclient, a real kernel, from the exercises folder as Jupyter would) with four states
of the work: every task done (the reference), none (the untouched stubs), only pooling, and all but
retrieval (the reference's files for the finished tasks, the stubs for the others).

Every run uses BERTLAB_FAST=1 (the training runs shrink to seconds) and one private cache directory:
the first run fills it (the fine-tuning's figures, and the slow steps on student code under the digest
of the files they use; the masked-LM and next-sentence heads ship with the kit and write nothing), the
later ones load from it (a rerun of the reference loads every slow step). Each step that waits for unfinished work must say so in one line naming exactly the
tasks it uses and lacks, and nothing may raise. The figures checked are the README's reference
figures for all-MiniLM-L6-v2; the lesson's own come from bertlab.headline.LESSON_FIGURES.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

import nbformat
import pytest

from bertlab.headline import LESSON_FIGURES
from bertlab.tasks import EXERCISE_TASKS
from bertlab_grader.authoring import notebook as notebook_source

KIT_ROOT = Path(__file__).resolve().parents[1]
# The lesson is written about this kit's four tasks, and these tests check its figures and texts; in a
# course that removed one (bertlab remove-task) they are skipped. That the lesson still runs there, the
# removed task's steps skipped with a line that says why, tests/test_task_authoring.py checks.
pytestmark = pytest.mark.tasks("cka", "pooling", "siamese", "retrieval")
NOTEBOOK_PATH = KIT_ROOT / "exercises" / notebook_source.NOTEBOOK_NAME

SBERT_COSINES = [0.585, 0.804, 0.547, 0.389, 0.403, 0.436, 0.389, 0.102]
SBERT_SPEARMAN, SBERT_MAE = 0.881, 0.285
SBERT_TOP3 = [0.560, 0.481, 0.454]
STSB_SBERT = 0.820
DAN_SPEARMAN, STSB_DAN = 0.452, 0.509  # our DAN (MiniLM's own input embeddings)


def test_committed_notebook_is_generated_from_its_source():
    committed = NOTEBOOK_PATH.read_text(encoding="utf-8")
    assert committed == notebook_source.notebook_text(), \
        "exercises/Week_7_encoder.ipynb is stale: run `python tools/build_exercises.py`"


def test_committed_notebook_has_no_outputs():
    notebook = nbformat.read(NOTEBOOK_PATH, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.id


def _execute(target: str, cache_dir: Path, save_to: Path):
    from nbclient import NotebookClient

    notebook = nbformat.read(NOTEBOOK_PATH, as_version=4)
    env = {"BERTLAB_IMPL": target, "BERTLAB_FAST": "1", "BERTLAB_CACHE_DIR": str(cache_dir),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    with pytest.MonkeyPatch.context() as patch:  # the kernel inherits this process's environment
        for key, value in env.items():
            patch.setenv(key, value)
        started = time.perf_counter()
        NotebookClient(notebook, timeout=900, kernel_name="python3", allow_errors=True,
                       resources={"metadata": {"path": str(NOTEBOOK_PATH.parent)}}).execute()
        seconds = time.perf_counter() - started
    nbformat.write(notebook, save_to)  # kept for debugging a failure
    print(f"\nnotebook against {target}: {seconds:.0f} s (executed copy: {save_to})")
    return notebook, seconds


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("bertlab-cache")


@pytest.fixture(scope="module")
def solutions_run(cache_dir, tmp_path_factory):
    return _execute("reference", cache_dir, tmp_path_factory.mktemp("nb") / "solutions.ipynb")


@pytest.fixture(scope="module")
def stubs_run(cache_dir, tmp_path_factory, solutions_run):  # after solutions_run: loads what it cached
    return _execute("exercises", cache_dir, tmp_path_factory.mktemp("nb") / "exercises.ipynb")


@pytest.fixture(scope="module")
def solutions_rerun(cache_dir, tmp_path_factory, solutions_run):  # the same code again: a warm run
    return _execute("reference", cache_dir, tmp_path_factory.mktemp("nb") / "solutions-again.ipynb")


def partly_done(folder: Path, done: Sequence[str]) -> Path:
    """An exercises folder where the tasks in ``done`` hold the reference's code and the others the stubs."""
    from bertlab_grader.core.locations import reference_sources

    shutil.copytree(KIT_ROOT / "exercises", folder)
    reference = reference_sources()
    for task in done:
        (folder / f"{task}.py").write_text(reference[f"{task}.py"], encoding="utf-8")
    return folder


@pytest.fixture(scope="module", params=[("pooling",), ("cka", "pooling", "siamese")],
                ids=["only-pooling", "all-but-retrieval"])
def partial_run(request, cache_dir, tmp_path_factory, solutions_run):
    folder = partly_done(tmp_path_factory.mktemp("partial") / "exercises", request.param)
    notebook, _ = _execute(str(folder), cache_dir, folder.parent / "partial.ipynb")
    return notebook, set(EXERCISE_TASKS) - set(request.param)


def _cell(notebook, tag: str):
    cells = [c for c in notebook.cells if tag in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, f"expected one cell tagged {tag!r}, found {len(cells)}"
    return cells[0]


def _stdout(notebook, tag: str) -> str:
    return "".join(o.text for o in _cell(notebook, tag).outputs if o.output_type == "stream" and o.name == "stdout")


def _errors(notebook) -> list[str]:
    problems = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        if cell.execution_count is None:
            problems.append(f"{cell.id}: not executed")
        for output in cell.outputs:
            if output.output_type == "error":
                problems.append(f"{cell.id}: {output.ename}: {output.evalue}")
            elif output.output_type == "stream" and "Traceback" in output.text:
                problems.append(f"{cell.id}: traceback printed: {output.text[-500:]}")
    return problems


# The tasks each step of a cell uses, one set per step in the order the cell runs them (a step that
# waits names those of its tasks that are not done, and only those).
STEP_TASKS: dict[str, list[set[str]]] = {
    "cka-untrained": [{"pooling", "cka"}],
    "cka-trained": [{"pooling", "cka"}],
    "cka-figure": [{"pooling", "cka"}],
    "cka-cls": [{"cka"}],
    "scratch": [{"pooling"}],
    "siamese": [{"siamese"}],
    "retrieval": [{"siamese", "retrieval"}, {"pooling", "retrieval"}],
    "sts-table": [{"siamese"}, {"pooling"}],
    "stsb": [{"siamese"}, {"pooling"}],
    "pca-figure": [{"siamese"}, {"pooling"}],
}
WAITING = re.compile(r"waiting for task\(s\): ([a-z, ]+)\)")


def _waiting_lines(notebook) -> dict[str, list[set[str]]]:
    """{cell tag: the task sets its "waiting for task(s): ...)" lines name}, cells that have such lines."""
    found = {}
    for cell in notebook.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if cell.cell_type != "code" or not tags:
            continue
        text = _stdout(notebook, tags[0])
        sets = [set(m.group(1).split(", ")) for m in WAITING.finditer(text)]
        if sets:
            found[tags[0]] = sets
            for line in text.splitlines():
                if "waiting for task(s):" in line:  # one line says it all: the tasks, the file, the check
                    assert "`bertlab check --task " in line, line
    return found


def _expected_waiting(missing: set[str]) -> dict[str, list[set[str]]]:
    expected = {}
    for tag, steps in STEP_TASKS.items():
        sets = [step & missing for step in steps if step & missing]
        if sets:
            expected[tag] = sets
    return expected


def _sorted_sets(by_tag: dict[str, list[set[str]]]) -> dict[str, list[list[str]]]:
    return {tag: sorted(sorted(s) for s in sets) for tag, sets in by_tag.items()}


def _number(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not found in:\n{text}"
    return float(match.group(1))


# --------------------------------------------------------------------------- against solutions

def test_solutions_run_top_to_bottom_without_errors(solutions_run):
    notebook, seconds = solutions_run
    assert _errors(notebook) == []
    assert "implementation: reference" in _stdout(notebook, "setup")


def test_cka_figures_are_drawn(solutions_run):
    notebook, _ = solutions_run
    for tag in ("cka-figure", "cka-cls"):
        assert any("image/png" in o.get("data", {}) for o in _cell(notebook, tag).outputs), tag
    untrained = _stdout(notebook, "cka-untrained")
    assert _number(r"smallest off-diagonal value: (\d\.\d+)", untrained) > 0.9  # flat
    trained = _stdout(notebook, "cka-trained")
    assert _number(r"embeddings vs layer 6: (\d\.\d+)", trained) < 0.8  # the staircase's far corner
    cls = _stdout(notebook, "cka-cls")
    assert "largest difference between any review's vector and the first one's: 0.0" in cls
    assert "row 0 of the [CLS] CKA matrix: [nan nan nan nan nan nan nan]" in cls


def test_architecture_table_counts_parameters(solutions_run):
    table = _stdout(solutions_run[0], "architecture")
    assert re.search(r"BERT-base\s+12\s+12\s+768\s+3072\s+30522\s+109,482,240", table), table
    assert re.search(r"all-MiniLM-L6-v2\s+6\s+12\s+384\s+1536\s+30522\s+22,713,216", table), table
    assert re.search(r"TinyBERT \(ours\)\s+4\s+4\s+384\s+1536\s+30522", table), table


def test_masked_lm_and_next_sentence_cells_show_predictions(solutions_run):
    notebook, _ = solutions_run
    fill = _stdout(notebook, "mlm")
    assert "masked-LM:" in fill and fill.count("Sentence: ") == 3
    assert len(re.findall(r"^\s+\[0\.\d{3}\] ", fill, flags=re.M)) == 9  # top-3 for each sentence
    probabilities = [float(p) for p in re.findall(r"P\(B follows A\) = (\d\.\d{3})", _stdout(notebook, "nsp"))]
    assert len(probabilities) == 2 and all(0 <= p <= 1 for p in probabilities)
    assert len(re.findall(r" 0\.\d{3}", _stdout(notebook, "early-late"))) == 3 * 5


def test_finetune_cells_report_both_models(solutions_run):
    table = _stdout(solutions_run[0], "finetune-table")
    assert "all-MiniLM-L6-v2, fine-tuned" in table and "TinyBERT from scratch" in table and "(not run)" not in table
    assert any("image/png" in o.get("data", {}) for o in _cell(solutions_run[0], "finetune-table").outputs)


def test_sts_table_matches_the_reference_figures(solutions_run):
    text = _stdout(solutions_run[0], "sts-table")
    rows = re.findall(r"^\s*(\d\.\d\d)\s+(-?\d\.\d{3})\s+(-?\d\.\d{3})\s+'", text, flags=re.M)
    assert len(rows) == 8, text
    assert [float(sbert) for _, sbert, _ in rows] == pytest.approx(SBERT_COSINES, abs=1e-3)
    assert _number(r"SBERT: Spearman (-?\d\.\d{3})", text) == pytest.approx(SBERT_SPEARMAN, abs=1e-3)
    assert _number(r"SBERT: Spearman -?\d\.\d{3}, MAE (\d\.\d{3})", text) == pytest.approx(SBERT_MAE, abs=1e-3)
    assert _number(r"DAN: Spearman (-?\d\.\d{3})", text) == pytest.approx(DAN_SPEARMAN, abs=1e-3)


def test_retrieval_matches_the_reference_figures(solutions_run):
    text = _stdout(solutions_run[0], "retrieval")
    sbert_block = text.split("SBERT top-3:")[1].split("DAN baseline top-3:")[0]
    scores = [float(s) for s in re.findall(r"\[(\d\.\d{3})\]", sbert_block)]
    assert scores == pytest.approx(SBERT_TOP3, abs=1e-3)
    assert "Cheap special effects" in sbert_block.splitlines()[1]
    assert len(re.findall(r"\[\d\.\d{3}\]", text.split("DAN baseline top-3:")[1])) == 3


def test_sts_benchmark_and_pca(solutions_run):
    notebook, _ = solutions_run
    text = _stdout(notebook, "stsb")
    assert _number(r"SBERT: Spearman (\d\.\d{3})", text) == pytest.approx(STSB_SBERT, abs=1e-3)
    assert _number(r"DAN: Spearman (\d\.\d{3})", text) == pytest.approx(STSB_DAN, abs=1e-3)
    pca = _stdout(notebook, "pca-figure")
    assert _number(r"SBERT \(all-MiniLM-L6-v2\): separation (\d+\.\d+)", pca) > _number(r"DAN baseline: separation (\d+\.\d+)", pca)
    assert any("image/png" in o.get("data", {}) for o in _cell(notebook, "pca-figure").outputs)


def test_solutions_progress_says_everything_runs(solutions_run):
    """Every task of the reference runs; a task the lesson has no call for (one an instructor added
    with new-task, docs/authoring.md "Use the new task in the lesson") is read instead: "written"."""
    text = _stdout(solutions_run[0], "progress")
    status = dict(re.findall(r"^  (\w+) +(.+)$", text, flags=re.M))
    assert set(status) == set(EXERCISE_TASKS), text
    called = {"cka", "pooling", "siamese", "retrieval"}  # the tasks lesson._call_once calls
    assert all(status[task] == ("runs" if task in called else "written") for task in EXERCISE_TASKS), text
    assert ("Every task runs." if set(EXERCISE_TASKS) <= called else "Every task is written.") in text, text
    assert _waiting_lines(solutions_run[0]) == {}


def test_the_last_table_puts_every_lesson_figure_beside_this_run(solutions_run):
    text = _stdout(solutions_run[0], "lesson-figures")
    blocks = text.split("\n- ")[1:]
    assert len(blocks) == len(LESSON_FIGURES), text
    for figure, block in zip(LESSON_FIGURES, blocks):
        assert block.startswith(figure.label), block
        assert f"lesson:   {figure.lesson}" in block
        this_run = re.search(r"this run: (.*)", block).group(1)
        assert not this_run.startswith("not measured"), block
        # Same model and data as the lesson: the same numbers, no note. Otherwise a note says why.
        assert ("why:" in block) != (figure.same_setup and figure.key != "finetune"), block
    assert "this run: 109,482,240" in text
    assert f"this run: {SBERT_SPEARMAN:.3f} / {SBERT_MAE:.3f}" in text
    assert "this run: " + ", ".join(f"{s:.3f}" for s in SBERT_TOP3) in text
    assert re.search(r"this run: flat: 0\.9\d\d-", text) and re.search(r"this run: staircase: ", text)
    assert "BERTLAB_FAST=1" in text  # the fine-tuning row says why its accuracies mean nothing here


# --------------------------------------------------------------------------- against the stubs

def test_stubs_run_completes_and_says_which_task_is_next(stubs_run):
    notebook, _ = stubs_run
    assert _errors(notebook) == []
    progress = _stdout(notebook, "progress")
    assert "Next: task cka. Open exercises/cka.py, implement linear_cka" in progress, progress
    assert "not implemented: masked_mean_pool" in progress
    untrained = _stdout(notebook, "cka-untrained")
    assert "Skipped (waiting for task(s): cka, pooling): task cka is not implemented yet: open exercises/cka.py, " \
           "replace the `raise NotImplementedYet(...)` in linear_cka with your code, then run " \
           "`bertlab check --task cka`." in untrained
    assert "usually about" not in _stdout(notebook, "scratch")  # stopped before announcing a training run
    assert "TinyBERT from scratch                   (not run yet: needs task(s) pooling)" in \
        _stdout(notebook, "finetune-table")
    # Steps that need no student code still run in full; the fine-tuning's figures come from the cache.
    assert "109,482,240" in _stdout(notebook, "architecture")
    assert _stdout(notebook, "mlm").count("Sentence: ") == 3
    assert "loaded from the kit's cache" in _stdout(notebook, "finetune")


def test_every_waiting_step_names_exactly_the_tasks_it_lacks(stubs_run, partial_run):
    for notebook, missing in ((stubs_run[0], set(EXERCISE_TASKS)), partial_run):
        assert _errors(notebook) == []
        assert _sorted_sets(_waiting_lines(notebook)) == _sorted_sets(_expected_waiting(missing)), missing


def test_the_last_table_says_what_each_missing_figure_waits_for(stubs_run, partial_run):
    for notebook, missing in ((stubs_run[0], set(EXERCISE_TASKS)), partial_run):
        text = _stdout(notebook, "lesson-figures")
        for figure, block in zip(LESSON_FIGURES, text.split("\n- ")[1:]):
            lacking = [t for t in EXERCISE_TASKS if t in set(figure.uses) & missing]
            if figure.key == "finetune":  # the fine-tuned model runs anyway; the from-scratch one needs pooling
                assert ("from scratch: waiting for task(s) pooling" in block) == ("pooling" in missing), block
            elif lacking:
                assert f"this run: not measured: waiting for task(s) {', '.join(lacking)}\n" in block + "\n", block
            else:
                assert "not measured" not in block, block


def test_the_cache_the_notebook_fills_is_reported_and_cleared(solutions_run, cache_dir, tmp_path, monkeypatch):
    from bertlab.cli import main

    copy = tmp_path / "cache"
    shutil.copytree(cache_dir, copy)
    written = sorted(p.name for p in copy.iterdir())
    assert any(name.startswith("finetune-") for name in written), written
    setup = _stdout(solutions_run[0], "setup") + _stdout(solutions_run[0], "progress")
    assert "--clear-cache" in setup and str(cache_dir) in setup
    monkeypatch.setenv("BERTLAB_CACHE_DIR", str(copy))
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["lesson", "--clear-cache"]) == 0
    text = out.getvalue()
    for name in written:
        assert re.search(rf"^  {re.escape(name)} +\d+(\.\d)? (KB|MB)$", text, flags=re.M), text
    assert re.search(r"^Freed \d+(\.\d)? (KB|MB)\.", text, flags=re.M), text
    assert not copy.exists()


def test_a_rerun_with_the_same_code_shows_what_the_first_run_kept(solutions_run, solutions_rerun):
    # The slow steps (fine-tuning, TinyBERT on the reference's pooling.py, SBERT and the DAN on the STS
    # benchmark) were kept by the first run under the digest of the files they use: the same files, so
    # nothing is computed again and every figure is the same.
    first, again = solutions_run[0], solutions_rerun[0]
    assert _errors(again) == []
    for tag in ("finetune", "scratch", "stsb"):
        assert "loaded from the kit's cache" in _stdout(again, tag), tag
        assert "usually about" not in _stdout(again, tag), tag
    assert _stdout(again, "stsb").count("loaded from the kit's cache") == 2  # SBERT and the DAN
    assert "kept in the kit's cache" in _stdout(first, "scratch") and "usually about" in _stdout(first, "scratch")
    numbers = lambda text: re.findall(r"\d+\.\d{3}", text)  # noqa: E731
    for tag in ("stsb", "lesson-figures"):
        assert numbers(_stdout(again, tag)) == numbers(_stdout(first, tag)), tag
    assert "TinyBERT from scratch" in _stdout(again, "finetune-table") and "(cached)" in _stdout(again, "finetune-table")


def test_the_default_fine_tuning_shows_the_figures_shipped_with_the_kit(tmp_path, monkeypatch, capsys):
    # The finetune cell as the notebook runs it by default (not BERTLAB_FAST): the run it asks for is the
    # one the kit ships, so nothing trains.
    from bertlab import datasets, finetune, lesson

    def no_training(*args, **kwargs):
        raise AssertionError("the default fine-tuning trained instead of showing the shipped figures")

    monkeypatch.setenv("BERTLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(finetune, "finetune_classifier", no_training)
    cell = _cell(nbformat.read(NOTEBOOK_PATH, as_version=4), "finetune")
    namespace = {"FAST": False, "datasets": datasets, "finetune": finetune, "lesson": lesson}
    exec(compile(cell.source, "finetune cell", "exec"), namespace)
    assert namespace["finetuned"]["source"] == "kit" and namespace["finetuned"]["steps"] == 63
    out = capsys.readouterr().out
    assert "computed when the kit was built" in out and "RETRAIN = True" in out
    assert not any(tmp_path.iterdir()), "showing shipped figures writes nothing to the cache"


# --------------------------------------------------------------------------- `bertlab lesson`

@pytest.mark.slow  # (over 5 s each, or many cases: the fast loop leaves it to the whole suite)
def test_lesson_command_on_the_stubs_runs_on_and_names_each_waiting_step_in_one_line(tmp_path):
    shutil.copytree(KIT_ROOT / "exercises", tmp_path / "exercises")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "bertlab.cli", "lesson", "--quick"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr  # unfinished work is not an error
    assert "Traceback" not in done.stdout + done.stderr and "internal error" not in done.stderr
    lines = [line for line in done.stdout.splitlines() if "waiting for task(s):" in line]
    assert len(lines) >= 4, done.stdout
    for line in lines:
        task = re.search(r"task (\w+) is not implemented yet: open exercises/(\w+)\.py", line)
        assert task and task.group(1) == task.group(2), line
        assert f"`bertlab check --task {task.group(1)}`" in line
    assert "this run: 109,482,240" in done.stdout  # what needs no student code is still measured
