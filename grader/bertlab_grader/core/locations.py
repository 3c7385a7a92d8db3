"""Where the instructor kit's own files are, installed or in a checkout: the one place that says so.

The two packages sit at their paths: ``bertlab`` is ``src/bertlab/``, ``bertlab_grader`` is
``grader/bertlab_grader/``. The folders the kit's design fixes at the top level are mapped into them
(``pyproject.toml``'s package-dir, the only place that lists them): ``solutions/`` is
``bertlab_grader.solutions``, ``tests/hidden/`` is ``bertlab_grader.hidden``, ``tests/public/`` is
``bertlab.public_tests``, ``docs/`` ships as ``bertlab_grader.kit_docs``. In a wheel they sit inside one
another in site-packages; in an editable install each is its own folder of the checkout. So no module
finds one of them by climbing from its own ``__file__``: each location below is asked of the import
system (``importlib.util.find_spec``), which knows the mapping in both modes, without importing the
package it asks about.

Only those top-level folders are named here. A room keeps its own data in its own folder and names
it there (``course/results.py`` its schema, ``commands/demo.py`` its cohort, ``reporting/report.py``
its templates, ``sandbox/launcher.py`` the ``inside`` package): this module, on the ground floor,
knows nothing of the rooms above it (``tests/test_architecture.py`` holds it).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Optional

from bertlab.tasks import EXERCISE_MODULES

from bertlab_grader.core.fences import strip_fences


def package_folder(name: str) -> Path:
    """The folder of package ``name`` (``bertlab_grader.solutions``, ``bertlab.public_tests``, ...)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the kit's package {name!r} is not installed (reinstall the kit: pip install .)")
    return Path(list(spec.submodule_search_locations)[0]).resolve()


PACKAGE_DIR = package_folder("bertlab_grader")            # grader/bertlab_grader/ in a checkout
STUDENT_PACKAGE_DIR = package_folder("bertlab")           # src/bertlab/ in a checkout
REFERENCE_DIR = package_folder("bertlab_grader.solutions")  # the solutions, with nbgrader's fences
SUITES_DIR = package_folder("bertlab_grader.hidden")      # the hidden test suites (a pytest package)
SUITES_CONFIG = SUITES_DIR / "pytest.ini"                 # their configuration, whatever folder grading runs from
REFERENCE_DATA = SUITES_DIR / "reference_data.py"
PUBLIC_TESTS_DIR = package_folder("bertlab.public_tests")


def _checkout() -> Optional[Path]:
    """The source checkout this package runs from (an editable install), or None when installed."""
    root = PACKAGE_DIR.parent.parent
    if PACKAGE_DIR.parent.name == "grader" and (root / "pyproject.toml").is_file():
        return root
    return None


CHECKOUT = _checkout()
#: What building the kit's wheel reads, relative to the checkout (pyproject.toml's package-dir, the readme).
WHEEL_SOURCES = ("pyproject.toml", "README.md", "src", "grader", "solutions", "tests/public", "tests/hidden", "docs")
#: What the sandbox hides whole: the checkout, or (installed) just this package's folder.
KIT_ROOT = CHECKOUT or PACKAGE_DIR.parent
#: The kit's documentation (docs/ of the checkout; installed, the copy shipped as bertlab_grader.kit_docs,
#: a folder of pages with no __init__.py, which an editable install cannot map).
DOCS_DIR = CHECKOUT / "docs" if CHECKOUT else PACKAGE_DIR / "kit_docs"


def reference_sources(fenced: bool = False) -> dict[str, str]:
    """{``cka.py``: source, ...} of the reference solutions; nbgrader's fence lines removed unless ``fenced``."""
    out = {}
    for module in EXERCISE_MODULES:
        text = (REFERENCE_DIR / f"{module}.py").read_text(encoding="utf-8")
        out[f"{module}.py"] = text if fenced else strip_fences(text)
    return out

