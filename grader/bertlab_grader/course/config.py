"""The course's configuration and set-up: names, the gradebook's URL, nbgrader_config.py, the
source and release notebooks (``init_course``), the course lock.

``course_db_url`` reads the URL a course's config sets, and ``CourseSettings.gradebook_url``
(course/settings.py) is its one caller: every other function here takes the ``CourseSettings`` of the
course (named in quotes, not imported: settings.py imports this module) and uses its one URL.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from importlib import metadata

from bertlab.fileio import atomic_write_text
from bertlab_grader.course.feedback import build_source_notebook
from bertlab_grader.course.submissions import (
    submitted_assignments,
    valid_id,
)


from bertlab.tasks import GRADED_TASKS  # (the order the gradebook and the feedback show the tasks)
from bertlab_grader.core.points import POINTS_EPSILON

log = logging.getLogger(__name__)

OUTCOMES = ("passed", "failed", "error", "timeout")

CONFIG_FILE = "nbgrader_config.py"
_BEGIN = "# --- bertlab: begin (managed by `bertlab grade`; edit outside this block) ---"
_OLD_BEGINS = ("# --- bertlab: begin (managed by bertlab init_course; edit outside this block) ---",)
_END = "# --- bertlab: end ---"
#: nbgrader's Gradebook default; the course id written when the config sets none.
DEFAULT_COURSE_ID = "default_course"


class CourseError(RuntimeError):
    """The course or gradebook is not in a state the operation needs; the message says what to do."""


class NbgraderCommandError(CourseError):
    """An ``nbgrader`` subprocess failed; ``stderr`` holds its error output."""

    def __init__(self, message: str, returncode: int, stdout: str, stderr: str):
        super().__init__(message)
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr



# ---------------------------------------------------------------------------------------------------
# names, paths, database URL


def check_name(kind: str, value: str) -> str:
    if not valid_id(value):
        raise ValueError(f"{kind} {value!r} is not usable as an nbgrader id: it must be 1-128 characters "
                         "without '/', '\\', '*', '?', '[', ']' or control characters, not starting with '.' "
                         "and not starting or ending with a space")
    return value


def ordered_tasks(names) -> list[str]:
    names = list(names)
    return [t for t in GRADED_TASKS if t in names] + sorted(n for n in names if n not in GRADED_TASKS)


def check_max_points(max_points: Mapping[str, float] | None) -> dict[str, float]:
    if not max_points:
        example = ", ".join(f"{task!r}: 10" for task in GRADED_TASKS[:2])
        raise ValueError(f"max_points is required: a mapping task -> points, e.g. {{{example}}}")
    out = {}
    for task in ordered_tasks(max_points):
        if task not in GRADED_TASKS:
            raise ValueError(f"unknown task {task!r} in max_points; tasks are {', '.join(GRADED_TASKS)}")
        points = float(max_points[task])
        if not math.isfinite(points) or points <= 0:
            raise ValueError(f"max_points[{task!r}] must be a positive number, not {max_points[task]!r}")
        out[task] = points
    return out


def normalise_db_url(db_url: str) -> str:
    """A relative SQLite path is made absolute (nbgrader runs in the course dir, callers may not)."""
    from sqlalchemy.engine import make_url

    url = make_url(db_url)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:" \
            and not url.database.startswith("file:") and not os.path.isabs(url.database):
        url = url.set(database=os.path.abspath(url.database))
        return url.render_as_string(hide_password=False)
    return db_url


def ensure_python_on_path() -> None:
    """Put the running Python's ``bin`` folder first on PATH (once).

    nbgrader runs its database migration as the command ``alembic``, found by name on PATH. From a
    virtualenv that is not activated (``VENV/bin/bertlab grade`` from cron or a CI step) that command
    is not on PATH and the gradebook cannot be created. The folder of ``sys.executable`` holds it.
    """
    bindir = os.path.dirname(sys.executable)
    parts = os.environ.get("PATH", "").split(os.pathsep)
    if bindir and bindir not in parts:
        os.environ["PATH"] = os.pathsep.join([bindir, *[p for p in parts if p]])


def _jupyter_data_dirs(distribution: str) -> list[str]:
    """The ``share/jupyter`` folder that ``distribution`` installed its data files into (nbconvert:
    its templates), found from the distribution's own file list, wherever the package was imported
    from: this Python's prefix, the base Python's, or another environment's site-packages that this one
    borrows (a ``.pth`` line or PYTHONPATH). Empty when it is not installed or lists no such files."""
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return []
    for file in dist.files or ():
        parts = file.parts
        for i in range(len(parts) - 1):
            if parts[i:i + 2] == ("share", "jupyter"):  # e.g. ../../../share/jupyter/nbconvert/templates/...
                return [os.path.realpath(dist.locate_file(Path(*parts[:i + 2])))]
    return []


def nbgrader_environment() -> dict[str, str]:
    """The environment for an ``nbgrader`` subprocess: this Python's ``bin`` on PATH, and on
    JUPYTER_PATH the data folder of the nbconvert that runs (its templates: without them feedback
    fails), which need not be under this Python's prefix: a virtualenv may use the packages of the base
    Python (``--system-site-packages``) or of another environment (a ``.pth`` line)."""
    ensure_python_on_path()
    env = dict(os.environ)
    data = [*_jupyter_data_dirs("nbconvert"), os.path.join(sys.prefix, "share", "jupyter")]
    existing = [p for p in env.get("JUPYTER_PATH", "").split(os.pathsep) if p]
    env["JUPYTER_PATH"] = os.pathsep.join(dict.fromkeys([*existing, *(d for d in data if os.path.isdir(d))]))
    return env


def _load_config(course_dir: Path):
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    if not (course_dir / CONFIG_FILE).is_file():
        return Config()
    return PyFileConfigLoader(CONFIG_FILE, path=str(course_dir)).load_config()


def _coursedir(course_dir: Path, gradebook_url: str | None = None):
    """nbgrader's own CourseDirectory for this course, configured as ``nbgrader`` would see it (with the
    settings' gradebook URL, when given, over the config's)."""
    from nbgrader.coursedir import CourseDirectory

    cfg = _load_config(course_dir)
    cfg.CourseDirectory.root = str(course_dir)
    if gradebook_url:
        cfg.CourseDirectory.db_url = gradebook_url
    return CourseDirectory(config=cfg), cfg


def course_db_url(course_dir: str | os.PathLike) -> str:
    """The gradebook URL the course's nbgrader_config.py sets, else nbgrader's default
    ``sqlite:///COURSE/gradebook.db`` (for ``CourseSettings.gradebook_url``, when no --db-url was given)."""
    coursedir, _ = _coursedir(Path(course_dir).resolve())
    return coursedir.db_url


