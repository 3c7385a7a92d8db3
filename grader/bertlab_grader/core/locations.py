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
SANDBOX_INSIDE_DIR = package_folder("bertlab_grader.sandbox.inside")  # the only kit code the sandbox shows
DEMO_COHORT_DIR = PACKAGE_DIR / "commands" / "demo_cohort"
LESSON_SOURCE = PACKAGE_DIR / "authoring" / "lesson" / "Week_7_encoder.py"
RESULTS_SCHEMA = PACKAGE_DIR / "course" / "results.schema.json"
COURSE_TEMPLATES = PACKAGE_DIR / "course" / "templates"
REPORT_TEMPLATES = PACKAGE_DIR / "reporting" / "templates"
GRADESCOPE_DIR = PACKAGE_DIR / "export" / "gradescope"


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


def timing_protocol_files() -> list[Path]:
    """What a speed measurement depends on besides the submission: the solutions, the hidden
    performance suite (speed.py and every task's speed test), the timing protocol, how each timed call's inputs are copied (and varied) and
    the malloc pin (performance/record.py keys on them)."""
    return [*sorted(REFERENCE_DIR.glob("*.py")), SUITES_DIR / "speed.py", *sorted(SUITES_DIR.glob("test_hidden_*_speed.py")),
            PACKAGE_DIR / "performance" / "timing.py", PACKAGE_DIR / "sandbox" / "inside" / "copies.py",
            PACKAGE_DIR / "sandbox" / "malloc_pin.py"]
