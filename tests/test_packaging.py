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

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

KIT_ROOT = Path(__file__).resolve().parents[1]
SOURCE_FILES = ("pyproject.toml", "README.md", "src", "docs")  # what building the kit's wheel reads
OWN = re.compile(r"^(bertlab|bertlab_grader|bertlab_student|__editable__\.bertlab|__editable___bertlab)", re.I)

pytestmark = pytest.mark.slow


def _run(cmd, cwd: Path, timeout: int = 900, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", NO_COLOR="1", PIP_NO_INDEX="1",
                   PIP_DISABLE_PIP_VERSION_CHECK="1", **env)
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=environ, capture_output=True, text=True,
                          timeout=timeout)


def _ok(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0, f"{' '.join(done.args)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def build_wheel(source: Path, out: Path) -> Path:
    """``pip wheel`` of the project at ``source`` (no dependencies, no download) into ``out``."""
    _ok(_run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", out, source],
             cwd=out.parent))
    wheel, = out.glob("*.whl")
    return wheel


@pytest.fixture(scope="module")
def deps(tmp_path_factory) -> Path:
    """A site-packages of symlinks to this machine's third-party packages, bertlab left out."""
    shelf = tmp_path_factory.mktemp("deps") / "site-packages"  # the name: the sandbox shows site dirs
    shelf.mkdir()
    site_dir = Path(sysconfig.get_paths()["purelib"])
    for entry in site_dir.iterdir():
        if not OWN.match(entry.name) and entry.suffix != ".pth":
            (shelf / entry.name).symlink_to(entry)
    return shelf


