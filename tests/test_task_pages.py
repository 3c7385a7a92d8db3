"""The pages and fixtures that hold a part per task agree with the task registry (docs/authoring.md,
"Where a task lives" and "The kit's whole submissions").

- docs/student-guide.md's task table and list of concept pages are generated from the registry
  (between marker comments): the committed blocks are what the registry gives, and they follow it.
- docs/hidden-checks.md has a section per task, in the registry's order.
- `bertlab new-task` gives every whole-submission fixture the new task's file by one rule (the
  reference to an honest one, the stub to a hostile one, nothing to a folder of one mistake), and
  the pages' parts come and go with the task.
The end-to-end run of new-task and remove-task in a copy of the kit is tests/test_task_authoring.py.
"""

from __future__ import annotations

import re
from pathlib import Path

from bertlab.tasks import EXERCISE_TASKS, EXERCISES, Exercise
from bertlab_grader.authoring import task_files
from bertlab_grader.core.fences import BEGIN, END

KIT_ROOT = Path(__file__).resolve().parents[1]
GUIDE = KIT_ROOT / task_files.STUDENT_GUIDE
CHECKS = KIT_ROOT / task_files.CHECKS_DOC


def test_the_student_guide_s_task_lists_are_what_the_registry_gives():
    text = GUIDE.read_text(encoding="utf-8")
    for block in task_files.GENERATED_BLOCKS:
        assert re.search(rf"^<!-- {block}: .*? -->$.*^<!-- /{block} -->$", text, flags=re.M | re.S), \
            f"docs/student-guide.md lost its generated block '{block}' (its two marker comments): put them back"
    assert task_files.student_guide_text(text, KIT_ROOT) == text, (
        "docs/student-guide.md's task lists differ from what src/bertlab/tasks.py gives: run "
        "`python tools/build_exercises.py` (never edit the blocks between the marker comments by hand)")


def test_the_task_lists_follow_the_registry():
    """A task more shows as a row and a concept page; a task fewer leaves no trace."""
    extra = Exercise("spearman_rank", "spearman_rank", ("spearman_correlation",), "6-spearman_rank.md",
                     summary="how alike two rankings are", uses=(EXERCISES[0].name,))
    table = task_files.task_table(KIT_ROOT, EXERCISES + (extra,))
    assert ("| spearman_rank | `exercises/spearman_rank.py` | `spearman_correlation` | how alike two rankings are |"
            in table), table
    assert f"spearman_rank uses your {EXERCISES[0].name}" in table.splitlines()[0]
    for e in EXERCISES:
        row = next(line for line in table.splitlines() if line.startswith(f"| {e.name} |"))
        assert all(f"`{function}" in row for function in e.functions) and row.endswith(f"| {e.summary} |"), row
    concepts = task_files.concept_list(KIT_ROOT, EXERCISES + (extra,))
    assert "- task spearman_rank: [6-spearman_rank.md](concepts/6-spearman_rank.md)" in concepts  # no page: its name
    fewer = EXERCISES[:-1]
    assert f"| {EXERCISES[-1].name} |" not in task_files.task_table(KIT_ROOT, fewer)
    assert f"concepts/{EXERCISES[-1].concept}" not in task_files.concept_list(KIT_ROOT, fewer)


def test_hidden_checks_has_a_section_per_task_in_the_registry_s_order():
    headings = re.findall(r"^## (\w+)$", CHECKS.read_text(encoding="utf-8"), flags=re.M)
    assert headings == list(EXERCISE_TASKS), (
        f"docs/hidden-checks.md has task sections {headings}, the registry's tasks are {list(EXERCISE_TASKS)}: "
        "each task needs its '## <task>' section, saying what its hidden tests check beyond the public ones "
        "(bertlab new-task writes one to fill in; docs/authoring.md, 'Add a task')")


