"""results.json: building, validating against results.schema.json, writing and reading one
submission's results dict (docs/results-format.md).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path

from bertlab.fileio import atomic_write_text
from bertlab.tasks import GRADED_TASKS
from bertlab_grader.core.points import POINTS_EPSILON
from bertlab_grader.course.config import (
    CourseError, OUTCOMES, check_max_points, check_name, ordered_tasks)
from bertlab_grader.course.settings import CourseSettings
from bertlab_grader.performance.timing import within_scatter

log = logging.getLogger(__name__)

#: The JSON Schema every results.json matches (this room's own data; docs/results-format.md).
RESULTS_SCHEMA = Path(__file__).with_name("results.schema.json")


# ---------------------------------------------------------------------------------------------------
# results


def error_result(student: str, assignment: str, message: str, max_points: Mapping[str, float]) -> dict:
    """A valid zero-score results dict for a submission that could not be graded at all: one ``error``
    entry per task, each carrying ``message``."""
    points = check_max_points(max_points)
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
    student = check_name("student", result["student"])
    assignment = check_name("assignment", result["assignment"])
    tests = []
    for i, t in enumerate(result["tests"]):
        where = f"test {i} ({t.get('name', '?')!r})" if isinstance(t, Mapping) else f"test {i}"
        if not isinstance(t, Mapping):
            raise ValueError(f"{where} is not a dict")
        if t.get("task") not in GRADED_TASKS:
            raise ValueError(f"{where}: task {t.get('task')!r} is not one of {', '.join(GRADED_TASKS)}")
        if t.get("outcome") not in OUTCOMES:
            raise ValueError(f"{where}: outcome {t.get('outcome')!r} is not one of {', '.join(OUTCOMES)}")
        pts, mx = float(t.get("points", 0.0)), float(t.get("max_points", 0.0))
        if not (math.isfinite(pts) and math.isfinite(mx) and 0 <= pts <= mx + POINTS_EPSILON):
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
    if "score" in result and abs(float(result["score"]) - score) > POINTS_EPSILON:
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
    if result.get("notes"):
        notes = result["notes"]
        if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
            raise ValueError("notes must be a list of strings")
        out["notes"] = [n[:2000] for n in notes]
    return out


def autograded_dir(settings: CourseSettings, student: str) -> Path:
    """``COURSE/autograded/<student>/<assignment>/``: where a student's graded files go."""
    return settings.root / "autograded" / student / settings.assignment


_SCHEMA_VALIDATOR = None
_FAST_SCHEMA_CHECK = None


def results_schema() -> dict:
    """results.schema.json as the grader validates with it: the file, with the task field's enum set to
    the registry's GRADED_TASKS (bertlab/tasks.py). The file itself leaves the list out, so that the
    registry is the one place that names the tasks."""
    schema = json.loads(RESULTS_SCHEMA.read_text(encoding="utf-8"))
    schema["$defs"]["test"]["properties"]["task"]["enum"] = list(GRADED_TASKS)
    return schema


def check_results_schema(result: Mapping) -> None:
    """Raise ValueError unless ``result`` is a results.json document as ``results.schema.json`` (the
    published format, docs/results-format.md) describes it. Every results.json the kit writes, and
    every document ``grade-one --json`` prints, passes through here.

    A cohort's single writer checks every result (a course of 10,000 on a cluster): jsonschema took
    about a third of a record's time. So a valid document is confirmed by the schema compiled to plain
    Python (fastjsonschema, already a dependency of nbformat; the schema's keywords mean the same in
    draft 7, which it compiles), and jsonschema, the reference implementation, judges any document the
    fast check refuses and words the error."""
    global _SCHEMA_VALIDATOR, _FAST_SCHEMA_CHECK
    if _FAST_SCHEMA_CHECK is None:
        import fastjsonschema

        schema = results_schema()
        schema.pop("$id", None)  # (a name, not a place: its refs are all within the file, "#/$defs/...")
        _FAST_SCHEMA_CHECK = fastjsonschema.compile({**schema, "$schema": "http://json-schema.org/draft-07/schema#"})
    try:
        _FAST_SCHEMA_CHECK(result)
        return
    except Exception:  # noqa: BLE001 - refused (or not JSON-like): the reference decides below
        pass
    errors = schema_errors(result)
    if errors:
        first = errors[0]
        where = "/".join(map(str, first.path)) or "(top level)"
        raise ValueError(f"results document does not match results.schema.json at {where}: {first.message}")


def schema_errors(result: Mapping) -> list:
    """Every jsonschema error of ``result`` against ``results.schema.json``, in document order (the
    reference implementation: the kit's own test session checks every results.json with it)."""
    global _SCHEMA_VALIDATOR
    import jsonschema

    if _SCHEMA_VALIDATOR is None:
        _SCHEMA_VALIDATOR = jsonschema.Draft202012Validator(results_schema())
    return sorted(_SCHEMA_VALIDATOR.iter_errors(result), key=lambda e: list(e.path))


