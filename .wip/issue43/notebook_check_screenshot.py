"""Issue 43's acceptance: a screenshot of a notebook check cell's output for a failing task.

    python .wip/issue43/notebook_check_screenshot.py OUTDIR

Builds a student workspace whose pooling ignores the mask (the bank's pool_mask_ignored), executes a
notebook with one cell, `import bertlab; bertlab.check("pooling")`, with nbclient in that workspace,
renders it to HTML with nbconvert and takes a screenshot with the system's headless Chromium:
OUTDIR/notebook_check_failing.png (and the .html beside it).
"""
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbconvert import HTMLExporter

from bertlab_grader.mutants.bank import load_bank

out = Path(sys.argv[1]).resolve()
shutil.rmtree(out, ignore_errors=True)
(out / "workspace" / "exercises").mkdir(parents=True)
[entry] = [e for e in load_bank(only="pool_mask_ignored", kinds=("mutant",)) if e.name == "pool_mask_ignored"]
for path in entry.path.iterdir():
    shutil.copy(path, out / "workspace" / "exercises" / path.name)
notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('import bertlab\nbertlab.check("pooling")')])
NotebookClient(notebook, timeout=600, kernel_name="python3",
               resources={"metadata": {"path": str(out / "workspace" / "exercises")}}).execute()
page, _ = HTMLExporter(template_name="lab").from_notebook_node(notebook)
(out / "notebook_check_failing.html").write_text(page, encoding="utf-8")
subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                "--window-size=1100,1300", f"--screenshot={out / 'notebook_check_failing.png'}",
                (out / "notebook_check_failing.html").as_uri()], check=True, capture_output=True, timeout=120)
print(out / "notebook_check_failing.png")
