"""The kit as pip installs it, not as a checkout: wheels built from the repo, installed non-editable into
fresh virtualenvs, used from an empty directory.

- The kit's wheel: nothing generic lands in site-packages (only ``bertlab`` and ``bertlab_grader``),
  ``bertlab demo`` grades the reference to full marks from an empty folder, ``bertlab grade`` works on
  that course from another folder, and ``bertlab release`` writes a bundle with the student pages.
- The student bundle's wheel (``bertlab-student``): its dependency list is the student list and
  nothing more, and, installed alone, its ``bertlab --help`` names only the student commands and
  ``bertlab check`` runs in the bundle.

Dependencies are not downloaded again for each virtualenv: each one sees this machine's installed
third-party packages through a folder of symlinks (``deps/site-packages``) that leaves out every
``bertlab`` distribution and the editable install's hooks, so only the wheel under test provides
``bertlab``. tools/acceptance/packaging.sh does the same from a fresh clone with real installs.
"""

from __future__ import annotations

import re
import shutil
import zipfile
from pathlib import Path

import pytest

from bertlab.tasks import EXERCISE_FILES
from venvs import (KIT_ROOT, build_wheel, installed_names, make_venv, ok, pip_install, requirement_names, run,
                   wheel_requires)

pytestmark = pytest.mark.slow
STUDENT_REQUIREMENTS = requirement_names((KIT_ROOT / "src/bertlab/requirements.txt").read_text().splitlines())
INSTRUCTOR_REQUIREMENTS = requirement_names((KIT_ROOT / "grader/bertlab_grader/requirements.txt").read_text().splitlines())


# ---------------------------------------------------------------------------------------------
# The kit's wheel (the installed_kit and demo fixtures are in tests/conftest.py)
# ---------------------------------------------------------------------------------------------

def test_the_wheel_installs_only_the_two_packages(installed_kit):
    from bertlab.finetune import shipped_finetune_path  # the notebook's fine-tuning figures ship too

    venv_bin, wheel = installed_kit
    names = installed_names(venv_bin)
    packages = {n for n in names if not n.endswith(".dist-info")}
    assert packages == {"bertlab", "bertlab_grader"}, names
    generic = run([venv_bin / "python", "-c", "import importlib.util as u; "
                    "print([n for n in ('solutions', 'exercises', 'grader', 'tests', 'hidden', 'public') if u.find_spec(n)])"],
                   cwd=wheel.parent)
    assert ok(generic).stdout.strip() == "[]"
    # What grading needs ships inside the package: the reference, the hidden suites, their pytest.ini,
    # the schema, the demo cohort, the student pages for release.
    with zipfile.ZipFile(wheel) as archive:
        files = set(archive.namelist())
    for needed in ("bertlab_grader/solutions/cka.py", "bertlab_grader/hidden/test_hidden_cka.py",
                   "bertlab_grader/hidden/pytest.ini", "bertlab_grader/course/results.schema.json",
                   "bertlab_grader/course/templates/task_results.html.j2", "bertlab_grader/kit_docs/student-guide.md",
                   "bertlab_grader/authoring/lesson/Week_7_encoder.py", "bertlab_grader/sandbox/inside/server.py",
                   "bertlab_grader/commands/demo_cohort/erin/cka.py", "bertlab_grader/export/gradescope/files/setup.sh",
                   "bertlab_grader/reporting/templates/report.html.j2",
                   "bertlab/public_tests/pytest.ini", "bertlab/public_tests/test_cka.py",
                   "bertlab/data/sts_b/sts-test.tsv", "bertlab/requirements.txt",
                   "bertlab/data/pretraining_heads/masked_lm.safetensors",
                   "bertlab/data/pretraining_heads/next_sentence.json",
                   f"bertlab/data/lesson_figures/{shipped_finetune_path().name}"):
        assert needed in files, needed
    assert wheel_requires(wheel) == STUDENT_REQUIREMENTS | INSTRUCTOR_REQUIREMENTS


