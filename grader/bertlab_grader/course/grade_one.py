"""`bertlab grade-one DIR`: one submission directory, graded in a fresh sandbox after a preflight
in that same sandbox, nothing recorded in any course (the Gradescope autograder grades this way too)."""

from __future__ import annotations

import json
from pathlib import Path

from bertlab.errors import UsageError

from bertlab.tasks import EXERCISE_FILES
from bertlab_grader.core.failures import RunStopped
from bertlab_grader.course.results import check_results_schema, format_gradebook, validate_result
from bertlab_grader.core.digest import sources_digest
from bertlab_grader.course.submissions import handin_notes, read_submission_sources, valid_id
from bertlab_grader.sandbox.bubblewrap import require_isolation


def grade_one(submission: Path, student: str | None = None, assignment: str = "week7",
              unsafe_no_sandbox: bool = False) -> dict:
    """Grade one submission directory in a fresh sandbox, after a preflight in that same sandbox;
    the results dict (with ``submission_digest`` and ``sandboxed``). Raises UsageError for a folder
    that is not a submission, GraderFailure when the grader failed (nothing is graded then)."""
    from bertlab_grader.grading.preflight import explain
    from bertlab_grader.grading.prepared import PreparedGrader  # (pytest: only where grading happens)

    submission = Path(submission).resolve()
    if not submission.is_dir():
        raise UsageError(f"{submission} is not a directory holding {', '.join(EXERCISE_FILES)}")
    student = student or submission.name
    if not valid_id(student):
        raise UsageError(f"{student!r} cannot be a student id; pass --student NAME")
    sources = read_submission_sources(submission)
    if not sources:
        raise UsageError(f"{submission} holds none of {', '.join(EXERCISE_FILES)}")
    require_isolation(unsafe_no_sandbox)
    with PreparedGrader.start(assignment, hide=[str(submission.parent)],
                              unsafe_no_sandbox=unsafe_no_sandbox) as grader:
        if grader.problem is not None:
            raise RunStopped(explain(grader.problem))
        result = grader.grade(sources, student)
    result["submission_digest"] = "sha256:" + sources_digest(sources)  # (the files graded, read once)

    result["notes"] = handin_notes(submission)  # (validate_result drops an empty list)

    result = validate_result(result)
    check_results_schema(result)
    return result


def grade_one_command(submission: Path, as_json: bool = False, student: str | None = None,
                      unsafe_no_sandbox: bool = False) -> int:
    """`bertlab grade-one`: print the result (or results.json with --json). Exit 0 graded, 1 grader
    failure (nothing printed on stdout), 2 usage error."""
    result = grade_one(submission, student, unsafe_no_sandbox=unsafe_no_sandbox)
    if as_json:
        print(json.dumps(result, indent=1))
    else:
        print(format_gradebook({result["student"]: result}))
        for test in result["tests"]:
            if test["outcome"] != "passed":
                print(f"  [{test['outcome']}] {test['task']}/{test['name']}: {test['message']}")
        if not result.get("sandboxed", True):
            print("NOTE: graded WITHOUT the sandbox (--unsafe-no-sandbox); results.json records it.")
    return 0
