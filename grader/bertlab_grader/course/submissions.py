"""Finding and reading student submissions in an nbgrader course directory.

A submission is ``COURSE/submitted/<student>/<assignment>/`` holding the student's exercise files, or a
zip of them: either the only ``*.zip`` inside that directory, or ``COURSE/submitted/<student>/<assignment>.zip``.
A zip is never trusted: it is checked member by member (no absolute paths, no ``..``, no links or device
files, no encryption, bounded member count, size and compression ratio) and only then extracted into a
private staging directory under ``COURSE/.bertlab/staging/``. A refused zip never raises out of
:func:`list_submissions`; the student's entry carries ``error`` (a message written for the student) and the
caller records a zero-score result for it (see ``bertlab_grader.course.results.error_result``).

Every folder under ``submitted/`` is accounted for: :func:`scan_submitted` returns the submissions and,
for each folder that holds no submission in the expected layout (files directly in
``submitted/<student>/``, notebooks but no ``.py`` files, an empty folder, only another assignment's
folder), a :class:`LayoutProblem` naming what was found and what was expected. Such a folder is not
graded: the instructor is told, and a zero that looks like untouched stubs is never recorded for it.

:func:`submission_digest` fingerprints what a submission holds, so a later run notices a resubmission.

Nothing here imports or runs student code: files are only listed, copied and read as text.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

#: The exercise modules a submission may hold; anything else in a submission is ignored.
from bertlab.handin.manifest import manifest_note
from bertlab.tasks import EXERCISE_FILES  # noqa: E402
from bertlab_grader.core.digest import sources_digest  # noqa: E402

#: Limits on a submitted zip.
MAX_ZIP_MEMBERS = 200
MAX_ZIP_TOTAL_BYTES = 50 * 1024 * 1024
MAX_ZIP_FILE_BYTES = 50 * 1024 * 1024  # the compressed archive itself
MAX_ZIP_RATIO = 100.0  # uncompressed / compressed, checked for members above RATIO_MIN_BYTES
RATIO_MIN_BYTES = 1024 * 1024
MAX_ZIP_DEPTH = 16

#: Limit on one exercise source file.
MAX_SOURCE_BYTES = 1024 * 1024

log = logging.getLogger(__name__)

_STAGING = Path(".bertlab") / "staging"
_IGNORED_MEMBERS = ("__MACOSX/",)


def valid_id(name: str) -> bool:
    """Whether ``name`` can be an nbgrader student or assignment id here: it becomes one path component
    (``submitted/<student>/<assignment>``), part of the glob patterns nbgrader builds from it (so no
    ``*?[]``), and a gradebook key (at most 128 characters)."""
    return (isinstance(name, str) and 0 < len(name) <= 128 and name == name.strip()
            and not name.startswith(".") and not any(c in name for c in "/\\*?[]")
            and not any(ord(c) < 32 or ord(c) == 127 for c in name))


class UnsafeZipError(ValueError):
    """A submitted zip was refused; ``str(exc)`` is a message the student may read."""


class Submission(tuple):
    """``(student, path)``, so ``for student, path in list_submissions(...)`` works.

    ``error`` is ``None`` for a gradable submission, or a student-readable message when the submission
    could not be accepted at all (a refused zip, several zips, a linked directory). ``source`` is what
    the student handed in (the directory or the zip); ``path`` is where the exercise files are (for a
    zip, the staging directory).

    ``sources()`` reads the exercise files once and keeps what it read: the digest a run records, the
    files a worker grades and the code the graded notebook shows are that one read, so a folder that
    changes during a run (a late `nbgrader collect`, a resubmission copied in) is never recorded as a
    mix of two versions.
    """

    def __new__(cls, student: str, path: Path, error: str | None = None, source: Path | None = None):
        self = super().__new__(cls, (student, Path(path)))
        self.error = error
        self.source = Path(source) if source is not None else Path(path)
        self._read: SubmissionSources | None = None
        return self

    def sources(self) -> "SubmissionSources":
        """The text of the exercise files (``read_submission_sources``), read at the first call; every
        later call returns that same read. Empty for a submission refused as a whole."""
        if self._read is None:
            self._read = SubmissionSources() if self.error else read_submission_sources(self.path)
        return self._read

    def forget_sources(self) -> None:
        """Drop the kept read once nothing of this run needs it (recorded, or skipped as unchanged): a
        run of thousands of submissions does not hold every student's files until its end."""
        self._read = None

    @property
    def student(self) -> str:
        return self[0]

    @property
    def path(self) -> Path:
        return self[1]

    def __reduce__(self):  # picklable, e.g. to hand to a worker process
        return (Submission, (self[0], self[1], self.error, self.source))

    def __repr__(self) -> str:
        extra = f", error={self.error!r}" if self.error else ""
        return f"Submission({self[0]!r}, {str(self[1])!r}{extra})"


