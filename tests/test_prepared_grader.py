"""One prepared grader (grader/bertlab_grader/grading/prepared.py): the only place that opens a grading
sandbox and runs the preflight in it; the pool, the Dask workers, grade-one and doctor all hold one.

The real sandbox and the real preflight are exercised by every grading test (test_course, test_cluster,
test_gradescope, test_doctor); these check what the type itself promises, with a stand-in sandbox.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from bertlab_grader.grading import prepared, segments

GRADER_PACKAGE = Path(__file__).resolve().parents[1] / "grader" / "bertlab_grader"


class FakeSandbox:
    opened: list["FakeSandbox"] = []

    def __init__(self, **kwargs):
        self.kwargs, self.closed = kwargs, False
        FakeSandbox.opened.append(self)

    def close(self):
        self.closed = True


@pytest.fixture
def fake(monkeypatch):
    FakeSandbox.opened = []
    monkeypatch.setattr(prepared, "Sandbox", FakeSandbox)
    monkeypatch.setattr(prepared, "warm_up", lambda: None)
    return monkeypatch


def test_the_trusted_side_warms_up_while_the_sandbox_does(fake):
    """The sandbox's template starts first (in its own process), then this process loads MiniLM and
    the reference data, then the preflight waits for both: the two warm-ups overlap."""
    events = []
    fake.setattr(FakeSandbox, "__init__", lambda self, **kw: (events.append("sandbox"), FakeSandbox.opened.append(self),
                                                              setattr(self, "closed", False))[0])
    fake.setattr(prepared, "warm_up", lambda: events.append("warm_up"))
    fake.setattr(prepared, "run_preflight", lambda sandbox, assignment, tasks: events.append("preflight"))
    prepared.PreparedGrader.start().close()
    assert events == ["sandbox", "warm_up", "preflight"]


def test_start_opens_one_sandbox_and_keeps_the_preflights_verdict(fake):
    fake.setattr(prepared, "run_preflight", lambda sandbox, assignment, tasks: f"cka/test_x lost points ({assignment})")
    grader = prepared.PreparedGrader.start("week7", hide=["/course"], uid=61003)
    sandbox, = FakeSandbox.opened
    assert sandbox.kwargs["hide"] == ["/course"] and sandbox.kwargs["uid"] == 61003
    assert grader.problem == "cka/test_x lost points (week7)" and not sandbox.closed  # the caller decides
    with grader:
        pass
    assert sandbox.closed


def test_a_preflight_that_raises_closes_the_sandbox_and_raises(fake):
    def broken(sandbox, assignment, tasks):
        raise RuntimeError("the sandbox's template died")

    fake.setattr(prepared, "run_preflight", broken)
    with pytest.raises(RuntimeError, match="template died"):
        prepared.PreparedGrader.start()
    assert FakeSandbox.opened[0].closed


def test_grade_sends_a_whole_submission_or_one_part_to_its_grader(fake):
    fake.setattr(prepared, "run_preflight", lambda sandbox, assignment, tasks: None)
    calls = []
    fake.setattr(prepared, "grade_sources",
                 lambda sb, sources, student, assignment: calls.append(("whole", student)) or {})
    fake.setattr(prepared, "grade_part",
                 lambda sb, sources, student, assignment, part: calls.append(("part", part)) or {})
    with prepared.PreparedGrader.start() as grader:
        grader.grade({"cka.py": "x = 1\n"}, "alice")
        grader.grade({"cka.py": "x = 1\n"}, "alice", part=segments.split_parts()[0])
    assert calls == [("whole", "alice"), ("part", segments.split_parts()[0])]


def _calls_in(path: Path, names: set[str]) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name in names:
                found.append(f"{path.relative_to(GRADER_PACKAGE)}:{node.lineno} {name}()")
    return found


def test_only_the_prepared_grader_opens_a_grading_sandbox_and_runs_the_preflight():
    """A fifth way to build "a warm sandbox that passed its preflight" would drift from the four that
    use this one (which uid, what it hides, whether the preflight waits for a timer)."""
    builders = [call for path in sorted(GRADER_PACKAGE.rglob("*.py"))
                if path != GRADER_PACKAGE / "grading" / "prepared.py"
                and "sandbox" not in path.relative_to(GRADER_PACKAGE).parts  # the sandbox room defines it
                for call in _calls_in(path, {"Sandbox", "run_preflight"})]
    assert builders == [], "build a PreparedGrader instead: " + ", ".join(builders)

