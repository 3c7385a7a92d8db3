"""`bertlab submit`: what goes in, the check of a fresh copy, the archive and its manifest, the refusals.

The runs use a released bundle with the student package alone on the path (as tests/test_check.py
does): what a student has. Grading the archive and the nbgrader exchange are in
tests/test_handin_grading.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bertlab.handin.archive import write_archive
from bertlab.handin.files import handin_files
from bertlab.handin.manifest import (MANIFEST_NAME, build_manifest, changed_files, checked_kit_files, file_digest,
                                     kit_digest, manifest_note)
from bertlab.handin.ways import HAND_IN_FILE, WAYS, hand_in_paragraph
from bertlab.tasks import ASSIGNMENT, EXERCISE_FILES, EXERCISE_TASKS, EXERCISES
from bertlab_grader.core.locations import REFERENCE_DIR


def submit(bundle: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`bertlab submit ARGS` in the bundle as a student runs it: the bundle's own package on the path,
    the instructor package shadowed by a stand-in that fails to import."""
    shadow = bundle.parent / "shadow"
    (shadow / "bertlab_grader").mkdir(parents=True, exist_ok=True)
    (shadow / "bertlab_grader" / "__init__.py").write_text("raise ModuleNotFoundError(name='bertlab_grader')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(bundle / "src"), str(shadow)]), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "bertlab.cli", "submit", *args], cwd=cwd or bundle, env=env,
                          capture_output=True, text=True, timeout=900)


def use_solutions(bundle: Path) -> None:
    for name in EXERCISE_FILES:
        shutil.copy(REFERENCE_DIR / name, bundle / "exercises" / name)


