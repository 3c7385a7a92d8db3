"""``bertlab report COURSE``: the cohort report, one self-contained HTML page (docs/report.md).

Where each figure comes from (nothing is graded or recomputed here; the page only reads):

    totals              COURSE/grades.csv (``nbgrader export``), its ``score`` column; a graded student
                        missing from grades.csv is counted with results.json's ``score`` and named
    per-task scores     autograded/<student>/<assignment>/results.json: the sum of ``tests[].points`` per task
    hidden tests        ``tests[].outcome`` per (task, test name): not passed / students whose result has it
    named mistakes      ``tests[].hint``, grouped per (task, hint), each student counted once
    performance ratios  ``tests[].ratio`` per performance test; a test run without one was not timed
    not graded          COURSE/.bertlab/last-run-<assignment>.json (``course/summary.py``: ``write_last_run``), zero-score
                        refused submissions, and submitted folders without a results.json
    similar pairs       ``bertlab_grader.reporting.similarity.similar_pairs`` (imported only when the page asks)

The page loads nothing: plots are inline SVG drawn here, style and script are inline, and its
Content-Security-Policy forbids every fetch, so it opens the same from a laptop, an e-mail or an LMS.
It reads as well for 2,000 students as for 5: histograms, summaries and top-N lists by default;
long lists and the per-student table are folded (the student table is searchable and sortable).
"""

from __future__ import annotations

import csv
import datetime
import functools
import html
import json
import math
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from bertlab.errors import ReportedError, UsageError
from bertlab.fileio import atomic_write_text
from bertlab.mistakes import MISTAKES
from bertlab.tasks import GRADED_TASKS
from bertlab_grader.core.points import POINTS_EPSILON
from bertlab_grader.course.preconditions import require_assignment_name, require_course_folder
from bertlab_grader.course.results import load_results
from bertlab_grader.course.settings import CourseSettings
from bertlab_grader.course.summary import last_run_path
from bertlab_grader.performance.timing import AT_KNEE, FULL_POINTS_UP_TO, HALF_POINTS_AT, KNEE

_BIN_EPSILON = 1e-6  # a histogram's bin edges: float round-off of value / width

TEMPLATE = Path(__file__).parent / "templates" / "report.html.j2"  # (this room's own data)
#: Rows shown before a list folds the rest away (tests, mistakes, not-graded lists).
SHOWN_ROWS = 15
#: Similar pairs asked for per task.
SIMILAR_TOP = 10
#: Bars in the totals histogram (at most) and in each task's.
TOTAL_BINS, TASK_BINS = 25, 12
#: Time ratios are binned on widening steps (a ratio spans 0.2x to 100x); where the points curve falls
#: below full points (2x) and where its gentle fall ends (100x) are marked: both are edges here.
RATIO_EDGES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0, math.inf)


def _refused(result: dict) -> bool:
    """A submission refused as a whole (a zip that failed its checks) is recorded by
    ``course.error_result``: one ``error`` per task named "<task>: submission not graded"."""
    tests = result["tests"]
    return bool(tests) and all(t["outcome"] == "error" and t["name"] == f"{t['task']}: submission not graded"
                               for t in tests)


def _num(x: float) -> str:
    """A score as people write it: 7.5, 12, 0.333."""
    return f"{float(x):.3g}" if abs(x) < 1 and x else f"{round(float(x), 2):g}"


def _pct(part: int, whole: int) -> str:
    """A share in whole percent; "<1%" rather than a misleading "0%" for a few of 2,000."""
    if not whole:
        return "-"
    share = 100.0 * part / whole
    return "<1%" if 0 < share < 0.5 else f"{share:.0f}%"


# ---------------------------------------------------------------------------------------------------
# histograms, drawn as inline SVG


@dataclass(frozen=True)
class Histogram:
    """``counts[i]`` values fell in [edges[i], edges[i+1]) (the last bin also holds its right edge);
    with ``right_closed``, in (edges[i], edges[i+1]] (the first bin also holds its left edge)."""

    edges: tuple[float, ...]
    counts: tuple[int, ...]
    right_closed: bool = False