class SubmissionSources(dict):
    """``{filename: text}`` for the exercise files present in a submission.

    A file that could not be read as source (too large, not UTF-8, a link, not a regular file) is still
    present, as a one-line module that raises ``ImportError`` with the reason, so whoever imports it sees
    a broken module with a clear message; ``problems`` maps such filenames to that reason.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.problems: dict[str, str] = {}


def _broken_module(filename: str, reason: str) -> str:
    return f"raise ImportError({f'{filename} could not be read: {reason}'!r})\n"


def handin_notes(path: str | os.PathLike) -> list[str]:
    """The results' notes about the hand-in at ``path`` (the folder the exercise files were read from):
    files changed after `bertlab submit` checked them (bertlab/handin/manifest.py). Costs no points."""
    note = manifest_note(Path(path), list(EXERCISE_FILES))
    return [note] if note else []


def read_submission_sources(path: str | os.PathLike) -> SubmissionSources:
    """Return the text of each exercise file (``cka.py``, ``pooling.py``, ``siamese.py``,
    ``retrieval.py``) present directly in ``path``. Other files are ignored; missing files are absent."""
    path = Path(path)
    out = SubmissionSources()
    if not path.is_dir():
        return out
    for name in EXERCISE_FILES:
        file = path / name
        if not os.path.lexists(file):
            continue
        problem = None
        text = None
        try:
            fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            problem = "it is a symbolic link" if os.path.islink(file) else f"it cannot be opened ({exc.strerror})"
        else:
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    problem = "it is not a regular file"
                elif st.st_size > MAX_SOURCE_BYTES:
                    problem = f"it is {st.st_size:,} bytes; a source file may be at most {MAX_SOURCE_BYTES:,} bytes"
                else:
                    with os.fdopen(fd, "rb", closefd=False) as fh:
                        data = fh.read(MAX_SOURCE_BYTES + 1)
                    if len(data) > MAX_SOURCE_BYTES:
                        problem = f"it is larger than {MAX_SOURCE_BYTES:,} bytes"
                    else:
                        try:
                            text = data.decode("utf-8-sig")
                        except UnicodeDecodeError as exc:
                            problem = (f"it is not UTF-8 text (byte {exc.start} cannot be decoded); "
                                       "save it as UTF-8")
            finally:
                os.close(fd)
        if problem is not None:
            out[name] = _broken_module(name, problem)
            out.problems[name] = f"{name} could not be read: {problem}"
        else:
            out[name] = text
    return out


# ---------------------------------------------------------------------------------------------------
# zips


def _member_parts(info: zipfile.ZipInfo) -> tuple[str, ...]:
    """The checked path components of a member, or raise UnsafeZipError."""
    raw = info.filename
    shown = raw.encode("unicode_escape").decode("ascii")[:200]
    if "\x00" in raw or any(ord(c) < 32 for c in raw):
        raise UnsafeZipError(f"member '{shown}' has control characters in its name")
    name = raw.replace("\\", "/")
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        raise UnsafeZipError(f"member '{shown}' has an absolute path; zip the files with relative names")
    parts = tuple(p for p in PurePosixPath(name).parts if p not in ("", "."))
    if ".." in parts:
        raise UnsafeZipError(
            f"member '{shown}' contains '..' and would be written outside the submission folder")
    if len(parts) > MAX_ZIP_DEPTH:
        raise UnsafeZipError(f"member '{shown}' is nested more than {MAX_ZIP_DEPTH} folders deep")
    return parts


def _check_member(info: zipfile.ZipInfo) -> None:
    shown = info.filename.encode("unicode_escape").decode("ascii")[:200]
    mode = (info.external_attr >> 16) & 0xFFFF
    ftype = stat.S_IFMT(mode)
    if ftype == stat.S_IFLNK:
        raise UnsafeZipError(f"member '{shown}' is a symbolic link; links are not accepted")
    if ftype not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise UnsafeZipError(f"member '{shown}' is not a regular file or folder")
    if info.flag_bits & 0x1:
        raise UnsafeZipError(f"member '{shown}' is encrypted; submit an unencrypted zip")
    if not info.is_dir() and info.file_size > RATIO_MIN_BYTES:
        ratio = info.file_size / max(info.compress_size, 1)
        if ratio > MAX_ZIP_RATIO:
            raise UnsafeZipError(
                f"member '{shown}' expands {ratio:,.0f}-fold ({info.file_size:,} bytes); "
                "this looks like a zip bomb")


def safe_extract_zip(zip_path: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Check every member of ``zip_path``, then extract it into ``dest`` (emptied first).

    Raises :class:`UnsafeZipError` with a student-readable reason; ``dest`` is left empty then.
    Returns ``dest``.
    """
    zip_path, dest = Path(zip_path), Path(dest)
    _fresh_private_dir(dest)
    try:
        _extract_checked(zip_path, dest)
    except UnsafeZipError:
        _fresh_private_dir(dest)
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as exc:
        _fresh_private_dir(dest)
        raise UnsafeZipError(f"the file is not a readable zip archive ({exc})") from None
    except (OSError, NotImplementedError, RuntimeError, ValueError) as exc:
        _fresh_private_dir(dest)
        raise UnsafeZipError(f"the zip could not be extracted ({type(exc).__name__}: {exc})") from None
    return dest


