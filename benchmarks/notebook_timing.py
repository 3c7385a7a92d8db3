"""How long the lesson notebook takes, cell by cell and section by section: the figures of docs/student-guide.md.

    python benchmarks/notebook_timing.py [--impl reference|DIR] [--cache DIR] [--runs 2] [--fast] [--save DIR]

Executes exercises/Week_7_encoder.ipynb (nbclient, a fresh Jupyter kernel, as a student's "Run all")
``--runs`` times in a row with one kit cache folder: the first run starts from an empty cache (the
folder is emptied first), the later ones find what the first kept. ``--impl`` is what the notebook
runs (``BERTLAB_IMPL``): ``reference`` (the default: correct student code) or an exercises folder.

Prints, per run, the wall time of each section (the cells between two "## " headings; the kernel's
own start is not counted) and of the whole run, the CPU time of the kernel's process, and the size of
the cache afterwards. Then every code cell's seconds, one column per run (the first: empty cache; the
others: warm), the totals, and each run's five most expensive cells; then a JSON line with the same
figures. A cell that fails is named (the run still counts: the notebook is written to go on). Never
asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = KIT_ROOT / "exercises" / "Week_7_encoder.ipynb"


def sections(notebook) -> list[tuple[str, list]]:
    """[(section title, its code cells)] in order; cells before the first "## " heading are "setup"."""
    found: list[tuple[str, list]] = [("setup", [])]
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            heading = re.search(r"^## (.+)$", cell.source, re.MULTILINE)
            if heading:
                found.append((heading.group(1).strip(), []))
        elif cell.cell_type == "code":
            found[-1][1].append(cell)
    return [(title, cells) for title, cells in found if cells]


def cell_name(cell, index: int) -> str:
    """A code cell's name in the tables: its id (``c05-finetune``: position and first tag), else its index."""
    return cell.get("id") or f"cell {index}"


def cell_seconds(cell) -> float:
    """Wall seconds the kernel spent on one cell (nbclient's recorded timestamps)."""
    timing = cell.get("metadata", {}).get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not (start and end):
        return 0.0
    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
    return (parse(end) - parse(start)).total_seconds()


CPU_PROBE = ("import resource as _r\n"
             "_s, _c = _r.getrusage(_r.RUSAGE_SELF), _r.getrusage(_r.RUSAGE_CHILDREN)\n"
             "print('kernel CPU seconds', _s.ru_utime + _s.ru_stime + _c.ru_utime + _c.ru_stime)")


def kernel_cpu_seconds(cell) -> float:
    """The CPU seconds the probe cell (``CPU_PROBE``, run last) printed: the kernel and its children."""
    for output in cell.outputs:
        match = re.search(r"kernel CPU seconds ([0-9.]+)", output.get("text", ""))
        if match:
            return float(match.group(1))
    return float("nan")


def run_once(impl: str, cache: Path, fast: bool, save: Path | None = None) -> dict:
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    os.environ.update({"BERTLAB_IMPL": impl, "BERTLAB_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1",
                       "TRANSFORMERS_OFFLINE": "1"})
    os.environ.pop("BERTLAB_FAST", None)
    if fast:
        os.environ["BERTLAB_FAST"] = "1"
    client = NotebookClient(notebook, timeout=3600, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    started = time.perf_counter()
    with client.setup_kernel():
        kernel_started = time.perf_counter()
        for index, cell in enumerate(notebook.cells):
            client.execute_cell(cell, index)
        finished = time.perf_counter()
        notebook.cells.append(nbformat.v4.new_code_cell(CPU_PROBE))
        client.execute_cell(notebook.cells[-1], len(notebook.cells) - 1)
        cpu = kernel_cpu_seconds(notebook.cells.pop())
    if save is not None:  # the executed notebook, outputs and all, to read what a run printed
        save.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, save)
    failed = [c.get("metadata", {}).get("tags", ["?"])[0] for c in notebook.cells if c.cell_type == "code"
              and any(o.get("output_type") == "error" for o in c.outputs)]
    by_section = {title: round(sum(cell_seconds(c) for c in cells), 1) for title, cells in sections(notebook)}
    by_cell = {cell_name(c, i): round(cell_seconds(c), 2) for i, c in enumerate(notebook.cells) if c.cell_type == "code"}
    cache_bytes = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file()) if cache.exists() else 0
    return {"sections_s": by_section, "each_cell_s": by_cell, "cells_s": round(sum(by_section.values()), 1),
            "kernel_start_s": round(kernel_started - started, 1), "wall_s": round(finished - started, 1),
            "kernel_cpu_s": round(cpu, 1), "cache_bytes": cache_bytes, "failed_cells": failed}


def run_label(run: int) -> str:
    return "cold" if run == 0 else "warm" if run == 1 else f"warm {run}"


def print_cells(results: list[dict], top: int = 5) -> None:
    """Each code cell's seconds, one column per run, the totals, then each run's ``top`` most expensive cells."""
    names = list(results[0]["each_cell_s"])
    header = "".join(f"{run_label(r):>10}" for r in range(len(results)))
    print(f"\neach cell, wall seconds (run 1 from an empty cache):\n  {'cell':<40}{header}")
    for name in names:
        print(f"  {name:<40}" + "".join(f"{r['each_cell_s'].get(name, 0.0):>10.2f}" for r in results))
    print(f"  {'total of the cells':<40}" + "".join(f"{r['cells_s']:>10.1f}" for r in results))
    print(f"  {'whole run (kernel start included)':<40}" + "".join(f"{r['wall_s']:>10.1f}" for r in results))
    for run, result in enumerate(results):
        costly = sorted(result["each_cell_s"].items(), key=lambda item: -item[1])[:top]
        print(f"\nthe {top} most expensive cells, run {run + 1} ({run_label(run)}): "
              + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in costly))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", default="reference", help="reference (default) or an exercises folder")
    parser.add_argument("--cache", type=Path, help="the kit cache folder to use (emptied first; default: a temporary one)")
    parser.add_argument("--runs", type=int, default=2, help="runs in a row; the first starts from an empty cache")
    parser.add_argument("--fast", action="store_true", help="BERTLAB_FAST=1 (the kit's tests' setting)")
    parser.add_argument("--save", type=Path, help="write each run's executed notebook into this folder (run-1.ipynb, ...)")
    args = parser.parse_args(argv)
    cache = args.cache or Path(tempfile.mkdtemp(prefix="bertlab-nb-cache-"))
    shutil.rmtree(cache, ignore_errors=True)
    results = []
    for run in range(args.runs):
        result = run_once(args.impl, cache, args.fast, args.save / f"run-{run + 1}.ipynb" if args.save else None)
        results.append(result)
        label = "empty cache" if run == 0 else "warm cache"
        print(f"\nrun {run + 1} ({label}), implementation {args.impl}{', BERTLAB_FAST=1' if args.fast else ''}:")
        for title, seconds in result["sections_s"].items():
            print(f"  {title[:60]:<62}{seconds:>8.1f} s")
        print(f"  {'all cells':<62}{result['cells_s']:>8.1f} s")
        print(f"  kernel start {result['kernel_start_s']} s; whole run {result['wall_s']} s wall, "
              f"{result['kernel_cpu_s']} s CPU (kernel); cache afterwards {result['cache_bytes'] / 1e3:.0f} KB ({cache})")
        if result["failed_cells"]:
            print(f"  cells that raised: {', '.join(result['failed_cells'])}")
    print_cells(results)
    print(json.dumps({"impl": args.impl, "fast": args.fast, "load_average_1min_at_end": os.getloadavg()[0],
                      "runs": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
