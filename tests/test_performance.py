"""The performance task's protocol (grader/performance/timing.py) and its record of measurements
(grader/performance/record.py), on a simulated clock: every "call" advances a fake perf_counter by
its cost times the machine's current slowness, so the tests are exact and never time anything real.
"""

from __future__ import annotations

import json

import pytest

from bertlab_grader.performance import timing as performance

from bertlab_grader.performance import record as timing_record


class FakeMachine:
    """A clock whose speed changes every ``period`` calls (slowness 1, 3, 1, 3, ...): a shared
    virtual machine whose speed moves over time, as measured in docs/hidden-suites.md."""

    def __init__(self, period: int = 7, slow: float = 3.0):
        self.now, self.calls, self.period, self.slow = 0.0, 0, period, slow

    def perf_counter(self) -> float:
        return self.now

    def call(self, cost_ms: float, result):
        def run():
            slowness = self.slow if (self.calls // self.period) % 2 else 1.0
            self.calls += 1
            self.now += cost_ms * 1e-3 * slowness
            return result
        return run


@pytest.fixture
def machine(monkeypatch):
    fake = FakeMachine()
    monkeypatch.setattr(performance.time, "perf_counter", fake.perf_counter)
    return fake


def test_the_paired_median_cancels_the_machine_changing_speed(machine):
    # The student's code costs 1.5x the reference's; the machine is 3x slower on alternate stretches
    # of calls. Pairs are timed side by side, so nearly every pair sees one speed: the median is exact.
    timing, got, want = performance.compare_speed(machine.call(1.5, "s"), machine.call(1.0, "r"))
    assert (got, want) == ("s", "r")
    assert timing.ratio == pytest.approx(1.5)
    # Best against best would compare calls from different stretches only by luck; here both sides
    # saw the fast stretch, so it agrees. What the median adds: the pairs straddling a change are outvoted.
    assert sum(1 for r in timing.ratios if r != pytest.approx(1.5)) > 0, "the simulation should disturb some pairs"
    assert timing.fraction == 1.0


def test_a_ratio_near_an_edge_gets_more_pairs_and_one_far_from_it_does_not(machine):
    near, _, _ = performance.compare_speed(machine.call(1.9, None), machine.call(1.0, None))
    far, _, _ = performance.compare_speed(machine.call(1.0, None), machine.call(1.0, None))
    assert len(near.reference) == len(near.student) == performance.PAIRS + performance.EXTRA_PAIRS
    assert len(far.reference) == performance.PAIRS
    assert near.ratio == pytest.approx(1.9) and near.fraction == 1.0


def test_a_very_slow_submission_is_not_timed_further(machine):
    timing, _, _ = performance.compare_speed(machine.call(100.0, None), machine.call(1.0, None))
    assert timing.gave_up and len(timing.student) == 1
    assert timing.fraction == 0.0
    assert "warm-up call" in timing.describe("f(x)")


@pytest.mark.parametrize("ratio,fraction", [(0.5, 1.0), (2.0, 1.0), (2.01, 0.5), (20.0, 0.5), (20.5, 0.0)])
def test_bands(ratio, fraction):
    assert performance.band_fraction(ratio) == fraction


# ---------------------------------------------------------------------------------------------------
# The record: identical files, identical points


def _record(tmp_path, protocol="p1"):
    return timing_record.TimingRecord(tmp_path / "course" / ".bertlab" / "timings-week7.json", protocol)


class Counted:
    def __init__(self, call):
        self.call, self.count = call, 0

    def __call__(self):
        self.count += 1
        return self.call()


def test_identical_files_reuse_the_first_measurement(machine, tmp_path):
    record = _record(tmp_path)
    files = {"cka.py": "def linear_cka(X, Y): ...\n", "pooling.py": "x = 1\n"}
    with timing_record.use(record, files):
        first, _, _ = performance.compare_speed(machine.call(1.95, "s"), machine.call(1.0, "r"), name="linear_cka")
    assert first.measured_at == ""  # measured now
    student = Counted(machine.call(3.0, "s again"))  # the machine changed; the files did not
    with timing_record.use(record, dict(reversed(list(files.items())))):  # same files, any order
        again, got, want = performance.compare_speed(student, machine.call(1.0, "r again"), name="linear_cka")
    assert student.count == 1, "reused: called once for its result (checked afresh), never timed"
    assert (got, want) == ("s again", "r again")
    assert again.ratio == first.ratio and again.fraction == first.fraction
    assert again.measured_at and "first graded" in again.describe("linear_cka(X, Y)")
    # Plain numbers only: the record (its file and the journal beside it) holds seconds, never a
    # result of the submission.
    assert json.loads(record.path.read_text())["protocol"] == "p1"
    assert [json.loads(line)["protocol"] for line in record.journal.read_text().splitlines()] == ["p1"]
    (kept,) = record.all_known().values()
    assert set(kept["linear_cka"]["timing"]) == {"reference", "student", "gave_up"}
    assert all(isinstance(t, float) for side in ("reference", "student") for t in kept["linear_cka"]["timing"][side])


def test_changed_files_or_protocol_or_a_damaged_record_are_timed_again(machine, tmp_path):
    record = _record(tmp_path)
    files = {"cka.py": "a = 1\n"}
    with timing_record.use(record, files):
        performance.compare_speed(machine.call(1.0, None), machine.call(1.0, None), name="linear_cka")

    def timed_calls(record, files):
        student = Counted(machine.call(1.0, None))
        with timing_record.use(record, files):
            performance.compare_speed(student, machine.call(1.0, None), name="linear_cka")
        return student.count

    assert timed_calls(record, {"cka.py": "a = 2\n"}) > 1, "one changed character is another submission"
    assert timed_calls(_record(tmp_path, protocol="p2"), files) > 1, "a new reference or suite times again"
    assert timed_calls(record, files) > 1, "p2's store set p1's measurements aside"
    assert timed_calls(record, files) == 1
    record.path.write_text("{not json")
    assert timed_calls(record, files) > 1, "a damaged record is set aside, never an error"
    assert timing_record.set_aside(tmp_path / "course", "week7") is True
    assert timing_record.set_aside(tmp_path / "course", "week7") is False
    assert not record.journal.exists()


def test_the_journal_is_folded_into_the_record_at_the_end_of_a_run(machine, tmp_path):
    record = _record(tmp_path)
    for n in range(3):
        with timing_record.use(record, {"cka.py": f"a = {n}\n"}):
            performance.compare_speed(machine.call(1.0, None), machine.call(1.0, None), name="linear_cka")
    before = record.all_known()
    assert len(before) == 3 and len(record.journal.read_text().splitlines()) == 3
    record.compact()
    assert not record.journal.exists() and record.all_known() == before
    assert len(json.loads(record.path.read_text())["submissions"]) == 3


def test_without_a_record_or_a_name_every_grading_measures(machine, tmp_path):
    student = Counted(machine.call(1.0, None))
    performance.compare_speed(student, machine.call(1.0, None), name="linear_cka")  # no record in use
    with timing_record.use(_record(tmp_path), {"cka.py": ""}):
        performance.compare_speed(student, machine.call(1.0, None))  # no name: not recorded
        performance.compare_speed(student, machine.call(1.0, None))
    assert student.count == 3 * (2 + performance.PAIRS)  # a warm-up, a timed warm-up, then the pairs
    assert not _record(tmp_path).path.exists()


def test_the_protocol_digest_covers_the_reference_and_the_suite(monkeypatch, tmp_path):
    """Edit a copy of the reference or of the hidden performance suite: the digest changes, so the
    course's kept timings are set aside; the same files give the same digest."""
    import shutil

    from bertlab_grader.core import locations

    before = timing_record.protocol_digest()
    for attribute, edited in (("REFERENCE_DIR", "cka.py"), ("SUITES_DIR", "test_hidden_performance.py")):
        copy = tmp_path / attribute
        shutil.copytree(getattr(locations, attribute), copy, ignore=shutil.ignore_patterns("__pycache__"))
        monkeypatch.setattr(locations, attribute, copy)
        assert timing_record.protocol_digest() == before, f"an unchanged copy of {attribute}"
        (copy / edited).write_text((copy / edited).read_text() + "\n# changed\n")
        assert timing_record.protocol_digest() != before, f"{edited} is not part of the digest"
        monkeypatch.undo()


def test_bertlab_grade_retime_reaches_the_runner(monkeypatch, tmp_path):
    """`bertlab grade COURSE --retime` asks the runner to set the record aside; without it, it keeps it."""
    from bertlab import cli
    from bertlab_grader.course import runner

    calls = []
    monkeypatch.setattr(runner, "grade_course", lambda course, **kwargs: calls.append(kwargs) or 0)
    assert cli.main(["grade", str(tmp_path), "--retime"]) == 0
    assert cli.main(["grade", str(tmp_path)]) == 0
    assert [c["retime"] for c in calls] == [True, False]