def _nice_width(span: float, max_bins: int) -> float:
    """The smallest of 0.5, 1, 2, 2.5, 5 x 10^k that cuts ``span`` into at most ``max_bins`` bins."""
    if span <= 0:
        return 1.0
    exponent = math.floor(math.log10(span / max_bins))
    for k in (exponent, exponent + 1):
        for step in (1.0, 2.0, 2.5, 5.0, 10.0):
            width = step * 10.0 ** k
            if width >= 0.5 and span / width <= max_bins + _BIN_EPSILON:
                return width
    return span


def linear_histogram(values: list[float], top: float, max_bins: int) -> Histogram:
    """Equal bins from 0 to ``top`` (a score's maximum). A value at ``top`` (full marks) falls in the
    last bin; values outside [0, top] (a manual grade above the maximum) in the nearest bin."""
    width = _nice_width(top, max_bins)
    n = max(1, math.ceil(top / width - _BIN_EPSILON))
    edges = tuple(round(i * width, 6) for i in range(n + 1))
    counts = [0] * n
    for v in values:
        counts[min(n - 1, max(0, int(math.floor(v / width + _BIN_EPSILON))))] += 1
    return Histogram(edges, tuple(counts))


def ratio_histogram(ratios: list[float], edges: tuple[float, ...] = RATIO_EDGES) -> Histogram:
    """Time ratios in the bins ``edges`` (widening), closed on the right as the points curve is
    (``performance.points_fraction``: a ratio of exactly 2 still earns full points)."""
    counts = [0] * (len(edges) - 1)
    for v in ratios:
        counts[next((i for i in range(len(counts)) if v <= edges[i + 1]), len(counts) - 1)] += 1
    return Histogram(edges, tuple(counts), right_closed=True)


def _edge_label(x: float, suffix: str) -> str:
    return "" if math.isinf(x) else f"{x:g}{suffix}"


