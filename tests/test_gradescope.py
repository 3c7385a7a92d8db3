"""`bertlab gradescope`: the autograder zip, set up and run as Gradescope runs it, in a temporary folder
shaped like /autograder (docs/gradescope.md).

The zip is built with --kit-wheel-only: the kit's own wheel, with the packages of the environment
running the tests standing in for the wheelhouse (the test makes ROOT/bertlab-venv first with
tests/venvs.py's make_venv, a ``.pth`` line lending those packages; setup.sh's ``python -m venv``
keeps it, as it keeps any existing virtualenv's site-packages, and installs the wheel with --no-deps;
it skips apt-get). run_autograder then grades the reference solution and a mutant of the
bank, and each Gradescope results.json must match gradescope.schema.json and carry the points that
`bertlab grade-one --json` gives the same files. The autograder's folder lives outside pytest's
temporary folder: conftest.py checks every results.json there against the kit's own format, and
Gradescope's is another.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from bertlab.tasks import EXERCISE_FILES, GRADED_TASKS
from bertlab_grader.export.gradescope import autograder as gradescope
from bertlab_grader.export.gradescope.autograder import check_gradescope_schema, to_gradescope
from venvs import make_venv, this_site_packages

KIT_ROOT = Path(__file__).resolve().parents[1]
MUTANT = "pool_divide_by_length"  # a pooling mistake the kit names with a hint


def _bertlab(*args, env=None, cwd=KIT_ROOT, timeout=900):
    return subprocess.run([sys.executable, "-m", "bertlab.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, env=env)


def _extract(archive: Path, into: Path) -> None:
    """Unzip as `unzip` does: with the permissions the zip records (run_autograder must stay executable)."""
    with zipfile.ZipFile(archive) as z:
        for info in z.infolist():
            path = Path(z.extract(info, into))
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                path.chmod(mode)


def _files(folder: Path) -> dict[str, str]:
    return {name: (folder / name).read_text() for name in EXERCISE_FILES if (folder / name).exists()}


@pytest.fixture(scope="module")
def autograder_zip(tmp_path_factory):
    out = tmp_path_factory.mktemp("gradescope-zip") / "autograder.zip"
    proc = _bertlab("gradescope", out, "--kit-wheel-only")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _new_root(archive: Path) -> Path:
    """An /autograder-shaped folder as Gradescope's image build leaves it, before setup.sh."""
    root = Path(tempfile.mkdtemp(prefix="bertlab-autograder-"))
    _extract(archive, root / "source")
    shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")
    (root / "submission").mkdir()
    return root


