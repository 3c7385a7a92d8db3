"""bertlab's nbgrader course: set-up, the gradebook, results files, export and feedback.

An nbgrader course directory drives grading (docs/architecture.md). ``bertlab grade`` replaces only
``nbgrader autograde``: the hidden suites run in the sandbox, and each submission's results dict
(results.json, docs/results-format.md) is recorded here into nbgrader's own gradebook and ``autograded/`` folder, so
``nbgrader export`` and ``nbgrader generate_feedback`` work unchanged.

Layout (nbgrader's, plus two bertlab files)::

    COURSE/nbgrader_config.py                    CourseDirectory.root (and db_url when not the default)
    COURSE/gradebook.db                          the default SQLite gradebook (any SQLAlchemy URL works)
    COURSE/source/<a>/<a>.ipynb                  intro + one grade cell per task (grade_id = task)
    COURSE/release/<a>/<a>.ipynb                 written by nbgrader's generate_assignment
    COURSE/submitted/<student>/<a>/              the student's .py files (or a zip of them)
    COURSE/autograded/<student>/<a>/<a>.ipynb    per task: test, outcome, points, message, hint
    COURSE/autograded/<student>/<a>/results.json the results dict (docs/results-format.md)
    COURSE/feedback/<student>/<a>/<a>.html       written by ``nbgrader generate_feedback``
    COURSE/.bertlab/                             staging for extracted zips, the gradebook lock

Public API: :func:`init_course`, :func:`record_result`, :func:`write_results_json`, :func:`load_results`,
:func:`list_submissions`, :func:`read_submission_sources`, :func:`export_grades`,
:func:`generate_feedback`, :func:`error_result`, :func:`course_max_points`, :func:`course_db_url`.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import math
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Mapping
from pathlib import Path

from bertlab.fileio import atomic_write_text
from bertlab_grader.feedback import build_graded_notebook, build_source_notebook
from bertlab_grader.submissions import (  # noqa: F401  (re-exported: the course's one entry point)
    EXERCISE_FILES,
    LayoutProblem,
    Submission,
    SubmissionSources,
    UnsafeZipError,
    list_submissions,
    read_submission_sources,
    safe_extract_zip,
    scan_submitted,
    submission_digest,
    submitted_assignments,
    valid_id,
)

log = logging.getLogger(__name__)

#: The graded tasks, in the order the gradebook and the feedback show them.
from bertlab.tasks import GRADED_TASKS as TASKS  # noqa: E402
OUTCOMES = ("passed", "failed", "error", "timeout")

CONFIG_FILE = "nbgrader_config.py"
_BEGIN = "# --- bertlab: begin (managed by `bertlab grade`; edit outside this block) ---"
_OLD_BEGINS = ("# --- bertlab: begin (managed by bertlab init_course; edit outside this block) ---",)
_END = "# --- bertlab: end ---"
_EPS = 1e-6
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


def _check_name(kind: str, value: str) -> str:
    if not valid_id(value):
        raise ValueError(f"{kind} {value!r} is not usable as an nbgrader id: it must be 1-128 characters "
                         "without '/', '\\', '*', '?', '[', ']' or control characters, not starting with '.' "
                         "and not starting or ending with a space")
    return value


def _ordered_tasks(names) -> list[str]:
    names = list(names)
    return [t for t in TASKS if t in names] + sorted(n for n in names if n not in TASKS)


def _check_max_points(max_points: Mapping[str, float] | None) -> dict[str, float]:
    if not max_points:
        raise ValueError("max_points is required: a mapping task -> points, e.g. {'cka': 12, 'pooling': 8}")
    out = {}
    for task in _ordered_tasks(max_points):
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r} in max_points; tasks are {', '.join(TASKS)}")
        points = float(max_points[task])
        if not math.isfinite(points) or points <= 0:
            raise ValueError(f"max_points[{task!r}] must be a positive number, not {max_points[task]!r}")
        out[task] = points
    return out


def _normalise_db_url(db_url: str) -> str:
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
    from importlib import metadata

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


def _coursedir(course_dir: Path, db_url: str | None = None):
    """nbgrader's own CourseDirectory for this course, configured as ``nbgrader`` would see it."""
    from nbgrader.coursedir import CourseDirectory

    cfg = _load_config(course_dir)
    cfg.CourseDirectory.root = str(course_dir)
    if db_url:
        cfg.CourseDirectory.db_url = db_url
    return CourseDirectory(config=cfg), cfg