def _extract_checked(zip_path: Path, dest: Path) -> None:
    st = os.lstat(zip_path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        raise UnsafeZipError("the zip is not a regular file")
    if st.st_size > MAX_ZIP_FILE_BYTES:
        raise UnsafeZipError(f"the zip is {st.st_size:,} bytes; at most {MAX_ZIP_FILE_BYTES:,} are accepted")
    with zipfile.ZipFile(zip_path) as zf:
        infos = zf.infolist()
        if len(infos) > MAX_ZIP_MEMBERS:
            raise UnsafeZipError(f"the zip has {len(infos)} members; at most {MAX_ZIP_MEMBERS} are accepted")
        plan: list[tuple[zipfile.ZipInfo, tuple[str, ...]]] = []
        seen: set[tuple[str, ...]] = set()
        total = 0
        for info in infos:
            parts = _member_parts(info)
            _check_member(info)
            if not parts:
                continue
            if parts in seen:
                raise UnsafeZipError(f"member '{'/'.join(parts)}' appears twice")
            seen.add(parts)
            total += info.file_size
            if total > MAX_ZIP_TOTAL_BYTES:
                raise UnsafeZipError(
                    f"the zip expands to more than {MAX_ZIP_TOTAL_BYTES:,} bytes; submit only your source files")
            if info.filename.startswith(_IGNORED_MEMBERS) or parts[-1] == ".DS_Store":
                continue
            plan.append((info, parts))
        # every member checked: now write, never following links, never overwriting
        written = 0
        for info, parts in plan:
            target = dest.joinpath(*parts)
            if info.is_dir():
                target.mkdir(mode=0o700, parents=True, exist_ok=True)
                continue
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as out, zf.open(info) as src:
                while True:
                    chunk = src.read(1 << 16)
                    if not chunk:
                        break
                    written += len(chunk)
                    if written > MAX_ZIP_TOTAL_BYTES:
                        raise UnsafeZipError(
                            f"the zip expands to more than {MAX_ZIP_TOTAL_BYTES:,} bytes")
                    out.write(chunk)


def _fresh_private_dir(path: Path) -> None:
    if os.path.lexists(path):
        if path.is_symlink() or not path.is_dir():
            path.unlink()
        else:
            shutil.rmtree(path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.mkdir(mode=0o700)


def sources_root(root: Path) -> Path:
    """The shallowest folder under ``root`` holding an exercise file (zips often wrap a folder)."""
    if any((root / f).is_file() for f in EXERCISE_FILES):
        return root
    candidates = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__MACOSX")
        if any(f in filenames for f in EXERCISE_FILES):
            depth = len(Path(dirpath).relative_to(root).parts)
            candidates.append((depth, dirpath))
    return Path(min(candidates)[1]) if candidates else root


def staging_dir(settings: "CourseSettings", student: str) -> Path:
    """Where a student's zip is extracted: ``COURSE/.bertlab/staging/<assignment>/<student>``.
    (``CourseSettings`` in quotes: settings.py imports the config, which imports this module.)"""
    return settings.root / _STAGING / settings.assignment / student


def _from_zip(settings: "CourseSettings", student: str, zip_path: Path) -> Submission:
    dest = staging_dir(settings, student)
    try:
        safe_extract_zip(zip_path, dest)
    except UnsafeZipError as exc:
        return Submission(student, dest, error=f"Your zip file {zip_path.name} was not accepted: {exc}.",
                          source=zip_path)
    return Submission(student, sources_root(dest), source=zip_path)


@dataclass(frozen=True)
class LayoutProblem:
    """A folder under ``submitted/`` that holds no submission in the expected layout (not graded)."""

    folder: str    # relative to the course, e.g. "submitted/zoe"
    found: str     # what is there, e.g. "cka.py, pooling.py directly in submitted/zoe/"
    expected: str  # what a submission looks like

    def __str__(self) -> str:
        return f"{self.folder}: found {self.found}; expected {self.expected}"


def _names(paths, limit: int = 5) -> str:
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in paths)
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _describe_other_content(folder: Path) -> str:
    """What a folder without exercise files or zips holds, in a few words."""
    entries = [p for p in folder.iterdir() if not p.name.startswith(".")]
    if not entries:
        return "an empty folder"
    notebooks = [p for p in entries if p.suffix == ".ipynb"]
    sources = [p for p in entries if p.suffix == ".py"]
    if notebooks and not sources:
        return f"notebook(s) {_names(notebooks)} but no .py files (the grader reads the .py exercise files)"
    if sources:
        return f".py file(s) {_names(sources)}, none named {', '.join(EXERCISE_FILES)}"
    return f"only {_names(entries)}"


def _layout_problem(student_dir: Path, assignment: str) -> LayoutProblem:
    """Why ``student_dir`` (which has no ``<assignment>/`` folder or zip) holds no submission."""
    rel = f"submitted/{student_dir.name}"
    expected = (f"{rel}/{assignment}/ holding {', '.join(EXERCISE_FILES)} (or one .zip of them)")
    entries = [p for p in student_dir.iterdir() if not p.name.startswith(".")]
    loose = [p for p in entries if p.name in EXERCISE_FILES]
    if loose:
        return LayoutProblem(rel, f"{_names(loose)} directly in {rel}/ (no {assignment}/ folder)", expected)
    folders = [p for p in entries if p.is_dir()]
    if folders:
        return LayoutProblem(rel, f"folder(s) {_names(folders)} but no {assignment}/", expected)
    return LayoutProblem(rel, _describe_other_content(student_dir), expected)


def scan_submitted(settings: "CourseSettings") -> tuple[list[Submission], list[LayoutProblem]]:
    """Every student's submission of the settings' assignment (sorted by student id), and every folder
    or file under ``submitted/`` that holds none in the expected layout.

    Directories are returned as they are; zips are checked and extracted (see module docstring). An
    entry whose ``error`` is set could not be accepted and must be recorded as a zero-score result.
    """
    course_dir, assignment = settings.root, settings.assignment
    submitted = course_dir / "submitted"
    if not submitted.is_dir():
        return [], []
    out: list[Submission] = []
    problems: list[LayoutProblem] = []
    expected_root = f"submitted/<student>/{assignment}/ holding {', '.join(EXERCISE_FILES)}"
    for student_dir in sorted(submitted.iterdir(), key=lambda p: p.name):
        student = student_dir.name
        if student.startswith("."):
            continue
        if not valid_id(student):
            problems.append(LayoutProblem(f"submitted/{student!r}", "a name that cannot be a student id "
                                          "(no '/', '\\', '*', '?', '[', ']', control characters or "
                                          "surrounding spaces)", "one folder per student id"))
            continue
        if student_dir.is_symlink():
            out.append(Submission(student, student_dir, error="The submission folder is a symbolic link."))
            continue
        if not student_dir.is_dir():
            problems.append(LayoutProblem(f"submitted/{student}", "a file", expected_root))
            continue
        folder = student_dir / assignment
        top_zip = student_dir / f"{assignment}.zip"
        if folder.is_symlink():
            out.append(Submission(student, folder, error="The submission folder is a symbolic link."))
        elif folder.is_dir():
            has_sources = any(os.path.lexists(folder / f) for f in EXERCISE_FILES)
            zips = sorted(p for p in folder.iterdir() if p.suffix.lower() == ".zip")
            if not has_sources and not zips and os.path.lexists(top_zip):
                out.append(_from_zip(settings, student, top_zip))
            elif has_sources:
                out.append(Submission(student, folder))
            elif not zips:
                rel = f"submitted/{student}/{assignment}"
                problems.append(LayoutProblem(rel, _describe_other_content(folder),
                                              f"{rel}/ holding {', '.join(EXERCISE_FILES)} (or one .zip of them)"))
            elif len(zips) > 1:
                names = ", ".join(p.name for p in zips)
                out.append(Submission(student, folder, error=(
                    f"The submission holds {len(zips)} zip files ({names}) and no source files; "
                    "submit one zip or the source files themselves.")))
            else:
                out.append(_from_zip(settings, student, zips[0]))
        elif os.path.lexists(top_zip):
            out.append(_from_zip(settings, student, top_zip))
        else:
            problems.append(_layout_problem(student_dir, assignment))
    return out, problems


def list_submissions(settings: "CourseSettings") -> list[Submission]:
    """Every student's submission of the settings' assignment, sorted by student id (see
    :func:`scan_submitted`, which also names the folders that hold none)."""
    return scan_submitted(settings)[0]


def submission_digest(submission: Submission) -> str:
    """``sha256:<hex>`` of what ``submission`` holds: its exercise files (names and text, as
    ``submission.sources()`` read them), or, for a submission refused as a whole, the file that was
    handed in and the reason. Equal digests mean the grader would see the same submission."""
    h = hashlib.sha256()
    if submission.error:
        h.update(b"refused\0" + submission.error.encode())
        source = submission.source
        if source.is_file() and not source.is_symlink():
            h.update(source.read_bytes())
    else:
        return "sha256:" + sources_digest(submission.sources())
    return "sha256:" + h.hexdigest()


def submitted_assignments(course_dir: str | os.PathLike) -> set[str]:
    """The assignment names students handed something in for: ``submitted/*/<name>/`` and
    ``submitted/*/<name>.zip``."""
    names: set[str] = set()
    submitted = Path(course_dir) / "submitted"
    if not submitted.is_dir():
        return names
    for student_dir in submitted.iterdir():
        if student_dir.name.startswith(".") or not student_dir.is_dir() or student_dir.is_symlink():
            continue
        for entry in student_dir.iterdir():
            if entry.name.startswith("."):
                continue
            if entry.is_dir() and valid_id(entry.name):
                names.add(entry.name)
            elif entry.suffix.lower() == ".zip" and valid_id(entry.stem):
                names.add(entry.stem)
    return names


# ---------------------------------------------------------------------------------------------------
# A recorded submission's files, for the graded notebook (read as text only, never imported or run)

def submitted_folder(settings: "CourseSettings", student: str) -> Path | None:
    """Where ``student``'s files of the settings' assignment are, as ``scan_submitted`` found them: the
    folder ``submitted/<student>/<assignment>/`` when it holds an exercise file, else the folder a zip
    was extracted to (never extracted here), else None."""
    folder = settings.root / "submitted" / student / settings.assignment
    if not folder.is_symlink() and folder.is_dir() and any(os.path.lexists(folder / f) for f in EXERCISE_FILES):
        return folder
    staged = staging_dir(settings, student)
    if not staged.is_symlink() and staged.is_dir():
        return sources_root(staged)
    return None


def submitted_sources(settings: "CourseSettings", student: str) -> SubmissionSources | None:
    """The text of ``student``'s handed-in files (``read_submission_sources``), or None when the course
    holds none for them (a refused zip, a result recorded without a submission)."""
    folder = submitted_folder(settings, student)
    if folder is None:
        return None
    return read_submission_sources(folder) or None
