"""Gradescope's side of the autograder that `bertlab gradescope` builds (grader/bertlab_grader/export/gradescope/archive.py).

Gradescope runs ``run_autograder`` (bertlab_grader/gradescope_autograder/) for every submission; it
calls ``python -m bertlab_grader.export.gradescope.autograder run``, which grades the upload with the kit's own
``grade_one.grade_one`` (the sandbox, the preflight, the hidden suites: exactly `bertlab grade-one`) and
writes the kit's result in Gradescope's format (gradescope.schema.json, checked before writing).
``check`` is setup.sh's last step: the kit imports, and whether bubblewrap works in the image.

    ROOT/                    BERTLAB_AUTOGRADER_ROOT, default /autograder (Gradescope's layout)
      source/                the unpacked zip: setup.sh, run_autograder, wheels/, bertlab-gradescope.json
      submission/            what the student uploaded (the files, a folder of them, or one zip)
      results/results.json   what ``run`` writes
      bertlab-venv/          the kit, installed by setup.sh
      bertlab-submission/    the exercise files graded (a private copy: the sandbox hides all of ROOT)
      bertlab-unzipped/      an uploaded zip, checked and extracted (submissions.safe_extract_zip)

Trust, as in the rest of the kit: what the submission did is a grade; what the grader failed to do
(``GraderFailure``, or any error of the kit itself) is not. Gradescope has no "not graded" state, so
such a run writes a results.json with no score at all, says NOT GRADED to the student and the
instructor, and exits 1 (docs/gradescope.md). Students read only the kit's per-test ``message`` and
``hint``; causes, paths and tracebacks go to stdout, which Gradescope shows to instructors only.

Exit codes of ``run``: 0 graded (or nothing to grade: the upload holds no exercise file, and the
student is told what to upload); 1 not graded because of the grader.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from bertlab.fileio import atomic_write_text
from bertlab.tasks import EXERCISE_FILES, GRADED_TASKS
from bertlab_grader.core import locations
from bertlab_grader.core.failures import GraderFailure
from bertlab_grader.course import grade_one
from bertlab_grader.course.results import (check_results_schema, error_result, format_gradebook, task_scores,
                                           validate_result)
from bertlab_grader.course.submissions import (UnsafeZipError, sources_root, handin_notes, read_submission_sources,
                                               safe_extract_zip)

ROOT_VARIABLE = "BERTLAB_AUTOGRADER_ROOT"
DEFAULT_ROOT = "/autograder"
SETTINGS_FILE = "bertlab-gradescope.json"  # at the zip's root, so in ROOT/source/
SCHEMA = Path(__file__).with_name("gradescope.schema.json")
VISIBILITIES = ("visible", "after_due_date", "after_published", "hidden")
STUDENT = "submission"  # the kit's student id for the one submission a run grades
STAGED, UNZIPPED = "bertlab-submission", "bertlab-unzipped"
# What the sandboxed server needs of the instructor package, relative to it: its own folder, the one the
# sandbox shows (template_process.SANDBOX_INSIDE_DIR). Kept readable when the rest of the package is locked
# away from student code (``lock_hidden_files``); the folders on the way to it stay traversable.
WORKER_NEEDS = ("sandbox/inside",)
NOT_GRADED = ("NOT GRADED. The autograder failed on this submission, through no fault of your code: "
              "this is not your grade. Your instructor has been given the details and will run the "
              "autograder on your submission again.")

_validator = None


def autograder_root() -> Path:
    """ROOT: ``$BERTLAB_AUTOGRADER_ROOT``, else /autograder."""
    return Path(os.environ.get(ROOT_VARIABLE) or DEFAULT_ROOT)


def load_settings(root: Path) -> dict:
    """The settings `bertlab gradescope` wrote into the zip (``source/bertlab-gradescope.json``):
    ``assignment``, ``visibility``, ``require_sandbox``, ``kit_version``; defaults for any missing."""
    settings = {"assignment": "week7", "visibility": "visible", "require_sandbox": False, "kit_version": "?"}
    path = root / "source" / SETTINGS_FILE
    if path.is_file():
        settings.update(json.loads(path.read_text(encoding="utf-8")))
    if settings["visibility"] not in VISIBILITIES:
        raise ValueError(f"{path}: visibility {settings['visibility']!r} is not one of {', '.join(VISIBILITIES)}")
    return settings


# ---------------------------------------------------------------------------------------------------
# Gradescope's format


def check_gradescope_schema(document: dict) -> None:
    """Raise ValueError unless ``document`` is a results.json as gradescope.schema.json (written from
    Gradescope's documentation) describes it. Every document ``run`` writes passes through here."""
    global _validator
    import jsonschema

    if _validator is None:
        _validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text(encoding="utf-8")))
    errors = sorted(_validator.iter_errors(document), key=lambda e: list(e.path))
    if errors:
        where = "/".join(map(str, errors[0].path)) or "(top level)"
        raise ValueError(f"document does not match gradescope.schema.json at {where}: {errors[0].message}")


