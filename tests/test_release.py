"""`bertlab release OUT`: the student bundle holds what a student needs, leaks nothing instructor-only,
installs, and its public tests and `bertlab check` run inside it.

The leak checks here are written independently of bertlab_grader.authoring.release.scan_bundle (which release runs
before publishing), and scan_bundle is itself tested on planted leaks.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Callable

import pytest

from bertlab.cli import main
from bertlab.tasks import EXERCISE_MODULES
from bertlab_grader.authoring import release as rel
from bertlab_grader.authoring.bundle import BUNDLE_DISTRIBUTION
from bertlab_grader.authoring.leak_scan import solution_fingerprints
from bertlab_grader.authoring.stubs import expected_exercises
from bertlab_grader.core.locations import PACKAGE_DIR, PUBLIC_TESTS_DIR, REFERENCE_DIR, SUITES_DIR

KIT_ROOT = Path(__file__).resolve().parents[1]
STUDENT_PACKAGE = KIT_ROOT / "src" / "bertlab"
FENCE = "### BEGIN SOLUTION"


def quiet(*_):
    pass


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return rel.release(tmp_path_factory.mktemp("release") / "week7-student", log=quiet)


def bundle_files(bundle: Path) -> dict[str, bytes]:
    return {str(p.relative_to(bundle)): p.read_bytes() for p in sorted(bundle.rglob("*")) if p.is_file()}


def student_pythonpath(bundle: Path, shadow: Path) -> str:
    """PYTHONPATH for running a bundle as a student would: the bundle's own package first, then a
    stand-in that makes the instructor package (installed here, in editable mode) unimportable.
    (tests/test_packaging.py installs the bundle alone into a virtualenv.)"""
    (shadow / "bertlab_grader").mkdir(parents=True, exist_ok=True)
    (shadow / "bertlab_grader" / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named \'bertlab_grader\' (not in the student bundle)", '
        'name="bertlab_grader")\n')
    return os.pathsep.join([str(bundle / "src"), str(shadow)])


def in_bundle(bundle: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.update(PYTHONPATH=student_pythonpath(bundle, bundle.parent / f"{bundle.name}-shadow"),
               HF_HUB_OFFLINE="1", NO_COLOR="1")
    return subprocess.run([sys.executable, *args], cwd=bundle, env=env, capture_output=True, text=True, timeout=600)


# ---------------------------------------------------------------------------------------------
# Contents
# ---------------------------------------------------------------------------------------------

def test_bundle_holds_what_a_student_needs(bundle):
    files = bundle_files(bundle)
    needed = ["README.md", "pyproject.toml", ".gitignore", rel.BUNDLE_MARKER, "docs/architecture.md",
              "docs/commands.md", "exercises/Week_7_encoder.ipynb"]
    needed += [f"exercises/{t}.py" for t in EXERCISE_MODULES]
    # The whole student package, public tests and requirements included.
    needed += [str(p.relative_to(KIT_ROOT)) for p in STUDENT_PACKAGE.rglob("*")
               if p.is_file() and not {"__pycache__", ".pytest_cache", ".hypothesis"} & set(p.parts)]
    needed += [f"src/bertlab/public_tests/{p.relative_to(PUBLIC_TESTS_DIR)}" for p in PUBLIC_TESTS_DIR.rglob("*")
               if p.is_file() and "__pycache__" not in p.parts]
    needed += [f"docs/{name}" for name in ("student-guide.md", "self-paced.md")]
    needed += [f"docs/concepts/{p.name}" for p in (KIT_ROOT / "docs" / "concepts").glob("*.md")]
    missing = [name for name in needed if name not in files]
    assert not missing, f"the bundle lacks {missing}"
    assert "src/bertlab/public_tests/test_cka.py" in files and "src/bertlab/requirements.txt" in files
    for name in [f"{t}.py" for t in EXERCISE_MODULES] + ["Week_7_encoder.ipynb"]:
        # the stubs and the notebook are the generated ones, byte for byte (the checkout's copy is current)
        assert files[f"exercises/{name}"] == (KIT_ROOT / "exercises" / name).read_bytes(), name
    assert "bertlab check" in files["README.md"].decode() and "bertlab submit" in files["README.md"].decode()
    # how this course takes the hand-in: the default way's paragraph, naming the archive submit writes
    assert files["HAND-IN.md"].decode().startswith("Hand in: upload week7-submission.zip")


def test_the_bundle_checks_against_the_same_kit_digest_as_the_kit(bundle):
    # A student's MANIFEST.json names the kit by a digest of the registry and the public tests: the
    # bundle's copies must give the digest of the kit it was released from.
    from bertlab.handin.manifest import checked_kit_files, kit_digest

    in_bundle = {name: bundle / "src" / "bertlab" / name for name in checked_kit_files()}
    assert all(path.is_file() for path in in_bundle.values()), sorted(in_bundle)
    assert kit_digest(in_bundle) == kit_digest()


def test_bundle_holds_nothing_instructor_only(bundle):
    files = bundle_files(bundle)
    for name in files:
        top = Path(name).parts
        assert "bertlab_grader" not in top and top[0] not in ("tests", "benchmarks", "tools"), name
        assert not name.endswith(".pyc") and "__pycache__" not in top, name
    assert "docs/instructor-guide.md" not in files and "docs/hidden-suites.md" not in files


def test_no_solution_code_anywhere_in_the_bundle(bundle):
    texts = {name: data.decode("utf-8", errors="replace") for name, data in bundle_files(bundle).items()}
    holders = {name for name, text in texts.items() if FENCE in text}
    assert not holders, f"nbgrader's fence text is in {holders}"
    # Distinctive lines of every reference body: in no bundle file. (A line that the provided code
    # of bertlab also has, e.g. a generic argument check, is public by design.)
    stubs = {f"{t}.py": (KIT_ROOT / "exercises" / f"{t}.py").read_text() for t in EXERCISE_MODULES}
    provided = "\n".join(p.read_text() for p in STUDENT_PACKAGE.rglob("*.py"))
    checked = 0
    for path in sorted(REFERENCE_DIR.glob("*.py")):
        for body in path.read_text().split(FENCE)[1:]:
            for line in body.split("### END SOLUTION")[0].splitlines():
                line = line.strip()
                if len(line) < 30 or line in stubs.get(path.name, "") or line in provided:
                    continue
                checked += 1
                leaks = [name for name, text in texts.items() if line in text]
                assert not leaks, f"{path.name} line {line!r} is in {leaks}"
    assert checked > 40, f"only {checked} distinctive solution lines: is the fence text still {FENCE!r}?"


def test_no_hidden_test_or_grader_file_in_the_bundle(bundle):
    texts = {name: data.decode("utf-8", errors="replace") for name, data in bundle_files(bundle).items()}
    contents = set(bundle_files(bundle).values())
    # A copy of a stub is shipped by design (the demo's erin holds one for a task she has not started).
    stubs = {text.encode("utf-8") for text in expected_exercises().values()}
    secret = [p for root in (PACKAGE_DIR, REFERENCE_DIR, SUITES_DIR) for p in root.rglob("*")
              if p.is_file() and "__pycache__" not in p.parts and len(p.read_bytes().strip()) > 64
              and p.read_bytes() not in stubs]
    assert len(secret) > 20, "nothing instructor-only found to compare with"
    copies = [str(p.relative_to(KIT_ROOT)) for p in secret if p.read_bytes() in contents]
    assert not copies, f"copied into the bundle: {copies}"
    public_names = {node.name for p in PUBLIC_TESTS_DIR.glob("test_*.py")
                    for node in ast.walk(ast.parse(p.read_text())) if isinstance(node, ast.FunctionDef)}
    hidden_only = {node.name for p in SUITES_DIR.rglob("test_*.py")
                   for node in ast.walk(ast.parse(p.read_text()))
                   if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")} - public_names
    leaked = sorted(name for name in hidden_only
                    if any(re.search(rf"\b{name}\b", text) for text in texts.values()))
    assert not leaked, f"hidden test names in the bundle: {leaked}"


def _requirements(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def test_bundle_is_its_own_distribution_with_the_student_dependencies(bundle):
    ours = tomllib.loads((bundle / "pyproject.toml").read_text())
    assert ours["project"]["name"] == BUNDLE_DISTRIBUTION == "bertlab-student"
    assert ours["project"]["scripts"] == {"bertlab": "bertlab.cli:main"}
    assert "entry-points" not in ours["project"], "the bundle must not add commands"
    assert ours["tool"]["setuptools"]["packages"] == ["bertlab", "bertlab.check", "bertlab.handin", "bertlab.teaching",
                                                      "bertlab.public_tests"]
    assert ours["tool"]["setuptools"]["dynamic"]["dependencies"] == {"file": ["src/bertlab/requirements.txt"]}
    student = _requirements(bundle / "src" / "bertlab" / "requirements.txt")
    assert student == _requirements(STUDENT_PACKAGE / "requirements.txt")
    names = {re.split(r"[<>=\[ ]", r)[0].lower() for r in student}
    assert {"torch", "transformers", "pytest", "notebook"} <= names
    assert not names & {"nbgrader", "psycopg2-binary", "faiss-cpu", "sentence-transformers", "jsonschema"}, names
    assert json.loads((bundle / rel.BUNDLE_MARKER).read_text())["tasks"] == list(EXERCISE_MODULES)


# ---------------------------------------------------------------------------------------------
# It runs
# ---------------------------------------------------------------------------------------------

def test_public_tests_run_in_the_bundle_and_say_not_implemented(bundle):
    result = in_bundle(bundle, "-m", "pytest", "--pyargs", "bertlab.public_tests", "-m", "pooling", "-q", "-x")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "is not implemented yet" in result.stdout, result.stdout[-3000:]
    assert "1 failed" in result.stdout


def test_bertlab_check_runs_in_the_bundle(bundle, tmp_path):
    copy = Path(shutil.copytree(bundle, tmp_path / "bundle"))  # check writes .bertlab/ progress
    result = in_bundle(copy, "-m", "bertlab.cli", "check", "--task", "cka")
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"in {copy.resolve()}" in result.stdout
    assert "not started" in result.stdout and "Next: start task cka" in result.stdout


def test_the_bundle_has_only_student_commands(bundle):
    helped = in_bundle(bundle, "-m", "bertlab.cli", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "check" in helped.stdout and "lesson" in helped.stdout
    for instructor in ("grade", "demo", "release", "audit", "doctor", "instructor"):
        assert instructor not in helped.stdout, (instructor, helped.stdout)
    result = in_bundle(bundle, "-m", "bertlab.cli", "grade-one", "somewhere")
    assert result.returncode == 2 and "invalid choice" in result.stderr and "Traceback" not in result.stderr
    reference = in_bundle(bundle, "-m", "bertlab.cli", "lesson", "--reference", "--quick")
    assert reference.returncode == 2, reference.stdout + reference.stderr
    assert "instructor kit" in reference.stderr and "Traceback" not in reference.stderr


# ---------------------------------------------------------------------------------------------
# Refusals and the scan
# ---------------------------------------------------------------------------------------------

def test_release_command_writes_refuses_and_replaces(tmp_path):
    out = tmp_path / "student"
    assert main(["release", str(out)]) == 0
    assert (out / "exercises" / "cka.py").is_file()
    with pytest.raises(rel.ReleaseError, match="not empty; use --force"):
        rel.release(out, log=quiet)
    # What an install and a test run leave behind is no student work: --force replaces it all.
    (out / "bertlab.egg-info").mkdir()
    (out / "bertlab.egg-info" / "PKG-INFO").write_text("Name: bertlab\n")
    (out / "exercises" / "__pycache__").mkdir()
    (out / "exercises" / "__pycache__" / "cka.cpython-311.pyc").write_bytes(b"\0compiled")
    (out / ".pytest_cache" / "v").mkdir(parents=True)
    (out / ".pytest_cache" / "v" / "lastfailed").write_text("{}")
    (out / ".bertlab").mkdir()  # an empty progress folder holds no progress
    (out / "exercises" / "cka.py").unlink()  # a file the release wrote and that is gone is no loss
    assert main(["release", str(out), "--force"]) == 0
    assert (out / "exercises" / "cka.py").is_file()
    assert not (out / "bertlab.egg-info").exists() and not (out / ".pytest_cache").exists()
    assert not [p for p in tmp_path.iterdir() if p.name != "student"], "staging or old bundle left behind"


def test_marker_records_what_the_release_wrote(tmp_path):
    out = rel.release(tmp_path / "fresh", log=quiet)  # not the shared bundle: tests run in that one
    marker = json.loads((out / rel.BUNDLE_MARKER).read_text())
    assert marker["bertlab_bundle"] == 1 and marker["tasks"] == list(EXERCISE_MODULES)
    written = {name: data for name, data in bundle_files(out).items() if name != rel.BUNDLE_MARKER}
    assert set(marker["files"]) == set(written)
    assert "exercises/pooling.py" in written and "exercises/Week_7_encoder.ipynb" in written
    for name, data in written.items():
        assert marker["files"][name] == hashlib.sha256(data).hexdigest(), name


# ---------------------------------------------------------------------------------------------
# --force never deletes a student's work
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def earlier(bundle, tmp_path) -> Path:
    """A copy of a fresh bundle, to play the student's folder that --force would replace."""
    return Path(shutil.copytree(bundle, tmp_path / "week7-student"))


