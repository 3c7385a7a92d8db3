"""bertlab's nbgrader course: set-up, the gradebook, results files, export and feedback.

An nbgrader course directory drives grading (docs/architecture.md). ``bertlab grade`` replaces only
``nbgrader autograde``: the hidden suites run in the sandbox, and each submission's results dict
(results.json, docs/results-format.md) is recorded here into nbgrader's own gradebook and ``autograded/`` folder, so
``nbgrader export`` and ``nbgrader generate_feedback`` work unchanged.

Layout (nbgrader's, plus two bertlab files)::

    COURSE/nbgrader_config.py                    CourseDirectory.root (and db_url when not the default)
    COURSE/gradebook.db                          the default SQLite gradebook (any SQLAlchemy URL works)
    COURSE/source/<a>/<a>.ipynb                  intro + one grade cell per task (grade_id = task)
    COURSE/release/<a>/<a>.ipynb                 written by nbgrader's generate_assignment
    COURSE/submitted/<student>/<a>/              the student's .py files (or a zip of them)
    COURSE/autograded/<student>/<a>/<a>.ipynb    per task: test, outcome, points, message, hint
    COURSE/autograded/<student>/<a>/results.json the results dict (docs/results-format.md)
    COURSE/feedback/<student>/<a>/<a>.html       written by ``nbgrader generate_feedback``
    COURSE/.bertlab/                             staging for extracted zips, the gradebook lock

Public API: :func:`init_course`, :func:`record_result` (:func:`prepare_record` and :func:`record_results`:
many at once, grader/bertlab_grader/course/journal.py), :func:`write_results_json`, :func:`load_results`,
:func:`list_submissions`, :func:`read_submission_sources`, :func:`export_grades`,
:func:`generate_feedback`, :func:`error_result`, :func:`course_max_points`, :func:`course_db_url`.
"""

# This module is the course's one entry point: everything else reads the course through it, and it
# holds nothing of its own. The jobs live beside it: config.py (names, the gradebook's URL,
# nbgrader_config.py, init_course), results.py (results.json), gradebook.py (recording, nbgrader's
# export and feedback), submissions.py (finding and reading submissions).

from bertlab_grader.core.locations import RESULTS_SCHEMA  # noqa: F401
from bertlab_grader.course.config import (  # noqa: F401
    CONFIG_FILE, DEFAULT_COURSE_ID, OUTCOMES, CourseError, NbgraderCommandError, check_gradebook, course_db_url,
    ensure_python_on_path, gradebook_assignments, init_course, known_assignments, nbgrader_environment)
from bertlab_grader.course.gradebook import (  # noqa: F401
    export_and_feedback, export_grades, generate_feedback, keep_gradebook_open, prepare_record, record_result,
    record_results)
from bertlab_grader.course.results import (  # noqa: F401
    autograded_dir, check_results_schema, course_max_points, error_result, load_results, validate_result,
    write_results_json)
from bertlab_grader.course.submissions import (  # noqa: F401
    EXERCISE_FILES, LayoutProblem, Submission, SubmissionSources, UnsafeZipError, list_submissions,
    read_submission_sources, safe_extract_zip, scan_submitted, submission_digest, submitted_assignments, valid_id)
