"""`bertlab gradescope OUT.zip`: the autograder archive Gradescope takes (docs/gradescope.md).

    OUT.zip
      setup.sh, run_autograder   at the root, as Gradescope requires (bertlab_grader/gradescope_autograder/)
      bertlab-gradescope.json    the settings run_autograder reads (grader/bertlab_grader/export/gradescope/autograder.py)
      wheels/                    the kit's wheel and every wheel it needs on Gradescope's image, so that
                                 setup.sh installs with `pip install --no-index --find-links wheels`

The kit's wheel is built from the kit that runs this command: from the checkout (`pip wheel`) when
the kit is installed editable, else repacked from the installed files (``repack_installed``).

The dependencies come from a wheelhouse, a folder of wheels for Gradescope's image (Ubuntu 22.04:
CPython 3.10, glibc 2.35, x86_64; torch's CPU build). ``pip download --no-index`` picks from it
exactly the wheels the kit needs there, offline, and names any that is missing. ``--download`` fills
the wheelhouse first from the package indexes (PyPI, and PyTorch's CPU index for torch): the only
step that needs the internet, done once. ``--kit-wheel-only`` leaves the dependencies out, for an
image whose Python already has them (the kit's own tests).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Optional

from bertlab.errors import ReportedError, UsageError
from bertlab_grader.core import locations
from bertlab_grader.export.gradescope.autograder import SETTINGS_FILE, VISIBILITIES
from bertlab_grader.core.locations import WHEEL_SOURCES

TEMPLATES = Path(__file__).parent / "files"  # setup.sh and run_autograder, as Gradescope runs them
TARGET_PYTHON = "3.10"        # python3 of Ubuntu 22.04, Gradescope's default base image
TARGET_GLIBC_MINOR = 35       # glibc 2.35 (Ubuntu 22.04): manylinux_2_35 and every older manylinux
TORCH_VERSION = "2.13.0"      # the README's pin
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
_NOT_IN_WHEEL = ("INSTALLER", "REQUESTED", "direct_url.json", "RECORD")  # written by pip at install time


def default_wheelhouse(python_version: str = TARGET_PYTHON) -> Path:
    """Where wheels for Gradescope's image are kept between builds: the user's cache folder."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "bertlab" / f"gradescope-wheels-cp{python_version.replace('.', '')}-manylinux-x86_64"


def target_args(python_version: str = TARGET_PYTHON) -> list[str]:
    """pip's options for Gradescope's interpreter: CPython ``python_version`` on glibc 2.35 x86_64.
    Every manylinux tag up to 2.35 is listed: pip does not widen a manylinux_2_x platform by itself."""
    nodot = python_version.replace(".", "")
    platforms = [f"manylinux_2_{minor}_x86_64" for minor in range(TARGET_GLIBC_MINOR, 4, -1)]
    platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    args = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp", "--abi", f"cp{nodot}"]
    for platform in platforms:
        args += ["--platform", platform]
    return args


def download_command(wheelhouse: Path, kit_wheel: Path, python_version: str = TARGET_PYTHON,
                     torch_version: str = TORCH_VERSION) -> list[str]:
    """``pip download`` of everything the kit needs on Gradescope's image into ``wheelhouse`` (needs the
    internet): PyPI for all but torch, whose CPU build comes from PyTorch's index."""
    return [sys.executable, "-m", "pip", "download", *target_args(python_version), "--dest", str(wheelhouse),
            "--extra-index-url", TORCH_CPU_INDEX, str(kit_wheel), f"torch=={torch_version}+cpu"]


# ---------------------------------------------------------------------------------------------------
# The kit's own wheel


def build_kit_wheel(out: Path) -> Path:
    """The wheel of the kit running this: built from its checkout, or repacked from its installed files."""
    out.mkdir(parents=True, exist_ok=True)
    if locations.CHECKOUT is not None:
        return _wheel_from_checkout(locations.CHECKOUT, out)
    return repack_installed(metadata.distribution("bertlab"), out)


