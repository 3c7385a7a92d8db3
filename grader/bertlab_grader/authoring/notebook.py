"""The lesson notebook, exercises/Week_7_encoder.ipynb, built from its source.

The source is ``lesson/Week_7_encoder.py``, a jupytext "percent" script (``# %%`` code cells,
``# %% [markdown]`` text cells, ``tags=[...]`` the cell tags the kit's tests look cells up by): a
diff of the lesson is a diff of plain Python, and the script opens as a notebook in Jupyter or VS
Code with jupytext. ``bertlab release`` writes the .ipynb into every bundle; the checkout's copy
(committed without outputs) is regenerated with ``python tools/build_exercises.py``.
tests/test_notebook.py fails when the two drift apart, and executes the notebook against the
reference (and the untouched stubs).
"""

from __future__ import annotations

import re
from pathlib import Path

NOTEBOOK_NAME = "Week_7_encoder.ipynb"
SOURCE = Path(__file__).parent / "lesson" / "Week_7_encoder.py"  # (this room's own data)
METADATA = {
    "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
    "language_info": {"name": "python"},
}


def build_notebook():
    """The lesson notebook (nbformat v4, no outputs, deterministic cell ids)."""
    import jupytext
    import nbformat

    text = SOURCE.read_text(encoding="utf-8")
    # The comment above the first cell marker is about the file, not part of the lesson.
    first_cell = re.search(r"^# %%", text, re.MULTILINE).start()
    notebook = jupytext.reads(text[first_cell:], fmt="py:percent")
    notebook.metadata = dict(METADATA)
    for index, cell in enumerate(notebook.cells):
        tags = list(cell.metadata.get("tags", []))
        # Ids must be stable or every regeneration would rewrite the whole file.
        cell.id = f"c{index:02d}" + (f"-{tags[0]}" if tags else "")
        cell.metadata = {"tags": tags} if tags else {}
    nbformat.validate(notebook)
    return notebook


def notebook_text() -> str:
    """The .ipynb file's exact text."""
    import nbformat

    return nbformat.writes(build_notebook()) + "\n"