def course_db_url(course_dir: str | os.PathLike, db_url: str | None = None) -> str:
    """The gradebook URL of a course: ``db_url`` when given, else what the course's nbgrader_config.py
    sets, else nbgrader's default ``sqlite:///COURSE/gradebook.db``."""
    if db_url:
        return _normalise_db_url(db_url)
    coursedir, _ = _coursedir(Path(course_dir).resolve())
    return coursedir.db_url


def _sqlite_path(url: str) -> Path | None:
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database)


def gradebook_assignments(course_dir: str | os.PathLike, db_url: str | None = None) -> set[str]:
    """The assignment names the course's gradebook holds, read without creating or migrating it
    (an absent SQLite file holds none)."""
    import sqlalchemy as sa

    url = course_db_url(course_dir, db_url)
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


def known_assignments(course_dir: str | os.PathLike, db_url: str | None = None) -> set[str]:
    """Every assignment the course knows of: in its gradebook, in ``source/``, or handed in under
    ``submitted/``. Reads only."""
    course_dir = Path(course_dir)
    names = set(submitted_assignments(course_dir))
    source = course_dir / "source"
    if source.is_dir():
        names.update(p.name for p in source.iterdir() if p.is_dir() and not p.name.startswith("."))
    with contextlib.suppress(Exception):  # an unreadable gradebook is reported by check_gradebook
        names.update(gradebook_assignments(course_dir, db_url))
    return names


def check_gradebook(course_dir: str | os.PathLike, db_url: str | None = None) -> str:
    """Make sure the gradebook can be opened and written, without changing it; returns its URL.

    Raises CourseError with one line that says what is wrong: an SQLite file (or its folder) that is
    missing or not writable, a server that does not answer, a URL that is not one.
    """
    import sqlalchemy as sa

    try:
        url = course_db_url(course_dir, db_url)
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
def _course_lock(course_dir: Path):
    """One writer at a time per course (SQLite dislikes concurrent writers; files stay consistent)."""
    from filelock import FileLock

    lock_dir = course_dir / ".bertlab"
    lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    with FileLock(lock_dir / "gradebook.lock"):
        yield


# ---------------------------------------------------------------------------------------------------
# course set-up


def _config_block(existing_db_line: str | None, db_url: str | None) -> str:
    lines = [
        _BEGIN,
        "import os as _bertlab_os",
        "c.CourseDirectory.root = _bertlab_os.path.dirname(_bertlab_os.path.abspath(__file__))",
        "# nbgrader's default course_id '' breaks the assignment->course foreign key on PostgreSQL",
        "if not c.CourseDirectory.get('course_id'):",
        f"    c.CourseDirectory.course_id = {DEFAULT_COURSE_ID!r}",
    ]
    if db_url:
        lines.append(f"c.CourseDirectory.db_url = {db_url!r}")
    elif existing_db_line:
        lines.append(existing_db_line)
    lines.append(_END)
    return "\n".join(lines) + "\n"


def _write_config(course_dir: Path, db_url: str | None) -> None:
    path = course_dir / CONFIG_FILE
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
    new = head + _config_block(existing_db_line, db_url) + tail
    if new != original:
        atomic_write_text(path, new)


def _write_if_changed(path: Path, text: str) -> bool:
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    atomic_write_text(path, text)
    return True


