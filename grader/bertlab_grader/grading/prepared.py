"""One prepared grader: a warm sandbox that passed its preflight, grading submissions in it.

Every way the kit grades holds one of these, and builds it here only: each worker of the cohort pool
(``course/pool.py``), each Dask worker's plugin (``cluster/worker_setup.py``), ``bertlab grade-one``
(``course/grade_one.py``, the Gradescope autograder too) and ``bertlab doctor``. What differs between
them is what they do around it (which folders to hide, which uid, what to do with a failed preflight),
not how a sandbox is opened, checked and used.

    with PreparedGrader.start(hide=[course], uid=61001) as grader:
        if grader.problem is not None:      # the reference lost points in this sandbox
            ...                             # report it; grade nobody
        result = grader.grade(sources, "alice")          # a whole submission: a results dict
        done = grader.grade(sources, "alice", part=part)  # one Part of a segmented one: a PartResult
"""

from __future__ import annotations

import time
from typing import Mapping, Optional, Sequence

from bertlab.tasks import EXERCISE_TASKS
from bertlab_grader.core.locations import KIT_ROOT
from bertlab_grader.grading.preflight import run_preflight
from bertlab_grader.grading.scoring import grade_part, grade_sources, warm_up
from bertlab_grader.grading.segments import Part, PartResult
from bertlab_grader.performance import gate as timing_gate
from bertlab_grader.performance import record as timing_record
from bertlab_grader.sandbox.launcher import Sandbox
from bertlab_grader.sandbox.template_process import TemplateHandoff


class PreparedGrader:
    """A warm sandbox, its preflight's verdict, and the one way to grade in it.

    ``problem``: None when the reference solution got full marks in this very sandbox, else the first
    thing it lost (the caller decides what a failed preflight means: the pool reports it and grades
    nobody, ``grade-one`` raises, ``doctor`` prints it). ``preflight_s``: how long the preflight took.
    """

    def __init__(self, sandbox: Sandbox, assignment: str, problem: Optional[str], preflight_s: float):
        self.sandbox, self.assignment = sandbox, assignment
        self.problem, self.preflight_s = problem, preflight_s

    @classmethod
    def start(cls, assignment: str = "week7", hide: Sequence[str] = (), uid: Optional[int] = None,
              unsafe_no_sandbox: bool = False,
              preflight_tasks: Sequence[str] = EXERCISE_TASKS,
              template: Optional[TemplateHandoff] = None) -> "PreparedGrader":
        """Open a sandbox (bubblewrap, or SandboxUnavailable unless the instructor asked for
        ``unsafe_no_sandbox`` by name) that hides ``hide`` and runs student code as ``uid``, then run the
        preflight in it (the reference graded on the hidden tests of ``preflight_tasks``: all of them,
        unless a pool shares them out, ``segments.preflight_share``). Whatever fails on the way closes
        the sandbox and raises.

        The sandbox's template warms up in its own process (torch, MiniLM: seconds); meanwhile this
        process runs ``warm_up`` (MiniLM and the reference data on the trusted side; nothing when
        already done), so the two warm-ups overlap instead of following each other. ``template``: the
        sandbox's template, started ahead with the same arguments by the process that made this one
        (course/pool.py, ``start_template``)."""
        kwargs = {"kit_root": KIT_ROOT, "hide": list(hide), "unsafe_no_sandbox": unsafe_no_sandbox,
                  "template": template}
        if uid is not None:
            kwargs["uid"] = uid
        sandbox = Sandbox(**kwargs)
        try:
            warm_up()
            start = time.monotonic()
            with timing_gate.working():  # the preflight is work: it waits while another worker times
                problem = run_preflight(sandbox, assignment, preflight_tasks)
            return cls(sandbox, assignment, problem, time.monotonic() - start)
        except BaseException:
            sandbox.close()
            raise

    def grade(self, sources: Mapping[str, str], student: str, part: Optional[Part] = None,
              timings: Optional[timing_record.TimingRecord | timing_record.KnownTimings] = None) -> dict | PartResult:
        """Grade ``sources`` ({"cka.py": text, ...}) as ``student``: the whole submission (a results
        dict), or with ``part`` one part of a submission graded in segments (a PartResult,
        ``grading/segments.py``). ``timings``: where the performance task reuses and keeps this
        submission's measurements (None: it measures afresh and keeps nothing). Raises GraderFailure
        when the grader failed; a student's mistake is a result, never an exception."""
        sources = dict(sources)  # one plain copy, for the timing record's digest and the grading alike
        with timing_gate.working(), timing_record.use(timings, sources):
            if part is None:
                return grade_sources(self.sandbox, sources, student, self.assignment)
            return grade_part(self.sandbox, sources, student, self.assignment, part)

    def close(self) -> None:
        self.sandbox.close()

    def __enter__(self) -> "PreparedGrader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
