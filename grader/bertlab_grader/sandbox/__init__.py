"""Running untrusted submissions: ``Sandbox`` (launcher.py, the trusted side) and ``inside/`` (the
only kit code that runs inside bubblewrap, mounted there alone).

``from bertlab_grader.sandbox import Sandbox`` is resolved lazily, so importing a sibling (the wire
format, the malloc pin) never starts the trusted side's imports.
"""

_LAUNCHER_NAMES = ("Sandbox", "SandboxError", "SandboxUnavailable", "bubblewrap_status", "FALLBACK_WARNING")


def __getattr__(name):
    if name in _LAUNCHER_NAMES:
        from bertlab_grader.sandbox import launcher

        return getattr(launcher, name)
    raise AttributeError(name)


__all__ = list(_LAUNCHER_NAMES)