def _test_output(test: dict) -> str:
    """What the student reads for one test: the kit's message, and the named mistake when there is one."""
    text = test.get("message") or ""
    if test.get("hint"):
        text = f"{text}\n\nLikely mistake: {test['hint']}" if text else f"Likely mistake: {test['hint']}"
    return text


def _score_lines(result: dict) -> list[str]:
    per_task = task_scores(result)
    lines = [f"Score: {result['score']:g} / {result['max_score']:g} from the kit's hidden tests."]
    lines += [f"  {task:<12} {per_task[task][0]:g} / {per_task[task][1]:g}"
              for task in GRADED_TASKS if task in per_task]
    lines.append("Each test below says what was wrong and what to check.")
    return lines


def to_gradescope(result: dict, *, visibility: str = "visible", seconds: float = 0.0,
                  notes: tuple[str, ...] = ()) -> dict:
    """The kit's results dict (docs/results-format.md) as Gradescope's results.json.

    One Gradescope test per hidden test, in the kit's order: ``name``, ``number`` "<task>.<k>" (tasks
    in gradebook order), ``score``/``max_score`` = the kit's points/max_points, ``output`` = the kit's
    message (+ hint), ``tags`` = [task], ``visibility``; the kit's outcome and ratio in ``extra_data``.
    Each performance ratio becomes a ``leaderboard`` entry (lower is better). ``notes`` (what was
    graded, the sandbox) go to the top-level output, after the score lines, which are left out unless
    the tests are ``visible`` (the output would otherwise show the score the tests hide)."""
    tests, counts = [], {}
    for test in result["tests"]:
        task = test["task"]
        counts[task] = counts.get(task, 0) + 1
        extra = {"outcome": test["outcome"]}
        if test.get("ratio") is not None:
            extra["ratio"] = test["ratio"]
        tests.append({"name": test["name"], "number": f"{GRADED_TASKS.index(task) + 1}.{counts[task]}",
                      "score": test["points"], "max_score": test["max_points"], "output": _test_output(test),
                      "tags": [task], "visibility": visibility, "extra_data": extra})
    lines = _score_lines(result) if visibility == "visible" else [
        f"Your submission was graded; the tests and the score are shown {visibility.replace('_', ' ')}."]
    document = {
        "score": result["score"],
        "execution_time": max(0, int(round(seconds))),
        "output": "\n".join([*lines, *(f"\n{note}" for note in notes)]),
        # Messages quote the submission's own exceptions: never rendered as HTML or Markdown.
        "output_format": "text", "test_output_format": "text", "test_name_format": "text",
        "visibility": visibility,
        "stdout_visibility": "hidden",  # stdout names the grading machine's paths: instructors only
        "extra_data": {"bertlab": {"graded": True, "sandboxed": bool(result.get("sandboxed", True)),
                                   "max_score": result["max_score"], "assignment": result["assignment"],
                                   **({"submission_digest": result["submission_digest"]}
                                      if result.get("submission_digest") else {})}},
        "tests": tests,
    }
    leaderboard = [{"name": f"{test['name']} (time / reference time)", "value": round(test["ratio"], 4),
                    "order": "asc"} for test in result["tests"] if test.get("ratio") is not None]
    if leaderboard:
        document["leaderboard"] = leaderboard
    return document


