"""Where the instructor kit's own files are, installed or in a checkout: one place, read by every module.

Everything the grader needs ships inside this package (a wheel grades as well as a checkout):
the reference solutions (``reference/``), the hidden suites (``suites/``), the mutant bank
(``mutants/``), the demo cohort, the sandbox. Only a checkout has a source tree around it
(``CHECKOUT``: the folder with pyproject.toml and ``src/``); nothing here depends on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from bertlab.tasks import EXERCISE_MODULES

PACKAGE_DIR = Path(__file__).resolve().parent
REFERENCE_DIR = PACKAGE_DIR / "reference"      # the reference solutions, with nbgrader's fences
SUITES_DIR = PACKAGE_DIR / "suites"            # the hidden test suites (a pytest package)
SUITES_CONFIG = SUITES_DIR / "pytest.ini"       # their pytest configuration, whatever folder grading runs from
REFERENCE_DATA = SUITES_DIR / "reference_data.py"
DEMO_COHORT_DIR = PACKAGE_DIR / "demo_cohort"


def _checkout() -> Optional[Path]:
    """The source checkout this package runs from (an editable install), or None when installed."""
    root = PACKAGE_DIR.parent.parent
    if PACKAGE_DIR.parent.name == "src" and (root / "pyproject.toml").is_file():
        return root
    return None


CHECKOUT = _checkout()
#: What the sandbox hides whole: the checkout, or (installed) just this package's folder.
KIT_ROOT = CHECKOUT or PACKAGE_DIR.parent


def reference_sources(fenced: bool = False) -> dict[str, str]:
    """{``cka.py``: source, ...} of the reference solutions; nbgrader's fence lines removed unless ``fenced``."""
    from .stubs import strip_fences

    out = {}
    for module in EXERCISE_MODULES:
        text = (REFERENCE_DIR / f"{module}.py").read_text(encoding="utf-8")
        out[f"{module}.py"] = text if fenced else strip_fences(text)
    return out


#: The kit's documentation (docs/ of the checkout; installed, the copy shipped as bertlab_grader.kit_docs).
DOCS_DIR = CHECKOUT / "docs" if CHECKOUT else PACKAGE_DIR / "kit_docs"
