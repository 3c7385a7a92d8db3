"""The mutant bank and its audit: every mutant caught in its own task only, every variant spared,
every hint recognised.

The default run audits a representative part (the reference solutions, the stubs, one mutant per task, two
variants) and checks every hint; ``BERTLAB_FULL_AUDIT=1`` audits the whole bank (4.5-7 minutes on
two loaded cores, see docs/hidden-suites.md).
"""

from __future__ import annotations



from bertlab.implementations import load_directory, load_implementation
from bertlab.mistakes import find as find_mistake
from bertlab_grader.audit import run_audit
from bertlab_grader.hints import PROBES, matching_mistakes
from bertlab_grader.mutants import EXERCISE_FILES, load_bank
from bertlab_grader.mutants.build import stripped_solutions
from bertlab_grader.scoring import CORRECTNESS_TASKS

REPRESENTATIVE = ("cka_no_centering", "pool_divide_by_length", "sbert_not_shared", "ret_ties_descending",
                  "var_cka_numpy", "var_ret_chunked")


def test_bank_size_and_one_mistake_per_mutant():
    mutants, variants = load_bank(kinds=("mutant",)), load_bank(kinds=("variant",))
    assert len(mutants) >= 30 and len(variants) >= 8
    for task in CORRECTNESS_TASKS:
        assert sum(m.task == task for m in mutants) >= 5, task
    solutions = stripped_solutions()
    for entry in mutants + variants:
        assert entry.task in CORRECTNESS_TASKS and entry.description, entry.name
        changed = [f for f in EXERCISE_FILES if (entry.path / f).read_text() != solutions[f]]
        assert changed == [entry.file], f"{entry.name} changes {changed}, declares {entry.file}"
        assert "### BEGIN SOLUTION" not in (entry.path / entry.file).read_text()


def test_every_mutant_is_a_known_mistake_of_its_task():
    # A mutant's hint is the table's record with its name (bertlab/mistakes.py), of the same task.
    for entry in load_bank(kinds=("mutant",)):
        known = find_mistake(entry.name)
        assert known is not None and known.task == entry.task, f"{entry.name} is not in bertlab/mistakes.py"
        assert entry.hint == known.hint and entry.hint.strip(), entry.name


def test_every_hinted_mutant_is_recognised_and_no_correct_code_gets_a_hint():
    for entry in load_bank(kinds=("mutant",)):
        if entry.hint:
            found = [m.name for m in matching_mistakes(load_directory(entry.path), entry.task)]
            assert found == [entry.name], f"{entry.name}: the probe matches {found}"
    for impl in [load_implementation("reference")] + [load_directory(v.path) for v in load_bank(kinds=("variant",))]:
        for task in PROBES:
            assert matching_mistakes(impl, task) == [], f"{impl.name} gets a {task} hint"


def test_audit(capsys):
    """`bertlab audit` over the whole bank: every mutant caught in its own task only, every variant
    full marks outside performance, every hint recognised (exit code 0), and the table printed."""
    code = run_audit(workers=2)
    table = capsys.readouterr().out
    assert code == 0, table
    assert "caught" in table and "MISSED" not in table
