"""A regrade request in formgrader: the instructor opens one student's graded submission and sees, on
one page, the student's code (numbered, beside its task's results) and the failing test's message
naming the file and line. The same notebook gives the student's feedback HTML.

One small course per module, recorded as ``bertlab grade`` records one (benchmarks/formgrader_timing.py
``build_review_course``): amy's cka.py raises at a line of her own, and her failing test's message is the
one the kit writes for that (``raised ValueError (...) in cka.py, line N``, bertlab.assertions); ben
passes. formgrader runs as a Jupyter server on a free local port with a token, its Jupyter folders in a
temporary folder, and is stopped at the end; the page is opened in the system Chromium by Playwright
(never a browser Playwright downloads). The screenshot is kept at /tmp/bertlab-formgrader-review.png.
"""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

import pytest

from conftest import system_chromium

from bertlab.tasks import EXERCISE_TASKS, GRADED_TASKS, exercise

pytestmark = [pytest.mark.slow, pytest.mark.tasks("cka")]

KIT_ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENT = "week7"
SCREENSHOT = Path("/tmp/bertlab-formgrader-review.png")
AMY_LINE = '    raise ValueError("amy-7f3c: centering went wrong")'
BEN_LINE = "# ben-91d2: my own comment"
CKA = "cka.py"


def _bench():
    sys.path.insert(0, str(KIT_ROOT / "benchmarks"))
    try:
        import formgrader_timing
    finally:
        sys.path.remove(str(KIT_ROOT / "benchmarks"))
    return formgrader_timing


def _result(student: str, failing_message: str | None) -> dict:
    tests = []
    for task in GRADED_TASKS:
        failed = task == "cka" and failing_message is not None
        tests.append({"name": f"test_{task}_matches_reference", "task": task,
                      "outcome": "failed" if failed else "passed", "points": 0.0 if failed else 4.0,
                      "max_points": 4.0, "message": failing_message if failed else ""})
    return {"student": student, "assignment": ASSIGNMENT, "tests": tests,
            "score": sum(t["points"] for t in tests), "max_score": sum(t["max_points"] for t in tests)}


def _browser():
    return system_chromium()


@pytest.fixture(scope="module")
def review(tmp_path_factory):
    """The course (amy fails at her own line of cka.py, ben passes), formgrader running on it, amy's
    page open in headless Chromium: yields a dict with the page, its text and HTML, amy's line number."""
    bench = _bench()
    course = tmp_path_factory.mktemp("formgrader") / "course"
    reference = bench.reference_files()
    amy = dict(reference)
    amy[CKA], line = bench.with_line(reference[CKA], AMY_LINE, "def linear_cka")
    # her docstring lines come first: the raise sits below the signature, as in a real submission
    ben = dict(reference)
    ben[CKA], _ = bench.with_line(reference[CKA], BEN_LINE, "import")
    message = (f"linear_cka(X [40, 8], Y [40, 5]) raised ValueError (amy-7f3c: centering went wrong) in {CKA}, "
               f"line {line}, but this input is valid: both are 2-D with the same number of rows n >= 2.")
    results = {"amy": _result("amy", message), "ben": _result("ben", None)}
    max_points = {task: 4.0 for task in GRADED_TASKS}
    bench.build_review_course(course, {"amy": amy, "ben": ben}, results, max_points)

    sync_playwright, chromium = _browser()
    with bench.formgrader(course) as (base, token):
        url = bench.submission_url(course, base, token, "amy")
        playwright = sync_playwright().start()
        try:
            browser = playwright.chromium.launch(executable_path=chromium, headless=True)
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            response = page.goto(url, wait_until="load")
            assert response is not None and response.ok, f"formgrader answered {response and response.status}"
            seen = {"page": page, "text": page.inner_text("body"), "html": page.content(), "line": line,
                    "message": message, "course": course, "amy": amy}
            yield seen
            browser.close()
        finally:
            playwright.stop()


def test_the_page_shows_the_students_line_and_the_failing_message(review):
    text = review["text"]
    assert "amy-7f3c: centering went wrong\")" in text.replace("\u00a0", " ")  # the code, as handed in
    assert review["message"] in text  # the failing test's message, which names the file and line
    assert f"in {CKA}, line {review['line']}" in text
    assert BEN_LINE not in text  # amy's page, not ben's
    # the heading of her cka.py's cell, and her line numbered as in her file
    cell = review["page"].locator(".bertlab-submitted-code").first
    assert "exercises/cka.py as handed in" in text
    numbered = cell.inner_text()
    assert re.search(rf"(^|\n)\s*{review['line']}\s*{re.escape(AMY_LINE.strip())}", numbered), \
        f"line {review['line']} of the code block is not her raise"


def test_the_code_sits_between_its_results_and_the_next_task(review):
    """In the page's order: cka's results (the message), then cka.py's code, then the next task's cell."""
    text = review["text"]
    message_at = text.index(review["message"])
    code_at = text.index("exercises/cka.py as handed in")
    following = [t for t in EXERCISE_TASKS if t != "cka"]
    assert message_at < code_at
    if following:
        assert code_at < text.index(f"exercises/{exercise(following[0]).filename} as handed in")


def test_one_code_block_per_file_and_no_hidden_test_source(review):
    page = review["page"]
    assert page.locator(".bertlab-submitted-code").count() == len(review["amy"])
    for suite in sorted((KIT_ROOT / "tests" / "hidden").glob("test_hidden_*.py")):
        distinctive = [line.strip() for line in suite.read_text().splitlines() if len(line.strip()) > 40]
        page_html = html.unescape(review["html"])
        assert not [line for line in distinctive if line in page_html], f"{suite.name} reached formgrader's page"


def test_screenshot_of_the_review(review):
    """The failing message and the code below it, for a person to look at."""
    page = review["page"]
    page.set_viewport_size({"width": 1280, "height": 1450})  # tall enough for her line below the message
    page.locator("text=exercises/cka.py as handed in").first.scroll_into_view_if_needed()
    page.evaluate("window.scrollBy(0, -560)")  # cka's grade cell and results above the code
    page.screenshot(path=str(SCREENSHOT))
    assert SCREENSHOT.stat().st_size > 10_000


def test_feedback_html_shows_the_same_code(review):
    from bertlab_grader.course.gradebook import generate_feedback
    from bertlab_grader.course.settings import CourseSettings

    feedback = generate_feedback(CourseSettings(review["course"], ASSIGNMENT), student="amy")
    page = (feedback / "amy" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    assert AMY_LINE.strip() in text and review["message"] in text
    assert BEN_LINE not in text
    for suite in sorted((KIT_ROOT / "tests" / "hidden").glob("test_hidden_*.py")):
        distinctive = [line.strip() for line in suite.read_text().splitlines() if len(line.strip()) > 40]
        assert not [line for line in distinctive if line in text], f"{suite.name} reached the feedback"
