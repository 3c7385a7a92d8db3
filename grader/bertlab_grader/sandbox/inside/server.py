"""The sandboxed server's start-up: the one command the sandbox runs.

Started by ../launcher.py (inside bubblewrap when it works) as a module of this folder, which the
sandbox mounts alone under the package name ``bertlab_sandbox``::

    python -s -B -m bertlab_sandbox.server --control-fd N --kit-root DIR [--uid U] [--isolated] [--preload minilm]

It drops root (confine.py), sets its import path to the kit roots and the Python install, and only
then imports torch, transformers, numpy, bertlab and the named models it preloads: the warm
*template* (template.py) then waits for jobs on its control socket. Each job (one submission's
sources) runs in a *child* forked from it (child.py): the child limits itself, imports the student's
modules and serves the trusted side's requests (rpc.py frames) on a socket of its own. When the job
ends the template kills every other process it can see and wipes the writable scratch space, so
nothing one student leaves behind reaches the next. reports.py says what a student may read of an
error; copies.py how a call's inputs are copied.

These files run beside student code: they import nothing of the kit but one another (relatively: the
package's name differs inside the sandbox and out) and the student package ``bertlab``; this folder
and ``bertlab`` are the only kit paths the sandbox shows.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.util
import os
import signal
import socket
import sys
import tempfile
import time
import traceback

from .confine import PR_SET_CHILD_SUBREAPER, PR_SET_DUMPABLE, call_prctl, drop_privileges
from .reports import PATH_PREFIXES, path_prefixes


def _own_pid_namespace() -> bool:
    """Are we inside the sandbox's pid namespace (init is bwrap) and unprivileged there?"""
    try:
        with open("/proc/1/cmdline", "rb") as f:
            init = f.read().split(b"\0")[0]
    except OSError:
        return False
    return os.path.basename(init) == b"bwrap" and os.getpid() != 1 and os.geteuid() != 0


def _drop_kit_editable_finders() -> None:
    """Remove the import hooks of an editable install of the kit (setuptools' ``__editable___*_finder``).

    They map ``bertlab`` and ``bertlab_grader`` (its reference and suites inside) to the kit's
    folders, most of which the sandbox hides; probing those paths can raise PermissionError (a template that cannot import) and puts
    kit paths into a student's error messages. The launcher passes the kit's import roots
    (``--kit-root``) for what the server needs, so these hooks add nothing. Editable installs of
    other projects (a developer's transformers, say) keep theirs.
    """
    kit = {"bertlab", "bertlab_grader"}

    def of_kit(obj) -> bool:
        owner = getattr(obj, "__self__", obj)  # a path hook is a bound classmethod
        module = sys.modules.get(getattr(owner, "__module__", "") or "")
        name = getattr(module, "__name__", "") or ""
        return name.startswith("__editable__") and bool(kit & set(getattr(module, "MAPPING", {}) or {}))

    sys.meta_path[:] = [f for f in sys.meta_path if not of_kit(f)]
    sys.path_hooks[:] = [h for h in sys.path_hooks if not of_kit(h)]
    sys.path_importer_cache.clear()