def _edit_notebook(path: Path) -> str:
    notebook = json.loads(path.read_text())
    notebook["cells"].append({"cell_type": "markdown", "metadata": {}, "source": ["My answer: layer 9."]})
    path.write_text(json.dumps(notebook, indent=1))
    return path.read_text()


def _write(text: str) -> Callable[[Path], str]:
    def write(path: Path) -> str:
        path.write_text(text)
        return text
    return write


def _append(text: str) -> Callable[[Path], str]:
    def append(path: Path) -> str:
        return _write(path.read_text() + text)(path)
    return append


# What a student may leave in the folder: {id: (relative path, what writes it and returns its text)}.
STUDENT_WORK = {
    "changed stub": ("exercises/pooling.py", _write("def masked_mean_pool(x, m):\n    return 42\n")),
    "added exercise file": ("exercises/scratch.py", _write("print('trying things')\n")),
    "progress": (".bertlab/progress.json", _write('{"version": 1, "tasks": {}, "history": []}\n')),
    "notebook": ("exercises/Week_7_encoder.ipynb", _edit_notebook),
    "notebook autosave": ("exercises/.ipynb_checkpoints/Week_7_encoder-checkpoint.ipynb", _write('{"cells": []}')),
    "notes": ("notes.md", _write("ask about CKA\n")),
    "changed provided file": ("src/bertlab/__init__.py", _append("# mine\n")),
}


