"""grader/bertlab_grader/grading/scoring.py: the hidden suites run in process, scored per test, with student-safe messages.

Most checks grade one task only (pooling is the fastest) with in-process implementations: the
reference solutions, a mutant of the bank, and small fakes that raise what the sandbox proxy would raise.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from bertlab.tasks import EXERCISES
from bertlab.implementations import load_directory, load_implementation
from bertlab_grader.grading import scoring
from bertlab_grader.course.results import validate_result
from bertlab_grader.mutants.bank import load_bank
from bertlab_grader.grading.scoring import max_points_by_task, points_by_test, run_hidden_suite

KIT = Path(__file__).resolve().parents[1]
DOCS = KIT / "docs" / "hidden-suites.md"

# What must never reach a student: test source, our file paths, tracebacks, pytest introspection.
FORBIDDEN = ("def test_", "bertlab_grader/hidden", "tests/hidden", "solutions/", "Traceback", "reference_data", "\nassert ", "assert close(",
             "grader/", "conftest")


def _solutions():
    return load_implementation("reference")


def _fake(modules: dict | None = None, **pooling_functions):
    """An implementation whose pooling module is made of the given functions, or whose modules are
    ``modules``; every other module is the reference's."""
    solutions = _solutions()
    by_module = {e.module: getattr(solutions, e.module) for e in EXERCISES}
    by_module.update(modules or {"pooling": SimpleNamespace(**pooling_functions)})
    return SimpleNamespace(name="fake", **by_module)


def test_max_points_match_the_documented_table():
    from bertlab.tasks import GRADED_TASKS

    totals = max_points_by_task()
    assert set(totals) == set(GRADED_TASKS)
    headed = {task: float(points) for task, points in re.findall(r"^### (\w+) \((\d+)\)$", DOCS.read_text(), flags=re.M)}
    assert headed == totals, "docs/hidden-suites.md's task headings give other totals than the hidden suites"
    (in_all,) = re.findall(r"^## Points per test \((\d+) in all\)$", DOCS.read_text(), flags=re.M)
    assert float(in_all) == sum(totals.values()), "docs/hidden-suites.md's '(N in all)' is not the sum of the tasks"
    documented = dict(re.findall(r"^\| `(test_\w+)` \| (\d+) \|", DOCS.read_text(), flags=re.M))
    collected = {name: points for tests in points_by_test().values() for name, points in tests}
    assert {k: float(v) for k, v in documented.items()} == collected, \
        "docs/hidden-suites.md lists other tests or points than the hidden suites (tests/hidden/) carry"


@pytest.mark.tasks("pooling", "retrieval")
def test_solutions_get_full_marks_and_a_valid_results_dict():
    result = run_hidden_suite(_solutions(), student="ref", tasks=("pooling", "retrieval"))
    totals = max_points_by_task()
    assert result["score"] == result["max_score"] == totals["pooling"] + totals["retrieval"]
    assert all(t["outcome"] == "passed" and t["message"] == "" for t in result["tests"])
    assert validate_result(result)["score"] == result["max_score"]
    assert {t["task"] for t in result["tests"]} == {"pooling", "retrieval"}


def test_a_mutant_gets_teaching_messages_and_its_hint():
    entry, = load_bank("pool_divide_by_length", kinds=("mutant",))
    result = run_hidden_suite(load_directory(entry.path), student="m", tasks=("pooling",))
    failed = [t for t in result["tests"] if t["outcome"] != "passed"]
    assert failed and result["score"] < result["max_score"]  # every pooling point needs the right mean: 0 here
    hint = entry.hint
    assert hint
    for t in failed:
        assert t["outcome"] == "failed" and t["points"] == 0
        assert "padded length" in t["message"], t["message"]
        assert not any(f in t["message"] for f in FORBIDDEN), t["message"]
        assert len(t["message"]) <= scoring.MAX_MESSAGE_CHARS
        assert t["hint"] == hint
    validate_result(result)


def test_the_stub_errors_everywhere_with_zero_points():
    result = run_hidden_suite(load_implementation("exercises"), student="stub", tasks=("cka", "pooling"), hints=False)
    assert result["score"] == 0
    assert all(t["outcome"] == "error" and t["message"].startswith("Not implemented yet") for t in result["tests"])


def test_timeouts_and_crashes_from_the_sandbox_are_classified():
    from bertlab_grader.sandbox.remote import SubmissionCrashed, SubmissionTimeout

    def hangs(hidden_states, attention_mask):
        raise SubmissionTimeout("masked_mean_pool: no answer within 20 s")

    def dies(hidden_states, attention_mask):
        raise SubmissionCrashed("masked_mean_pool: the submission's process died: killed by SIGKILL")

    timed_out = run_hidden_suite(_fake(masked_mean_pool=hangs), student="t", tasks=("pooling",), hints=False)
    assert {t["outcome"] for t in timed_out["tests"]} == {"timeout"}
    assert all("did not answer in time" in t["message"] for t in timed_out["tests"])
    crashed = run_hidden_suite(_fake(masked_mean_pool=dies), student="c", tasks=("pooling",), hints=False)
    assert {t["outcome"] for t in crashed["tests"]} == {"error"}
    assert all("SIGKILL" in t["message"] and t["points"] == 0 for t in crashed["tests"])