def _wheel_from_checkout(checkout: Path, out: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="bertlab-wheel-") as tmp:
        source = Path(tmp) / "source"
        source.mkdir()
        for name in WHEEL_SOURCES:  # a copy: building in place would leave build/ and egg-info in the checkout
            path = checkout / name
            if path.is_dir():
                shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
            else:
                shutil.copy2(path, source / name)
        done = subprocess.run([sys.executable, "-m", "pip", "--isolated", "wheel", "--no-deps", "--no-build-isolation",
                               "--quiet", "--wheel-dir", str(out), str(source)], capture_output=True, text=True,
                              env=_pip_alone())
    if done.returncode != 0:
        raise ReportedError(f"building the kit's wheel from {checkout} failed:\n{done.stderr[-2000:]}")
    wheels = sorted(out.glob("bertlab-*.whl"))
    if len(wheels) != 1:
        raise ReportedError(f"building the kit's wheel left {len(wheels)} bertlab wheels in {out}")
    return wheels[0]


def repack_installed(dist: metadata.Distribution, out: Path) -> Path:
    """A wheel of an installed (not editable) distribution, from the files its RECORD lists: its
    top-level packages (top_level.txt) and its .dist-info, less what pip writes at install time; a
    fresh RECORD (the wheel format's sha256 and size per file). Installing it gives the same files."""
    files = list(dist.files or ())
    info = next((f.parts[0] for f in files if f.name == "METADATA" and f.parts[0].endswith(".dist-info")), None)
    direct = dist.read_text("direct_url.json")
    if direct and json.loads(direct).get("dir_info", {}).get("editable"):
        raise ReportedError(f"{dist.metadata['Name']} is installed editable but its checkout was not found; "
                            "run `bertlab gradescope` from an installed kit or from the checkout")
    tops = set((dist.read_text("top_level.txt") or "").split())
    tags = [line.split(":", 1)[1].strip() for line in (dist.read_text("WHEEL") or "").splitlines()
            if line.startswith("Tag:")]
    if info is None or not tops or not tags:
        raise ReportedError(f"{dist.metadata['Name']}'s installed metadata lists no .dist-info, top_level.txt or wheel "
                            "tag: cannot rebuild the kit's wheel from it; reinstall the kit")
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"]).lower()
    wheel = out / f"{name}-{dist.version}-{tags[0]}.whl"
    rows = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        members = sorted((f for f in files if _belongs_in_wheel(f, tops, info)),
                         key=lambda f: (f.parts[0] == info, str(f)))  # the .dist-info goes last
        for member in members:
            data = Path(dist.locate_file(member)).read_bytes()
            archive.writestr(member.as_posix(), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append((member.as_posix(), f"sha256={digest}", str(len(data))))
        record = f"{info}/RECORD"
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows([*rows, (record, "", "")])
        archive.writestr(record, buffer.getvalue())
    return wheel


def _belongs_in_wheel(member, tops: set, dist_info: str) -> bool:
    parts = member.parts
    if not parts or parts[0] == ".." or "__pycache__" in parts:
        return False  # console scripts (pip makes them again from entry_points.txt) and bytecode
    if parts[0] == dist_info:
        return len(parts) == 2 and parts[1] not in _NOT_IN_WHEEL
    return parts[0] in tops or parts[0].removesuffix(".py") in tops


# ---------------------------------------------------------------------------------------------------
# The wheelhouse


def _pip_alone() -> dict:
    """The environment for a pip that reads nothing of this machine's pip set-up: --isolated still
    loads the site-wide configuration files (a constraints file there would change the answer)."""
    return {**os.environ, "PIP_CONFIG_FILE": os.devnull}


def select_wheels(kit_wheel: Path, wheelhouse: Path, into: Path, python_version: str = TARGET_PYTHON,
                  torch_version: str = TORCH_VERSION) -> list[Path]:
    """Copy into ``into`` exactly the wheels the kit needs on Gradescope's image, taken from
    ``wheelhouse`` alone (``pip download --no-index``: offline). UsageError naming what is missing."""
    done = subprocess.run([sys.executable, "-m", "pip", "--isolated", "download", "--no-index", "--find-links",
                           str(wheelhouse), *target_args(python_version), "--dest", str(into), str(kit_wheel),
                           f"torch=={torch_version}"], capture_output=True, text=True, env=_pip_alone())
    if done.returncode != 0:
        missing = re.search(r"satisfies the requirement (\S+)", done.stderr)
        what = f"has no wheel of {missing.group(1)}" if missing else "cannot provide the kit's dependencies"
        raise UsageError(
            f"the wheelhouse {wheelhouse} {what} for Gradescope's image (CPython {python_version}, manylinux "
            "x86_64). Fill it once where there is internet: `bertlab gradescope OUT.zip --download "
            f"--wheelhouse {wheelhouse}` (docs/gradescope.md has the plain pip command). pip said: "
            + " ".join(line.strip() for line in done.stderr.splitlines() if line.startswith("ERROR"))[:400])
    wheels = sorted(into.glob("*.whl"))
    refuse_cuda(wheels, wheelhouse)
    return wheels


def refuse_cuda(wheels: list[Path], wheelhouse: Path) -> None:
    """UsageError when the selection holds torch's CUDA build (nvidia-* wheels, gigabytes): Gradescope
    has no GPU, and the kit needs torch's CPU build."""
    cuda = sorted(p.name for p in wheels if p.name.lower().startswith("nvidia_"))
    if cuda:
        raise UsageError(f"the wheelhouse {wheelhouse} holds torch's CUDA build (it pulls {len(cuda)} nvidia-* "
                         f"wheels, e.g. {cuda[0]}); Gradescope has no GPU. Remove torch and the nvidia-* wheels "
                         "from it and run again with --download, which takes torch's CPU build from "
                         f"{TORCH_CPU_INDEX}.")


def fill_wheelhouse(kit_wheel: Path, wheelhouse: Path, python_version: str, torch_version: str) -> None:
    """``pip download`` what the kit needs on Gradescope's image into ``wheelhouse`` (the internet)."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    command = download_command(wheelhouse, kit_wheel, python_version, torch_version)
    print("Downloading the wheels for Gradescope's image (once; later builds reuse them offline):\n  "
          + " ".join(command[1:]), file=sys.stderr, flush=True)
    if subprocess.run(command).returncode != 0:
        raise ReportedError("pip download failed (see above): without the internet, fill the wheelhouse on a "
                            "machine that has it and pass it with --wheelhouse DIR (docs/gradescope.md)")
    for stale in wheelhouse.glob("bertlab-*.whl"):  # the kit's wheel is built afresh for every zip
        stale.unlink()


# ---------------------------------------------------------------------------------------------------
# The zip


def build_zip(out: Path, *, wheelhouse: Optional[Path] = None, download: bool = False, kit_wheel_only: bool = False,
              python_version: str = TARGET_PYTHON, torch_version: str = TORCH_VERSION, assignment: str = "week7",
              visibility: str = "visible", require_sandbox: bool = False, force: bool = False) -> dict:
    """Write the autograder archive ``out``; a summary dict (path, bytes, wheels, wheelhouse)."""
    out = Path(out).resolve()
    if out.suffix.lower() != ".zip":
        raise UsageError(f"{out.name} does not end in .zip: Gradescope takes the autograder as a zip "
                         "(e.g. autograder.zip)")
    if out.exists() and not force:
        raise UsageError(f"{out} exists; pass --force to replace it")
    if not out.parent.is_dir():
        raise UsageError(f"no folder {out.parent} to write {out.name} into")
    if visibility not in VISIBILITIES:
        raise UsageError(f"visibility {visibility!r} is not one of {', '.join(VISIBILITIES)}")
    wheelhouse = Path(wheelhouse).resolve() if wheelhouse else default_wheelhouse(python_version)
    if not kit_wheel_only and not download and not wheelhouse.is_dir():
        raise UsageError(f"no wheelhouse at {wheelhouse}: the zip must carry the wheels Gradescope installs offline. "
                         f"Fill it once where there is internet: `bertlab gradescope {out.name} --download"
                         + ("" if wheelhouse == default_wheelhouse(python_version) else f" --wheelhouse {wheelhouse}")
                         + "`, or pass a folder of wheels with --wheelhouse DIR (docs/gradescope.md)")
    with tempfile.TemporaryDirectory(prefix="bertlab-gradescope-") as tmp:
        kit_wheel = build_kit_wheel(Path(tmp) / "kit")
        if kit_wheel_only:
            wheels = [kit_wheel]
        else:
            if download:
                fill_wheelhouse(kit_wheel, wheelhouse, python_version, torch_version)
            wheels = select_wheels(kit_wheel, wheelhouse, Path(tmp) / "selected", python_version, torch_version)
        settings = {"assignment": assignment, "visibility": visibility, "require_sandbox": require_sandbox,
                    "kit_version": metadata.version("bertlab"), "kit_wheel": kit_wheel.name,
                    "target": {"python": python_version, "platform": "manylinux x86_64 (glibc <= 2.35)",
                               "torch": f"{torch_version}+cpu"},
                    "dependencies_included": not kit_wheel_only}
        partial = out.with_name(f".{out.name}.partial")
        try:
            _write_zip(partial, wheels, settings)
            os.replace(partial, out)
        finally:
            partial.unlink(missing_ok=True)
    return {"path": out, "bytes": out.stat().st_size, "wheels": len(wheels),
            "wheelhouse": None if kit_wheel_only else wheelhouse}


def _entry(name: str, mode: int) -> zipfile.ZipInfo:
    entry = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    entry.external_attr = (0o100000 | mode) << 16  # a regular file with these permissions
    entry.compress_type = zipfile.ZIP_DEFLATED
    return entry


def _write_zip(path: Path, wheels: list[Path], settings: dict) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name in ("setup.sh", "run_autograder"):  # executable: Gradescope runs both
            archive.writestr(_entry(name, 0o755), (TEMPLATES / name).read_bytes())
        archive.writestr(_entry(SETTINGS_FILE, 0o644), json.dumps(settings, indent=1) + "\n")
        for wheel in wheels:  # wheels are zips already: stored, not compressed again
            archive.write(wheel, f"wheels/{wheel.name}", compress_type=zipfile.ZIP_STORED)


def gradescope_command(out: str, *, wheelhouse: Optional[str] = None, download: bool = False,
                       kit_wheel_only: bool = False, python_version: Optional[str] = None,
                       torch_version: Optional[str] = None, visibility: str = "visible",
                       require_sandbox: bool = False, force: bool = False) -> int:
    """`bertlab gradescope`: build the zip, then say what it holds and what to do with it."""
    python_version, torch_version = python_version or TARGET_PYTHON, torch_version or TORCH_VERSION
    if not re.fullmatch(r"3\.\d+", python_version):
        raise UsageError(f"--python-version {python_version!r}: give a CPython version such as 3.10")
    if download and kit_wheel_only:
        raise UsageError("--download and --kit-wheel-only contradict each other: choose one")
    summary = build_zip(Path(out), wheelhouse=Path(wheelhouse) if wheelhouse else None, download=download,
                        kit_wheel_only=kit_wheel_only, python_version=python_version, torch_version=torch_version,
                        visibility=visibility, require_sandbox=require_sandbox, force=force)
    print(f"Wrote {summary['path']} ({summary['bytes'] / 1e6:.1f} MB, {summary['wheels']} wheel(s)"
          + (f" from {summary['wheelhouse']}" if summary["wheelhouse"] else ", the kit's only") + ").")
    if kit_wheel_only:
        print("  Only the kit's wheel: setup.sh succeeds only on an image whose python3 already has the kit's "
              "dependencies (not Gradescope's stock image).")
    print("Next: on Gradescope, Configure Autograder -> upload this zip (base image Ubuntu 22.04); in the "
          "assignment's autograder settings give it at least 2 GB of memory (4 GB to be safe). Then Test "
          "Autograder with the reference solution and with the stubs (docs/gradescope.md).")
    return 0