@pytest.mark.parametrize("name", list(STUDENT_WORK), ids=list(STUDENT_WORK))
def test_force_refuses_while_the_bundle_holds_student_work(earlier, name):
    rel_path, work = STUDENT_WORK[name]
    path = earlier / rel_path
    path.parent.mkdir(parents=True, exist_ok=True)
    text = work(path)
    before = bundle_files(earlier)
    with pytest.raises(rel.ReleaseError) as caught:
        rel.release(earlier, force=True, log=quiet)
    message = str(caught.value)
    assert f"  - {rel_path} (" in message and "nothing was deleted" in message
    assert "elsewhere" in message or "somewhere safe" in message
    assert "new folder" in message
    assert path.read_text() == text
    assert bundle_files(earlier) == before, "the earlier bundle changed"
    assert [p.name for p in earlier.parent.iterdir()] == [earlier.name], "staging folder left behind"


def test_force_refusal_lists_files_sorted_and_capped(earlier):
    for i in range(25):
        (earlier / "exercises" / f"try{i:02d}.py").write_text(f"x = {i}\n")
    (earlier / "exercises" / "cka.py").write_text("mine\n")
    with pytest.raises(rel.ReleaseError) as caught:
        rel.release(earlier, force=True, log=quiet)
    listed = [line.split(" (")[0].strip("- ") for line in str(caught.value).splitlines() if line.startswith("  - ")]
    assert listed == ["exercises/cka.py"] + [f"exercises/try{i:02d}.py" for i in range(19)]
    assert "  ... and 6 more" in str(caught.value)
    assert "exercises/cka.py (changed since the release)" in str(caught.value)


