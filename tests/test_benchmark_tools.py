"""The cohort benchmark's own tools: the floor's call limit and the projection's arithmetic.

The benchmark itself takes half an hour and no test runs it, so its parts that decide figures are
tested here: a floor that never stops a runaway test is no floor (one Python loop held it for half an
hour), and a projection that counted a stage twice would print a wrong verdict.
"""

from __future__ import annotations

from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def benchmark_modules(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import cohort_benchmark
    import floor_limit

    floor_limit.STOPPED.clear()
    floor_limit.SECONDS.clear()
    yield cohort_benchmark, floor_limit
    floor_limit.STOPPED.clear()
    floor_limit.SECONDS.clear()


def test_the_floor_stops_a_test_at_the_limit_and_counts_it_by_task(benchmark_modules, tmp_path, monkeypatch):
    _, floor_limit = benchmark_modules
    monkeypatch.setattr(floor_limit, "LIMIT_S", 0.3)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    cka: a task\n    retrieval: a task\n")
    (tmp_path / "test_runaway.py").write_text(
        "import time\nimport pytest\n\n"
        "@pytest.mark.retrieval\n"
        "def test_loops_for_ever():\n"
        "    end = time.monotonic() + 5  # a floor that never stops it lets it pass after 5 s\n"
        "    while time.monotonic() < end:\n        pass\n\n"
        "@pytest.mark.cka\n"
        "def test_quick():\n    assert 1 + 1 == 2\n")
    code = pytest.main(["-q", "-p", "floor_limit", "-p", "no:cacheprovider", str(tmp_path)])
    assert code == pytest.ExitCode.TESTS_FAILED, "the runaway test should fail at the limit, the other pass"
    assert [node.split("::")[-1] for node in floor_limit.STOPPED] == ["test_loops_for_ever"]
    assert 0.3 <= floor_limit.SECONDS["retrieval"] < 5.0, floor_limit.SECONDS
    assert floor_limit.SECONDS["cka"] < 0.3, floor_limit.SECONDS


def test_the_alarm_is_off_once_the_test_ends(benchmark_modules, tmp_path, monkeypatch):
    import signal
    import time

    _, floor_limit = benchmark_modules
    monkeypatch.setattr(floor_limit, "LIMIT_S", 0.2)
    (tmp_path / "test_quick.py").write_text("def test_quick():\n    pass\n")
    assert pytest.main(["-q", "-p", "floor_limit", "-p", "no:cacheprovider", str(tmp_path)]) == pytest.ExitCode.OK
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    time.sleep(0.3)  # an alarm left armed would end this test with FloorLimitReached


def test_the_projection_adds_each_stage_once(benchmark_modules, monkeypatch):
    cohort_benchmark, _ = benchmark_modules
    monkeypatch.setattr(cohort_benchmark.os, "sched_getaffinity", lambda pid: {0, 1})
    phases = {"start_up_s": 20.0, "grading_s": 500.0, "export_feedback_s": 10.0}
    figures = cohort_benchmark.projection(phases, n=100, workers=2, writer={"sqlite": 300.0, "postgresql": 250.0},
                                          export_processes=3, main_host_cores=16)
    per_core = 500.0 * 2 / 100          # 10 s a submission and core
    export_per_core = 10.0 * 2 / 100    # 3 processes on this host's 2 cores
    ten_thousand = figures["10000_on_64_cores"]
    assert ten_thousand["grading_s"] == pytest.approx(10_000 * per_core / 64, abs=0.1)
    assert ten_thousand["export_feedback_s"] == pytest.approx(10_000 * export_per_core / 16, abs=0.1)
    assert ten_thousand["total_s"] == pytest.approx(20.0 + 10_000 * per_core / 64 + 10_000 * export_per_core / 16,
                                                    abs=0.2)
    assert ten_thousand["met"] is (ten_thousand["total_s"] <= 600)
    hundred_thousand = figures["100000_on_256_cores"]
    assert hundred_thousand["grading_s"] == pytest.approx(100_000 * per_core / 256, abs=0.1)
    assert hundred_thousand["goal_min"] == 30
    # never faster than the single writer records: with a fast grader, the writer decides
    fast = cohort_benchmark.projection({**phases, "grading_s": 1.0}, n=100, workers=2, writer={"sqlite": 250.0},
                                       export_processes=1, main_host_cores=16)
    assert fast["100000_on_256_cores"]["grading_s"] == pytest.approx(100_000 / 250.0, abs=0.1)
    for name, (value, where) in figures["inputs"].items():
        assert where, f"the projection's input {name} says not where it was measured"