def _sqlite_path(url: str) -> Path | None:
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database)


def gradebook_assignments(settings: "CourseSettings") -> set[str]:
    """The assignment names the course's gradebook (``settings.gradebook_url``) holds, read without
    creating or migrating it (an absent SQLite file holds none)."""
    import sqlalchemy as sa

    url = settings.gradebook_url
    path = _sqlite_path(url)
    if path is not None and not path.is_file():
        return set()
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            if not sa.inspect(conn).has_table("assignment"):
                return set()
            return {row[0] for row in conn.execute(sa.text("SELECT name FROM assignment"))}
    finally:
        engine.dispose()


def known_assignments(settings: "CourseSettings") -> set[str]:
    """Every assignment the course knows of: in its gradebook, in ``source/``, or handed in under
    ``submitted/``. Reads only."""
    course_dir = settings.root
    names = set(submitted_assignments(course_dir))
    source = course_dir / "source"
    if source.is_dir():
        names.update(p.name for p in source.iterdir() if p.is_dir() and not p.name.startswith("."))
    with contextlib.suppress(Exception):  # an unreadable gradebook is reported by check_gradebook
        names.update(gradebook_assignments(settings))
    return names


def check_gradebook(settings: "CourseSettings") -> str:
    """Make sure the course's gradebook can be opened and written, without changing it; returns its URL.

    Raises CourseError with one line that says what is wrong: an SQLite file (or its folder) that is
    missing or not writable, a server that does not answer, a URL that is not one.
    """
    import sqlalchemy as sa

    try:
        url = settings.gradebook_url
    except Exception as exc:  # noqa: BLE001 - a broken nbgrader_config.py, say
        raise CourseError(f"cannot read the course's {CONFIG_FILE}: {type(exc).__name__}: {exc}") from None
    try:
        path = _sqlite_path(url)
    except Exception as exc:  # noqa: BLE001 - sqlalchemy.exc.ArgumentError and friends
        raise CourseError(f"the gradebook URL {url!r} is not a database URL ({exc})") from None
    if path is not None:
        folder = path.parent
        if not folder.is_dir():
            raise CourseError(f"the gradebook {path} cannot be created: its folder {folder} does not exist")
        target = path if path.exists() else folder
        if not os.access(target, os.W_OK):
            raise CourseError(f"the gradebook {path} is not writable (check the permissions of {target})")
        return url
    engine = None
    try:
        engine = sa.create_engine(url)
        with engine.connect():
            pass
    except Exception as exc:  # noqa: BLE001 - a missing driver, a server that does not answer: one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CourseError(f"cannot open the gradebook at {sa.engine.make_url(url).render_as_string()}: "
                          f"{type(exc).__name__}: {first}") from None
    finally:
        if engine is not None:
            engine.dispose()
    return url


@contextlib.contextmanager
def course_lock(course_dir: Path):
    """One writer at a time per course (SQLite dislikes concurrent writers; files stay consistent)."""
    from filelock import FileLock

    lock_dir = course_dir / ".bertlab"
    lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    with FileLock(lock_dir / "gradebook.lock"):
        yield


# ---------------------------------------------------------------------------------------------------
# course set-up


