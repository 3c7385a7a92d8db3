"""`bertlab report`: the cohort page, opened in a real headless browser (Debian's Chromium, driven by
Playwright's Python package; never a browser Playwright downloads).

One course per module, built without grading (benchmarks/report_timing.py ``build_course``: synthetic
results recorded through ``bertlab_grader.course.gradebook``, grades.csv from ``nbgrader export``, the run
summary ``bertlab grade`` keeps): five graded students (one id holds HTML characters, one has a manual
grade in grades.csv), one refused zip (recorded as zero), one student the grader failed on, and one
folder holding no submission. The similarity section is fed a planted list. Every figure the page shows is read from the DOM and
compared with grades.csv and the results.json files, parsed here.
"""

from __future__ import annotations

import csv
import json
import shutil
import statistics
import sys
import types
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import system_chromium

from bertlab.cli import main
from bertlab.tasks import EXERCISE_TASKS, GRADED_TASKS
from bertlab_grader.reporting import report

KIT_ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENT = "week7"
SCREENSHOT_COPY = Path("/tmp/bertlab-report-screenshot.png")
GRADED = ["ann", "bo", "cy", "kim <b>&co", "eve"]
FAILED_ON = "zed"
MANUAL_GRADE_FOR = "bo"
REFUSED = {"rex": "The zip holds a link (cka.py -> /etc/passwd); hand in plain files."}
# A compact set of real hidden tests (collecting the real suites costs seconds): every task, two
# performance tests, so every section of the page has something to show.
# A task a course removed (bertlab remove-task) is left out, with the speed test that times it.
_SPEED_TESTS = {"cka": ("test_linear_cka_speed", 3.0), "retrieval": ("test_semantic_search_speed", 4.0)}
LAYOUT = {task: tests for task, tests in {
    "cka": [("test_linear_cka_matches_reference", 3.0), ("test_linear_cka_invariances", 2.0),
            ("test_cka_matrix_matches_reference", 2.0)],
    "pooling": [("test_pool_matches_reference", 3.0), ("test_pool_keeps_dtype", 2.0)],
    "siamese": [("test_forward_is_pairwise_cosine", 3.0), ("test_both_sides_share_one_encoder", 3.0)],
    "retrieval": [("test_search_matches_brute_force_across_block_sizes", 5.0),
                  ("test_search_ties_by_ascending_index", 3.0)],
    "performance": [test for task, test in _SPEED_TESTS.items() if task in EXERCISE_TASKS],
}.items() if task in GRADED_TASKS}
SEED = 80  # a cohort with every outcome, a mistake two students share, a test not timed


@dataclass(frozen=True)
class PlantedPair:  # the fields of bertlab_grader.reporting.similarity.SimilarPair
    task: str
    a: str
    b: str
    similarity: float


PLANTED = [PlantedPair("cka", "ann", "kim <b>&co", 0.93), PlantedPair("cka", "bo", "cy", 0.41),
           PlantedPair("pooling", "ann", "eve", 0.27)]


def _build_course(course: Path) -> dict:
    sys.path.insert(0, str(KIT_ROOT / "benchmarks"))
    try:
        from report_timing import build_course
    finally:
        sys.path.remove(str(KIT_ROOT / "benchmarks"))
    return build_course(course, 0, seed=SEED, layout=LAYOUT, students=GRADED + [FAILED_ON], not_graded=1,
                        refused=REFUSED)