def not_graded(headline: str, detail: str, *, why: str, seconds: float = 0.0) -> dict:
    """A results.json that is not a grade: no score anywhere, one informational failing test that
    says so, ``extra_data.bertlab.graded`` false (``why``: ``autograder_failed`` or ``nothing_to_grade``)."""
    return {
        "execution_time": max(0, int(round(seconds))),
        "output": headline,
        "output_format": "text", "test_output_format": "text", "test_name_format": "text",
        "stdout_visibility": "hidden",
        "extra_data": {"bertlab": {"graded": False, "why": why}},
        "tests": [{"name": ("NOT GRADED: the autograder failed (not your grade)" if why == "autograder_failed"
                            else "NOT GRADED: no exercise file found"),
                   "status": "failed", "output": detail, "visibility": "visible"}],
    }


def write_results(root: Path, document: dict) -> Path:
    """Check ``document`` against gradescope.schema.json, then write ROOT/results/results.json atomically."""
    check_gradescope_schema(document)
    path = root / "results" / "results.json"
    atomic_write_text(path, json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    return path


# ---------------------------------------------------------------------------------------------------
# The upload


@dataclass
class Upload:
    """What the student uploaded: the folder of exercise files to grade, or why there is none."""

    folder: Optional[Path] = None   # the exercise files are here (None: nothing to grade, or refused)
    refused: Optional[str] = None   # a student-readable reason the upload was refused (a bad zip)
    notes: list[str] = field(default_factory=list)  # what the student should know about what was graded


def _exercise_files_under(top: Path) -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d != "__MACOSX")  # as submissions.sources_root walks
        for name in filenames:
            if name in EXERCISE_FILES:
                found.setdefault(name, []).append(Path(dirpath) / name)
    return found


def find_upload(upload: Path, unzip_to: Path) -> Upload:
    """Where the exercise files of ``upload`` (Gradescope's submission folder) are, by the kit's rules
    (bertlab_grader.course.submissions): the shallowest folder holding one of cka.py, pooling.py, siamese.py,
    retrieval.py; else the one zip uploaded, checked and extracted into ``unzip_to``. A zip the kit
    refuses is the student's own error (graded zero with the reason, as `bertlab grade` does)."""
    top = upload
    if not _exercise_files_under(upload):
        zips = sorted(p for p in upload.iterdir() if p.suffix.lower() == ".zip") if upload.is_dir() else []
        if len(zips) > 1:
            names = ", ".join(p.name for p in zips)
            return Upload(refused=f"The submission holds {len(zips)} zip files ({names}) and no source files; "
                                  "submit one zip or the source files themselves.")
        if zips:
            try:
                safe_extract_zip(zips[0], unzip_to)
            except UnsafeZipError as exc:
                return Upload(refused=f"Your zip file {zips[0].name} was not accepted: {exc}.")
            top = unzip_to
    found = _exercise_files_under(top)
    if not found:
        return Upload()
    folder = sources_root(top)
    where = folder.relative_to(top).as_posix()
    graded = [name for name in EXERCISE_FILES if os.path.lexists(folder / name)]
    notes = [f"Graded: {', '.join(graded)}" + (f" (from the folder {where}/)" if where != "." else "") + "."]
    missing = [name for name in EXERCISE_FILES if name not in graded]
    elsewhere = sorted({p.relative_to(top).as_posix() for name in missing for p in found.get(name, [])})
    if missing:
        notes.append(f"Missing: {', '.join(missing)}; their tests score 0."
                     + (f" Found elsewhere and NOT graded: {', '.join(elsewhere)}. Put all {len(EXERCISE_FILES)} files "
                        "in one folder." if elsewhere else ""))
    return Upload(folder=folder, notes=notes)