def checked_result(result: Mapping) -> dict:
    """``result`` validated (:func:`validate_result`: a clean copy) and checked against
    results.schema.json (:func:`check_results_schema`): what the kit writes. The recording path calls
    it once per result, before anything of that result is written."""
    clean = validate_result(result)
    check_results_schema(clean)
    return clean


def results_json_text(clean: Mapping) -> str:
    """The text of results.json for a result :func:`checked_result` returned."""
    return json.dumps(clean, indent=1, ensure_ascii=False) + "\n"


def write_results_json(course_dir: str | os.PathLike, result: Mapping) -> Path:
    """Write ``autograded/<student>/<assignment>/results.json`` atomically (the result names its
    student and assignment); return its path."""
    result = checked_result(result)
    path = Path(course_dir) / "autograded" / result["student"] / result["assignment"] / "results.json"
    atomic_write_text(path, results_json_text(result))
    return path


def load_results(settings: CourseSettings) -> dict[str, dict]:
    """The results already written for the settings' assignment: ``{student: result}``. A missing,
    unreadable or inconsistent results.json is skipped (that student is graded again)."""
    assignment = settings.assignment
    root = settings.root / "autograded"
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


def course_max_points(settings: CourseSettings) -> dict[str, float]:
    """task -> points of the assignment as the course's gradebook holds them (what :func:`error_result`
    needs)."""
    from nbgrader.api import Gradebook, MissingEntry

    assignment = settings.assignment
    with Gradebook(settings.gradebook_url) as gb:
        try:
            cells = {c.name: c.max_score for c in gb.find_notebook(assignment, assignment).grade_cells}
        except MissingEntry:
            raise CourseError(f"the gradebook has no assignment {assignment!r}: run init_course first") from None
    return {t: cells[t] for t in ordered_tasks(cells)}


def task_scores(result: dict) -> dict[str, tuple[float, float]]:
    """task -> (points, max points) of one results dict."""
    scores: dict[str, list[float]] = {}
    for test in result["tests"]:
        entry = scores.setdefault(test["task"], [0.0, 0.0])
        entry[0] += test["points"]
        entry[1] += test["max_points"]
    return {t: tuple(v) for t, v in scores.items()}


def format_gradebook(results: dict[str, dict]) -> str:
    """A plain-text table: one row per student, one column per task, and the total."""
    width = {t: max(13, len(t) + 2) for t in GRADED_TASKS}  # a long task name keeps its column apart
    header = f"{'student':<16}" + "".join(f"{t:>{width[t]}}" for t in GRADED_TASKS) + f"{'total':>15}"
    lines = [header, "-" * len(header)]
    for student in sorted(results):
        result = results[student]
        per_task = task_scores(result)
        cells = "".join(f"{'%g/%g' % per_task[t] if t in per_task else '-':>{width[t]}}" for t in GRADED_TASKS)
        lines.append(f"{student:<16}{cells}{'%g/%g' % (result['score'], result['max_score']):>15}")
    return "\n".join(lines)


#: Two gradings of the same files may give a speed test's points this far apart and agree (issue 41's
#: promise: within 0.1 in every run, quiet or busy).
SPEED_POINTS_SPREAD = 0.1


def grade_differences(first: Mapping[str, dict], second: Mapping[str, dict]) -> list[str]:
    """How two gradings of the same submissions differ ({student: results dict} each): [] when they agree.

    Every task but performance must get exactly the same points. A performance test's points follow
    its measured time ratio on a continuous curve (``bertlab_grader.performance.timing.points_fraction``),
    so two measurements of the same code give nearly the same points: a difference of at most
    ``SPEED_POINTS_SPREAD`` is no difference. A larger one whose two ratios are within the
    measurement's scatter of each other (``within_scatter``) is still listed, prefixed "speed
    scatter:", so a caller can show it; only the other lines are real differences."""
    lines = []
    for student in sorted(set(first) | set(second)):
        if student not in first or student not in second:
            lines.append(f"{student}: graded in only one of the two")
            continue
        a, b = task_scores(first[student]), task_scores(second[student])
        for task in sorted(set(a) | set(b)):
            if task != "performance" and a.get(task) != b.get(task):
                lines.append(f"{student}: {task} {a.get(task)} against {b.get(task)}")
        tests_a = {t["name"]: t for t in first[student]["tests"] if t["task"] == "performance"}
        tests_b = {t["name"]: t for t in second[student]["tests"] if t["task"] == "performance"}
        for name in sorted(set(tests_a) | set(tests_b)):
            ta, tb = tests_a.get(name, {}), tests_b.get(name, {})
            pa, pb = ta.get("points"), tb.get("points")
            if pa == pb or (isinstance(pa, (int, float)) and isinstance(pb, (int, float))
                            and abs(pa - pb) <= SPEED_POINTS_SPREAD):
                continue
            ratios = (ta.get("ratio"), tb.get("ratio"))
            scatter = all(isinstance(r, (int, float)) for r in ratios) and within_scatter(*ratios)
            lines.append(f"{'speed scatter: ' if scatter else ''}{student}: {name} {pa} points (ratio "
                         f"{ratios[0]}) against {pb} (ratio {ratios[1]})")
    return lines