def members(archive: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(archive) as z:
        return {name: z.read(name) for name in z.namelist()}


# ---------------------------------------------------------------------------------------------
# The pieces


def test_the_task_files_and_the_helpers_they_import_go_in_nothing_else(tmp_path):
    for e in EXERCISES:
        (tmp_path / e.filename).write_text("x = 1\n")
    first = EXERCISES[0].filename
    (tmp_path / first).write_text("from .helpers import y\n")
    (tmp_path / "helpers.py").write_text("from . import maths\ny = 2\n")  # a helper's helper too
    (tmp_path / "maths.py").write_text("z = 3\n")
    (tmp_path / "scratch.py").write_text("import helpers\n")  # imports a helper, but no task imports it
    (tmp_path / "notes.txt").write_text("my notes\n")
    tasks, helpers = handin_files(tmp_path)
    assert tasks == list(EXERCISE_FILES)
    assert helpers == ["helpers.py", "maths.py"]


def test_the_manifest_names_each_file_by_its_sha256_and_finds_what_changed(tmp_path):
    files = {"cka.py": b"a = 1\n", "pooling.py": b"b = 2\n"}
    manifest = build_manifest(files, {"cka": {"status": "passed", "passed": 3, "total": 3}}, "9.9")
    assert manifest["files"]["cka.py"] == file_digest(b"a = 1\n") and manifest["kit"] == "bertlab 9.9"
    assert manifest["files"]["cka.py"].startswith("sha256:") and len(manifest["files"]["cka.py"]) == 71
    assert changed_files(manifest, files) == []
    assert changed_files(manifest, {**files, "cka.py": b"a = 2\n"}) == ["cka.py"]
    assert changed_files(manifest, {"cka.py": b"a = 1\n"}) == ["pooling.py"]  # gone is changed too

    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    assert manifest_note(tmp_path, list(files)) is None  # no manifest: nothing to say
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
    assert manifest_note(tmp_path, list(files)) is None  # as checked
    (tmp_path / "pooling.py").write_bytes(b"b = 3\n")
    note = manifest_note(tmp_path, list(files))
    assert note.startswith("changed after it was checked: pooling.py") and "no points" in note
    (tmp_path / MANIFEST_NAME).write_text("{not json")
    assert manifest_note(tmp_path, list(files)) is None  # a broken manifest is ignored, never held against anyone


def test_the_manifest_identifies_the_kit_checked_against_and_the_grader_says_when_it_differs(tmp_path):
    files = {"cka.py": b"a = 1\n"}
    manifest = build_manifest(files, {}, "9.9")
    assert manifest["kit_digest"] == kit_digest() and manifest["kit_digest"].startswith("sha256:")
    (tmp_path / "cka.py").write_bytes(files["cka.py"])
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
    assert manifest_note(tmp_path, list(files)) is None  # the same kit, the same files
    # An adapted kit (a public test changed) under the same version number: another digest.
    adapted = dict(checked_kit_files())
    changed = tmp_path / "test_cka.py"
    changed.write_bytes(adapted["public_tests/test_cka.py"].read_bytes() + b"\n# one more check\n")
    adapted["public_tests/test_cka.py"] = changed
    (tmp_path / MANIFEST_NAME).write_text(json.dumps({**manifest, "kit_digest": kit_digest(adapted)}))
    note = manifest_note(tmp_path, list(files))
    assert note.startswith("checked against another kit than the course's (bertlab 9.9") and "no points" in note


def test_the_archive_replaces_the_old_one_only_when_complete(tmp_path, monkeypatch):
    target = tmp_path / "week7-submission.zip"
    write_archive(target, {"cka.py": b"old\n"}, {"files": {}})
    before = target.read_bytes()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(zipfile.ZipFile, "writestr", broken)
    with pytest.raises(OSError, match="disk full"):
        write_archive(target, {"cka.py": b"new\n"}, {"files": {}})
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [target.name], "no partial file is left behind"


def test_the_hand_in_paragraph_is_the_bundles_own_or_the_default(tmp_path):
    assert hand_in_paragraph(tmp_path, "a.zip") == WAYS["upload"].replace("{archive}", "a.zip")
    (tmp_path / HAND_IN_FILE).write_text("Upload {archive} to Moodle by Friday.\n")
    assert hand_in_paragraph(tmp_path, "a.zip") == "Upload a.zip to Moodle by Friday."


# ---------------------------------------------------------------------------------------------
# Real runs in a bundle


@pytest.mark.slow  # (over 10 s: the fast loop leaves it to the whole suite)
def test_submit_checks_a_fresh_copy_and_packs_exactly_what_it_checked(bundle):
    use_solutions(bundle)
    (bundle / "exercises" / "notes.txt").write_text("not handed in\n")
    proc = submit(bundle, cwd=bundle / "exercises")  # from inside exercises/, as `bertlab check` allows
    assert proc.returncode == 0, proc.stdout + proc.stderr
    archive = bundle / f"{ASSIGNMENT}-submission.zip"
    assert archive.is_file(), proc.stdout
    packed = members(archive)
    assert sorted(packed) == sorted([*EXERCISE_FILES, MANIFEST_NAME])
    for name in EXERCISE_FILES:
        assert packed[name] == (bundle / "exercises" / name).read_bytes()
    manifest = json.loads(packed[MANIFEST_NAME])
    assert manifest["files"] == {name: file_digest(packed[name]) for name in EXERCISE_FILES}
    assert set(manifest["tasks"]) == set(EXERCISE_TASKS)
    for task in EXERCISE_TASKS:
        assert manifest["tasks"][task]["status"] == "passed", (task, proc.stdout)
        assert re.search(rf"^  {task} +passed +(\d+)/\1$", proc.stdout, re.M), proc.stdout
    assert str(archive) in proc.stdout and "Hand in:" in proc.stdout and "does not pass" not in proc.stdout


@pytest.mark.slow  # (over 10 s: the fast loop leaves it to the whole suite)
def test_a_file_that_does_not_import_is_refused_and_the_old_archive_stays(bundle):
    first = submit(bundle)  # the untouched stubs: every task "not started", packed with a warning
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("does not pass yet") == len(EXERCISE_TASKS)
    archive = bundle / f"{ASSIGNMENT}-submission.zip"
    before = archive.read_bytes()

    broken = bundle / "exercises" / EXERCISE_FILES[1]
    lines = broken.read_text().splitlines()
    broken.write_text("\n".join(lines) + "\ndef oops(:\n")
    proc = submit(bundle)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{EXERCISE_FILES[1]}, line {len(lines) + 1}: SyntaxError" in proc.stderr, proc.stderr
    assert "nothing was written" in proc.stderr and "--anyway" in proc.stderr and "Traceback" not in proc.stderr
    assert archive.read_bytes() == before

    elsewhere = bundle / "out" / "mine.zip"
    anyway = submit(bundle, "--anyway", "--out", str(elsewhere))
    assert anyway.returncode == 0, anyway.stderr
    assert members(elsewhere)[EXERCISE_FILES[1]] == broken.read_bytes()
    assert "--anyway" in anyway.stdout and archive.read_bytes() == before


def test_an_import_error_names_the_file_and_line_where_it_was_raised(bundle):
    target = bundle / "exercises" / EXERCISE_FILES[0]
    text = target.read_text()
    target.write_text(text + "\nimport no_such_module_anywhere\n")
    proc = submit(bundle)
    assert proc.returncode == 2
    line = len(text.splitlines()) + 2
    assert f"{EXERCISE_FILES[0]}, line {line}: ModuleNotFoundError: No module named 'no_such_module_anywhere'" \
        in proc.stderr, proc.stderr
    assert not (bundle / f"{ASSIGNMENT}-submission.zip").exists()


def test_nbgrader_without_a_course_says_what_to_configure(bundle, tmp_path):
    pytest.importorskip("nbgrader")
    env_home = tmp_path / "home"
    env_home.mkdir()
    shadow = bundle.parent / "shadow"
    (shadow / "bertlab_grader").mkdir(parents=True, exist_ok=True)
    (shadow / "bertlab_grader" / "__init__.py").write_text("raise ModuleNotFoundError(name='bertlab_grader')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(bundle / "src"), str(shadow)]), "HOME": str(env_home),
           "JUPYTER_CONFIG_DIR": str(env_home / ".jupyter"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "bertlab.cli", "submit", "--nbgrader"], cwd=bundle, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no nbgrader course is configured" in proc.stderr and "course_id" in proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert not (bundle / f"{ASSIGNMENT}-submission.zip").exists()


def test_the_archive_goes_beside_exercises_or_to_a_zip_the_student_names(tmp_path):
    from bertlab.errors import UsageError
    from bertlab.handin.command import archive_destination

    exercises = tmp_path / "bundle" / "exercises"
    assert archive_destination(None, exercises, ASSIGNMENT) == (tmp_path / "bundle" / f"{ASSIGNMENT}-submission.zip").resolve()
    assert archive_destination(tmp_path / "mine.zip", exercises, ASSIGNMENT) == (tmp_path / "mine.zip").resolve()
    with pytest.raises(UsageError, match=r"--out .*mine\.tar: the archive must be a \.zip file"):
        archive_destination(tmp_path / "mine.tar", exercises, ASSIGNMENT)