def _browser():
    return system_chromium()


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    """The course, its report (written with a fake similarity module and 4 rows before a list folds),
    and grades.csv and results.json as parsed here."""
    base = tmp_path_factory.mktemp("report")
    course = base / "course"
    built = _build_course(course)
    # bo's line as nbgrader export writes it after an instructor added a manual grade of +1.5 points:
    # the page must show grades.csv's total (what is published) and name the difference
    with (course / "grades.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        if row["student_id"] == MANUAL_GRADE_FOR:
            row["raw_score"] = row["score"] = str(float(row["score"]) + 1.5)
    with (course / "grades.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    fake = types.ModuleType("bertlab_grader.reporting.similarity")
    fake.similar_pairs = lambda course, assignment="week7", top=10: list(PLANTED)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "bertlab_grader.reporting.similarity", fake)
        mp.setattr(report, "SHOWN_ROWS", 4)
        page, _ = report.write_report(course, ASSIGNMENT, base / "page.html")
    with (course / "grades.csv").open(newline="") as handle:
        grades = {row["student_id"]: float(row["score"]) for row in csv.DictReader(handle)
                  if row["assignment"] == ASSIGNMENT}
    results = {p.parent.parent.name: json.loads(p.read_text())
               for p in course.glob(f"autograded/*/{ASSIGNMENT}/results.json")}
    return {"course": course, "page": page, "grades": grades, "results": results, "built": built, "base": base}


@pytest.fixture(scope="module")
def browser_page(cohort):
    """The page opened in headless Chromium; console messages, page errors and requests recorded."""
    sync_playwright, chromium = _browser()
    playwright = sync_playwright().start()
    browser = playwright.chromium.launch(executable_path=chromium, headless=True)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    seen = {"console": [], "errors": [], "requests": []}
    page.on("console", lambda m: seen["console"].append((m.type, m.text)))
    page.on("pageerror", lambda e: seen["errors"].append(str(e)))
    page.on("request", lambda r: seen["requests"].append(r.url))
    page.goto(cohort["page"].as_uri(), wait_until="load")
    yield page, seen
    browser.close()
    playwright.stop()


def _rows(page, selector: str, attributes: list[str]) -> list[dict]:
    return page.eval_on_selector_all(
        selector, "(els, names) => els.map(e => Object.fromEntries(names.map(n => [n, e.getAttribute(n)])))",
        attributes)


# ------------------------------------------------------------------------------------------------
# the page in the browser


@pytest.mark.tasks("cka", "pooling", "siamese", "retrieval")  # SEED was chosen for the layout with every task
def test_course_has_what_the_page_must_show(cohort):
    """The synthetic cohort (fixed seed) exercises every figure: each outcome, a mistake made by two
    students, ratios and a test not timed, a grader failure, a layout problem, a refused zip;
    grades.csv holds every graded student."""
    tests = [t for s in GRADED for t in cohort["results"][s]["tests"]]
    assert {t["outcome"] for t in tests} == {"passed", "failed", "error", "timeout"}
    shared = Counter(h for s in GRADED for h in {(t["task"], t["hint"]) for t in cohort["results"][s]["tests"]
                                                 if t.get("hint")})
    assert shared and max(shared.values()) >= 2
    assert any("ratio" in t for t in tests)
    assert any(t["task"] == "performance" and "ratio" not in t for t in tests)
    assert set(cohort["grades"]) == set(GRADED) | set(REFUSED)
    assert set(cohort["results"]) == set(GRADED) | set(REFUSED)
    assert cohort["built"]["layout"] and cohort["built"]["not_graded"]


def test_page_loads_with_no_console_errors_and_no_network(browser_page, cohort):
    page, seen = browser_page
    assert seen["errors"] == []
    assert [m for m in seen["console"] if m[0] in ("error", "warning")] == []
    assert seen["requests"] == [cohort["page"].as_uri()], "the page must load nothing but itself"
    assert page.title().startswith(f"{ASSIGNMENT}: cohort report")


def test_every_plot_renders(browser_page, cohort):
    page, _ = browser_page
    plots = page.eval_on_selector_all("svg.plot", """els => els.map(e => {
        const r = e.getBoundingClientRect();
        return {plot: e.dataset.plot, w: r.width, h: r.height,
                bars: Array.from(e.querySelectorAll('rect.bar')).map(b => [+b.dataset.count, b.getBBox().height])};
    })""")
    timed = {t["name"] for s in GRADED for t in cohort["results"][s]["tests"] if "ratio" in t}
    assert sorted(p["plot"] for p in plots) == sorted(
        ["totals"] + [f"task-{t}" for t in LAYOUT] + [f"ratio-{name}" for name in timed])
    for plot in plots:
        assert plot["w"] > 50 and plot["h"] > 50, plot
        assert plot["bars"] and all((h > 0) == (count > 0) for count, h in plot["bars"]), plot
    images = page.eval_on_selector_all("img", "els => els.map(i => [i.complete, i.naturalWidth])")
    assert all(done and width > 0 for done, width in images)


def test_totals_match_grades_csv(browser_page, cohort):
    page, _ = browser_page
    grades = cohort["grades"]
    shown = {r["data-student"]: float(r["data-total"]) for r in page.eval_on_selector_all(
        "#student-table tbody tr", "rows => rows.map(r => ({'data-student': r.dataset.student, "
        "'data-total': r.querySelector('[data-total]').dataset.total}))")}
    assert shown == pytest.approx(grades)
    own = cohort["results"][MANUAL_GRADE_FOR]["score"]
    assert grades[MANUAL_GRADE_FOR] == own + 1.5
    differs = page.text_content("details[data-note=csv-differs]")
    assert MANUAL_GRADE_FOR in differs and "1 student(s)" in differs
    # the visible text of the odd id is the id itself: escaped, never read as HTML
    assert "kim <b>&co" in page.inner_text("#student-table")
    # the histogram holds exactly grades.csv's totals, bin by bin
    bars = [(float(b["data-lo"]), float(b["data-hi"]), int(b["data-count"]))
            for b in _rows(page, "svg[data-plot=totals] rect.bar", ["data-lo", "data-hi", "data-count"])]
    expected = Counter()
    for value in grades.values():
        for i, (lo, hi, _) in enumerate(bars):
            # the last bin also holds full marks and a manual grade above them (report.linear_histogram)
            if lo <= value < hi or (i == len(bars) - 1 and value >= hi):
                expected[i] += 1
                break
    assert [count for _, _, count in bars] == [expected[i] for i in range(len(bars))]
    assert sum(expected.values()) == len(grades)
    stats = {r["data-stat"]: float(r["data-value"]) for r in _rows(page, "[data-stat]", ["data-stat", "data-value"])}
    values = list(grades.values())
    assert stats["n"] == len(values)
    assert stats["mean"] == pytest.approx(statistics.fmean(values))
    assert stats["median"] == pytest.approx(statistics.median(values))
    assert stats["min"] == min(values) and stats["max"] == max(values)
    assert page.inner_text("[data-card=graded] .big") == str(len(values))


def test_task_scores_match_results_json(browser_page, cohort):
    page, _ = browser_page
    cells = page.eval_on_selector_all("#student-table tbody tr", """rows => rows.map(r => [r.dataset.student,
        Array.from(r.querySelectorAll('td[data-task]')).map(c => [c.dataset.task, +c.dataset.value])])""")
    for student, tasks in cells:
        expected = defaultdict(float)
        for t in cohort["results"][student]["tests"]:
            expected[t["task"]] += t["points"]
        assert dict(tasks) == pytest.approx(dict(expected)), student
    means = {r["data-task"]: float(r["data-mean"]) for r in _rows(page, "#tasks .panel", ["data-task", "data-mean"])}
    for task, mean in means.items():
        per_student = [sum(t["points"] for t in r["tests"] if t["task"] == task) for r in cohort["results"].values()]
        assert mean == pytest.approx(statistics.fmean(per_student)), task


def test_hidden_tests_failure_rates_worst_first(browser_page, cohort):
    page, _ = browser_page
    rows = _rows(page, "tr[data-test]", ["data-test", "data-task", "data-ran", "data-passed", "data-failed",
                                         "data-error", "data-timeout", "data-rate"])
    expected = defaultdict(Counter)
    for student in GRADED:  # the refused zip's placeholder tests are not hidden tests
        for t in cohort["results"][student]["tests"]:
            expected[(t["task"], t["name"])][t["outcome"]] += 1
    assert {(r["data-task"], r["data-test"]) for r in rows} == set(expected)
    for r in rows:
        outcomes = expected[(r["data-task"], r["data-test"])]
        assert int(r["data-ran"]) == sum(outcomes.values())
        for outcome in ("passed", "failed", "error", "timeout"):
            assert int(r[f"data-{outcome}"]) == outcomes[outcome], (r, outcome)
    rates = [float(r["data-rate"]) for r in rows]
    assert rates == sorted(rates, reverse=True)
    # 4 rows before the list folds (set by the fixture): the rest are in a closed <details>
    assert page.locator("table[data-table=tests] tbody tr").count() == 4
    assert not page.eval_on_selector("table[data-table=tests-more]", "t => t.closest('details').open")


def test_named_mistakes_counted_per_student(browser_page, cohort):
    page, _ = browser_page
    rows = page.eval_on_selector_all("#mistakes tr[data-count]", """rows => rows.map(r => [r.dataset.task,
        r.querySelector('.hint-text').textContent, +r.dataset.count])""")
    expected = defaultdict(set)
    for student in GRADED:
        for t in cohort["results"][student]["tests"]:
            if t.get("hint"):
                expected[(t["task"], t["hint"])].add(student)
    assert {(task, hint): count for task, hint, count in rows} == {k: len(v) for k, v in expected.items()}
    counts = [count for _, _, count in rows]
    assert counts == sorted(counts, reverse=True)


def test_performance_ratios(browser_page, cohort):
    page, _ = browser_page
    panels = {r["data-ratio-test"]: r for r in _rows(page, "[data-ratio-test]",
                                                     ["data-ratio-test", "data-timed", "data-median"])}
    ratios = defaultdict(list)
    for student in GRADED:
        for t in cohort["results"][student]["tests"]:
            if t["task"] == "performance":
                ratios[t["name"]] += [t["ratio"]] if "ratio" in t else []
    assert set(panels) == set(ratios)
    for name, values in ratios.items():
        assert int(panels[name]["data-timed"]) == len(values)
        if values:
            assert float(panels[name]["data-median"]) == pytest.approx(statistics.median(values))


def test_not_graded_and_why(browser_page, cohort):
    page, _ = browser_page
    failure = page.locator(f"tr[data-kind=grader][data-student={FAILED_ON}]")
    cause = cohort["built"]["not_graded"][FAILED_ON]
    assert cause.splitlines()[0] in failure.inner_text()
    layout = page.inner_text("table[data-table=layout]")
    assert all(p.folder in layout for p in cohort["built"]["layout"])
    refused = page.locator("tr[data-kind=refused][data-student=rex]")
    assert REFUSED["rex"] in refused.inner_text()
    assert page.inner_text("[data-card=not-graded] .big") == str(1 + len(cohort["built"]["layout"]))


def test_similar_pairs_section(browser_page):
    page, _ = browser_page
    rows = _rows(page, "#similar tr[data-task]", ["data-task", "data-a", "data-b", "data-similarity"])
    assert [(r["data-task"], r["data-a"], r["data-b"], float(r["data-similarity"])) for r in rows] == \
        [(p.task, p.a, p.b, p.similarity) for p in PLANTED]
    assert "kim <b>&co" in page.inner_text("#similar")


def test_full_page_screenshot(browser_page, tmp_path_factory):
    page, _ = browser_page
    path = tmp_path_factory.mktemp("screenshot") / "bertlab-report.png"
    page.screenshot(path=str(path), full_page=True)
    shutil.copyfile(path, SCREENSHOT_COPY)
    print(f"\nreport screenshot: {path} (copy: {SCREENSHOT_COPY})")
    header = path.read_bytes()[:24]
    width, height = int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and width == 1280 and height > 2000


def test_student_table_filters_and_sorts(browser_page, cohort):
    page, _ = browser_page
    page.fill("#student-search", "e")  # eve and rex... and nobody else
    visible = page.eval_on_selector_all("#student-table tbody tr", "rows => rows.filter(r => !r.hidden)"
                                        ".map(r => r.dataset.student)")
    assert sorted(visible) == sorted(s for s in cohort["grades"] if "e" in s.lower())
    page.fill("#student-search", "")
    page.click("#student-table th:nth-child(2)")  # total, ascending
    totals = page.eval_on_selector_all("#student-table tbody [data-total]", "cells => cells.map(c => +c.dataset.total)")
    assert totals == sorted(cohort["grades"].values())


# ------------------------------------------------------------------------------------------------
# the command


def test_report_command_writes_the_default_page(cohort, capsys):
    course = cohort["course"]
    assert main(["report", str(course), "--no-similar"]) == 0
    out = capsys.readouterr().out
    page = course / f"report-{ASSIGNMENT}.html"
    assert str(page) in out and f"{len(cohort['grades'])} graded" in out
    text = page.read_text()
    assert "written with --no-similar" in text
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text


def test_report_section_uses_the_similarity_module(cohort):
    """Without the planted list: the section shows what ``similar_pairs`` returns (the real module,
    here on two students handed the reference solution: a pair to find)."""
    similarity = pytest.importorskip("bertlab_grader.reporting.similarity")
    from bertlab_grader.core.locations import reference_sources

    course = cohort["course"]
    for student in ("ann", "bo"):
        for name, text in reference_sources().items():
            (course / "submitted" / student / ASSIGNMENT / name).write_text(text)
    section = report.collect(course, ASSIGNMENT)["similar"]
    pairs = similarity.similar_pairs(course, ASSIGNMENT, top=report.SIMILAR_TOP)
    assert pairs, "two copies of the reference must make a pair"
    assert [(t["task"], p["a"], p["b"], p["similarity"]) for t in section["tasks"] for p in t["pairs"]] == \
        [(p.task, p.a, p.b, p.similarity) for p in pairs]


def test_nothing_graded_is_a_one_line_usage_error(tmp_path, capsys):
    course = tmp_path / "course"
    (course / "submitted" / "ann" / ASSIGNMENT).mkdir(parents=True)
    assert main(["report", str(course)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nothing graded" in err and "bertlab grade" in err
    assert main(["report", str(tmp_path / "nowhere")]) == 2
    assert "no course folder" in capsys.readouterr().err
    assert not (course / f"report-{ASSIGNMENT}.html").exists()


def test_out_in_a_missing_folder_is_a_usage_error(cohort, capsys):
    out = cohort["base"] / "no-such-folder" / "page.html"
    assert main(["report", str(cohort["course"]), "--no-similar", "--out", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err and not out.exists()


# ------------------------------------------------------------------------------------------------
# the histograms


def test_linear_histogram_bins():
    hist = report.linear_histogram([0.0, 12.5, 49.5, 50.0, 50.0], 50.0, 25)
    assert hist.edges[0] == 0 and hist.edges[-1] == 50 and len(hist.counts) <= 25
    assert sum(hist.counts) == 5 and hist.counts[0] == 1 and hist.counts[-1] == 3  # full marks: last bin
    tiny = report.linear_histogram([1.0], 3.0, 12)
    assert len(tiny.counts) <= 12 and sum(tiny.counts) == 1


def test_ratio_bins_cover_every_ratio():
    hist = report.ratio_histogram([0.1, 1.0, 2.0, 2.01, 20.0, 400.0])
    assert sum(hist.counts) == 6 and hist.counts[-1] == 1 and hist.right_closed
    # closed on the right as the kit's bands are (ratio <= 2: full points): 2.0 left of the 2x edge
    edges = report.RATIO_EDGES
    assert hist.counts[edges.index(2.0) - 1] == 1 and hist.counts[edges.index(2.0)] == 1
    assert hist.counts[edges.index(20.0) - 1] == 1
