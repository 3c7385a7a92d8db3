"""Is bubblewrap usable here: finding bwrap, the namespaces it may create, and a trial run, cached.

``bubblewrap_status()`` answers once per bwrap binary, uid and command; ``SandboxUnavailable`` says
what is wrong and how to fix it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Optional

from bertlab_grader.core.failures import GraderFailure


# Where bwrap is looked for when it is not on PATH: a grader started from a virtualenv that is not
# activated, from cron or from systemd may have a PATH without /usr/bin. A module-level tuple so that
# tests can make bubblewrap "missing" on a machine that has it.
BWRAP_CANDIDATES = ("/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap")
INSTALL_HINT = ("Install it (Debian/Ubuntu: apt-get install bubblewrap), or, only if you accept running "
                "student code unisolated, pass --unsafe-no-sandbox.")
NAMESPACE_HINT = ("Allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; in a "
                  "container, run it with the privileges bwrap needs, e.g. docker --privileged or "
                  "--security-opt seccomp=unconfined), or, only if you accept running student code "
                  "unisolated, pass --unsafe-no-sandbox.")
# Probe results, keyed by the bwrap binary's identity (path, inode, mtime, size), our euid and the
# exact command: a changed PATH, a replaced binary or a different set of mounts is tried again.
bwrap_checked: dict[tuple, tuple[bool, str]] = {}




class SandboxError(GraderFailure):
    """The sandbox itself failed (could not start, or died while no student code ran): the grader's
    failure, never the submission's. A ``GraderFailure``, hence also a ``RuntimeError``."""


class SandboxUnavailable(SandboxError):
    """Bubblewrap is missing or cannot create its namespaces, and running student code unisolated
    was not asked for (``unsafe_no_sandbox``). ``str(exc)``: what is wrong, then how to fix it."""


# ============================================================================ bubblewrap itself

def find_bwrap() -> Optional[str]:
    """The bwrap binary: on PATH, else at one of BWRAP_CANDIDATES; None when there is none."""
    found = shutil.which("bwrap")
    if found:
        return os.path.abspath(found)
    for candidate in BWRAP_CANDIDATES:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def binary_key(path: str) -> tuple:
    try:
        st = os.stat(path)
        return (path, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size, os.geteuid())
    except OSError:
        return (path, None, os.geteuid())


def namespace_args() -> list[str]:
    """The namespaces the sandbox asks bwrap for."""
    if os.geteuid() == 0:
        # Not --unshare-all: as root that adds a user namespace mapping root to root, and the
        # server could then not switch to an unprivileged uid (see TemplateCommand.drop_uid).
        return ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    return ["--unshare-all"]


def sandbox_python() -> str:
    """The interpreter path to run inside the sandbox: sys.executable with its folder resolved (the
    sandbox shows real paths) but its own name kept, so that a virtualenv's ``bin/python`` symlink
    still finds its ``pyvenv.cfg`` (resolving it would start the base Python without the venv)."""
    exe = sys.executable or "/usr/bin/python3"
    return os.path.join(os.path.realpath(os.path.dirname(exe)), os.path.basename(exe))


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def trial_run(command: list[str], env: Optional[dict] = None, timeout: float = 60.0) -> tuple[bool, str]:
    """Run ``command``; (exited 0, its stderr or why it could not run)."""
    try:
        done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout,
                              cwd="/")
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout:g} s"
    except OSError as exc:
        return False, f"{type(exc).__name__}: {exc}"
    err = done.stderr.decode("utf-8", "replace")
    if done.returncode != 0:
        return False, err.strip() or f"exit code {done.returncode}"
    return True, err


def bubblewrap_status() -> tuple[bool, str]:
    """Can bubblewrap sandbox student code here? (works, one line saying why or why not).

    Starts a real bwrap with the namespaces the sandbox uses and a trivial Python inside (a few tens
    of ms): finding the binary is not enough, since a container may forbid the namespaces. Used by
    ``Sandbox`` (which refuses to run without isolation unless told to) and ``bertlab doctor``.
    Cached per bwrap binary and euid.
    """
    bwrap = find_bwrap()
    if bwrap is None:
        return False, "bubblewrap (bwrap) is not installed: not on PATH nor in " + ", ".join(BWRAP_CANDIDATES)
    key = ("status", *binary_key(bwrap))
    if key not in bwrap_checked:
        command = [bwrap, *namespace_args(), "--die-with-parent", "--new-session", "--ro-bind", "/", "/",
                   "--proc", "/proc", "--dev", "/dev", sandbox_python(), "-s", "-S", "-c", "pass"]
        ok, err = trial_run(command, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, timeout=30.0)
        if ok:
            try:
                name = _first_line(subprocess.run([bwrap, "--version"], capture_output=True, timeout=10,
                                                  stdin=subprocess.DEVNULL).stdout.decode("utf-8", "replace"))
            except (OSError, subprocess.SubprocessError):
                name = ""
            name = name if name.startswith("bubblewrap") else "bubblewrap"
            bwrap_checked[key] = (True, f"{name} at {bwrap} creates its namespaces")
        else:
            bwrap_checked[key] = (False, f"bubblewrap at {bwrap} cannot create its sandbox: {_first_line(err)}")
    return bwrap_checked[key]


def unavailable_error(reason: str) -> SandboxUnavailable:
    hint = INSTALL_HINT if "not installed" in reason else NAMESPACE_HINT
    return SandboxUnavailable(f"{reason}; student code cannot be isolated.\n{hint}")


def require_isolation(unsafe_no_sandbox: bool) -> None:
    """Refuse at once, before any grader starts, when bubblewrap cannot isolate student code here
    (SandboxUnavailable: the reason, then how to install or enable bubblewrap); nothing is checked
    when the instructor named --unsafe-no-sandbox."""
    if unsafe_no_sandbox:
        return
    ok, why = bubblewrap_status()
    if not ok:
        raise unavailable_error(why)


# ============================================================================ command line