def check_mounts() -> int:
    """The launcher's check of its mounts (``--check-mounts``): run as the template would (same uid, same
    sys.path), find and read what the template imports, without paying for importing it."""
    try:
        for name in ("numpy", "torch", "transformers", "safetensors", "bertlab", "bertlab.models", f"{__package__}.rpc"):
            spec = importlib.util.find_spec(name)
            if spec is None:
                raise ImportError(f"no module named {name!r} in the sandbox (sys.path: {sys.path})")
            if spec.origin and os.path.isabs(spec.origin):
                with open(spec.origin, "rb") as f:
                    f.read(1)
        with open(os.path.abspath(__file__), "rb") as f:
            f.read(1)
    except Exception:
        traceback.print_exc()
        return 1
    return 0


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--control-fd", type=int)
    parser.add_argument("--check-mounts", action="store_true",
                        help="check that what the template imports can be found and read, then exit")
    parser.add_argument("--kit-root", action="append", default=[])
    parser.add_argument("--uid", type=int)
    parser.add_argument("--isolated", action="store_true")
    parser.add_argument("--preload", action="append", default=[])
    args = parser.parse_args(argv)
    if args.control_fd is None and not args.check_mounts:
        parser.error("--control-fd is required")
    started = time.monotonic()
    if args.uid is not None:
        drop_privileges(args.uid)
    call_prctl(PR_SET_DUMPABLE, 0)       # no ptrace, no /proc/<pid>/mem or fd access for children
    call_prctl(PR_SET_CHILD_SUBREAPER, 1)  # orphans of a job stay ours to kill
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
                signal.SIGALRM):
        signal.signal(sig, signal.SIG_IGN)  # a job may signal us; only SIGKILL/SIGSTOP get through
    # ``-m`` put the working directory first on sys.path (/tmp in the sandbox, writable by the jobs):
    # imports come from the kit roots and the Python install only.
    here = {"", os.getcwd(), os.path.dirname(os.path.abspath(__file__))}
    sys.path[:] = [p for p in sys.path if p not in here]
    for root in reversed(args.kit_root):
        sys.path.insert(0, root)
    _drop_kit_editable_finders()
    PATH_PREFIXES[:] = path_prefixes(args.kit_root)
    if args.check_mounts:
        raise SystemExit(check_mounts())
    ctrl = socket.socket(fileno=args.control_fd)

    # Only now, as the unprivileged uid: torch and the child and template sides that use it.
    import numpy  # noqa: F401  (warm: every submission uses these)
    import torch
    import torch.nn.functional  # noqa: F401
    import transformers  # noqa: F401
    import safetensors.torch  # noqa: F401
    from . import rpc  # noqa: F401
    from bertlab import probes

    from .child import PREBUILT, PROBES
    from .template import Template, wipe_directory

    PROBES.update(probes.PROBES)

    try:
        import jaxtyping  # noqa: F401  (the stubs' annotations)
    except ImportError:
        pass
    warnings = []
    for name in args.preload:
        try:
            from bertlab.models import named_model

            model = named_model(name)
            ids = torch.tensor([[101, 7592, 2088, 102]])
            with torch.no_grad():  # one forward warms the kernels every child will use
                model(input_ids=ids, attention_mask=torch.ones_like(ids))
            if name != "minilm":  # MiniLM is shared by named_model itself; the others are fresh per call
                PREBUILT[name] = model
        except Exception as exc:
            warnings.append(f"could not preload {name!r}: {type(exc).__name__}: {exc}")
    if args.isolated and not _own_pid_namespace():
        warnings.append("--isolated given outside a bubblewrap pid namespace: cleaning up by process tree")
        args.isolated = False  # kill(-1) and wiping /tmp are only safe inside our own namespace
    scratch = "/tmp" if args.isolated else tempfile.gettempdir()
    if args.isolated:
        wipe_directory(scratch)
    # Everything loaded so far lives as long as the template, and every child inherits it: moved out
    # of the collector's view, a child's full collection (peak_memory's, before each measured call,
    # or one the allocation count sets off) walks the child's own objects only. Unfrozen, it walked
    # the ~380,000 objects of torch, transformers and MiniLM: 0.18 s each (measured), and writing their
    # headers copied the template's shared pages into every child.
    import gc
    gc.collect()
    gc.freeze()
    ready = {"op": "ready", "pid": os.getpid(), "uid": os.getuid(), "isolated": args.isolated,
             "setup_s": round(time.monotonic() - started, 3), "threads": torch.get_num_threads(),
             "warnings": warnings}
    Template(ctrl, args.isolated, scratch).serve(ready)


if __name__ == "__main__":
    main()