def _gradebook_matches(db_url: str, assignment: str, max_points: dict[str, float]) -> bool:
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url) as gb:
        try:
            nb = gb.find_notebook(assignment, assignment)
        except MissingEntry:
            return False
        cells = {c.name: c.max_score for c in nb.grade_cells}
        sources = {c.name for c in nb.source_cells}
        return (cells.keys() == max_points.keys() and sources == set(max_points)
                and all(abs(cells[t] - p) < _EPS for t, p in max_points.items()))


def _generate_assignment(course_dir: Path, assignment: str, db_url: str | None) -> None:
    """Run nbgrader's GenerateAssignment converter in process (``nbgrader generate_assignment --force``)."""
    from nbgrader.converters import GenerateAssignment
    from nbgrader.utils import capture_log

    coursedir, cfg = _coursedir(course_dir, db_url)
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


def init_course(course_dir: str | os.PathLike, assignment: str = "week7",
                max_points: Mapping[str, float] | None = None, db_url: str | None = None) -> None:
    """Make ``course_dir`` an nbgrader course holding ``assignment``; safe to call again.

    Writes the bertlab block of ``nbgrader_config.py`` (CourseDirectory.root, and ``db_url`` when given;
    ``db_url=None`` keeps a URL set earlier, else nbgrader's default SQLite ``gradebook.db`` in the
    course), the source notebook with one grade cell per task of ``max_points`` (task -> points), and runs
    nbgrader's generate_assignment so the gradebook holds the assignment, notebook and cells exactly as
    ``nbgrader generate_assignment`` would record them (a later run of that command finds nothing to
    change). ``max_points`` is required.
    """
    course_dir = Path(course_dir).resolve()
    _check_name("assignment", assignment)
    points = _check_max_points(max_points)
    if db_url:
        db_url = _normalise_db_url(db_url)
    ensure_python_on_path()  # the gradebook's migration runs `alembic` by name
    course_dir.mkdir(parents=True, exist_ok=True)
    with _course_lock(course_dir):
        _write_config(course_dir, db_url)
        url = course_db_url(course_dir)
        import nbformat

        source = course_dir / "source" / assignment / f"{assignment}.ipynb"
        changed = _write_if_changed(source, nbformat.writes(build_source_notebook(assignment, points)) + "\n")
        release = course_dir / "release" / assignment / f"{assignment}.ipynb"
        if changed or not release.exists() or not _gradebook_matches(url, assignment, points):
            _generate_assignment(course_dir, assignment, url)


# ---------------------------------------------------------------------------------------------------
# results


def error_result(student: str, assignment: str, message: str, max_points: Mapping[str, float]) -> dict:
    """A valid zero-score results dict for a submission that could not be graded at all: one ``error``
    entry per task, each carrying ``message``."""
    points = _check_max_points(max_points)
    tests = [{"name": f"{task}: submission not graded", "task": task, "outcome": "error",
              "points": 0.0, "max_points": p, "message": message} for task, p in points.items()]
    return {"student": student, "assignment": assignment, "score": 0.0,
            "max_score": float(sum(points.values())), "tests": tests}