def test_the_installed_wheel_grades_from_an_empty_directory(demo):
    done = ok(demo["proc"])
    assert list(demo["cwd"].iterdir()) == [], "the demo wrote into the working directory"
    alice = demo["results"]["alice"]
    assert alice["score"] == alice["max_score"] > 0 and alice["sandboxed"] is True, done.stdout[-2000:]
    # `bertlab grade` on that course, started from somewhere else: everything is already graded.
    again = ok(run([demo["venv_bin"] / "bertlab", "grade", demo["course"], "--workers", "1"], cwd=demo["cwd"]))
    assert "unchanged" in again.stdout, again.stdout[-2000:]


def test_the_installed_wheel_releases_a_complete_bundle(installed_kit, tmp_path):
    venv_bin, _ = installed_kit
    out = tmp_path / "week7-student"
    ok(run([venv_bin / "bertlab", "release", out], cwd=tmp_path))
    for needed in ("exercises/cka.py", "exercises/Week_7_encoder.ipynb", "docs/student-guide.md",
                   "docs/concepts/1-cka.md", "src/bertlab/public_tests/test_cka.py", "pyproject.toml"):
        assert (out / needed).is_file(), needed
    assert (out / "exercises" / "cka.py").read_text() == (KIT_ROOT / "exercises" / "cka.py").read_text()


# ---------------------------------------------------------------------------------------------
# The student bundle, alone
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bundle_install(tmp_path_factory, machine_deps) -> tuple[Path, Path, Path]:
    """(venv bin/, bundle folder, bundle wheel): a released bundle, built and installed on its own."""
    from bertlab_grader.authoring.release import release

    base = tmp_path_factory.mktemp("student")
    bundle = release(base / "week7-student", log=lambda *_: None)
    source = base / "build-copy"  # build from a copy: the student's folder stays as released
    shutil.copytree(bundle, source)
    (base / "wheels").mkdir()
    wheel = build_wheel(source, base / "wheels")
    venv_bin = make_venv(base / "venv", machine_deps)
    pip_install(venv_bin, wheel)
    return venv_bin, bundle, wheel


def test_the_bundle_depends_on_the_student_list_only(bundle_install):
    _, _, wheel = bundle_install
    assert wheel.name.startswith("bertlab_student-")
    requires = wheel_requires(wheel)  # read once: the METADATA of the bundle's wheel
    assert requires == STUDENT_REQUIREMENTS
    assert {"nbgrader", "psycopg2-binary", "jsonschema"} <= INSTRUCTOR_REQUIREMENTS
    assert not requires & (INSTRUCTOR_REQUIREMENTS | {"faiss-cpu", "sentence-transformers"})
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/")[0] for name in archive.namelist()}
    assert tops == {"bertlab", next(t for t in tops if t.endswith(".dist-info"))}, tops


def test_the_installed_bundle_shows_and_runs_only_student_commands(bundle_install, tmp_path):
    venv_bin, bundle, _ = bundle_install
    helped = ok(run([venv_bin / "bertlab", "--help"], cwd=bundle))
    listed = set(re.findall(r"^ {4}(\w[\w-]*)\s", helped.stdout, re.M))
    assert listed == {"check", "submit", "lesson"}, helped.stdout
    assert "instructor" not in helped.stdout
    grade = run([venv_bin / "bertlab", "grade", "x"], cwd=bundle)
    assert grade.returncode == 2 and "invalid choice" in grade.stderr
    work = Path(shutil.copytree(bundle, tmp_path / "bundle"))
    checked = run([venv_bin / "bertlab", "check", "--task", "pooling"], cwd=work / "exercises")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert re.search(r"^pooling\s+0/\d+\s+not started", checked.stdout, re.M), checked.stdout
    assert "bertlab_grader" not in checked.stdout + checked.stderr
    # Hand in, as the student's own installation does it: the untouched stubs, packed with a warning each.
    handed = run([venv_bin / "bertlab", "submit"], cwd=work)
    assert handed.returncode == 0, handed.stdout + handed.stderr
    with zipfile.ZipFile(work / "week7-submission.zip") as archive:
        assert sorted(archive.namelist()) == sorted([*EXERCISE_FILES, "MANIFEST.json"])
    assert "Hand in: upload week7-submission.zip" in handed.stdout and "bertlab_grader" not in handed.stderr
