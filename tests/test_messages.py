"""What a failing student reads is never wrong: a message names a cause only where a check confirmed it
(issue 42). The helpers of bertlab/assertions.py that decide it, the choice of the failure
`bertlab check` shows first, the feedback's word for partial points, and the grader's hints that go
only on the tests their mistake explains.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from bertlab.assertions import describe_change, formula_recheck, name_mistake, precision_diagnosis
from bertlab.implementations import load_directory, load_implementation
from bertlab.mistakes import hint, mistake, named_in


# ---- name_mistake: one mistake, or silence


def test_name_mistake_names_the_one_matching_mistake():
    value = torch.tensor([1.0, 2.0])
    assert name_mistake(value, {"pool_sum": value.clone(), "pool_cls": value + 5}) == hint("pool_sum")


def test_name_mistake_is_silent_when_two_mistakes_give_the_same_value():
    # This input cannot tell the two apart: naming either would be a guess.
    value = torch.tensor([1.0, 2.0])
    assert name_mistake(value, {"pool_sum": value.clone(), "pool_cls": value.clone()}) == ""


def test_name_mistake_is_silent_on_nan():
    # A nan "matches" every formula that divides by zero at the same place: it confirms nothing.
    value = torch.tensor([math.nan, 2.0])
    assert name_mistake(value, {"pool_nan_all_padding": value.clone()}) == ""
    assert name_mistake(math.nan, {"cka_center_rows": math.nan}) == ""


# ---- precision: said only when a rerun on float64 copies confirms it


def _cka(dtype=None):
    """A linear CKA computed in ``dtype`` (None: in the inputs' own dtype)."""
    def linear_cka(X, Y):
        X, Y = torch.as_tensor(X), torch.as_tensor(Y)
        X, Y = (X, Y) if dtype is None else (X.to(dtype), Y.to(dtype))
        Xc, Yc = X - X.mean(0), Y - Y.mean(0)
        return float(torch.linalg.norm(Yc.T @ Xc) ** 2 / (torch.linalg.norm(Xc.T @ Xc) * torch.linalg.norm(Yc.T @ Yc)))
    return linear_cka


def _zscored_cka(X, Y):
    X, Y = torch.as_tensor(X).double(), torch.as_tensor(Y).double()
    Xc, Yc = (X - X.mean(0)) / X.std(0), (Y - Y.mean(0)) / Y.std(0)
    return float(torch.linalg.norm(Yc.T @ Xc) ** 2 / (torch.linalg.norm(Xc.T @ Xc) * torch.linalg.norm(Yc.T @ Yc)))


def _offset_pair():
    g = torch.Generator().manual_seed(0)
    X = (torch.randn(200, 10, generator=g) * 0.1 + 1e4).float()
    Y = ((X.double() - 1e4) @ torch.randn(10, 6, generator=g, dtype=torch.float64) + 3e4).float()
    return X, Y


def test_precision_is_named_when_float64_copies_give_the_right_value():
    X, Y = _offset_pair()
    expected = _cka(torch.float64)(X, Y)
    got = _cka(torch.float32)(X, Y)
    assert abs(got - expected) > 1e-6  # the float32 arithmetic is wrong here
    said = precision_diagnosis(_cka(torch.float32), X, Y, expected, 1e-6)
    assert "float64" in said and "column means were subtracted" in said
    g = torch.Generator().manual_seed(1)
    X16 = (torch.randn(128, 16, generator=g) * 20 + 5).half()
    Y16 = (X16.float() @ torch.randn(16, 8, generator=g) + torch.randn(128, 8, generator=g) * 30).half()
    expected16 = _cka(torch.float64)(X16, Y16)
    assert not abs(_cka()(X16, Y16) - expected16) <= 1e-6  # computed in float16: wrong (or nan: overflow)
    half = precision_diagnosis(_cka(), X16, Y16, expected16, 1e-6)
    assert "float64 copies of these (float16) inputs" in half


def test_no_cause_is_named_for_a_wrong_formula_computed_in_float64():
    X, Y = _offset_pair()
    expected = _cka(torch.float64)(X, Y)
    assert precision_diagnosis(_zscored_cka, X, Y, expected, 1e-6) == ""
    assert formula_recheck("the centering").startswith("No known mistake gives this value")


def test_precision_diagnosis_leaves_the_inputs_alone():
    X, Y = _offset_pair()
    x, y = X.clone(), Y.numpy().copy()

    def centers_in_place(a, b):
        a = torch.as_tensor(a)
        a -= a.mean(0)
        return 0.0

    precision_diagnosis(centers_in_place, x, y, 0.5, 1e-6)
    assert torch.equal(x, X) and np.array_equal(y, Y.numpy())


# ---- the changed input, named, and how it changed


def test_describe_change_names_the_argument_and_the_operation():
    corpus = torch.randn(5, 3, dtype=torch.float64) + 2
    said = describe_change("corpus", corpus, corpus / corpus.norm(dim=1, keepdim=True))
    assert said.startswith("the caller's corpus changed: 15 of 15 entries differ")
    assert "divided by their norms" in said
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert "divided or multiplied" in describe_change("mask", mask, mask / mask.sum(1, keepdim=True))
    X = torch.randn(4, 3, dtype=torch.float64) + 1
    assert "column means were subtracted" in describe_change("X", X, X - X.mean(0))
    assert describe_change("X", X, X.clone()) == ""
    assert "changed dtype" in describe_change("X", X, X.float())


# ---- the failure `bertlab check` shows first, the word for partial points


def test_check_leads_with_a_failure_that_names_a_cause():
    from bertlab.check.run import TaskReport, TestResult

    vague = TestResult(nodeid="t::a", name="a", task="cka", outcome="failed", message="linear_cka gave 0.3; expected 0.5.")
    named = TestResult(nodeid="t::b", name="b", task="cka", outcome="failed",
                       message="linear_cka gave 1.0. " + hint("cka_no_centering"))
    report = TaskReport(task="cka", tests=[vague, named])
    assert report.first_failure is named
    assert named_in(named.message) == ("cka_no_centering",)
    assert TaskReport(task="cka", tests=[vague]).first_failure is vague


def test_feedback_says_part_for_a_speed_test_that_earned_some_points():
    from bertlab_grader.course.feedback import outcome_word

    assert outcome_word({"outcome": "failed", "points": 2.5, "max_points": 4.0}) == "part (2.5 of 4 points)"
    assert outcome_word({"outcome": "failed", "points": 0.0, "max_points": 4.0}) == "failed"
    assert outcome_word({"outcome": "passed", "points": 4.0, "max_points": 4.0}) == "passed"


# ---- a grader hint goes only on the tests its mistake explains


def test_a_hint_goes_only_on_the_tests_the_mutant_fails_too():
    from bertlab_grader.grading.hints import diagnose_failures, mutant_fails
    from bertlab_grader.grading.scoring import failing_test_names
    from bertlab_grader.mutants.bank import load_bank

    entry = load_bank("pool_sum", kinds=("mutant",))[0]
    impl = load_directory(entry.path)
    explained = mutant_fails(entry, "pooling", failing_test_names)
    assert explained  # the mutant fails some pooling tests: those are what its hint explains
    hints = diagnose_failures(impl, "pooling", sorted(explained) + ["a_test_the_mutant_passes"], failing_test_names)
    assert set(hints) == set(explained)
    assert all(text == mistake("pool_sum").hint for text in hints.values())
    assert diagnose_failures(load_implementation("reference"), "pooling", ["anything"], failing_test_names) == {}


def test_check_gives_the_nan_hint_only_for_a_result_that_holds_a_nan():
    from pathlib import Path

    from bertlab.check.hints import hint_for
    from bertlab.check.run import TestResult

    def shown(message: str) -> str:
        return hint_for("cka", TestResult(nodeid="t::a", name="a", task="cka", outcome="failed", message=message),
                        Path("/nonexistent"))

    assert shown("linear_cka(X, Y) contains NaN (first at index [0]).").startswith(hint("nan_result"))
    assert shown("linear_cka returned nan, but neither input has zero variance").startswith(hint("nan_result"))
    # A nan was owed and a number came back: the opposite mistake, so not the 0/0 hint.
    assert hint("nan_result") not in shown("CKA is 0/0 (undefined); expected nan, got 0.0.")
