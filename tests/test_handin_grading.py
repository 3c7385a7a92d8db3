"""`bertlab submit`'s hand-ins, graded: the archive as `bertlab grade` takes it, a file changed after the
check, and the nbgrader exchange end to end (release, submit, collect, grade).

One course, one `bertlab grade` run, four students who handed in the same files four ways:
- ann: the archive `bertlab submit` wrote, as ``submitted/ann/week7.zip``;
- bob: the same files loose in ``submitted/bob/week7/``;
- cal: ann's archive with one file changed after the check (the manifest no longer matches);
- the student of the exchange: `bertlab submit --nbgrader` from a bundle, `nbgrader collect` by the
  instructor (nbgrader names them by their login).
The files are the reference's with one mistake from the mutant bank, so the points are not all or
nothing. Minutes: marked slow.
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bertlab.handin.manifest import MANIFEST_NAME
from bertlab.tasks import ASSIGNMENT, EXERCISE_FILES
from bertlab_grader.authoring.release import release
from bertlab_grader.core.locations import REFERENCE_DIR
from bertlab_grader.course.config import init_course
from bertlab_grader.grading.scoring import max_points_by_task
from bertlab_grader.mutants.bank import load_bank
from bertlab_grader.course.settings import CourseSettings

pytestmark = pytest.mark.slow

MUTANT = "pool_divide_by_length"  # a mistake of one task: the others keep their points


def bertlab(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bertlab.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=1500)


def nbgrader(*args: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"nbgrader {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def nbgrader_config(course_id: str, exchange: Path, extra: str = "") -> str:
    return f"c = get_config()\nc.CourseDirectory.course_id = {course_id!r}\nc.Exchange.root = {str(exchange)!r}\n{extra}"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("handin")
    home = base / "home"  # nbgrader's caches and configuration, away from this machine's
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "JUPYTER_CONFIG_DIR": str(home / ".jupyter"),
           "JUPYTER_DATA_DIR": str(home / "data"), "HF_HUB_OFFLINE": "1"}

    bundle = release(base / "bundle", log=lambda *_: None)
    mutant, = [e for e in load_bank(MUTANT, kinds=("mutant",)) if e.name == MUTANT]
    for name in EXERCISE_FILES:
        shutil.copy(mutant.path / name if name == mutant.file else REFERENCE_DIR / name, bundle / "exercises" / name)

    # The exchange: the instructor's course releases the assignment, the student submits into it.
    exchange, course = base / "exchange", base / "course"
    exchange.mkdir()
    exchange.chmod(0o777)
    init_course(CourseSettings(course, ASSIGNMENT), max_points=max_points_by_task())
    with open(course / "nbgrader_config.py", "a", encoding="utf-8") as config:
        config.write("\n" + nbgrader_config("bl101", exchange).replace("c = get_config()\n", ""))
    nbgrader("release_assignment", ASSIGNMENT, cwd=course, env=env)
    (bundle / "nbgrader_config.py").write_text(nbgrader_config("bl101", exchange), encoding="utf-8")
    handed = bertlab("submit", "--nbgrader", cwd=bundle, env=env)
    assert handed.returncode == 0, handed.stdout + handed.stderr
    nbgrader("collect", ASSIGNMENT, cwd=course, env=env)
    login = getpass.getuser()
    assert (course / "submitted" / login / ASSIGNMENT / MANIFEST_NAME).is_file(), list(course.rglob("*"))[:40]

    # The archive, then loose, then changed after the check.
    submitted = bertlab("submit", cwd=bundle, env=env)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    archive = bundle / f"{ASSIGNMENT}-submission.zip"
    (course / "submitted" / "ann").mkdir(parents=True)
    shutil.copy(archive, course / "submitted" / "ann" / f"{ASSIGNMENT}.zip")
    (course / "submitted" / "bob" / ASSIGNMENT).mkdir(parents=True)
    for name in EXERCISE_FILES:
        shutil.copy(bundle / "exercises" / name, course / "submitted" / "bob" / ASSIGNMENT / name)
    changed = EXERCISE_FILES[0]
    (course / "submitted" / "cal" / ASSIGNMENT).mkdir(parents=True)
    with zipfile.ZipFile(archive) as source, \
            zipfile.ZipFile(course / "submitted" / "cal" / ASSIGNMENT / "handin.zip", "w") as target:
        for name in source.namelist():
            data = source.read(name)
            target.writestr(name, data + b"\n# edited after the check\n" if name == changed else data)

    grade = bertlab("grade", str(course), "--workers", "1", cwd=base, env=env)
    assert grade.returncode == 0, grade.stdout + grade.stderr
    results = {p.parent.parent.name: json.loads(p.read_text())
               for p in course.glob(f"autograded/*/{ASSIGNMENT}/results.json")}
    return {"results": results, "login": login, "changed": changed, "handed": handed}


def _points(result: dict) -> dict[str, float]:
    return {t["name"]: t["points"] for t in result["tests"] if t["task"] != "performance"}


def test_the_archive_gets_the_points_of_the_same_files_handed_in_loose(graded):
    results = graded["results"]
    ann, bob = results["ann"], results["bob"]
    assert _points(ann) == _points(bob)
    assert 0 < ann["score"] < ann["max_score"], "the mutant should cost some points and not all"
    assert "notes" not in ann and "notes" not in bob  # as checked; loose files carry no manifest


def test_a_file_changed_after_the_check_is_a_note_never_a_penalty(graded):
    cal = graded["results"]["cal"]
    assert cal["notes"] and cal["notes"][0].startswith(f"changed after it was checked: {graded['changed']}")
    # the edit is a comment: the same points as the unchanged files
    assert _points(cal) == _points(graded["results"]["bob"])


def test_the_exchange_hands_in_what_bertlab_grade_grades(graded):
    mine = graded["results"][graded["login"]]
    assert _points(mine) == _points(graded["results"]["bob"])
    assert "notes" not in mine
    assert "Handed in through nbgrader's exchange" in graded["handed"].stdout
