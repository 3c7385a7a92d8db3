"""The course a command works on, as one value: its folder, the assignment, the gradebook, the sandbox.

``bertlab grade COURSE --assignment A --db-url URL --unsafe-no-sandbox`` builds one
:class:`CourseSettings` from its command line, and every step of the run takes that value instead of
the four separate arguments (in the spirit of nbgrader's ``CourseDirectory``, which carries the
course's root, assignment and database the same way). What the course's own ``nbgrader_config.py``
says is read once, when a step first asks for the gradebook's URL.

    settings = CourseSettings(Path("course"), "week7")
    settings.gradebook_url      # the command line's --db-url, else nbgrader_config.py's, else the default
    settings.hidden_paths       # what a sandbox must not see: the course and the gradebook's folder

Both are worked out once and kept in the value, so a grader worker that receives the settings (pickled
to a process of the pool) uses what the main process worked out and reads no config of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from bertlab_grader.course.config import course_db_url


@dataclass(frozen=True)
class CourseSettings:
    """One course and one assignment, as a command names them.

    ``root``: the nbgrader course folder (made absolute). ``assignment``: the assignment graded.
    ``db_url``: the gradebook URL the command line gave, or None where the course's config decides
    (kept as given: ``init_course`` writes a given URL into the config and keeps an earlier one for
    None). ``unsafe_no_sandbox``: True only when the instructor named ``--unsafe-no-sandbox``.
    """

    root: Path
    assignment: str = "week7"
    db_url: str | None = None
    unsafe_no_sandbox: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root).resolve())

    @cached_property
    def gradebook_url(self) -> str:
        """The gradebook's URL: ``db_url`` when given, else what the course's nbgrader_config.py sets,
        else nbgrader's default ``sqlite:///ROOT/gradebook.db`` (read once, then kept)."""
        return course_db_url(self.root, self.db_url)

    @cached_property
    def hidden_paths(self) -> tuple[str, ...]:
        """What a sandbox must not see besides the kit: the course (every student's files) and the
        folder of a SQLite gradebook."""
        hide = [str(self.root)]
        url = self.gradebook_url
        if url.startswith("sqlite:///"):
            hide.append(str(Path(url.removeprefix("sqlite:///")).resolve().parent))
        return tuple(sorted(set(hide)))
