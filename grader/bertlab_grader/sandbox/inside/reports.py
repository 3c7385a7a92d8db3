"""What a student may read of an error: tracebacks by file name only, no sandbox-side folders."""

from __future__ import annotations

import os
import sys
import traceback

from .rpc import REBUILT_EXCEPTIONS



MESSAGE_LIMIT = 2000
TRACEBACK_LIMIT = 4000


# (prefix, replacement) pairs, longest prefix first: the sandbox-side folders of the kit and the
# Python install. Text the server writes for the student (exception messages, the tracebacks and
# warnings it prints) names files relative to them ("torch/nn/functional.py", "bertlab/models.py"):
# a student sees where in a library something failed, not how the grading machine is laid out.
PATH_PREFIXES: list[tuple[str, str]] = []


def path_prefixes(kit_roots) -> list[tuple[str, str]]:
    """The (prefix, replacement) pairs for ``kit_roots`` and this Python (see ``scrub_paths``)."""
    import site
    import sysconfig

    found: dict[str, str] = {}
    folders = [*kit_roots, *site.getsitepackages(), sysconfig.get_paths().get("stdlib") or "",
               sysconfig.get_paths().get("platstdlib") or "", os.path.dirname(os.path.abspath(__file__))]
    folders += [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")]
    for folder in folders:
        if folder and folder != "/":
            for variant in {folder.rstrip("/"), os.path.realpath(folder)}:
                found[variant + "/"] = ""
    for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix):
        if prefix and prefix != "/":
            for variant in {prefix.rstrip("/"), os.path.realpath(prefix)}:
                found.setdefault(variant + "/", "<python>/")
                found.setdefault(variant, "<python>")
    return sorted(found.items(), key=lambda kv: -len(kv[0]))


def scrub_paths(text: str, prefixes=None) -> str:
    """``text`` with the sandbox-side folders of the kit and the Python install cut off."""
    for prefix, replacement in PATH_PREFIXES if prefixes is None else prefixes:
        if prefix in text:
            text = text.replace(prefix, replacement)
    return text


def short_traceback(exc: BaseException) -> str:
    """A traceback for the student's output: every frame by file name only (``server.py``,
    ``cka.py``, ``functional.py``), never the sandbox-side path of the kit or the Python install."""
    lines = ["Traceback (most recent call last):\n"]
    try:
        for f in traceback.extract_tb(exc.__traceback__):
            lines.append(f'  File "{os.path.basename(f.filename)}", line {f.lineno}, in {f.name}\n')
        lines.append(scrub_paths("".join(traceback.format_exception_only(type(exc), exc))))
    except BaseException:
        lines.append(f"{type(exc).__name__}\n")
    return "".join(lines)


def student_visible_hooks() -> None:
    """In a child: what Python prints by itself (an uncaught exception in a thread, a warning) names
    files without their sandbox-side folders, like the server's own reports."""
    import threading
    import warnings

    def thread_hook(args):
        if args.exc_type is SystemExit:
            return
        name = getattr(args.thread, "name", "?")
        try:
            sys.stderr.write(f"Exception in thread {name}:\n{short_traceback(args.exc_value)}")
        except BaseException:
            pass

    original = warnings.formatwarning

    def formatwarning(message, category, filename, lineno, line=None):
        return scrub_paths(original(message, category, filename, lineno, line))

    threading.excepthook = thread_hook
    sys.excepthook = lambda typ, value, tb: sys.stderr.write(short_traceback(value))
    warnings.formatwarning = formatwarning


def describe_exception(exc: BaseException, student_files: set[str]) -> dict:
    """What the trusted side may see of a student exception: type, message, the student's frames."""
    try:
        message = str(exc)
    except BaseException:  # a student __str__ may raise anything
        message = "<unprintable exception message>"
    if not isinstance(message, str):
        message = "<unprintable exception message>"
    builtin = next((c.__name__ for c in type(exc).__mro__
                    if c.__module__ == "builtins" and c.__name__ in REBUILT_EXCEPTIONS), None)
    try:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename in student_files]
        lines = [f'  File "{os.path.basename(f.filename)}", line {f.lineno}, in {f.name}\n'
                 + (f"    {f.line}\n" if f.line else "") for f in frames]
    except BaseException:
        lines = []
    tb = "".join(lines)
    return {"type": str(type(exc).__name__)[:200], "builtin": builtin,
            "message": scrub_paths(message)[:MESSAGE_LIMIT], "traceback": tb[-TRACEBACK_LIMIT:],
            "fatal": not isinstance(exc, Exception)}