def test_force_refuses_a_bundle_that_predates_the_manifest(earlier):
    marker = earlier / rel.BUNDLE_MARKER
    old = json.loads(marker.read_text())
    del old["files"]
    marker.write_text(json.dumps(old))
    with pytest.raises(rel.ReleaseError, match="predates the manifest") as caught:
        rel.release(earlier, force=True, log=quiet)
    assert "by hand" in str(caught.value)
    marker.write_text("{not json")
    with pytest.raises(rel.ReleaseError, match="cannot be read"):
        rel.release(earlier, force=True, log=quiet)
    assert (earlier / "exercises" / "pooling.py").is_file()


def test_force_checks_again_just_before_deleting(earlier, monkeypatch):
    build = rel.build_bundle

    def student_saves_while_building(dest, log=print, **options):
        (earlier / "exercises" / "pooling.py").write_text("saved during the release\n")
        return build(dest, log=log, **options)

    monkeypatch.setattr(rel, "build_bundle", student_saves_while_building)
    with pytest.raises(rel.ReleaseError, match="exercises/pooling.py"):
        rel.release(earlier, force=True, log=quiet)
    assert (earlier / "exercises" / "pooling.py").read_text() == "saved during the release\n"
    assert [p.name for p in earlier.parent.iterdir()] == [earlier.name], "old bundle or staging left aside"


