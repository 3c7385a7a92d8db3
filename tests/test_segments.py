"""A submission graded in segments on several workers (grader/bertlab_grader/grading/segments.py) gets exactly the
grade it gets in one process: the same outcome, points, message and hint for every hidden test.

The cohort grader splits the last submissions of a run into parts that run at once on the free
workers (grader/bertlab_grader/course/pool.py), so which way a submission is graded depends on where it stands in
the queue. Identical files must still get identical points.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from bertlab.tasks import EXERCISE_MODULES, GRADED_TASKS
from bertlab_grader.grading import segments

KIT = Path(__file__).resolve().parents[1]
HIDDEN = KIT / "tests" / "hidden"


def test_every_task_is_in_one_segment_and_the_timing_comes_last():
    tasks = [t for seg in segments.SEGMENTS for t in seg]
    assert sorted(tasks) == sorted(GRADED_TASKS) and len(tasks) == len(set(tasks))
    assert segments.SEGMENTS[segments.FINAL] == ("performance",)
    assert segments.modules_of(segments.FINAL) == list(EXERCISE_MODULES)
    # The segments run in the hidden suites' own order (tests/hidden/conftest.py sorts them so).
    assert tasks == list(GRADED_TASKS)


def test_a_pools_workers_share_the_preflight_out_and_cover_every_task_together():
    """Each worker grades the reference on one task at least (its sandbox ran the reference), and
    together the workers of a pool cover every correctness task (grading/segments.py, preflight_share)."""
    from bertlab.tasks import EXERCISE_TASKS

    assert segments.preflight_share(0, 1) == tuple(EXERCISE_TASKS)
    for workers in range(2, 2 * len(EXERCISE_TASKS) + 2):
        shares = [segments.preflight_share(slot, workers) for slot in range(workers)]
        assert all(shares), f"a worker of {workers} has no share of the preflight: {shares}"
        covered = [t for share in shares for t in share]
        assert set(covered) == set(EXERCISE_TASKS), f"{workers} workers leave out {set(EXERCISE_TASKS) - set(covered)}"
        assert all(t in EXERCISE_TASKS for t in covered), "the performance task is never preflighted"


@pytest.mark.parametrize("task", [t for t in GRADED_TASKS if t != "performance"])
def test_a_segment_calls_only_its_own_modules(task):
    """What makes the parts independent: no hidden test of a segment before the last names a
    submission module of another segment (a hang found there could not be known here)."""
    source = (HIDDEN / f"test_hidden_{task}.py").read_text(encoding="utf-8")
    named = set(re.findall(r"\bimpl\.(\w+)", source)) & set(EXERCISE_MODULES)
    own = set(segments.modules_of(segments.segment_of(task)))
    assert named, f"test_hidden_{task}.py names no module of the submission: the scan is out of date"
    assert named <= own, (f"test_hidden_{task}.py calls {sorted(named - own)}, outside its segment's modules "
                          f"{sorted(own)}: put those tasks in one segment (grader/bertlab_grader/grading/segments.py)")


def test_the_final_part_takes_every_earlier_segment_in_order():
    done = {i: segments.PartResult({"tests": [{"name": f"t{i}", "task": segments.SEGMENTS[i][0]}]},
                                   {"skip": {}, "hung": {("k",): f"from {i}", (f"k{i}",): "own"}, "failed_hard": {}})
            for i in reversed(range(segments.FINAL))}
    part = segments.final_part(done)
    assert [t["name"] for t in part.earlier_tests] == [f"t{i}" for i in range(segments.FINAL)]
    assert part.seed["hung"][("k",)] == "from 0", "the earliest segment's memo wins, as in one process"
    assert {(f"k{i}",) for i in range(segments.FINAL)} <= set(part.seed["hung"])
    assert part.hints and part.final and part.tasks == ("performance",)
    with pytest.raises(ValueError, match="not graded yet"):
        segments.final_part({0: done[0]})


def test_a_part_and_its_result_cross_a_process_as_json_and_come_back_equal():
    """The one encoding of the pipe (and of Dask's JSON): a memo's key is a tuple of tuples (a call's
    kind), which JSON turns into lists; it must come back as the same tuple, or a seeded session
    would not know the hang again."""
    key = (("module", "cka", "linear_cka"), "call", (("tensor", "torch.float32", 2),), ())
    memos = {"skip": {"cka": {"why": "hung"}}, "hung": {key: "linear_cka timed out"},
             "failed_hard": {key: ("SubmissionTimeout", "timed out", "TimeoutError")}}
    done = segments.PartResult({"student": "s", "tests": [{"name": "t0"}]}, memos)
    again = segments.PartResult.from_json(json.loads(json.dumps(done.to_json())))
    assert again == done, f"a PartResult changed on the way:\n  {done}\n  {again}"
    final = segments.final_part({i: done for i in range(segments.FINAL)})
    back = segments.Part.from_json(json.loads(json.dumps(final.to_json())))
    assert back == final and hash(next(iter(back.seed["hung"]))) == hash(key)
    for part in segments.split_parts():
        assert segments.Part.from_json(json.loads(json.dumps(part.to_json()))) == part


# ---------------------------------------------------------------------------------------------------
# Both ways, on submissions that hang, crash, print, hoard memory or make known mistakes

CASES = {
    "solutions": KIT / "solutions",
    "erin": KIT / "grader" / "bertlab_grader" / "commands" / "demo_cohort" / "erin",
    "wrong_sbert_detach": KIT / "tests" / "outside_bank" / "wrong_sbert_detach",
    "wrong_pool_last_token": KIT / "tests" / "outside_bank" / "wrong_pool_last_token",
    "hostile_search_valueerror": KIT / "tests" / "outside_bank" / "hostile_search_valueerror",
    "exit_in_call": KIT / "tests" / "redteam_submissions" / "exit_in_call",
    "exit_at_import": KIT / "tests" / "redteam_submissions" / "exit_at_import",
    "flood": KIT / "tests" / "redteam_submissions" / "flood",
}
CASES = {name: folder for name, folder in CASES.items() if folder.is_dir()}  # a removed task's (remove-task)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    from bertlab_grader.sandbox import bubblewrap
    from bertlab_grader.sandbox.launcher import Sandbox
    from bertlab_grader.grading.scoring import warm_up

    if bubblewrap.find_bwrap() is None:
        pytest.skip("bubblewrap (bwrap) is not installed: grading needs the real sandbox")
    # A 3 s limit instead of 20 s: the hangs cost less, and both ways of grading share it. A 1 GiB
    # memory budget instead of 3: erin's memory bomb meets it after about 2 s of work, not 5 s, so it
    # is stopped by the memory limit both ways, never by the call's time limit one way only.
    sb = Sandbox(kit_root=KIT, hide=[], timeout_s=3.0, memory_mb=1024)
    warm_up()
    yield sb
    sb.close()


def _sources(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.py"))}


def _in_parts(sandbox, sources: dict) -> dict:
    """The way the pool grades a split submission: the first parts (in any order: here the last
    first, to show order does not matter), each in a session of its own, then the final part."""
    from bertlab_grader.grading.scoring import grade_part

    done = {}
    for part in reversed(segments.split_parts()):
        done[part.segment] = grade_part(sandbox, sources, "student", "week7", part)
    return grade_part(sandbox, sources, "student", "week7", segments.final_part(done)).result


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_graded_in_parts_exactly_as_in_one_process(sandbox, tmp_path, name):
    from bertlab_grader.grading.scoring import grade_sources
    from bertlab_grader.performance import record as timing_record

    sources = _sources(CASES[name])
    assert sources, f"{CASES[name]} holds no .py file"
    # One timing record for both: the second grading reuses the first one's measurement (as copies
    # of one submission do in a course), so the performance task compares too.
    record = timing_record.TimingRecord(tmp_path / "timings.json", timing_record.protocol_digest())
    with timing_record.use(record, sources):
        whole = grade_sources(sandbox, sources, "student", "week7")
        parts = _in_parts(sandbox, sources)
    assert [t["name"] for t in parts["tests"]] == [t["name"] for t in whole["tests"]], "the same tests, in order"
    for a, b in zip(whole["tests"], parts["tests"]):
        assert a == b, f"{name}: {a['name']} graded in one process:\n  {a}\nin parts:\n  {b}"
    assert (parts["score"], parts["max_score"]) == (whole["score"], whole["max_score"])


def _schedule(n_submissions: int, workers: int):
    from types import SimpleNamespace

    from bertlab_grader.course.schedule import Schedule

    return Schedule([SimpleNamespace(student=f"s{i}") for i in range(n_submissions)], workers)


def _name(job) -> str:
    return job.submission.student + ("" if job.part is None else f"/{job.part.segment}")


def _part_payload(job) -> dict:
    """What a worker sends back for a part (a stand-in for grade_part's, encoded for the pipe)."""
    return segments.PartResult({"tests": [{"name": f"t{job.part.segment}", "task": job.part.tasks[0]}]},
                               {"skip": {}, "hung": {}, "failed_hard": {}}).to_json()


def test_the_pool_splits_only_the_last_submissions_and_only_with_free_workers():
    """When fewer whole submissions wait than there are workers, the next one is handed out in parts
    (grader/bertlab_grader/course/schedule.py); a pool of one worker never splits."""
    def handed(n_submissions: int, workers: int) -> list[str]:
        schedule, out = _schedule(n_submissions, workers), []
        while schedule:
            out.append(_name(schedule.take()))
        return out

    def first_parts(student: str) -> list[str]:  # the parts handed out before the final one
        return [f"{student}/{i}" for i in range(segments.FINAL)]

    assert handed(4, 2) == ["s0", "s1", "s2", *first_parts("s3")]
    assert handed(4, 3) == ["s0", "s1", *first_parts("s2"), *first_parts("s3")]
    assert handed(3, 1) == ["s0", "s1", "s2"]


def test_a_split_submission_is_reported_once_with_its_final_part_result():
    schedule = _schedule(1, 2)
    parts = [schedule.take() for _ in range(segments.FINAL)]
    assert not schedule, "only the parts before the final one are handed out at first"
    *first, last = [parts[-1], *parts[:-1]]  # they may finish in any order
    for job in first:
        assert schedule.finished(job, "part", _part_payload(job)) is None
        assert not schedule, "the final part waits for every earlier one"
    assert schedule.finished(last, "part", _part_payload(last)) is None
    final = schedule.take()
    assert _name(final) == f"s0/{segments.FINAL}"
    assert [t["name"] for t in final.part.earlier_tests] == [f"t{i}" for i in range(segments.FINAL)]
    whole = {"tests": ["all"], "score": 1.0}
    payload = segments.PartResult(whole, {}).to_json()
    assert schedule.finished(final, "part", payload) == (final.submission, whole, None)
    assert not schedule and not schedule.done


def test_a_split_submissions_parts_go_out_longest_first_by_their_last_seconds(tmp_path):
    """The parts of a split submission are handed out longest first, by how long each took when last
    graded (registry order where none is known): the final part waits for the last of them. What
    the parts take now is recorded, kept in the course, and read back by the next run; a record that
    cannot be read orders nothing."""
    from bertlab_grader.course.schedule import Schedule, keep_part_seconds, read_part_seconds

    def order(seconds) -> list[int]:
        from types import SimpleNamespace

        schedule = Schedule([SimpleNamespace(student="s0")], 2, seconds)
        return [schedule.take().part.segment for _ in range(segments.FINAL)]

    names = [segments.segment_name(i) for i in range(segments.FINAL)]
    assert order(None) == list(range(segments.FINAL))
    assert order({names[-1]: 3.0, names[0]: 1.0}) == [segments.FINAL - 1, 0, *range(1, segments.FINAL - 1)]
    assert order({name: float(i) for i, name in enumerate(names)}) == list(reversed(range(segments.FINAL)))

    seconds: dict = {}
    schedule = Schedule([SimpleNamespace(student="s0")], 2, seconds)
    parts = [schedule.take() for _ in range(segments.FINAL)]
    for k, job in enumerate(parts):
        schedule.finished(job, "part", _part_payload(job), seconds=0.5 + k)
    final = schedule.take()
    schedule.finished(final, "part", segments.PartResult({"tests": []}, {}).to_json(), seconds=9.0)
    assert seconds == {segments.segment_name(job.part.segment): 0.5 + k for k, job in enumerate(parts)}, \
        "each part before the final one records its seconds (the final part is always last)"

    path = tmp_path / ".bertlab" / "part-seconds-week7.json"
    assert read_part_seconds(path) == {}
    keep_part_seconds(path, seconds)
    assert read_part_seconds(path) == seconds
    for broken in ("not json", "[1, 2]", '{"cka": "slow", "retrieval": -1, "pooling": NaN}'):
        path.write_text(broken)
        assert read_part_seconds(path) == {}, broken
    blocked = tmp_path / "a file, not a folder"
    blocked.write_text("")
    keep_part_seconds(blocked / "part-seconds-week7.json", seconds)  # (cannot be kept: the run goes on)


def test_a_failed_part_fails_its_submission_once_and_drops_the_rest():
    """A grader failure in one part: the submission is reported not graded, once; its queued parts
    are not handed out, a part still running elsewhere is ignored when it ends, and a retry of one
    is not queued. Other submissions go on."""
    schedule = _schedule(3, 2)
    assert [_name(schedule.take()) for _ in range(2)] == ["s0", "s1"]
    part0 = schedule.take()
    part1 = schedule.take()
    assert (_name(part0), _name(part1)) == ("s2/0", "s2/1")
    submission, result, why = schedule.finished(part0, "grader_failure", "GraderFailure: the sandbox died")
    assert (submission.student, result, why) == ("s2", None, "GraderFailure: the sandbox died")
    assert not schedule, "s2's queued part 2 is dropped"
    assert schedule.finished(part1, "part", _part_payload(part1)) is None
    schedule.retry(part1)
    assert not schedule