def _config_block(existing_db_line: str | None, new_url: str | None) -> str:
    lines = [
        _BEGIN,
        "import os as _bertlab_os",
        "c.CourseDirectory.root = _bertlab_os.path.dirname(_bertlab_os.path.abspath(__file__))",
        "# nbgrader's default course_id '' breaks the assignment->course foreign key on PostgreSQL",
        "if not c.CourseDirectory.get('course_id'):",
        f"    c.CourseDirectory.course_id = {DEFAULT_COURSE_ID!r}",
    ]
    if new_url:
        lines.append(f"c.CourseDirectory.db_url = {new_url!r}")
    elif existing_db_line:
        lines.append(existing_db_line)
    lines.append(_END)
    return "\n".join(lines) + "\n"


def _write_config(settings: "CourseSettings") -> None:
    """The bertlab block of nbgrader_config.py: the settings' URL when the command line gave it, else
    the URL line an earlier run wrote (or none: nbgrader's default)."""
    path = settings.root / CONFIG_FILE
    original = path.read_text(encoding="utf-8") if path.exists() else ""
    text = original
    for old_begin in _OLD_BEGINS:  # a course set up by an earlier kit: its block is replaced in place
        text = text.replace(old_begin, _BEGIN)
    head, tail, old_block = text, "", ""
    if _BEGIN in text and _END in text:
        head, rest = text.split(_BEGIN, 1)
        old_block, tail = rest.split(_END, 1)
        tail = tail.lstrip("\n")
    existing_db_line = next((ln for ln in old_block.splitlines()
                             if ln.startswith("c.CourseDirectory.db_url")), None)
    if not head.strip():
        head = "# nbgrader configuration of a bertlab course\nc = get_config()  # noqa: F821\n\n"
    elif not head.endswith("\n"):
        head += "\n"
    new_url = settings.gradebook_url if settings.url_from_command_line else None
    new = head + _config_block(existing_db_line, new_url) + tail
    if new != original:
        atomic_write_text(path, new)


def _write_if_changed(path: Path, text: str) -> bool:
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    atomic_write_text(path, text)
    return True


def _gradebook_matches(settings: "CourseSettings", max_points: dict[str, float]) -> bool:
    from nbgrader.api import Gradebook, MissingEntry

    assignment = settings.assignment
    with Gradebook(settings.gradebook_url) as gb:
        try:
            nb = gb.find_notebook(assignment, assignment)
        except MissingEntry:
            return False
        cells = {c.name: c.max_score for c in nb.grade_cells}
        sources = {c.name for c in nb.source_cells}
        return (cells.keys() == max_points.keys() and sources == set(max_points)
                and all(abs(cells[t] - p) < POINTS_EPSILON for t, p in max_points.items()))


def _generate_assignment(settings: "CourseSettings") -> None:
    """Run nbgrader's GenerateAssignment converter in process (``nbgrader generate_assignment --force``)."""
    from nbgrader.converters import GenerateAssignment
    from nbgrader.utils import capture_log

    assignment = settings.assignment
    coursedir, cfg = _coursedir(settings.root, settings.gradebook_url)
    coursedir.assignment_id = assignment
    converter = GenerateAssignment(coursedir=coursedir, config=cfg)
    converter.force = True
    converter.create_assignment = True
    outcome = capture_log(converter)
    if not outcome["success"]:
        detail = outcome.get("log", "") + outcome.get("error", "")
        if "because there are submissions associated with it" in detail:
            raise CourseError(
                f"The tasks of {assignment!r} changed but the gradebook already holds submissions for it; "
                "nbgrader cannot add or remove grade cells then. Use a new assignment name or a fresh "
                f"course.\n{detail}")
        raise CourseError(f"nbgrader generate_assignment {assignment} failed:\n{detail}")


def init_course(settings: "CourseSettings", max_points: Mapping[str, float] | None = None) -> None:
    """Make ``settings.root`` an nbgrader course holding ``settings.assignment``; safe to call again.

    Writes the bertlab block of ``nbgrader_config.py`` (CourseDirectory.root, and
    ``settings.gradebook_url`` when the command line gave it, ``settings.url_from_command_line``; else
    a URL set earlier is kept, or nbgrader's default SQLite ``gradebook.db`` in the course), the source
    notebook with one grade cell per task of ``max_points`` (task -> points), and runs nbgrader's
    generate_assignment so the gradebook holds the assignment, notebook and cells exactly as ``nbgrader
    generate_assignment`` would record them (a later run of that command finds nothing to change).
    ``max_points`` is required.
    """
    course_dir, assignment = settings.root, settings.assignment
    check_name("assignment", assignment)
    points = check_max_points(max_points)
    ensure_python_on_path()  # the gradebook's migration runs `alembic` by name
    course_dir.mkdir(parents=True, exist_ok=True)
    with course_lock(course_dir):
        _write_config(settings)  # (now the config holds settings.gradebook_url: the given one, or its own)
        import nbformat

        source = course_dir / "source" / assignment / f"{assignment}.ipynb"
        changed = _write_if_changed(source, nbformat.writes(build_source_notebook(assignment, points)) + "\n")
        release = course_dir / "release" / assignment / f"{assignment}.ipynb"
        if changed or not release.exists() or not _gradebook_matches(settings, points):
            _generate_assignment(settings)


