"""The sandbox starts, isolates and grades wherever the kit, the course and the virtualenv live.

Each case copies the kit's sources (``src/bertlab/``, ``grader/``, ``solutions/``, ``tests/public/``,
``tests/hidden/``, ``docs/``, ``pyproject.toml``) and a submission (the reference sources, fences
stripped) to one layout and installs the copy into a virtualenv with pip, as a user would: editable
(``pip install -e``: setuptools' import hook maps the packages to the copy's folders, most of which the
sandbox hides) with the kit under /tmp, under a 0700 folder in /home, under /srv, in paths with
spaces, with the virtualenv in the submission folder's parent, or inside the kit; and non-editable
(the packages in the venv's site-packages). A fresh Python process (the venv's, PATH reduced to
/usr/bin:/bin as for a virtualenv that is not activated, cwd elsewhere)
starts ``Sandbox(kit_root=<copy>, hide=[<submission's parent>], preload=())`` and grades
``linear_cka``: the template must start under bubblewrap (no fallback, no "NOT isolated"), answer
correctly, and still hide the course and the kit's secret parts.

These are the layouts that broke before: mounts applied in the wrong order left the kit's parent
folders 0700 to the sandbox's unprivileged uid (a kit under /tmp with its venv inside), and a venv
under a hidden folder was not shown back, so the sandbox silently ran unisolated. Skipped only where
bubblewrap is not installed at all; where it is installed these must pass.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from bertlab_grader.sandbox import bubblewrap, launcher
from bertlab_grader.core.locations import REFERENCE_DIR
from venvs import copy_kit_sources, install_source, make_venv, this_site_packages, venv_purelib

if bubblewrap.find_bwrap() is None:
    pytest.skip("bubblewrap (bwrap) is not installed: the sandbox cannot run here", allow_module_level=True)

KIT = Path(__file__).resolve().parents[1]
SECRET = "SECRET-COURSE-FILE-4c1d"

# Appended to the submission's cka.py: what the student's process can see from where it runs.
PROBE = '''

def location_probe(paths):
    import importlib
    import os
    out = {"uid": os.getuid()}
    for name in ("bertlab_grader.solutions.cka", "bertlab_grader.hidden.conftest", "bertlab_grader.course.runner"):
        try:
            importlib.import_module(name)
            out[name] = "imported"
        except Exception as exc:
            out[name] = type(exc).__name__
    for p in paths:
        try:
            out[p] = sorted(os.listdir(p)) if os.path.isdir(p) else open(p).read()
        except OSError as exc:
            out[p] = type(exc).__name__
    return out
'''

# Run by the Python under test, in a process of its own: argv = kit_root, submission folder.
SCRIPT = '''
import json, sys
from pathlib import Path

kit, submission = Path(sys.argv[1]), Path(sys.argv[2])
import bertlab_grader, bertlab
from bertlab_grader.core.fences import strip_fences
from bertlab_grader.sandbox.launcher import Sandbox

# The copy is what runs, not the checkout the test suite came from.
assert Path(bertlab_grader.__file__).resolve().is_relative_to(kit.resolve()), bertlab_grader.__file__
assert Path(bertlab.__file__).resolve().is_relative_to(kit.resolve()), bertlab.__file__
import torch

sources = {p.name: strip_fences(p.read_text()) for p in sorted(submission.glob("*.py"))}
X = torch.randn(12, 5, generator=torch.Generator().manual_seed(0))
sb = Sandbox(kit_root=kit, hide=[submission.parent], preload=(), timeout_s=60.0)
try:
    with sb.session(sources) as impl:
        result = {"isolated": sb.isolated, "errors": impl.import_errors(), "cka": impl.cka.linear_cka(X, X),
                  "probe": impl.cka.location_probe(json.loads(sys.argv[3]))}
finally:
    sb.close()
print("RESULT " + json.dumps(result))
'''


def _venv(path: Path) -> Path:
    """A virtualenv that also sees the packages (torch & co.) of the environment running the tests,
    as a course would make one on top of its machine's packages (tests/venvs.py: a ``.pth`` line,
    not ``--system-site-packages``, since the tests themselves may run in a virtualenv)."""
    return make_venv(path, this_site_packages()) / "python"


def _submission(folder: Path) -> None:
    folder.mkdir(parents=True)
    for path in sorted(REFERENCE_DIR.glob("*.py")):
        if path.name != "__init__.py":
            text = path.read_text() + (PROBE if path.name == "cka.py" else "")
            (folder / path.name).write_text(text)
    (folder.parent / "gradebook.db").write_text(SECRET)


# id: (where the case's folder goes, folder mode, kit, course, student, venv: None | "course" | "kit"
#      | "installed")
CASES = {
    "tmp": ("/tmp", 0o755, "kit", "course", "alice", None),
    "home-0700": ("/home", 0o700, "kit", "course", "alice", None),
    "srv": ("/srv", 0o755, "kit", "course", "alice", None),
    "spaces": ("/tmp", 0o755, "my kit", "my course", "alice smith", None),
    "venv-beside-submission": ("/srv", 0o755, "kit", "course", "alice", "course"),
    "venv-inside-kit": ("/tmp", 0o755, "kit", "course", "alice", "kit"),
    "installed-in-venv": ("/srv", 0o755, "kit", "course", "alice", "installed"),
}


@pytest.fixture(params=sorted(CASES))
def layout(request):
    where, mode, kit_name, course_name, student, venv = CASES[request.param]
    if not os.access(where, os.W_OK):
        pytest.skip(f"cannot create a folder in {where} as this user")
    base = Path(where) / f"bertlab loc-{uuid.uuid4().hex[:8]}" if " " in kit_name else \
        Path(where) / f"bertlab-loc-{uuid.uuid4().hex[:8]}"
    base.mkdir(mode=mode)
    os.chmod(base, mode)
    try:
        kit, course = base / kit_name, base / course_name
        submission = course / student
        _submission(submission)
        if venv == "installed":  # the packages themselves in the venv's site-packages; no checkout
            python = _venv(base / "venv")
            source = copy_kit_sources(base / "source")
            install_source(python.parent, source, editable=False)
            shutil.rmtree(source)
            kit = venv_purelib(python.parent)
        else:
            copy_kit_sources(kit)
            python = _venv({"course": course / ".venv", "kit": kit / ".venv"}.get(venv, base / "venv"))
            install_source(python.parent, kit, editable=True)
        yield {"python": python, "kit": kit, "submission": submission, "course": course, "venv": venv}
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow  # (over 5 s each, or many cases: the fast loop leaves it to the whole suite)
def test_the_sandbox_grades_and_isolates_wherever_things_live(layout, tmp_path):
    kit, submission, course = layout["kit"], layout["submission"], layout["course"]
    installed = layout["venv"] == "installed"
    # The instructor package's folders: the copy's, or the installed package's in site-packages.
    grader = kit / "bertlab_grader" if installed else kit / "grader" / "bertlab_grader"
    solutions = grader / "solutions" if installed else kit / "solutions"
    hidden = grader / "hidden" if installed else kit / "tests" / "hidden"
    inside = Path("/tmp/.bertlab-kit/bertlab_sandbox")  # where the sandbox shows grader/bertlab_grader/sandbox/inside/
    looked_at = [str(course), str(course / "gradebook.db"), str(submission), str(grader), str(solutions),
                 str(hidden), str(solutions / "cka.py"), str(inside)]
    if not installed:
        looked_at += [str(kit), str(kit / "src"), str(kit / "tests")]
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(tmp_path)}
    done = subprocess.run([str(layout["python"]), "-c", SCRIPT, str(kit), str(submission), json.dumps(looked_at)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "NOT isolated" not in output and "bubblewrap not available" not in output, output[-4000:]
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert result["isolated"] is True and result["errors"] == {}
    assert result["cka"] == pytest.approx(1.0, abs=1e-9)
    probe = result["probe"]
    if os.geteuid() == 0:
        assert probe["uid"] != 0
    for name in ("bertlab_grader.solutions.cka", "bertlab_grader.hidden.conftest", "bertlab_grader.course.runner"):
        assert probe[name] == "ModuleNotFoundError", (name, probe[name])
    assert SECRET not in json.dumps(probe)
    # The course is hidden (an empty folder, or not there at all inside a hidden /home): only a
    # virtualenv inside it is shown back (its bin/, lib/, pyvenv.cfg).
    if layout["venv"] == "course":
        assert probe[str(course)] == [".venv"]
    else:
        assert probe[str(course)] in ([], "FileNotFoundError")
    assert probe[str(submission)] == "FileNotFoundError"
    if not installed:
        assert set(probe[str(kit)]) <= {"src", ".venv"}, probe[str(kit)]
        assert probe[str(kit / "src")] == ["bertlab"], probe[str(kit / "src")]
        assert probe[str(kit / "tests")] == "FileNotFoundError", probe[str(kit / "tests")]
    # Of the instructor package nothing is shown where it lies: the sandboxed server's own folder is
    # mounted alone elsewhere; the solutions and the hidden suites are nowhere.
    assert probe[str(grader)] in ([], "FileNotFoundError"), probe[str(grader)]
    for secret in (solutions, hidden, solutions / "cka.py"):
        assert probe[str(secret)] in ([], "FileNotFoundError"), (secret, probe[str(secret)])
    assert "server.py" in probe[str(inside)] and "cka.py" not in probe[str(inside)], probe[str(inside)]