def test_release_command_refuses_student_work_without_a_traceback(earlier, capsys):
    (earlier / "exercises" / "pooling.py").write_text("my pooling\n")
    capsys.readouterr()
    assert main(["release", str(earlier), "--force"]) == 2
    err = capsys.readouterr().err
    assert "exercises/pooling.py" in err and "Traceback" not in err
    assert (earlier / "exercises" / "pooling.py").read_text() == "my pooling\n"


def test_release_refuses_the_kit_itself_and_folders_it_did_not_write(tmp_path):
    for inside in (KIT_ROOT / "student", KIT_ROOT, KIT_ROOT.parent):
        with pytest.raises(rel.ReleaseError, match="inside the kit"):
            rel.release(inside, force=True, log=quiet)
    assert not (KIT_ROOT / "student").exists()
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    with pytest.raises(rel.ReleaseError, match="not a bundle written by"):
        rel.release(precious, force=True, log=quiet)
    assert (precious / "thesis.tex").read_text() == "years of work"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert rel.release(empty, log=quiet) == empty.resolve()


def test_scan_finds_planted_leaks(bundle, tmp_path):
    planted = Path(shutil.copytree(bundle, tmp_path / "planted"))
    assert rel.scan_bundle(planted) == []
    solution_line = next(iter(solution_fingerprints()))
    (planted / "docs" / "cheat.md").write_text(f"Here is how:\n\n    {solution_line}\n")
    source = ["def f():\n", "    ### BEGIN SOLUTION\n", "    return 1\n"]
    notebook = {"cells": [{"cell_type": "code", "source": source}]}
    (planted / "exercises" / "extra.ipynb").write_text(json.dumps(notebook, indent=1))
    hidden = next(p for p in sorted(SUITES_DIR.glob("*.py")) if len(p.read_bytes()) > 64)
    shutil.copy(hidden, planted / "src" / "bertlab" / "public_tests" / "renamed.py")
    (planted / "src" / "bertlab_grader").mkdir()
    (planted / "src" / "bertlab_grader" / "x.txt").write_text("x")
    problems = "\n".join(rel.scan_bundle(planted))
    assert "docs/cheat.md:3: a line of solutions/" in problems
    assert "exercises/extra.ipynb" in problems and "nbgrader fence" in problems
    assert f"src/bertlab/public_tests/renamed.py: a copy of tests/hidden/{hidden.name}" in problems
    assert "src/bertlab_grader/x.txt: instructor-only path" in problems


def test_a_stub_among_the_instructor_files_is_not_a_leak(tmp_path, monkeypatch):
    """A whole submission of the kit that has not started a task (the demo's erin, after `bertlab
    new-task`) holds the untouched stub, which the bundle ships: the scan does not call the bundle's
    stub a copy of it. Any other instructor-only file copied into the bundle still is one."""
    from bertlab_grader.authoring import leak_scan
    from bertlab_grader.authoring.stubs import expected_exercises

    name, stub = next(iter(expected_exercises().items()))
    package = tmp_path / "bertlab_grader"
    (package / "commands" / "demo_cohort" / "erin").mkdir(parents=True)
    (package / "commands" / "demo_cohort" / "erin" / name).write_text(stub, encoding="utf-8")
    (package / "secret.py").write_text("ANSWER = 'instructor only, long enough to be recognised by the scan'\n")
    monkeypatch.setattr(leak_scan, "PACKAGE_DIR", package)
    monkeypatch.setattr(leak_scan, "CHECKOUT", None)
    monkeypatch.setattr(leak_scan, "REFERENCE_DIR", package)
    monkeypatch.setattr(leak_scan, "SUITES_DIR", package)
    found = leak_scan._instructor_only_hashes()
    assert hashlib.sha256(stub.encode()).hexdigest() not in found, found
    assert hashlib.sha256((package / "secret.py").read_bytes()).hexdigest() in found, found


def test_links_in_the_bundle_docs_resolve_inside_the_bundle(bundle):
    """A student page that links to a page the bundle does not ship is a dead end for the student."""
    broken = []
    for path in sorted((bundle / "docs").rglob("*.md")) + [bundle / "README.md"]:
        for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            if not (path.parent / target.split("#")[0]).exists():
                broken.append(f"{path.relative_to(bundle)} -> {target}")
    assert not broken, "links the bundle cannot follow:\n" + "\n".join(broken)
