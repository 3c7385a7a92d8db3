"""The course a command works on, as one value: its folder, the assignment, the gradebook, the sandbox.

``bertlab grade COURSE --assignment A --db-url URL --unsafe-no-sandbox`` builds one
:class:`CourseSettings` from its command line, and every step of the run takes that value instead of
the four separate arguments (in the spirit of nbgrader's ``CourseDirectory``, which carries the
course's root, assignment and database the same way). What the course's own ``nbgrader_config.py``
says is read once, when a step first asks for the gradebook's URL.

    settings = CourseSettings(Path("course"), "week7")               # or ..., "week7", "postgresql://..."
    settings.gradebook_url      # the command line's --db-url, else nbgrader_config.py's, else the default
    settings.url_from_command_line   # True when --db-url gave it (init_course writes it into the config)
    settings.hidden_paths       # what a sandbox must not see: the course and the gradebook's folder

The settings have one URL, ``gradebook_url``: every step that opens the gradebook uses it, and no
function of the course room or ``export/`` takes a URL of its own. It and the hidden folders are worked
out once and kept in the value, so a grader worker that receives the settings (pickled to a process of
the pool) uses what the main process worked out and reads no config of its own.
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field
from functools import cached_property
from pathlib import Path

from bertlab_grader.course.config import course_db_url, normalise_db_url


@dataclass(frozen=True, eq=False)
class CourseSettings:
    """One course and one assignment, as a command names them.

    ``root``: the nbgrader course folder (made absolute). ``assignment``: the assignment graded.
    ``db_url`` (given to the constructor only, not kept as a second URL): the command line's
    ``--db-url``, or None where the course's config decides; a given one becomes ``gradebook_url``
    (a relative SQLite path made absolute) and sets ``url_from_command_line``.
    ``unsafe_no_sandbox``: True only when the instructor named ``--unsafe-no-sandbox``.
    """

    root: Path
    assignment: str = "week7"
    db_url: InitVar[str | None] = None
    unsafe_no_sandbox: bool = False
    #: True when the command line named the URL: ``init_course`` writes it into nbgrader_config.py
    #: then, and keeps the config's own (or nbgrader's default) otherwise.
    url_from_command_line: bool = field(init=False, default=False)

    def __post_init__(self, db_url: str | None) -> None:
        object.__setattr__(self, "root", Path(self.root).resolve())
        if db_url:  # the URL is settled now; without one, the config is read when a step first asks
            object.__setattr__(self, "url_from_command_line", True)
            self.__dict__["gradebook_url"] = normalise_db_url(db_url)  # (cached_property's own slot)

    @cached_property
    def gradebook_url(self) -> str:
        """The gradebook's URL: the command line's when given, else what the course's nbgrader_config.py
        sets, else nbgrader's default ``sqlite:///ROOT/gradebook.db`` (read once, then kept)."""
        return course_db_url(self.root)

    def __eq__(self, other: object) -> bool:
        """The same course, assignment, sandbox choice and gradebook (the URL is compared too, which
        the dataclass's own equality would leave out: it is not a field)."""
        if not isinstance(other, CourseSettings):
            return NotImplemented
        return (self.root, self.assignment, self.unsafe_no_sandbox, self.url_from_command_line,
                self.gradebook_url) == (other.root, other.assignment, other.unsafe_no_sandbox,
                                        other.url_from_command_line, other.gradebook_url)

    def __hash__(self) -> int:
        return hash((self.root, self.assignment, self.unsafe_no_sandbox))

    @cached_property
    def hidden_paths(self) -> tuple[str, ...]:
        """What a sandbox must not see besides the kit: the course (every student's files) and the
        folder of a SQLite gradebook."""
        hide = [str(self.root)]
        url = self.gradebook_url
        if url.startswith("sqlite:///"):
            hide.append(str(Path(url.removeprefix("sqlite:///")).resolve().parent))
        return tuple(sorted(set(hide)))


# The dataclass keeps an InitVar's default as a class attribute: without this, ``settings.db_url`` would
# read None on every settings and look like a second URL. (The constructor keeps its default.)
del CourseSettings.db_url