def stage(sources: dict, root: Path) -> Path:
    """Copy the exercise files to ROOT/bertlab-submission/ (private, emptied first): grade_one hides
    the folder around what it grades from student code, and that folder is then ROOT, all of it."""
    staged = root / STAGED
    if staged.exists():
        shutil.rmtree(staged)
    staged.mkdir(mode=0o700)
    for name, text in sources.items():
        (staged / name).write_text(text, encoding="utf-8")
    return staged


# ---------------------------------------------------------------------------------------------------
# The sandbox inside Gradescope's container


def sandbox_decision(require_sandbox: bool) -> tuple[bool, str]:
    """(grade without the sandbox?, why). Bubblewrap isolates student code when it can create its
    namespaces here; a container that forbids them gets the kit's named ``--unsafe-no-sandbox``, and
    only here, unless the zip was built with --require-sandbox (then this raises GraderFailure)."""
    from bertlab_grader.sandbox import launcher

    works, why = launcher.bubblewrap_status()
    if works:
        return False, why
    if require_sandbox:
        raise GraderFailure(f"bubblewrap cannot sandbox student code in this container ({why}), and the "
                            "autograder was built with --require-sandbox")
    return True, why


def lock_hidden_files(package_dir: Path, source: Path) -> list[Path]:
    """Without the sandbox, student code runs as an unprivileged uid (when the grader is root): make the
    zip's files (``source``: the wheels hold the hidden suites) and the installed instructor package
    unreadable to it, except what the sandboxed server imports (``WORKER_NEEDS``). Returns what was locked."""
    locked = []
    keep = {package_dir / name for name in WORKER_NEEDS}
    on_the_way = {folder for path in keep for folder in path.parents if package_dir in folder.parents}
    targets = [source]

    def collect(folder: Path) -> None:  # everything but what the server needs and the folders leading to it
        for path in sorted(folder.iterdir()):
            if path in on_the_way:
                collect(path)
            elif path not in keep:
                targets.append(path)

    collect(package_dir)
    for path in targets:
        if path.exists() and not path.is_symlink():
            mode = stat.S_IMODE(path.stat().st_mode)
            path.chmod(mode & ~(stat.S_IRWXG | stat.S_IRWXO))
            locked.append(path)
    return locked


# ---------------------------------------------------------------------------------------------------
# The two commands


def run(root: Path) -> int:
    """Grade ROOT/submission and write ROOT/results/results.json; the exit code (module docstring)."""
    started = time.monotonic()
    print(f"bertlab Gradescope autograder: grading {root / 'submission'}", flush=True)
    try:
        settings = load_settings(root)
        upload = find_upload(root / "submission", root / UNZIPPED)
        if upload.refused:
            return _record_refused(root, settings, upload.refused, started)
        if upload.folder is None:
            uploaded = root / "submission"
            found = sorted(p.name for p in uploaded.iterdir()) if uploaded.is_dir() else []
            print("Nothing to grade: the upload holds none of " + ", ".join(EXERCISE_FILES), flush=True)
            write_results(root, not_graded(
                "NOT GRADED: your upload holds none of the exercise files. Upload " + ", ".join(EXERCISE_FILES)
                + " (the files themselves, a folder of them, or one zip of them) and submit again.",
                f"Found: {', '.join(found) or 'nothing'}. Expected: {', '.join(EXERCISE_FILES)}.",
                why="nothing_to_grade", seconds=time.monotonic() - started))
            return 0
        return _grade(root, settings, upload, started)
    except Exception as exc:  # noqa: BLE001 - a failure of the grader, whatever it is, is never a grade
        print(f"NOT GRADED, the grader failed: {type(exc).__name__}: {exc}", flush=True)
        traceback.print_exc(file=sys.stdout)
        write_results(root, not_graded(NOT_GRADED, "The autograder failed before it finished grading. "
                                       "Nothing was scored.", why="autograder_failed",
                                       seconds=time.monotonic() - started))
        return 1


