"""Running untrusted submissions: ``Sandbox`` (launcher.py, trusted side) and worker.py (sandbox side).

``from grader.sandbox import Sandbox`` is resolved lazily, so the worker, which runs inside the
sandbox where only this directory and grader/rpc.py are visible, never imports the trusted side.
"""


def __getattr__(name):
    if name in ("Sandbox", "SandboxError", "FALLBACK_WARNING"):
        from . import launcher

        return getattr(launcher, name)
    raise AttributeError(name)