def validate_result(result: Mapping) -> dict:
    """Check a results dict against docs/results-format.md; return a clean copy (floats, known keys, ``score`` = the sum
    of the tests' points). Raises ValueError for an unknown task or outcome, points outside
    [0, max_points], or a student / assignment that cannot be an nbgrader id."""
    if not isinstance(result, Mapping):
        raise ValueError("a result must be a dict")
    for key in ("student", "assignment", "tests"):
        if key not in result:
            raise ValueError(f"result has no {key!r}")
    student = _check_name("student", result["student"])
    assignment = _check_name("assignment", result["assignment"])
    tests = []
    for i, t in enumerate(result["tests"]):
        where = f"test {i} ({t.get('name', '?')!r})" if isinstance(t, Mapping) else f"test {i}"
        if not isinstance(t, Mapping):
            raise ValueError(f"{where} is not a dict")
        if t.get("task") not in TASKS:
            raise ValueError(f"{where}: task {t.get('task')!r} is not one of {', '.join(TASKS)}")
        if t.get("outcome") not in OUTCOMES:
            raise ValueError(f"{where}: outcome {t.get('outcome')!r} is not one of {', '.join(OUTCOMES)}")
        pts, mx = float(t.get("points", 0.0)), float(t.get("max_points", 0.0))
        if not (math.isfinite(pts) and math.isfinite(mx) and 0 <= pts <= mx + _EPS):
            raise ValueError(f"{where}: points {pts} must lie in [0, max_points={mx}]")
        clean = {"name": str(t.get("name", "")), "task": t["task"], "outcome": t["outcome"],
                 "points": pts, "max_points": mx, "message": str(t.get("message") or "")}
        if t.get("hint"):
            clean["hint"] = str(t["hint"])
        if t.get("ratio") is not None:
            ratio = float(t["ratio"])
            if not (math.isfinite(ratio) and ratio > 0):
                raise ValueError(f"{where}: ratio {ratio} must be a positive number")
            clean["ratio"] = ratio
        tests.append(clean)
    score = sum(t["points"] for t in tests)
    max_score = sum(t["max_points"] for t in tests)
    if "score" in result and abs(float(result["score"]) - score) > _EPS:
        # the gradebook sums the tests' points per task; results.json must say the same
        log.warning("%s/%s: score %s is not the sum of its tests' points; recording %s",
                    student, assignment, result["score"], score)
    out = {"student": student, "assignment": assignment, "score": float(score),
           "max_score": float(result.get("max_score", max_score)), "tests": tests}
    if result.get("submission_digest") is not None:
        if not isinstance(result["submission_digest"], str):
            raise ValueError("submission_digest must be a string")
        out["submission_digest"] = result["submission_digest"]
    if result.get("sandboxed") is not None:
        if not isinstance(result["sandboxed"], bool):
            raise ValueError("sandboxed must be true or false")
        out["sandboxed"] = result["sandboxed"]
    return out


def autograded_dir(course_dir: str | os.PathLike, student: str, assignment: str) -> Path:
    return Path(course_dir) / "autograded" / student / assignment


RESULTS_SCHEMA = Path(__file__).resolve().parent / "results.schema.json"
_SCHEMA_VALIDATOR = None


def check_results_schema(result: Mapping) -> None:
    """Raise ValueError unless ``result`` is a results.json document as ``results.schema.json`` (the
    published format, docs/results-format.md) describes it. Every results.json the kit writes, and
    every document ``grade-one --json`` prints, passes through here."""
    global _SCHEMA_VALIDATOR
    import jsonschema

    if _SCHEMA_VALIDATOR is None:
        _SCHEMA_VALIDATOR = jsonschema.Draft202012Validator(json.loads(RESULTS_SCHEMA.read_text(encoding="utf-8")))
    errors = sorted(_SCHEMA_VALIDATOR.iter_errors(result), key=lambda e: list(e.path))
    if errors:
        first = errors[0]
        where = "/".join(map(str, first.path)) or "(top level)"
        raise ValueError(f"results document does not match results.schema.json at {where}: {first.message}")