def _grade(root: Path, settings: dict, upload: Upload, started: float) -> int:
    staged = stage(read_submission_sources(upload.folder), root)
    unsafe, why = sandbox_decision(settings["require_sandbox"])
    # A `bertlab submit` archive's manifest: files changed after the check are a note, never a penalty.
    notes = list(upload.notes) + [f"Note: {note}." for note in handin_notes(upload.folder)]
    if unsafe:
        print(f"WARNING: {why}: grading WITHOUT the sandbox (--unsafe-no-sandbox).", flush=True)
        if os.geteuid() == 0 and locations.CHECKOUT is None:
            locked = lock_hidden_files(locations.PACKAGE_DIR, root / "source")
            print(f"  locked away from student code: {', '.join(p.name for p in locked)}", flush=True)
        notes.append("Note: graded without the kit's bubblewrap sandbox, which cannot run in this "
                     "container (recorded as sandboxed: false).")
    else:
        print(f"Sandbox: {why}", flush=True)
    result = grade_one.grade_one(staged, student=STUDENT, assignment=settings["assignment"], unsafe_no_sandbox=unsafe)
    print(format_gradebook({STUDENT: result}), flush=True)
    for test in result["tests"]:
        if test["outcome"] != "passed":
            print(f"  [{test['outcome']}] {test['task']}/{test['name']}: {test['message'][:300]}", flush=True)
    document = to_gradescope(result, visibility=settings["visibility"], seconds=time.monotonic() - started,
                             notes=tuple(notes))
    path = write_results(root, document)
    print(f"Graded in {time.monotonic() - started:.1f} s; wrote {path}", flush=True)
    return 0


def _record_refused(root: Path, settings: dict, reason: str, started: float) -> int:
    """An upload the kit refuses (a bad zip): zero in every task with the reason, as `bertlab grade` records it."""
    from bertlab_grader.grading.scoring import max_points_by_task

    print(f"Upload refused: {reason}", flush=True)
    result = validate_result(error_result(STUDENT, settings["assignment"], reason, max_points_by_task()))
    check_results_schema(result)
    write_results(root, to_gradescope(result, visibility=settings["visibility"],
                                      seconds=time.monotonic() - started))
    return 0


def check(root: Path) -> int:
    """setup.sh's last step: the kit and its schema load; say whether bubblewrap works here."""
    from bertlab_grader.sandbox import launcher

    settings = load_settings(root)
    json.loads(SCHEMA.read_text(encoding="utf-8"))
    works, why = launcher.bubblewrap_status()
    print(f"bertlab {settings['kit_version']} installed for assignment {settings['assignment']}; "
          f"test visibility {settings['visibility']}.")
    if works:
        print(f"Sandbox: {why}.")
    elif settings["require_sandbox"]:
        print(f"Sandbox: NOT available ({why}). Built with --require-sandbox: no submission will be graded "
              "in this image.")
    else:
        print(f"Sandbox: NOT available ({why}). Submissions will be graded without it (--unsafe-no-sandbox), "
              "and every result says so.")
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bertlab_grader.export.gradescope.autograder",
                                     description="Gradescope's side of the kit's autograder (run by run_autograder "
                                                 "and setup.sh).")
    parser.add_argument("command", choices=("run", "check"))
    parser.add_argument("--root", default=None, help=f"default: ${ROOT_VARIABLE}, else {DEFAULT_ROOT}")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    root = Path(args.root) if args.root else autograder_root()
    return run(root) if args.command == "run" else check(root)


if __name__ == "__main__":
    sys.exit(main())
