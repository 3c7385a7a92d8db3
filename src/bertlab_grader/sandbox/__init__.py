"""Running untrusted submissions: ``Sandbox`` (launcher.py, trusted side) and worker.py (sandbox side).

``from bertlab_grader.sandbox import Sandbox`` is resolved lazily, so the worker, which runs inside the
sandbox where only this directory and bertlab_grader/rpc.py are visible, never imports the trusted side.
"""

_LAUNCHER_NAMES = ("Sandbox", "SandboxError", "SandboxUnavailable", "bubblewrap_status", "FALLBACK_WARNING")


def __getattr__(name):
    if name in _LAUNCHER_NAMES:
        from . import launcher

        return getattr(launcher, name)
    raise AttributeError(name)


__all__ = list(_LAUNCHER_NAMES)