def test_a_task_s_sections_come_and_go_with_it():
    tests = [("test_spearman_rank_matches_reference", 2), ("test_spearman_rank_rejects_bad_input", 1)]
    checks = CHECKS.read_text(encoding="utf-8")
    added = task_files._checks_doc_with(checks, "spearman_rank", EXERCISE_TASKS[-1], tests)
    headings = re.findall(r"^## (\w+)$", added, flags=re.M)
    assert headings == [*EXERCISE_TASKS, "spearman_rank"]
    assert "| spearman rank matches reference | 2 |" in added  # each test in words, with its points
    assert task_files._checks_doc_without(added, "spearman_rank") == checks

    suites = (KIT_ROOT / task_files.SUITES_DOC).read_text(encoding="utf-8")
    total = int(re.search(r"\((\d+) in all\)", suites).group(1))
    added = task_files._suites_doc_with(suites, "spearman_rank", tests)
    assert f"({total + 3} in all)" in added and "### spearman_rank (3)" in added
    assert task_files._suites_doc_without(added, "spearman_rank") == suites
    # The total is the sum of the task headings, whatever the page said before.
    assert f"({total} in all)" in task_files._with_total(suites.replace(f"({total} in all)", "(7 in all)"))


def _fake_kit(root: Path) -> None:
    """A checkout with the fixtures' shapes: an outside bank of one correct and one wrong entry, the
    red team's honest student and a hostile one of one file, the demo's hostile erin."""
    (root / task_files.OUTSIDE_BANK).mkdir(parents=True)
    (root / task_files.OUTSIDE_BANK / "bank.toml").write_text(
        '[correct_one]\nkind = "correct"\ndescription = "d"\n\n'
        f'[wrong_one]\nkind = "wrong"\ntask = "{EXERCISE_TASKS[0]}"\nbase = "correct_one"\ndescription = "d"\n')
    whole = [f"{task_files.OUTSIDE_BANK}/correct_one", "tests/redteam_submissions/correct",
             "grader/bertlab_grader/commands/demo_cohort/erin"]
    for folder in whole:
        for e in EXERCISES:
            (root / folder).mkdir(parents=True, exist_ok=True)
            (root / folder / e.filename).write_text("# a file\n")
    for folder in (f"{task_files.OUTSIDE_BANK}/wrong_one", "tests/redteam_submissions/loop"):
        (root / folder).mkdir(parents=True)
        (root / folder / EXERCISES[0].filename).write_text("# one mistake\n")


def test_new_task_gives_each_whole_submission_its_file_by_the_rule(tmp_path):
    _fake_kit(tmp_path)
    new = Exercise("spearman_rank", "spearman_rank", ("spearman_rank",), "6-spearman_rank.md")
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / new.filename).write_text(f"def spearman_rank(x):\n    {BEGIN}\n    return 1.0\n    {END}\n")
    (tmp_path / "exercises").mkdir()
    (tmp_path / "exercises" / new.filename).write_text("def spearman_rank(x):\n    raise NotImplementedError\n")

    written = task_files._add_to_fixtures(tmp_path, new)

    reference = "def spearman_rank(x):\n    return 1.0\n"  # the fences stripped
    stub = (tmp_path / "exercises" / new.filename).read_text()
    expected = {f"{task_files.OUTSIDE_BANK}/correct_one/{new.filename}": reference,
                f"tests/redteam_submissions/correct/{new.filename}": reference,
                f"grader/bertlab_grader/commands/demo_cohort/erin/{new.filename}": stub}
    assert sorted(written) == sorted(expected)
    for path, text in expected.items():
        assert (tmp_path / path).read_text() == text, path
    # A folder of one mistake takes its other files from its base, or is not a whole submission.
    assert not (tmp_path / task_files.OUTSIDE_BANK / "wrong_one" / new.filename).exists()
    assert not (tmp_path / "tests" / "redteam_submissions" / "loop" / new.filename).exists()


def test_the_kit_s_whole_submissions_are_the_ones_the_rule_names():
    """The honest ones are the outside bank's correct entries and the red team's correct/; erin is the
    hostile one; each holds a file for every registered task."""
    import tomllib

    found = task_files.whole_submissions(KIT_ROOT)
    bank = tomllib.loads((KIT_ROOT / task_files.OUTSIDE_BANK / "bank.toml").read_text(encoding="utf-8"))
    correct = {f"{task_files.OUTSIDE_BANK}/{name}" for name, spec in bank.items() if spec["kind"] == "correct"}
    assert {folder for folder, honest in found.items() if honest} == correct | set(task_files.HONEST_FIXTURES)
    assert [folder for folder, honest in found.items() if not honest] == ["grader/bertlab_grader/commands/demo_cohort/erin"]
