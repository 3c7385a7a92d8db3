"""Does each handed-in file parse and import? Run as ``python -m bertlab.handin.imports FOLDER`` in a
fresh process (the student's own code, on their own machine, as `bertlab check` runs it): prints one
JSON object, {file name: "line N: ErrorType: message"} for each file that fails, {} when all import.

A file is imported as part of a package made of the folder (``from .pooling import ...`` works, as in
the grader), in the registry's order; a file that fails is reported at its own line, not at the line
of the file that imported it."""

from __future__ import annotations

import importlib
import json
import sys
import traceback
import types
import uuid
from pathlib import Path


def _where(exc: BaseException, folder: Path) -> str:
    """The line in the folder's files where ``exc`` was raised (a SyntaxError carries its own)."""
    if isinstance(exc, SyntaxError) and exc.lineno:
        return f"{Path(exc.filename or '?').name}, line {exc.lineno}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).parent == folder]
    if frames:
        return f"{Path(frames[-1].filename).name}, line {frames[-1].lineno}"
    return ""


def import_errors(folder: Path, files: list[str]) -> dict[str, str]:
    """{file: "where: ErrorType: message"} for each of ``files`` (names in ``folder``) that fails to import."""
    folder = Path(folder).resolve()
    package = types.ModuleType(f"_bertlab_handin_{uuid.uuid4().hex[:8]}")
    package.__path__ = [str(folder)]
    sys.modules[package.__name__] = package
    errors = {}
    for name in files:
        try:
            importlib.import_module(f"{package.__name__}.{Path(name).stem}")
        except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt from student code too
            if isinstance(exc, KeyboardInterrupt) and not isinstance(exc, Exception):
                raise
            where = _where(exc, folder)
            message = str(exc.msg if isinstance(exc, SyntaxError) else exc).strip().splitlines()
            errors[name] = f"{where + ': ' if where else ''}{type(exc).__name__}: {message[0] if message else ''}"
    return errors


def main(argv: list[str]) -> int:
    folder = Path(argv[0])
    files = argv[1:] or sorted(p.name for p in folder.glob("*.py"))
    print(json.dumps(import_errors(folder, files)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