def svg_histogram(hist: Histogram, *, plot: str, xlabel: str, width: int = 560, height: int = 190,
                  marks: tuple[tuple[float, str], ...] = (), suffix: str = "", unit: str = "students") -> str:
    """An inline SVG bar chart of ``hist``; bars are equally wide (label the edges when bins are not).
    Every bar carries ``data-lo``, ``data-hi``, ``data-count`` and a tooltip; ``marks`` draws a dashed
    line at each (edge value, label). ``plot`` names the chart (``data-plot``)."""
    left, right, top, bottom = 42, 12, (26 if marks else 14), 40
    plot_w, plot_h = width - left - right, height - top - bottom
    n = len(hist.counts)
    bar_w = plot_w / n
    ymax = max(hist.counts) or 1
    esc = html.escape
    out = [f'<svg class="plot" data-plot="{esc(plot)}" xmlns="http://www.w3.org/2000/svg" role="img" '
           f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
           f'<title>{esc(xlabel)}: histogram of {sum(hist.counts)} {esc(unit)}</title>',
           f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}"/>',
           f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}"/>',
           f'<text class="tick" x="{left - 5}" y="{top + 4}" text-anchor="end">{ymax}</text>',
           f'<text class="tick" x="{left - 5}" y="{top + plot_h + 4}" text-anchor="end">0</text>']
    for i, count in enumerate(hist.counts):
        lo, hi = hist.edges[i], hist.edges[i + 1]
        h = plot_h * count / ymax
        x = left + i * bar_w
        if hist.right_closed:
            span = (f"above {lo:g}{suffix}" if math.isinf(hi) else
                    f"{'[' if i == 0 else '('}{lo:g}{suffix}, {hi:g}{suffix}]")
        else:
            span = f"[{lo:g}{suffix}, {hi:g}{suffix}{']' if i == n - 1 else ')'}"
        out.append(f'<rect class="bar" data-lo="{lo!r}" data-hi="{hi!r}" data-count="{count}" '
                   f'x="{x + 1:.1f}" y="{top + plot_h - h:.1f}" width="{max(bar_w - 2, 1):.1f}" height="{h:.1f}">'
                   f'<title>{esc(span)}: {count} {esc(unit)}</title></rect>')
    label_every = max(1, math.ceil((n + 1) / max(2, plot_w // 48)))  # about 48 px per edge label
    for i, edge in enumerate(hist.edges):
        # every label_every-th edge, and the last one (then not a neighbour crowding it)
        if (i % label_every == 0 and n - i >= label_every) or i == n:
            out.append(f'<text class="tick" x="{left + i * bar_w:.1f}" y="{top + plot_h + 14}" '
                       f'text-anchor="middle">{esc(_edge_label(edge, suffix))}</text>')
    for value, label in marks:
        if value in hist.edges:
            x = left + hist.edges.index(value) * bar_w
            # the label sits above the bars, left of its line: the bins left of an edge earn it
            out.append(f'<line class="mark" x1="{x:.1f}" y1="{top - 14}" x2="{x:.1f}" y2="{top + plot_h}"/>'
                       f'<text class="mark-label" x="{x - 3:.1f}" y="{top - 6}" text-anchor="end">{esc(label)}</text>')
    out.append(f'<text class="axis-label" x="{left + plot_w / 2:.1f}" y="{height - 6}" '
               f'text-anchor="middle">{esc(xlabel)}</text></svg>')
    return "".join(out)


# ---------------------------------------------------------------------------------------------------
# reading the course


def read_grades_csv(course: Path, assignment: str) -> tuple[dict[str, float] | None, str]:
    """``({student: score}, note)`` from nbgrader export's grades.csv, rows of ``assignment`` only;
    ``(None, why)`` when there is no usable grades.csv."""
    path = course / "grades.csv"
    if not path.is_file():
        return None, (f"{path} does not exist: `bertlab grade` writes it at the end of each run "
                      "(or run `nbgrader export` in the course folder). Totals here come from results.json.")
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        return None, f"{path} could not be read ({exc}). Totals here come from results.json."
    if rows and not {"assignment", "student_id", "score"} <= rows[0].keys():
        return None, (f"{path} is not nbgrader export's format (no assignment, student_id and score columns). "
                      "Totals here come from results.json.")
    scores: dict[str, float] = {}
    for row in rows:
        if row["assignment"] == assignment:
            try:
                scores[row["student_id"]] = float(row["score"])
            except (TypeError, ValueError):
                continue
    return scores, ""


def read_last_run(course: Path, assignment: str) -> tuple[dict | None, str]:
    """The summary ``bertlab grade`` kept of its last run of ``assignment``, or ``(None, why)``."""
    settings = CourseSettings(course, assignment)
    path = last_run_path(settings)
    if not path.is_file():
        return None, (f"no record of a grading run ({path.relative_to(settings.root)} is missing: the course was "
                      "graded by an earlier kit or not with `bertlab grade`). Folders the grader failed on "
                      "cannot be listed; the next `bertlab grade` records them.")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(document, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        return None, f"{path} could not be read ({exc}); the next `bertlab grade` writes it again."
    return document, ""


def submitted_students(course: Path, assignment: str) -> list[str]:
    """Students with a ``submitted/<student>/<assignment>/`` folder or ``<assignment>.zip`` (read only:
    unlike ``submissions.scan_submitted`` this extracts no zip)."""
    root = course / "submitted"
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir()
                  if not p.name.startswith(".") and p.is_dir()
                  and ((p / assignment).is_dir() or (p / f"{assignment}.zip").is_file()))


def _assignments_graded(course: Path) -> list[str]:
    return sorted({p.parent.name for p in (course / "autograded").glob("*/*/results.json")})


# ---------------------------------------------------------------------------------------------------
# the figures


def _stats(values: list[float]) -> dict[str, float]:
    quartiles = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
    return {"n": len(values), "mean": statistics.fmean(values), "median": statistics.median(values),
            "q1": quartiles[0], "q3": quartiles[2], "min": min(values), "max": max(values)}


def _task_maxima(results: dict[str, dict]) -> dict[str, float]:
    """task -> points, the most common per-student sum of ``max_points`` (every result of one run
    agrees; a result from an older suite must not move the scale)."""
    sums: dict[str, Counter] = defaultdict(Counter)
    for result in results.values():
        per_task: dict[str, float] = defaultdict(float)
        for t in result["tests"]:
            per_task[t["task"]] += t["max_points"]
        for task, points in per_task.items():
            sums[task][round(points, 6)] += 1
    return {task: sums[task].most_common(1)[0][0] for task in GRADED_TASKS if task in sums}


def _mistake_names() -> dict[str, str]:
    return {m.hint: m.name for m in MISTAKES}


def _totals(results: dict[str, dict], graded: list[str], csv_scores: dict[str, float] | None):
    """Each graded student's total as grades.csv has it, and the students where it is not results.json's."""
    totals, differ, missing = {}, [], []
    for student in graded:
        own = results[student]["score"]
        if csv_scores is not None and student in csv_scores:
            totals[student] = csv_scores[student]
            if abs(csv_scores[student] - own) > POINTS_EPSILON:
                differ.append({"student": student, "csv": _num(csv_scores[student]), "results": _num(own)})
        else:
            totals[student] = own
            if csv_scores is not None:
                missing.append(student)
    return totals, differ, missing


def _tests_table(results: dict[str, dict], graded: list[str]) -> list[dict]:
    """One row per hidden test: how many students' results hold it, and its outcomes; worst first."""
    rows: dict[tuple[str, str], dict] = {}
    order = {task: i for i, task in enumerate(GRADED_TASKS)}
    for student in graded:
        for t in results[student]["tests"]:
            row = rows.setdefault((t["task"], t["name"]), {
                "task": t["task"], "name": t["name"], "points": t["max_points"], "ran": 0,
                "passed": 0, "failed": 0, "error": 0, "timeout": 0})
            row["ran"] += 1
            row[t["outcome"]] += 1
    for row in rows.values():
        row["not_passed"] = row["ran"] - row["passed"]
        row["rate"] = row["not_passed"] / row["ran"]
        row["points"] = _num(row["points"])
    return sorted(rows.values(), key=lambda r: (-r["rate"], order.get(r["task"], 99), r["name"]))


def _mistakes_table(results: dict[str, dict], graded: list[str]) -> list[dict]:
    """One row per (task, hint): the students whose failing tests carry it (each counted once)."""
    students: dict[tuple[str, str], set] = defaultdict(set)
    for student in graded:
        for t in results[student]["tests"]:
            if t.get("hint"):
                students[(t["task"], t["hint"])].add(student)
    names = _mistake_names()
    rows = [{"task": task, "hint": hint, "name": names.get(hint, ""), "count": len(who),
             "share": len(who) / len(graded), "students": sorted(who)}
            for (task, hint), who in students.items()]
    return sorted(rows, key=lambda r: (-r["count"], r["task"], r["hint"]))


def _ratios(results: dict[str, dict], assessed: list[str]) -> list[dict]:
    """Per performance test: the time ratios measured, how many earned full points, half or more, and less, and how many were not timed."""
    by_test: dict[str, dict] = {}
    for student in assessed:
        for t in results[student]["tests"]:
            if t["task"] != "performance":
                continue
            entry = by_test.setdefault(t["name"], {"name": t["name"], "ratios": [], "ran": 0})
            entry["ran"] += 1
            if "ratio" in t:
                entry["ratios"].append(t["ratio"])
    full, half = FULL_POINTS_UP_TO, HALF_POINTS_AT  # the points curve: full points, then half of them
    out = []
    for name in sorted(by_test):
        entry = by_test[name]
        ratios = entry["ratios"]
        row = {"name": name, "ran": entry["ran"], "timed": len(ratios), "not_timed": entry["ran"] - len(ratios),
               "full_limit": _num(full), "half_limit": _num(half),
               "full": sum(r <= full for r in ratios), "half": sum(full < r <= half for r in ratios),
               "slower": sum(r > half for r in ratios), "median": None, "svg": None}
        if ratios:
            row["median"] = statistics.median(ratios)
            row["median_text"] = f"{row['median']:.2f}x"
            hist = ratio_histogram(ratios)
            marks = ((full, f"full points up to {_num(full)}x"), (KNEE, f"{AT_KNEE:.2f} at {_num(KNEE)}x"))
            row["svg"] = svg_histogram(hist, plot=f"ratio-{name}", xlabel=f"{name}: time / reference time",
                                       marks=marks, suffix="x", width=460, height=170)
        out.append(row)
    return out


def _not_graded(course: Path, assignment: str, results: dict[str, dict], last_run: dict | None) -> dict:
    """What was handed in but has no grade of its own, and why."""
    submitted = submitted_students(course, assignment)
    grader = []
    stale = set(last_run.get("stale", [])) if last_run else set()
    for student, cause in sorted((last_run or {}).get("not_graded", {}).items()):
        cause = str(cause).strip()
        grader.append({"student": student, "first": cause.splitlines()[0] if cause else "(no cause recorded)",
                       "cause": cause, "stale": student in stale and student in results})
    named = {row["student"] for row in grader}
    missing = [{"student": s, "why": ("graded in no run yet: handed in after the last run, or the run stopped "
                                      "first; the next `bertlab grade` grades it")}
               for s in submitted if s not in results and s not in named]
    layout = [{"folder": str(p.get("folder", "")), "found": str(p.get("found", "")),
               "expected": str(p.get("expected", ""))}
              for p in (last_run or {}).get("layout_problems", []) if isinstance(p, dict)]
    refused = [{"student": s, "message": results[s]["tests"][0]["message"]}
               for s in sorted(results) if _refused(results[s])]
    return {"grader": grader, "missing": missing, "layout": layout, "refused": refused,
            "stopped": (last_run or {}).get("stopped"), "finished": (last_run or {}).get("finished"),
            "submitted": len(submitted),
            "count": len(grader) + len(missing) + len(layout)}


def _similar(course: Path, assignment: str, enabled: bool) -> dict:
    """The most similar pairs per task, or why there are none."""
    if not enabled:
        return {"note": "Not computed: the report was written with --no-similar.", "tasks": []}
    try:
        from bertlab_grader.reporting.similarity import similar_pairs
    except ImportError as exc:
        return {"note": f"Not computed: the similarity check is not available here ({exc}).", "tasks": []}
    try:
        pairs = similar_pairs(course, assignment, top=SIMILAR_TOP)
    except ReportedError as exc:
        return {"note": f"Not computed: {exc}", "tasks": []}
    by_task: dict[str, list] = defaultdict(list)
    for pair in pairs:
        by_task[pair.task].append({"a": pair.a, "b": pair.b, "similarity": float(pair.similarity)})
    ordered = [t for t in GRADED_TASKS if t in by_task] + sorted(t for t in by_task if t not in GRADED_TASKS)
    tasks = [{"task": t, "pairs": sorted(by_task[t], key=lambda p: -p["similarity"])} for t in ordered]
    note = "" if tasks else ("No pairs: no two submissions share code beyond the stubs, or fewer than two "
                             "had code of their own to compare.")
    return {"note": note, "tasks": tasks}


def collect(course: Path, assignment: str = "week7", *, similar: bool = True) -> dict:
    """Everything the page shows, read from the course (the template's context)."""
    course = Path(course)
    settings = CourseSettings(course, assignment)
    require_course_folder(settings, what="the nbgrader course folder that `bertlab grade` graded "
                                         "(it holds autograded/<student>/<assignment>/results.json)")
    require_assignment_name(assignment)
    results = load_results(settings)
    if not results:
        others = [a for a in _assignments_graded(course) if a != assignment]
        hint = (f" Graded assignments here: {', '.join(others)} (pass one with --assignment)." if others else
                f" Grade it first: bertlab grade {course} --assignment {assignment}.")
        raise UsageError(f"nothing graded for {assignment!r} in {course}: there is no "
                         f"autograded/<student>/{assignment}/results.json.{hint}")

    # refused submissions (zero, recorded) count in the totals, as in the gradebook, but not in the
    # per-test, mistake and ratio figures: their tests are placeholders, not hidden tests
    graded = sorted(results)
    assessed = [s for s in graded if not _refused(results[s])]
    csv_scores, csv_note = read_grades_csv(course, assignment)
    totals, differ, missing_from_csv = _totals(results, graded, csv_scores)
    maxima = _task_maxima({s: results[s] for s in assessed} or results)
    max_total = sum(maxima.values()) or max(r["max_score"] for r in results.values())
    total_values = [totals[s] for s in graded]
    stats = _stats(total_values)

    task_scores = {s: defaultdict(float) for s in graded}
    for s in graded:
        for t in results[s]["tests"]:
            task_scores[s][t["task"]] += t["points"]
    tasks = []
    for task, top in maxima.items():
        values = [task_scores[s][task] for s in graded]
        st = _stats(values)
        tasks.append({"task": task, "max": _num(top), "mean": st["mean"], "mean_text": f"{st['mean']:.1f}",
                      "median_text": _num(st["median"]),
                      "full": sum(v >= top - POINTS_EPSILON for v in values), "zero": sum(v <= POINTS_EPSILON for v in values),
                      "svg": svg_histogram(linear_histogram(values, top, TASK_BINS), plot=f"task-{task}",
                                           xlabel=f"{task} points (of {_num(top)})", width=300, height=160)})

    students = [{"student": s, "total": totals[s], "total_text": _num(totals[s]),
                 "tasks": [{"task": task, "value": task_scores[s][task], "text": _num(task_scores[s][task])}
                           for task in maxima],
                 "not_passed": sum(t["outcome"] != "passed" for t in results[s]["tests"]),
                 "refused": _refused(results[s])}
                for s in graded]
    last_run, last_run_note = read_last_run(course, assignment)
    return {
        "course": str(course.resolve()), "assignment": assignment,
        "generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "n": len(graded), "max_total": _num(max_total),
        "stats": [{"key": key, "label": label, "value": stats[key],
                   "text": f"{stats[key]:.1f}" if key == "mean" else _num(stats[key])}
                  for key, label in (("n", "graded"), ("mean", "mean"), ("median", "median"),
                                     ("q1", "lower quartile"), ("q3", "upper quartile"),
                                     ("min", "lowest"), ("max", "highest"))],
        "mean_text": f"{stats['mean']:.1f}", "median_text": _num(stats["median"]),
        "full_marks": sum(v >= max_total - POINTS_EPSILON for v in total_values),
        "totals_source": "grades.csv" if csv_scores is not None else "results.json",
        "csv_note": csv_note, "csv_differ": differ, "csv_missing": missing_from_csv,
        "totals_svg": svg_histogram(linear_histogram(total_values, max_total, TOTAL_BINS), plot="totals",
                                    xlabel=f"total points (of {_num(max_total)})", width=640, height=220),
        "tasks": tasks, "task_names": list(maxima),
        "tests": _tests_table(results, assessed), "mistakes": _mistakes_table(results, assessed) if assessed else [],
        "assessed": len(assessed), "ratios": _ratios(results, assessed),
        "not_graded": _not_graded(course, assignment, results, last_run), "last_run_note": last_run_note,
        "similar": _similar(course, assignment, similar), "students": students,
        "shown": SHOWN_ROWS, "pct": _pct, "num": _num,
    }


# ---------------------------------------------------------------------------------------------------
# the page


@functools.lru_cache(maxsize=1)
def _template():
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE.parent)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env.get_template(TEMPLATE.name)


def render(context: dict) -> str:
    """The page for ``context`` (:func:`collect`). The SVG strings are built here with every label
    escaped; everything else the template escapes (student ids and file names are the students')."""
    from markupsafe import Markup

    context = dict(context)
    context["totals_svg"] = Markup(context["totals_svg"])
    context["tasks"] = [dict(t, svg=Markup(t["svg"])) for t in context["tasks"]]
    context["ratios"] = [dict(r, svg=Markup(r["svg"]) if r["svg"] else None) for r in context["ratios"]]
    return _template().render(**context)


def write_report(course: Path, assignment: str = "week7", out: Path | None = None, *,
                 similar: bool = True) -> tuple[Path, dict]:
    """Write the page (default ``COURSE/report-<assignment>.html``, atomically); return (path, context)."""
    context = collect(Path(course), assignment, similar=similar)
    out = Path(out) if out is not None else Path(course) / f"report-{assignment}.html"
    if not out.parent.is_dir():
        raise UsageError(f"--out {out}: the folder {out.parent} does not exist. Create it, or name a file in "
                         "an existing folder.")
    if out.is_dir():
        raise UsageError(f"--out {out} is a folder: name the HTML file to write, e.g. {out / 'report.html'}")
    atomic_write_text(out, render(context))
    return out, context


def report_command(settings: CourseSettings, out: Path | None = None, similar: bool = True) -> int:
    """`bertlab report`: write the page, say where and how many it covers; returns the exit code, 0."""
    path, context = write_report(settings.root, settings.assignment, out, similar=similar)
    waiting = context["not_graded"]["count"]
    print(f"Wrote {path}: {context['n']} graded submission(s) of {settings.assignment}"
          + (f", {waiting} handed in but not graded (see the page)" if waiting else "")
          + ". Open it in any browser; it needs no network.")
    return 0