def test_after_two_timeouts_a_task_stops_waiting():
    """Each timeout costs the whole per-call limit: after TIMEOUTS_PER_TASK of them in one task, its other
    tests are scored as timeouts without being tried (so one endless loop cannot stretch a grading to
    minutes), with the first timeout's message."""
    from bertlab_grader.sandbox.remote import SubmissionTimeout

    calls = []

    def hangs(*args, **kwargs):
        calls.append(args)
        raise SubmissionTimeout(f"masked_mean_pool did not return within the 20 s limit (call {len(calls)})")

    solutions = _solutions()
    hanging_siamese = SimpleNamespace(**{name: getattr(solutions.siamese, name) for name in dir(solutions.siamese)
                                         if not name.startswith("__")})
    hanging_siamese.create_sbert = hangs
    for task, impl in (("pooling", _fake(masked_mean_pool=hangs)),
                       ("siamese", _fake({"siamese": hanging_siamese}))):
        calls.clear()
        result = run_hidden_suite(impl, student="t", tasks=(task,), hints=False)
        outcomes = [t["outcome"] for t in result["tests"]]
        assert set(outcomes) == {"timeout"}, (task, outcomes)
        assert len(calls) <= scoring.TIMEOUTS_PER_TASK < len(outcomes), (task, len(calls))
        first = next(t["message"] for t in result["tests"] if "(call 1)" in t["message"])
        not_tried = [t for t in result["tests"] if t["message"] == first]
        assert len(not_tried) >= len(outcomes) - scoring.TIMEOUTS_PER_TASK, (task, [t["message"] for t in result["tests"]])


def test_a_students_own_assert_is_an_error_of_their_code():
    def asserts(hidden_states, attention_mask):
        assert hidden_states.dim() == 99, "my own sanity check"

    result = run_hidden_suite(_fake(masked_mean_pool=asserts), student="a", tasks=("pooling",), hints=False)
    assert result["score"] == 0
    for t in result["tests"]:  # every test first asks for a right answer on valid input: the assert fires there
        assert t["outcome"] == "error", t
        assert t["message"].startswith("Your code raised AssertionError: my own sanity check"), t["message"]


def test_an_exception_inside_the_kits_lookups_is_the_graders_not_the_students():
    # A lookup of a mistake the table lacks raises KeyError in bertlab/mistakes.py (``mistake``; the
    # suites' ``hint`` gives "" instead): the kit's bug, reported as a grader failure, never recorded
    # as the student's error.
    from bertlab.mistakes import mistake
    from bertlab_grader.grading.scoring import grader_failure_cause

    with pytest.raises(KeyError) as excinfo:
        mistake("no_such_mistake")
    cause = grader_failure_cause(excinfo, "call")
    assert cause is not None and "mistakes.py" in cause and "KeyError" in cause


def test_partial_points_from_the_points_curve(monkeypatch):
    from bertlab_grader.performance import timing as performance

    monkeypatch.setattr(performance, "points_fraction", lambda ratio: 0.374)  # every ratio earns 0.374
    result = run_hidden_suite(_solutions(), student="p", tasks=("performance",), hints=False,
                              extra_pytest_args=["-k", "masked_mean_pool"])
    (test,) = result["tests"]
    assert test["outcome"] == "failed" and test["points"] == round(test["max_points"] * 0.374, 2)
    assert "0.37 of the points" in test["message"]
    validate_result(result)


def test_wrong_but_fast_earns_no_speed_points():
    def wrong(hidden_states, attention_mask):
        return hidden_states.sum(dim=1)

    result = run_hidden_suite(_fake(masked_mean_pool=wrong), student="w", tasks=("performance",), hints=False,
                              extra_pytest_args=["-k", "masked_mean_pool"])
    (test,) = result["tests"]
    assert test["points"] == 0 and "only for a right answer" in test["message"]


def test_messages_never_carry_introspection():
    rewritten = AssertionError("encode is wrong: expected 1, got 2\nassert tensor(False)\n +  where ...")
    assert scoring.check_message(rewritten) == "encode is wrong: expected 1, got 2"
    assert scoring.check_message(AssertionError("assert x == y")) == "A hidden check failed."
    long = AssertionError("\n".join(f"line {i}" for i in range(50)))
    assert scoring.check_message(long).count("\n") == scoring.MAX_MESSAGE_LINES


def test_repeated_runs_in_one_process_agree():
    first = run_hidden_suite(_solutions(), student="x", tasks=("cka",), hints=False)
    second = run_hidden_suite(_solutions(), student="x", tasks=("cka",), hints=False)
    assert first == second and first["score"] == 25


def test_unknown_task_is_refused():
    with pytest.raises(ValueError):
        run_hidden_suite(_solutions(), student="x", tasks=("nonsense",))