def make_venv(where: Path, deps: Path) -> Path:
    """A fresh virtualenv at ``where`` whose interpreter also sees ``deps``; returns its bin/ folder."""
    _ok(_run([sys.executable, "-m", "venv", "--without-pip", where], cwd=where.parent))
    purelib = _ok(_run([where / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                       cwd=where.parent)).stdout.strip()
    (Path(purelib) / "_machine_deps.pth").write_text(f"{deps}\n")
    return where / "bin"


def pip_install(venv_bin: Path, wheel: Path) -> None:
    # This interpreter's pip, aimed at the venv: the venv has none of its own (--without-pip).
    _ok(_run([sys.executable, "-m", "pip", "--python", venv_bin / "python", "install", "--no-deps", wheel],
             cwd=wheel.parent))


def installed_names(venv_bin: Path) -> set[str]:
    purelib = _ok(_run([venv_bin / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                       cwd=venv_bin)).stdout.strip()
    return {p.name for p in Path(purelib).iterdir() if p.name != "_machine_deps.pth" and p.name != "__pycache__"}


def requirement_names(lines) -> set[str]:
    return {re.split(r"[<>=!~;\[ ]", line.strip())[0].lower().replace("_", "-") for line in lines
            if line.strip() and not line.strip().startswith("#")}


def wheel_requires(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(metadata).decode()
    return requirement_names(line.split(":", 1)[1] for line in text.splitlines()
                             if line.startswith("Requires-Dist:") and "extra ==" not in line)


# ---------------------------------------------------------------------------------------------
# The kit's wheel
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def kit_venv(tmp_path_factory, deps) -> tuple[Path, Path]:
    """(venv bin/, wheel): the kit built from a copy of its source files, installed non-editable."""
    base = tmp_path_factory.mktemp("kit")
    source = base / "source"
    source.mkdir()
    for name in SOURCE_FILES:  # a copy: building in place would leave build/ and egg-info in the checkout
        path = KIT_ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(path, source / name)
    (base / "wheels").mkdir()
    wheel = build_wheel(source, base / "wheels")
    venv_bin = make_venv(base / "venv", deps)
    pip_install(venv_bin, wheel)
    return venv_bin, wheel


def test_the_wheel_installs_only_the_two_packages(kit_venv):
    venv_bin, wheel = kit_venv
    names = installed_names(venv_bin)
    packages = {n for n in names if not n.endswith(".dist-info")}
    assert packages == {"bertlab", "bertlab_grader"}, names
    generic = _run([venv_bin / "python", "-c", "import importlib.util as u; "
                    "print([n for n in ('solutions', 'exercises', 'grader', 'tests') if u.find_spec(n)])"],
                   cwd=wheel.parent)
    assert _ok(generic).stdout.strip() == "[]"
    # What grading needs ships inside the package: the reference, the hidden suites, their pytest.ini,
    # the schema, the demo cohort, the student pages for release.
    with zipfile.ZipFile(wheel) as archive:
        files = set(archive.namelist())
    for needed in ("bertlab_grader/reference/cka.py", "bertlab_grader/suites/test_hidden_cka.py",
                   "bertlab_grader/suites/pytest.ini", "bertlab_grader/results.schema.json",
                   "bertlab_grader/templates/task_results.html.j2", "bertlab_grader/kit_docs/student-guide.md",
                   "bertlab_grader/lesson/Week_7_encoder.py",
                   "bertlab/public_tests/pytest.ini", "bertlab/data/sts_b/sts-test.tsv", "bertlab/requirements.txt"):
        assert needed in files, needed
    assert wheel_requires(wheel) == (requirement_names((KIT_ROOT / "src/bertlab/requirements.txt").read_text().splitlines())
                                     | requirement_names((KIT_ROOT / "src/bertlab_grader/requirements.txt").read_text().splitlines()))


def test_the_installed_wheel_grades_from_an_empty_directory(kit_venv, tmp_path):
    venv_bin, _ = kit_venv
    empty = tmp_path / "empty"
    empty.mkdir()
    course = tmp_path / "course"
    demo = _run([venv_bin / "bertlab", "demo", "--keep", course, "--workers", "1"], cwd=empty, timeout=1500)
    _ok(demo)
    assert list(empty.iterdir()) == [], "the demo wrote into the working directory"
    results = json.loads((course / "autograded" / "alice" / "week7" / "results.json").read_text())
    assert results["score"] == results["max_score"] > 0, demo.stdout[-2000:]
    assert results["sandboxed"] is True
    # `bertlab grade` on that course, started from somewhere else: everything is already graded.
    again = _run([venv_bin / "bertlab", "grade", course, "--workers", "1"], cwd=empty, timeout=900)
    _ok(again)
    assert "unchanged" in again.stdout, again.stdout[-2000:]


def test_the_installed_wheel_releases_a_complete_bundle(kit_venv, tmp_path):
    venv_bin, _ = kit_venv
    out = tmp_path / "week7-student"
    _ok(_run([venv_bin / "bertlab", "release", out], cwd=tmp_path))
    for needed in ("exercises/cka.py", "exercises/Week_7_encoder.ipynb", "docs/student-guide.md",
                   "docs/concepts/1-cka.md", "src/bertlab/public_tests/test_cka.py", "pyproject.toml"):
        assert (out / needed).is_file(), needed
    assert (out / "exercises" / "cka.py").read_text() == (KIT_ROOT / "exercises" / "cka.py").read_text()


# ---------------------------------------------------------------------------------------------
# The student bundle, alone
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bundle_install(tmp_path_factory, deps) -> tuple[Path, Path, Path]:
    """(venv bin/, bundle folder, bundle wheel): a released bundle, built and installed on its own."""
    from bertlab_grader.release import release

    base = tmp_path_factory.mktemp("student")
    bundle = release(base / "week7-student", log=lambda *_: None)
    source = base / "build-copy"  # build from a copy: the student's folder stays as released
    shutil.copytree(bundle, source)
    (base / "wheels").mkdir()
    wheel = build_wheel(source, base / "wheels")
    venv_bin = make_venv(base / "venv", deps)
    pip_install(venv_bin, wheel)
    return venv_bin, bundle, wheel


def test_the_bundle_depends_on_the_student_list_only(bundle_install):
    _, _, wheel = bundle_install
    assert wheel.name.startswith("bertlab_student-")
    student = requirement_names((KIT_ROOT / "src/bertlab/requirements.txt").read_text().splitlines())
    assert wheel_requires(wheel) == student
    instructor_only = requirement_names((KIT_ROOT / "src/bertlab_grader/requirements.txt").read_text().splitlines())
    assert {"nbgrader", "psycopg2-binary", "jsonschema"} <= instructor_only
    assert not wheel_requires(wheel) & (instructor_only | {"faiss-cpu", "sentence-transformers"})
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/")[0] for name in archive.namelist()}
    assert tops == {"bertlab", next(t for t in tops if t.endswith(".dist-info"))}, tops


def test_the_installed_bundle_shows_and_runs_only_student_commands(bundle_install, tmp_path):
    venv_bin, bundle, _ = bundle_install
    helped = _ok(_run([venv_bin / "bertlab", "--help"], cwd=bundle))
    listed = set(re.findall(r"^ {4}(\w[\w-]*)\s", helped.stdout, re.M))
    assert listed == {"check", "lesson"}, helped.stdout
    assert "instructor" not in helped.stdout
    grade = _run([venv_bin / "bertlab", "grade", "x"], cwd=bundle)
    assert grade.returncode == 2 and "invalid choice" in grade.stderr
    work = Path(shutil.copytree(bundle, tmp_path / "bundle"))
    checked = _run([venv_bin / "bertlab", "check", "--task", "pooling"], cwd=work / "exercises")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert re.search(r"^pooling\s+0/\d+\s+not started", checked.stdout, re.M), checked.stdout
    assert "bertlab_grader" not in checked.stdout + checked.stderr
