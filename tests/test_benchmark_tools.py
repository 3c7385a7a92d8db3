"""The cohort benchmark's own tools: the floor's call limit and the projection's arithmetic.

The benchmark itself takes half an hour and no test runs it, so its parts that decide figures are
tested here: a floor that never stops a runaway test is no floor (one Python loop held it for half an
hour), and a projection that counted a stage twice would print a wrong verdict.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def benchmark_modules(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import cohort_benchmark
    import floor_limit

    for kept in (floor_limit.STOPPED, floor_limit.SECONDS, floor_limit.HUNG):
        kept.clear()
    yield cohort_benchmark, floor_limit
    for kept in (floor_limit.STOPPED, floor_limit.SECONDS, floor_limit.HUNG):
        kept.clear()


class _Impl:
    """A stand-in implementation: one module per exercise, each with a call that runs for 5 s."""


def _stand_in(tmp_path):
    import importlib.util

    from bertlab.tasks import EXERCISE_MODULES

    impl = _Impl()
    for name in EXERCISE_MODULES:
        path = tmp_path / f"floor_stand_in_{name}.py"
        path.write_text(
            "import time\n\n"
            "def slow(x, end=None):\n"
            "    end = time.monotonic() + 5 if end is None else end  # a floor that never stops it: 5 s\n"
            "    while time.monotonic() < end:\n        pass\n    return x\n\n"
            "def helper(x):\n    return x + 1\n\n"
            "def outer(x):\n    return helper(x) * 2  # a call inside the submission\n\n"
            "def swallows(x):\n    try:\n        return slow(x)\n    except Exception:\n        return -1\n")
        spec = importlib.util.spec_from_file_location(f"floor_stand_in_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        setattr(impl, name, module)
    return impl


def test_the_floor_stops_a_call_at_the_limit_and_does_not_make_it_again(benchmark_modules, tmp_path, monkeypatch):
    import time

    from bertlab.tasks import EXERCISE_MODULES

    _, floor_limit = benchmark_modules
    monkeypatch.setattr(floor_limit, "_state", {"depth": 0, "limit_s": 0.3})
    impl = _stand_in(tmp_path)
    floor_limit.limit_calls(impl)
    module = getattr(impl, EXERCISE_MODULES[0])
    assert module.outer(1) == 4, "a call inside the submission goes through"
    begun = time.monotonic()
    with pytest.raises(floor_limit.FloorLimitReached):
        module.slow(1)
    assert 0.3 <= time.monotonic() - begun < 3
    assert floor_limit.STOPPED == [f"{EXERCISE_MODULES[0]}.slow"]
    begun = time.monotonic()
    with pytest.raises(floor_limit.FloorLimitReached):
        module.slow(2)  # the same kind of input: at once, as the sandbox's memo of hung calls does
    assert time.monotonic() - begun < 0.2
    with pytest.raises(floor_limit.FloorLimitReached):
        module.swallows(1)  # the submission's own except Exception does not hide the limit
    with impl.call_limit(1.0):  # a hidden test's longer limit for a large input
        begun = time.monotonic()
        assert module.slow("text", end=time.monotonic() + 0.6) == "text"
    assert 0.6 <= time.monotonic() - begun < 1.0
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0), "an alarm was left armed after the calls"


def test_the_floor_counts_each_tests_seconds_by_task(benchmark_modules, tmp_path):
    _, floor_limit = benchmark_modules
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    cka: a task\n    retrieval: a task\n")
    (tmp_path / "test_tasks.py").write_text(
        "import time\nimport pytest\n\n"
        "@pytest.mark.retrieval\n"
        "def test_slower():\n    time.sleep(0.3)\n\n"
        "@pytest.mark.cka\n"
        "def test_quick():\n    pass\n")
    assert pytest.main(["-q", "-p", "floor_limit", "-p", "no:cacheprovider", str(tmp_path)]) == pytest.ExitCode.OK
    assert 0.3 <= floor_limit.SECONDS["retrieval"] < 3.0, floor_limit.SECONDS
    assert floor_limit.SECONDS["cka"] < 0.3, floor_limit.SECONDS


def test_the_projection_adds_each_stage_once(benchmark_modules):
    cohort_benchmark, _ = benchmark_modules
    phases = {"start_up_s": 20.0, "grading_s": 500.0, "export_feedback_s": 10.0}
    figures = cohort_benchmark.projection(phases, n=100, workers=2, writer={"sqlite": 300.0, "postgresql": 250.0},
                                          export_cores=2, main_host_cores=16)
    per_core = 500.0 * 2 / 100          # 10 s a submission and core
    export_per_core = 10.0 * 2 / 100    # its processes kept 2 cores busy
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
                                       export_cores=1, main_host_cores=16)
    assert fast["100000_on_256_cores"]["grading_s"] == pytest.approx(100_000 / 250.0, abs=0.1)
    for name, (value, where) in figures["inputs"].items():
        assert where, f"the projection's input {name} says not where it was measured"