@pytest.fixture(scope="module")
def autograder(autograder_zip):
    """ROOT after setup.sh: the kit installed from the zip's wheel into ROOT/bertlab-venv."""
    root = _new_root(autograder_zip)
    # Not --system-site-packages: the tests may run in a virtualenv, whose packages the base Python
    # does not have. The venv sees this environment's packages (and its pip) through a .pth line.
    make_venv(root / "bertlab-venv", this_site_packages())
    env = {**os.environ, "BERTLAB_AUTOGRADER_ROOT": str(root), "BERTLAB_SETUP_APT": "0",
           "BERTLAB_SETUP_PYTHON": sys.executable,
           "BERTLAB_SETUP_VENV_OPTIONS": "--without-pip",
           "BERTLAB_SETUP_PIP_OPTIONS": "--no-deps"}
    proc = subprocess.run(["bash", root / "source" / "setup.sh"], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "Sandbox:" in proc.stdout
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _run(root: Path, upload: dict[str, bytes]) -> tuple[subprocess.CompletedProcess, dict]:
    """Put ``upload`` ({relative path: bytes}) in ROOT/submission, run run_autograder, read results.json."""
    submission = root / "submission"
    shutil.rmtree(submission)
    submission.mkdir()
    for rel, data in upload.items():
        (submission / rel).parent.mkdir(parents=True, exist_ok=True)
        (submission / rel).write_bytes(data)
    proc = subprocess.run([root / "run_autograder"], capture_output=True, text=True, cwd=root, timeout=900,
                          env={**os.environ, "BERTLAB_AUTOGRADER_ROOT": str(root)})
    return proc, json.loads((root / "results" / "results.json").read_text())


def _grade_one(files: dict[str, str], where: Path) -> dict:
    folder = where / "submission"
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    proc = _bertlab("grade-one", folder, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def assert_same_grade(document: dict, kit: dict, root: Path) -> None:
    """The Gradescope document carries the kit's result: per test and in total."""
    from bertlab_grader.performance.timing import points_fraction

    check_gradescope_schema(document)
    assert [t["name"] for t in document["tests"]] == [t["name"] for t in kit["tests"]]
    for ours, theirs in zip(document["tests"], kit["tests"]):
        assert ours["tags"] == [theirs["task"]] and ours["max_score"] == theirs["max_points"], ours["name"]
        assert ours["visibility"] == "visible" and ours["number"].count(".") == 1
        ratio, their_ratio = ours["extra_data"].get("ratio"), theirs.get("ratio")
        if theirs["task"] == "performance" and (ratio is not None or their_ratio is not None):
            # Two runs time the code twice: the points follow each run's own ratio on the points curve,
            # and the same ratio gives the same points.
            assert ratio is not None and their_ratio is not None, ours["name"]
            assert ours["score"] == pytest.approx(ours["max_score"] * points_fraction(ratio), abs=0.01), ours["name"]
            if points_fraction(ratio) == points_fraction(their_ratio):
                assert ours["score"] == pytest.approx(theirs["points"], abs=0.01), ours["name"]
        else:
            assert ours["score"] == theirs["points"], (ours["name"], ours["score"], theirs["points"])
            assert ours["extra_data"]["outcome"] == theirs["outcome"], ours["name"]
            assert theirs["message"] in ours["output"]
            assert theirs.get("hint", "") in ours["output"]
    assert document["score"] == pytest.approx(sum(t["score"] for t in document["tests"]))
    correctness = [(o["score"], t["points"]) for o, t in zip(document["tests"], kit["tests"])
                   if t["task"] != "performance"]
    assert sum(o for o, _ in correctness) == pytest.approx(sum(t for _, t in correctness))
    assert document["extra_data"]["bertlab"]["graded"] is True
    assert document["extra_data"]["bertlab"]["sandboxed"] == kit["sandboxed"]
    assert document["extra_data"]["bertlab"]["submission_digest"] == kit["submission_digest"]
    assert {e["name"].split(" ")[0] for e in document.get("leaderboard", [])} == \
        {t["name"] for t in document["tests"] if t["extra_data"].get("ratio") is not None}
    text = json.dumps(document)
    for secret in (str(root), str(KIT_ROOT), "site-packages", "def test_", "bertlab_grader"):
        assert secret not in text, f"{secret!r} reached the student's results"


# ---------------------------------------------------------------------------------------------------
# The zip, set up and run


def test_zip_layout(autograder_zip):
    with zipfile.ZipFile(autograder_zip) as z:
        names = z.namelist()
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in z.infolist()}
        settings = json.loads(z.read(gradescope.SETTINGS_FILE))
    assert {"setup.sh", "run_autograder", gradescope.SETTINGS_FILE} <= set(names)  # at the root
    assert modes["setup.sh"] & 0o111 and modes["run_autograder"] & 0o111
    wheels = [n for n in names if n.startswith("wheels/")]
    assert len(wheels) == 1 and wheels[0].startswith("wheels/bertlab-") and wheels[0].endswith(".whl")
    assert settings["visibility"] == "visible" and settings["require_sandbox"] is False
    assert settings["dependencies_included"] is False and settings["kit_wheel"] == wheels[0].split("/")[1]


@pytest.mark.slow
def test_reference_and_a_mutant_get_the_grade_of_grade_one(autograder, demo, tmp_path):
    from bertlab_grader.core.locations import reference_sources
    from bertlab_grader.mutants.bank import load_bank

    reference = reference_sources()
    mutant = _files(load_bank(MUTANT, kinds=("mutant",))[0].path)
    # The reference in a folder of the upload; the mutant as an uploaded zip (checked, then extracted).
    proc, document = _run(autograder, {f"week7/{name}": text.encode() for name, text in reference.items()})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    # The kit's own grade of the reference: the demo cohort's alice hands in exactly these files, graded by
    # `bertlab grade` (grade-one's grading, in a cohort) in the session's demo course; the digests prove it.
    alice = demo["results"]["alice"]
    assert alice["submission_digest"] == document["extra_data"]["bertlab"]["submission_digest"], \
        "the demo's alice no longer hands in the reference: grade the reference with _grade_one here instead"
    assert_same_grade(document, alice, autograder)
    assert f"Graded: {', '.join(EXERCISE_FILES)} (from the folder week7/)" in document["output"]

    # The mutant as `bertlab submit` packs it (files at the top, MANIFEST.json), whose manifest was written
    # for another cka.py: graded as it is, with a note that costs nothing.
    from bertlab.handin.archive import write_archive
    from bertlab.handin.manifest import build_manifest

    archive = tmp_path / "upload.zip"
    checked = {name: text.encode() for name, text in mutant.items()}
    write_archive(archive, checked, build_manifest({**checked, "cka.py": b"# what was checked\n"}, {}, "test"))
    proc, document = _run(autograder, {"upload.zip": archive.read_bytes()})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "Note: changed after it was checked: cka.py" in document["output"], document["output"]
    kit = _grade_one(mutant, tmp_path / "mutant")
    assert_same_grade(document, kit, autograder)
    lost = [t for t in document["tests"] if t["score"] < t["max_score"] and t["tags"] == ["pooling"]]
    assert lost and any("Likely mistake:" in t["output"] for t in lost)  # the bank mutant's named mistake
    assert "Score: " in document["output"] and "pooling" in document["output"]


def test_a_setup_that_failed_is_not_a_grade(autograder_zip):
    root = _new_root(autograder_zip)  # setup.sh never ran: no virtualenv
    try:
        proc, document = _run(root, {name: b"" for name in EXERCISE_FILES})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert proc.returncode == 1 and "setup.sh did not finish" in proc.stdout
    check_gradescope_schema(document)
    assert "score" not in document and all("score" not in t for t in document["tests"])
    assert document["output"].startswith("NOT GRADED") and document["extra_data"]["bertlab"]["graded"] is False


# ---------------------------------------------------------------------------------------------------
# run, in process (the grading itself stubbed where it would only cost time)


def _root_with_upload(upload: dict[str, bytes]) -> Path:
    root = Path(tempfile.mkdtemp(prefix="bertlab-autograder-"))
    for rel, data in upload.items():
        (root / "submission" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "submission" / rel).write_bytes(data)
    (root / "submission").mkdir(exist_ok=True)
    return root


@pytest.fixture
def root_for():
    made = []

    def make(upload):
        made.append(_root_with_upload(upload))
        return made[-1]

    yield make
    for root in made:
        shutil.rmtree(root, ignore_errors=True)


def _results(root: Path) -> dict:
    document = json.loads((root / "results" / "results.json").read_text())
    check_gradescope_schema(document)
    return document


def test_a_grader_failure_is_not_a_grade(root_for, monkeypatch, capsys):
    from bertlab_grader.course import grade_one
    from bertlab_grader.core.failures import GraderFailure
    from bertlab_grader.core.locations import reference_sources

    def sandbox_dies(*args, **kwargs):
        raise GraderFailure("the sandbox died while no student code ran (/opt/grader/secret/path)")

    monkeypatch.setattr(grade_one, "grade_one", sandbox_dies)
    root = root_for({name: text.encode() for name, text in reference_sources().items()})
    assert gradescope.run(root) == 1
    document = _results(root)
    assert "score" not in document and all("score" not in t and "max_score" not in t for t in document["tests"])
    assert document["output"].startswith("NOT GRADED") and "not your grade" in document["output"]
    assert document["tests"][0]["status"] == "failed" and "NOT GRADED" in document["tests"][0]["name"]
    assert document["extra_data"]["bertlab"] == {"graded": False, "why": "autograder_failed"}
    assert "/opt/grader" not in json.dumps(document)  # the cause is the instructor's: stdout only
    assert "the sandbox died" in capsys.readouterr().out


def test_an_upload_without_exercise_files_is_not_graded(root_for):
    root = root_for({"notes.txt": b"hello", "Week_7_encoder.ipynb": b"{}"})
    assert gradescope.run(root) == 0
    document = _results(root)
    assert "score" not in document and document["extra_data"]["bertlab"]["why"] == "nothing_to_grade"
    assert all(name in document["output"] for name in EXERCISE_FILES)
    assert "Week_7_encoder.ipynb" in document["tests"][0]["output"]


def test_a_refused_zip_scores_zero_with_the_reason(root_for, tmp_path):
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("../cka.py", "x = 1\n")
    root = root_for({"evil.zip": archive.read_bytes()})
    assert gradescope.run(root) == 0
    document = _results(root)
    assert document["score"] == 0 and document["tests"]
    assert all("was not accepted" in t["output"] and "'..'" in t["output"] for t in document["tests"])
    assert {t["tags"][0] for t in document["tests"]} == set(GRADED_TASKS)


def test_find_upload_follows_the_kits_rules(tmp_path):
    from bertlab_grader.core.locations import reference_sources

    sources = reference_sources()
    upload = tmp_path / "upload"
    (upload / "hw" / "week7").mkdir(parents=True)
    (upload / "hw" / "week7" / "cka.py").write_text(sources["cka.py"])
    (upload / "hw" / "week7" / "pooling.py").write_text(sources["pooling.py"])
    (upload / "hw" / "other").mkdir()
    (upload / "hw" / "other" / "siamese.py").write_text(sources["siamese.py"])
    found = gradescope.find_upload(upload, tmp_path / "unzipped")
    assert found.folder == upload / "hw" / "other"  # the shallowest folder, then the first by name (the kit's rule)
    assert any(note.startswith("Missing:") and "NOT graded" in note for note in found.notes), found.notes

    staged = gradescope.stage({"cka.py": sources["cka.py"]}, tmp_path)
    assert staged.parent == tmp_path and stat.S_IMODE(staged.stat().st_mode) == 0o700
    assert (staged / "cka.py").read_text() == sources["cka.py"]

    archive_upload = tmp_path / "zipped"
    archive_upload.mkdir()
    with zipfile.ZipFile(archive_upload / "mine.zip", "w") as z:
        for name, text in sources.items():
            z.writestr(f"exercises/{name}", text)
    found = gradescope.find_upload(archive_upload, tmp_path / "unzipped2")
    assert found.folder == tmp_path / "unzipped2" / "exercises" and found.refused is None
    assert _files(found.folder) == sources

    from bertlab.handin.archive import write_archive
    from bertlab.handin.manifest import build_manifest
    from bertlab_grader.course.submissions import handin_notes

    packed = tmp_path / "packed"  # as `bertlab submit` writes it: files at the top, and MANIFEST.json
    packed.mkdir()
    files = {name: text.encode() for name, text in sources.items()}
    write_archive(packed / "week7-submission.zip", files, build_manifest(files, {}, "test"))
    found = gradescope.find_upload(packed, tmp_path / "unzipped4")
    assert found.refused is None and _files(found.folder) == sources
    assert handin_notes(found.folder) == []  # as checked: nothing to note

    with zipfile.ZipFile(archive_upload / "second.zip", "w") as z:
        z.writestr("cka.py", sources["cka.py"])
    found = gradescope.find_upload(archive_upload, tmp_path / "unzipped3")
    assert found.folder is None and "2 zip files" in found.refused


# ---------------------------------------------------------------------------------------------------
# The sandbox inside Gradescope's container


def test_without_bubblewrap_it_grades_unsafe_only_if_allowed(monkeypatch):
    from bertlab_grader.core.failures import GraderFailure
    from bertlab_grader.sandbox import launcher

    monkeypatch.setattr(launcher, "bubblewrap_status", lambda: (False, "bwrap: No permissions to create new namespace"))
    unsafe, why = gradescope.sandbox_decision(require_sandbox=False)
    assert unsafe is True and "namespace" in why
    with pytest.raises(GraderFailure, match="--require-sandbox"):
        gradescope.sandbox_decision(require_sandbox=True)
    monkeypatch.setattr(launcher, "bubblewrap_status", lambda: (True, "bubblewrap works"))
    assert gradescope.sandbox_decision(require_sandbox=True) == (False, "bubblewrap works")


def test_lock_hidden_files_leaves_the_worker_what_it_imports(tmp_path):
    from bertlab_grader.sandbox import template_process

    # What the server needs of the instructor package is the one folder the sandbox shows it.
    from bertlab_grader.core.locations import PACKAGE_DIR
    from bertlab_grader.sandbox.template_process import SANDBOX_INSIDE_DIR

    assert gradescope.WORKER_NEEDS == (SANDBOX_INSIDE_DIR.relative_to(PACKAGE_DIR).as_posix(),)
    assert template_process.SERVER_FILE.parent == SANDBOX_INSIDE_DIR

    package, source = tmp_path / "bertlab_grader", tmp_path / "source"
    for folder in (package / "sandbox" / "inside", package / "hidden", package / "solutions", package / "course",
                   source / "wheels"):
        folder.mkdir(parents=True)
    for name in ("__init__.py", "course/runner.py", "hidden/test_hidden_cka.py", "sandbox/launcher.py",
                 "sandbox/__init__.py", "sandbox/inside/server.py", "sandbox/inside/rpc.py"):
        (package / name).write_text("")
        (package / name).chmod(0o644)
    needed = {name: stat.S_IMODE((package / name).stat().st_mode) for name in gradescope.WORKER_NEEDS}
    locked = gradescope.lock_hidden_files(package, source)
    assert set(locked) == {source, package / "__init__.py", package / "course", package / "hidden", package / "solutions",
                           package / "sandbox" / "__init__.py", package / "sandbox" / "launcher.py"}
    for path in locked:
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path
    assert needed == {name: stat.S_IMODE((package / name).stat().st_mode) for name in gradescope.WORKER_NEEDS}
    assert all(mode & 0o004 for mode in needed.values())


# ---------------------------------------------------------------------------------------------------
# Gradescope's format


def _result(**extra) -> dict:
    tests = [
        {"name": "test_a", "task": "cka", "outcome": "passed", "points": 2.0, "max_points": 2.0, "message": ""},
        {"name": "test_b", "task": "pooling", "outcome": "failed", "points": 0.0, "max_points": 3.0,
         "message": "values off at row 1", "hint": "divides by the padded length"},
        {"name": "test_c", "task": "cka", "outcome": "error", "points": 0.0, "max_points": 1.0,
         "message": "Not implemented yet: cka: implement cka_matrix"},
        {"name": "test_speed", "task": "performance", "outcome": "failed", "points": 1.5, "max_points": 3.0,
         "message": "3.1x the reference's time", "ratio": 3.1},
    ]
    return {"student": "submission", "assignment": "week7", "score": 3.5, "max_score": 9.0, "sandboxed": False,
            "tests": tests, **extra}


def test_to_gradescope_carries_every_test():
    result = _result()
    document = to_gradescope(result, seconds=12.4, notes=("Graded: cka.py.",))
    check_gradescope_schema(document)
    # numbered task.test, tasks in gradebook order (performance last)
    assert [t["number"] for t in document["tests"]] == ["1.1", "2.1", "1.2", f"{len(GRADED_TASKS)}.1"]
    assert [(t["score"], t["max_score"], t["tags"]) for t in document["tests"]] == \
        [(t["points"], t["max_points"], [t["task"]]) for t in result["tests"]]
    assert document["tests"][1]["output"] == "values off at row 1\n\nLikely mistake: divides by the padded length"
    assert document["score"] == result["score"] and document["execution_time"] == 12
    assert document["leaderboard"] == [{"name": "test_speed (time / reference time)", "value": 3.1, "order": "asc"}]
    assert document["extra_data"]["bertlab"]["sandboxed"] is False
    assert "3.5 / 9" in document["output"] and "Graded: cka.py." in document["output"]


def test_hidden_tests_keep_the_score_out_of_the_output():
    document = to_gradescope(_result(), visibility="after_due_date")
    check_gradescope_schema(document)
    assert all(t["visibility"] == "after_due_date" for t in document["tests"])
    assert "3.5" not in document["output"] and "after due date" in document["output"]


def test_the_schema_holds_to_gradescopes_documentation():
    good = to_gradescope(_result())
    check_gradescope_schema(good)
    for broken, why in [({**good, "grade": 1}, "additional"),
                        ({**good, "visibility": "public"}, "visibility"),
                        ({k: v for k, v in good.items() if k not in ("score", "tests")}, "top level"),
                        ({**{k: v for k, v in good.items() if k != "score"},
                          "tests": [{"name": "x", "max_score": 1.0}]}, "tests/0"),
                        ({**good, "leaderboard": [{"name": "t"}]}, "leaderboard/0"),
                        ({**good, "execution_time": 1.5}, "execution_time")]:
        with pytest.raises(ValueError, match="gradescope.schema.json"):
            check_gradescope_schema(broken)
    informational = {"output": "x", "tests": [{"name": "NOT GRADED", "status": "failed"}]}
    check_gradescope_schema(informational)  # Gradescope's informational check: a status and no score


# ---------------------------------------------------------------------------------------------------
# Building the zip


def _kit_wheel(archive: Path, into: Path) -> Path:
    with zipfile.ZipFile(archive) as z:
        name = next(n for n in z.namelist() if n.startswith("wheels/bertlab-"))
        wheel = into / Path(name).name
        wheel.write_bytes(z.read(name))
    return wheel


def test_an_installed_kit_builds_the_same_kit_wheel(autograder, autograder_zip, tmp_path):
    # The kit in ROOT/bertlab-venv is installed from the zip's wheel (not editable): its zip must carry
    # a wheel rebuilt from the installed files (gradescope_zip.repack_installed) with the same content.
    python = autograder / "bertlab-venv" / "bin" / "python"
    proc = subprocess.run([python, "-m", "bertlab.cli", "gradescope", tmp_path / "again.zip", "--kit-wheel-only"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    original, rebuilt = _kit_wheel(autograder_zip, tmp_path / "a"), _kit_wheel(tmp_path / "again.zip", tmp_path / "b")
    assert rebuilt.name == original.name
    with zipfile.ZipFile(original) as a, zipfile.ZipFile(rebuilt) as b:
        record = next(n for n in b.namelist() if n.endswith(".dist-info/RECORD"))
        assert sorted(set(a.namelist()) - {record}) == sorted(set(b.namelist()) - {record})
        assert all(a.read(n) == b.read(n) for n in a.namelist() if n != record)
        assert b.namelist()[-1] == record and len(b.read(record).decode().splitlines()) == len(b.namelist())
    assert any(n.endswith("bertlab_grader/export/gradescope/gradescope.schema.json") for n in a.namelist())
    assert any(n.endswith("bertlab_grader/export/gradescope/files/run_autograder") for n in a.namelist())


def test_a_wheelhouse_that_lacks_a_dependency_is_named(autograder_zip, tmp_path):
    from bertlab.errors import UsageError
    from bertlab_grader.export.gradescope.archive import refuse_cuda, select_wheels

    kit_wheel = _kit_wheel(autograder_zip, tmp_path)
    empty = tmp_path / "wheelhouse"
    empty.mkdir()
    with pytest.raises(UsageError, match=r"has no wheel of .*--download"):
        select_wheels(kit_wheel, empty, tmp_path / "selected")
    with pytest.raises(UsageError, match="CUDA"):
        refuse_cuda([Path("torch-2.13.0-cp310-cp310-manylinux_2_28_x86_64.whl"),
                     Path("nvidia_cublas_cu12-12.8.4.1-py3-none-manylinux_2_27_x86_64.whl")], empty)
    refuse_cuda([Path("torch-2.13.0+cpu-cp310-cp310-manylinux_2_28_x86_64.whl")], empty)


def test_usage_errors_are_one_line(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    for args, expected in [((tmp_path / "autograder.tar",), "does not end in .zip"),
                           ((tmp_path / "autograder.zip",), "--download"),
                           ((tmp_path / "autograder.zip", "--download", "--kit-wheel-only"), "contradict")]:
        proc = _bertlab("gradescope", *args, env=env)
        assert proc.returncode == 2 and expected in proc.stderr, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    (tmp_path / "taken.zip").write_bytes(b"")
    proc = _bertlab("gradescope", tmp_path / "taken.zip", "--kit-wheel-only", env=env)
    assert proc.returncode == 2 and "--force" in proc.stderr