def write_results_json(course_dir: str | os.PathLike, result: Mapping) -> Path:
    """Write ``autograded/<student>/<assignment>/results.json`` atomically; return its path."""
    result = validate_result(result)
    check_results_schema(result)
    path = autograded_dir(course_dir, result["student"], result["assignment"]) / "results.json"
    atomic_write_text(path, json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    return path


def load_results(course_dir: str | os.PathLike, assignment: str) -> dict[str, dict]:
    """The results already written for ``assignment``: ``{student: result}``. A missing, unreadable or
    inconsistent results.json is skipped (that student is graded again)."""
    root = Path(course_dir) / "autograded"
    out: dict[str, dict] = {}
    if not root.is_dir():
        return out
    for student_dir in sorted(root.iterdir()):
        path = student_dir / assignment / "results.json"
        if not path.is_file():
            continue
        try:
            result = validate_result(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            log.warning("ignoring %s: %s", path, exc)
            continue
        if result["student"] != student_dir.name or result["assignment"] != assignment:
            log.warning("ignoring %s: it is for %s/%s", path, result["student"], result["assignment"])
            continue
        out[student_dir.name] = result
    return out


def course_max_points(course_dir: str | os.PathLike, assignment: str = "week7",
                      db_url: str | None = None) -> dict[str, float]:
    """task -> points of ``assignment`` as the gradebook holds them (what :func:`error_result` needs)."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(course_db_url(course_dir, db_url)) as gb:
        try:
            cells = {c.name: c.max_score for c in gb.find_notebook(assignment, assignment).grade_cells}
        except MissingEntry:
            raise CourseError(f"the gradebook has no assignment {assignment!r}: run init_course first") from None
    return {t: cells[t] for t in _ordered_tasks(cells)}


def _submission_timestamp(course_dir: Path, student: str, assignment: str):
    """The submission time nbgrader's collect step wrote, if any."""
    from nbgrader.utils import parse_utc

    path = course_dir / "submitted" / student / assignment / "timestamp.txt"
    try:
        text = path.read_text(encoding="utf-8").strip()
        return (parse_utc(text), text) if text else (None, None)
    except (OSError, ValueError):
        return None, None


_OPEN_GRADEBOOKS: dict[str, object] = {}  # db_url -> nbgrader Gradebook kept open by keep_gradebook_open


@contextlib.contextmanager
def keep_gradebook_open(course_dir: str | os.PathLike, db_url: str | None = None):
    """Within this block, ``record_result`` on this course reuses one gradebook connection.

    Opening nbgrader's Gradebook builds a new SQLAlchemy engine, so every statement is compiled again:
    about 60 of the 75 ms a record took (measured). A cohort run records hundreds of results in a row.
    Each record still commits on its own, so a killed run loses nothing recorded.
    """
    from nbgrader.api import Gradebook

    ensure_python_on_path()
    url = course_db_url(Path(course_dir).resolve(), db_url)
    if url in _OPEN_GRADEBOOKS:
        yield
        return
    gb = Gradebook(url)
    _OPEN_GRADEBOOKS[url] = gb
    try:
        yield
    finally:
        _OPEN_GRADEBOOKS.pop(url, None)
        gb.close()


@contextlib.contextmanager
def _gradebook(db_url: str):
    """The gradebook kept open for ``db_url``, or a new one closed on exit."""
    if db_url in _OPEN_GRADEBOOKS:
        yield _OPEN_GRADEBOOKS[db_url]
        return
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gb:
        yield gb


def _record_in_gradebook(db_url: str, result: dict, timestamp) -> dict[str, float]:
    """Upsert student, submission, submitted notebook and one grade per task; return task -> max points."""
    from nbgrader.api import Grade, MissingEntry, SubmittedNotebook
    from sqlalchemy.exc import SAWarning

    student, assignment = result["student"], result["assignment"]
    with _gradebook(db_url) as gb, warnings.catch_warnings():
        # nbgrader's add_submission builds rows before adding them to the session; SQLAlchemy warns
        warnings.simplefilter("ignore", SAWarning)
        try:
            notebook = gb.find_notebook(assignment, assignment)
        except MissingEntry:
            raise CourseError(f"the gradebook has no assignment {assignment!r} with notebook "
                              f"{assignment!r}: run init_course first") from None
        cells = {c.name: c for c in notebook.grade_cells}
        unknown = {t["task"] for t in result["tests"]} - cells.keys()
        if unknown:
            raise CourseError(f"result for {student} has tasks {sorted(unknown)} that {assignment!r} does not "
                              f"grade (its grade cells: {sorted(cells)})")
        scores = {name: 0.0 for name in cells}
        maxima = {name: 0.0 for name in cells}
        for t in result["tests"]:
            scores[t["task"]] += t["points"]
            maxima[t["task"]] += t["max_points"]
        for name, cell in cells.items():
            if maxima[name] and abs(maxima[name] - cell.max_score) > _EPS:
                log.warning("%s/%s: task %s tests are worth %g points but its grade cell is worth %g",
                            student, assignment, name, maxima[name], cell.max_score)

        gb.update_or_create_student(student)
        kwargs = {"timestamp": timestamp} if timestamp is not None else {}
        submission = gb.update_or_create_submission(assignment, student, **kwargs)
        try:
            sub_nb = gb.find_submission_notebook(assignment, assignment, student)
        except MissingEntry:  # the notebook was (re)created after this submission was first recorded
            sub_nb = SubmittedNotebook(notebook=notebook, assignment=submission)
            gb.db.add(sub_nb)
        try:
            grades = {g.cell_id: g for g in sub_nb.grades}
            for name, cell in cells.items():
                grade = grades.get(cell.id)
                if grade is None:
                    grade = Grade(cell_id=cell.id, notebook=sub_nb)
                    gb.db.add(grade)
                grade.auto_score = scores[name]
                # as nbgrader's autograder: a human score already given is kept, and flagged for review
                grade.needs_manual_grade = grade.manual_score is not None
            gb.db.commit()
        except Exception:
            gb.db.rollback()
            raise
        return {name: cells[name].max_score for name in _ordered_tasks(cells)}


def record_result(course_dir: str | os.PathLike, result: Mapping, db_url: str | None = None,
                  *, timestamp: datetime.datetime | str | None = None) -> Path:
    """Record one graded submission (idempotent: recording a student again replaces the earlier result).

    Upserts the student, the SubmittedAssignment / SubmittedNotebook and one auto-scored grade per task
    (the sum of that task's test points) in the gradebook; writes the graded notebook
    ``autograded/<student>/<assignment>/<assignment>.ipynb`` that ``nbgrader generate_feedback`` renders,
    copies nbgrader's ``timestamp.txt`` / ``submission_secret.txt`` from the submitted folder when the
    collect step wrote them, and writes ``results.json`` last. ``timestamp`` overrides the submission time
    (else the submitted ``timestamp.txt`` is used). Returns the autograded folder.
    """
    import nbformat

    course_dir = Path(course_dir).resolve()
    result = validate_result(result)
    student, assignment = result["student"], result["assignment"]
    url = course_db_url(course_dir, db_url)
    ts_value, ts_text = _submission_timestamp(course_dir, student, assignment)
    if timestamp is not None:
        from nbgrader.utils import parse_utc
        ts_value = parse_utc(timestamp)
        ts_text = ts_value.isoformat(sep=" ")
    with _course_lock(course_dir):
        max_points = _record_in_gradebook(url, result, ts_value)
        dest = autograded_dir(course_dir, student, assignment)
        nb = build_graded_notebook(assignment, max_points, result)
        atomic_write_text(dest / f"{assignment}.ipynb", nbformat.writes(nb) + "\n")
        if ts_text:
            atomic_write_text(dest / "timestamp.txt", ts_text + "\n")
        secret = course_dir / "submitted" / student / assignment / "submission_secret.txt"
        if secret.is_file() and not secret.is_symlink():
            atomic_write_text(dest / "submission_secret.txt", secret.read_text(encoding="utf-8"))
        write_results_json(course_dir, result)
    return dest


# ---------------------------------------------------------------------------------------------------
# nbgrader commands


def _run_nbgrader(course_dir: Path, args: list[str], timeout: float) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "nbgrader", *args]
    try:
        proc = subprocess.run(cmd, cwd=course_dir, capture_output=True, text=True, timeout=timeout,
                              env=nbgrader_environment())
    except subprocess.TimeoutExpired as exc:
        raise NbgraderCommandError(f"nbgrader {' '.join(args)} took longer than {timeout:g} s", -1,
                                   str(exc.stdout or ""), str(exc.stderr or "")) from None
    if proc.returncode != 0:
        raise NbgraderCommandError(
            f"nbgrader {' '.join(args)} failed (exit {proc.returncode}) in {course_dir}:\n{proc.stderr.strip()}",
            proc.returncode, proc.stdout, proc.stderr)
    return proc


def _db_args(db_url: str | None) -> list[str]:
    return [f"--CourseDirectory.db_url={_normalise_db_url(db_url)}"] if db_url else []


def export_grades(course_dir: str | os.PathLike, db_url: str | None = None, timeout: float = 600) -> Path:
    """Run ``nbgrader export`` in the course; return the path of ``grades.csv``."""
    course_dir = Path(course_dir).resolve()
    dest = course_dir / "grades.csv"
    _run_nbgrader(course_dir, ["export", f"--to={dest}", *_db_args(db_url)], timeout)
    if not dest.is_file():
        raise CourseError(f"nbgrader export finished but wrote no {dest}")
    return dest


def generate_feedback(course_dir: str | os.PathLike, assignment: str = "week7", db_url: str | None = None,
                      student: str | None = None, timeout: float = 600) -> Path:
    """Run ``nbgrader generate_feedback ASSIGNMENT --force`` in the course (optionally for one student);
    return the ``feedback`` folder (``feedback/<student>/<assignment>/<assignment>.html``)."""
    course_dir = Path(course_dir).resolve()
    _check_name("assignment", assignment)
    args = ["generate_feedback", assignment, "--force", *_db_args(db_url)]
    if student is not None:
        args.append(f"--student={_check_name('student', student)}")
    _run_nbgrader(course_dir, args, timeout)
    return course_dir / "feedback"


def export_and_feedback(course_dir: str | os.PathLike, assignment: str = "week7", db_url: str | None = None,
                        students: list[str] | None = None, processes: int = 1,
                        timeout: float = 600) -> tuple[Path, Path]:
    """``nbgrader export`` and ``nbgrader generate_feedback``, run side by side; the feedback split over
    ``processes`` nbgrader processes, each excluding the other parts' ``students``
    (``--CourseDirectory.student_id_exclude``). Returns (grades.csv, feedback folder).

    Both commands only read the gradebook, so they may run at once. Each nbgrader process pays about
    2 s of start-up, and rendering one student's feedback costs about 0.1 s: splitting pays from a few
    dozen students on (measured: 100 students, 11.2 s for one process).
    """
    course_dir = Path(course_dir).resolve()
    _check_name("assignment", assignment)
    for student in students or ():
        _check_name("student", student)
    dest = course_dir / "grades.csv"
    commands = [["export", f"--to={dest}", *_db_args(db_url)]]
    students = sorted(students or ())
    parts = max(1, min(processes, len(students) // 25))
    if any("," in s for s in students):  # the exclude list is comma-separated: do not split then
        parts = 1
    for k in range(parts):
        args = ["generate_feedback", assignment, "--force", *_db_args(db_url)]
        if parts > 1:
            others = [s for i, s in enumerate(students) if i % parts != k]
            args.append(f"--CourseDirectory.student_id_exclude={','.join(others)}")
        commands.append(args)
    env = nbgrader_environment()
    procs = [(args, subprocess.Popen([sys.executable, "-m", "nbgrader", *args], cwd=course_dir, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
             for args in commands]
    failures = []
    deadline = time.monotonic() + timeout
    for args, proc in procs:
        try:
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            failures.append(NbgraderCommandError(f"nbgrader {args[0]} took longer than {timeout:g} s", -1, out, err))
            continue
        if proc.returncode != 0:
            failures.append(NbgraderCommandError(
                f"nbgrader {' '.join(args[:2])} failed (exit {proc.returncode}) in {course_dir}:\n{err.strip()}",
                proc.returncode, out, err))
    if failures:
        raise failures[0]
    if not dest.is_file():
        raise CourseError(f"nbgrader export finished but wrote no {dest}")
    return dest, course_dir / "feedback"
