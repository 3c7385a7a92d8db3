"""Wheels and virtualenvs for the kit's tests: the kit as pip installs it, not as a checkout.

Dependencies are not downloaded again for each virtualenv: a ``.pth`` line makes the running
interpreter's site-packages visible to it, after the venv's own. Only the venv's own site-packages is
processed as a site directory, so the checkout's editable install (an import hook installed by a
``.pth`` file) stays inert there: ``bertlab`` and ``bertlab_grader`` come from the wheel under test,
and importlib.metadata finds the venv's own ``bertlab`` first. The student bundle's venv sees a
folder of symlinks instead (``machine_deps``) that leaves out every ``bertlab`` distribution, so not
even the checkout's metadata is there. (The kit's venv cannot use symlinks: its sandbox shows site
directories to student code, and a link into a hidden folder, a venv under /tmp say, would not resolve.)
Every test that needs a second environment makes it with ``make_venv``, from the environment the tests
run in; never with ``--system-site-packages``, whose base Python lacks the kit's dependencies when the
tests run in a virtualenv.
tools/acceptance/packaging.sh does the same from a fresh clone with real installs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parents[1]
from bertlab_grader.core.locations import WHEEL_SOURCES  # noqa: E402  (what building the wheel reads)
OWN = re.compile(r"^(bertlab|bertlab_grader|bertlab_student|__editable__\.bertlab|__editable___bertlab)", re.I)


def run(cmd, cwd: Path, timeout: int = 900, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", NO_COLOR="1", PIP_NO_INDEX="1",
                   PIP_DISABLE_PIP_VERSION_CHECK="1", **env)
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=environ, capture_output=True, text=True,
                          timeout=timeout)


def ok(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0, f"{' '.join(done.args)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def build_wheel(source: Path, out: Path) -> Path:
    """``pip wheel`` of the project at ``source`` (no dependencies, no download) into ``out``."""
    ok(run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", out, source],
             cwd=out.parent))
    wheel, = out.glob("*.whl")
    return wheel


def make_venv(where: Path, deps: Path) -> Path:
    """A fresh virtualenv at ``where`` whose interpreter also sees ``deps``; returns its bin/ folder."""
    ok(run([sys.executable, "-m", "venv", "--without-pip", where], cwd=where.parent))
    (venv_purelib(where / "bin") / "_machine_deps.pth").write_text(f"{deps}\n")
    return where / "bin"


def venv_purelib(venv_bin: Path) -> Path:
    """The venv's own site-packages, as its interpreter reports it."""
    script = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(ok(run([venv_bin / "python", "-c", script], cwd=venv_bin)).stdout.strip())


def pip_install(venv_bin: Path, wheel: Path) -> None:
    # This interpreter's pip, aimed at the venv: the venv has none of its own (--without-pip).
    ok(run([sys.executable, "-m", "pip", "--python", venv_bin / "python", "install", "--no-deps", wheel],
             cwd=wheel.parent))


def installed_names(venv_bin: Path) -> set[str]:
    """What the venv's own site-packages holds, besides the line that lends it this machine's packages."""
    return {p.name for p in venv_purelib(venv_bin).iterdir() if p.name not in ("_machine_deps.pth", "__pycache__")}


def requirement_names(lines) -> set[str]:
    return {re.split(r"[<>=!~;\[ ]", line.strip())[0].lower().replace("_", "-") for line in lines
            if line.strip() and not line.strip().startswith("#")}


def wheel_requires(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(metadata).decode()
    return requirement_names(line.split(":", 1)[1] for line in text.splitlines()
                             if line.startswith("Requires-Dist:") and "extra ==" not in line)


def this_site_packages() -> Path:
    """The site-packages of the interpreter running the tests (where the kit's dependencies are)."""
    return Path(sysconfig.get_paths()["purelib"])


def machine_deps(where: Path) -> Path:
    """A site-packages of symlinks to this machine's third-party packages, bertlab left out."""
    shelf = where / "site-packages"
    shelf.mkdir()
    for entry in this_site_packages().iterdir():
        if not OWN.match(entry.name) and entry.suffix != ".pth":
            (shelf / entry.name).symlink_to(entry)
    return shelf


def copy_kit_sources(source: Path) -> Path:
    """A copy of what building the kit reads (its checkout minus tests, tools, benchmarks) at ``source``:
    a copy, since building in place would leave build/ and egg-info in the checkout."""
    source.mkdir(parents=True, exist_ok=True)
    for name in WHEEL_SOURCES:
        path = KIT_ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(path, source / name)
    return source


def install_source(venv_bin: Path, source: Path, editable: bool) -> None:
    """``pip install [-e] source`` into the venv (no dependencies: the venv borrows them), as a user
    installs a checkout; this interpreter's pip and build backend, aimed at the venv."""
    ok(run([sys.executable, "-m", "pip", "--python", venv_bin / "python", "install", "--no-deps",
            "--no-build-isolation", *(["-e"] if editable else []), source], cwd=source.parent))


def install_kit(base: Path, deps: Path) -> tuple[Path, Path]:
    """(venv bin/, wheel): the kit built from a copy of its source files, installed non-editable."""
    source = copy_kit_sources(base / "source")
    (base / "wheels").mkdir()
    wheel = build_wheel(source, base / "wheels")
    venv_bin = make_venv(base / "venv", deps)
    pip_install(venv_bin, wheel)
    return venv_bin, wheel
