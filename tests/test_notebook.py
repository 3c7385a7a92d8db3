"""The lesson notebook: generated from bertlab_grader/notebook.py, committed without outputs, and executed
top to bottom (nbclient, a real kernel, from the exercises folder as Jupyter would) against the
reference and against the untouched stubs.

Both runs use BERTLAB_FAST=1 (the two training runs shrink to seconds) and a private cache directory
(the small masked-LM of the fast recipe is trained by the first run and reused by the second).
The figures checked are the README's reference figures for all-MiniLM-L6-v2.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import nbformat
import pytest

from bertlab_grader import notebook as notebook_source

KIT_ROOT = Path(__file__).resolve().parents[1]
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
def stubs_run(cache_dir, tmp_path_factory, solutions_run):  # after solutions_run: reuses its cached masked-LM
    return _execute("exercises", cache_dir, tmp_path_factory.mktemp("nb") / "exercises.ipynb")


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
    assert "All four tasks run" in _stdout(solutions_run[0], "progress")


# --------------------------------------------------------------------------- against the stubs

def test_stubs_run_completes_and_says_which_task_is_next(stubs_run):
    notebook, _ = stubs_run
    assert _errors(notebook) == []
    progress = _stdout(notebook, "progress")
    assert "Next: task cka. Open exercises/cka.py, implement linear_cka" in progress, progress
    assert "not implemented: masked_mean_pool" in progress
    untrained = _stdout(notebook, "cka-untrained")
    assert "Task pooling is not implemented yet: open exercises/pooling.py, replace the `raise " \
           "NotImplementedYet(...)` in masked_mean_pool" in untrained
    assert "`bertlab check --task pooling`" in untrained
    assert "Skipped: this step uses a result from a step above that is waiting for task(s): pooling" in untrained
    assert "Task cka is not implemented yet" in _stdout(notebook, "cka-cls")
    assert "Task siamese is not implemented yet" in _stdout(notebook, "siamese")
    assert "Task pooling is not implemented yet" in _stdout(notebook, "scratch")
    assert "(not run)" in _stdout(notebook, "finetune-table")  # the fine-tuned model still ran
    # Steps that need no student code still run in full.
    assert "109,482,240" in _stdout(notebook, "architecture")
    assert _stdout(notebook, "mlm").count("Sentence: ") == 3


# --------------------------------------------------------------------------- `bertlab lesson`

def test_lesson_command_on_the_stubs_names_the_task_to_write_in_one_line(tmp_path):
    import os
    import shutil
    import subprocess
    import sys

    shutil.copytree(KIT_ROOT / "exercises", tmp_path / "exercises")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "bertlab.cli", "lesson", "--quick"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("bertlab lesson:")]
    assert len(lines) == 1, done.stderr
    line = lines[0]
    task = re.search(r"task (\w+) is not implemented yet: (\w+) in exercises/(\w+)\.py", line)
    assert task and task.group(1) == task.group(3), line
    assert f"`bertlab check --task {task.group(1)}`" in line
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
