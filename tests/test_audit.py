"""The mutant bank and its audit: every mutant caught in its own task only, every variant spared,
every hint recognised.

``test_audit`` audits the whole bank, as `bertlab audit` does (about a minute on two quiet cores, see
docs/hidden-suites.md "The audit").
"""

from __future__ import annotations

import pytest

from bertlab.implementations import load_directory, load_implementation
from bertlab.mistakes import find as find_mistake
from bertlab_grader.authoring.audit import run_audit
from bertlab_grader.grading.hints import matching_mistakes
from bertlab_grader.mutants.bank import FINGERPRINTS
from bertlab.tasks import EXERCISE_FILES
from bertlab_grader.mutants.bank import load_bank
from bertlab_grader.core.locations import reference_sources as stripped_solutions
from bertlab.tasks import EXERCISE_TASKS


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The hints' fingerprints are taken on one torch thread here, as they do in a grader worker and in the audit's
    workers. With two, the siamese fingerprint's small tiny-BERT passes cost five times the CPU, mostly
    threads waiting on each other (measured on two shared cores: 1.7 s of CPU per fingerprint instead of
    0.34 s). Restored after this module; the audit forks its workers from this process."""
    from bertlab_grader.performance.timing import one_torch_thread

    with one_torch_thread():
        yield


def test_bank_size_and_one_mistake_per_mutant():
    mutants, variants = load_bank(kinds=("mutant",)), load_bank(kinds=("variant",))
    assert len(mutants) >= 30 and len(variants) >= 8
    for task in EXERCISE_TASKS:
        # The kit's own tasks keep their bank; a task an instructor adds needs one mutant at least (an
        # audit without one tests nothing: new-task's placeholder has one, the worked example two).
        least = 5 if task in ("cka", "pooling", "siamese", "retrieval") else 1
        assert sum(m.task == task for m in mutants) >= least, f"task {task} has fewer than {least} mutants"
    solutions = stripped_solutions()
    for entry in mutants + variants:
        assert entry.task in EXERCISE_TASKS and entry.description, entry.name
        changed = [f for f in EXERCISE_FILES if (entry.path / f).read_text() != solutions[f]]
        assert changed == [entry.file], f"{entry.name} changes {changed}, declares {entry.file}"
        assert "### BEGIN SOLUTION" not in (entry.path / entry.file).read_text()


def test_every_mutant_is_a_known_mistake_of_its_task():
    # A mutant's hint is the table's record with its name (bertlab/mistakes.py), of the same task.
    for entry in load_bank(kinds=("mutant",)):
        known = find_mistake(entry.name)
        assert known is not None and known.task == entry.task, f"{entry.name} is not in bertlab/mistakes.py"
        assert known.hint.strip(), entry.name
        # A mistake no returned value shows (memory) is named by its hidden test, never by a fingerprint.
        assert entry.hint == (known.hint if known.fingerprinted else ""), entry.name


@pytest.mark.slow  # (over 5 s each, or many cases: the fast loop leaves it to the whole suite)
def test_every_hinted_mutant_is_recognised_and_no_correct_code_gets_a_hint():
    for entry in load_bank(kinds=("mutant",)):
        if entry.hint:
            found = [m.name for m in matching_mistakes(load_directory(entry.path), entry.task)]
            assert found == [entry.name], f"{entry.name}: the fingerprint matches {found}"
    for impl in [load_implementation("reference")] + [load_directory(v.path) for v in load_bank(kinds=("variant",))]:
        for task in FINGERPRINTS:
            assert matching_mistakes(impl, task) == [], f"{impl.name} gets a {task} hint"


def test_a_fingerprint_that_matches_no_known_mistake_stops_at_its_first_difference():
    """A hint is only looked for among the known mistakes, so a submission that already differs from
    all of them is not called further (a hostile one's calls cost seconds each: forks, a memory bomb)."""
    from types import SimpleNamespace

    from bertlab_grader.grading.hints import fingerprint

    calls = []

    def nonsense(name):
        def call(*args, **kwargs):
            calls.append(name)
            return "nonsense"  # no mistake of the bank returns a string anywhere
        return call

    impl = SimpleNamespace(
        cka=SimpleNamespace(linear_cka=nonsense("linear_cka"), cka_matrix=nonsense("cka_matrix")),
        pooling=SimpleNamespace(masked_mean_pool=nonsense("masked_mean_pool")),
        retrieval=SimpleNamespace(semantic_search=nonsense("semantic_search"), SemanticIndex=nonsense("SemanticIndex")),
        siamese=SimpleNamespace(create_sbert=nonsense("create_sbert")))
    for task in (t for t in FINGERPRINTS if hasattr(impl, t)):  # the kit's own tasks (a new one has no probe here)
        calls.clear()
        fingerprint(impl, task)  # taken whole, as for the bank: every probe is called
        whole = len(calls)
        calls.clear()
        assert matching_mistakes(impl, task) == [], task
        assert len(calls) == 1 and whole > 1, (
            f"{task}: the hint's fingerprint made {len(calls)} call(s) (the whole fingerprint: {whole}); "
            "after the first answer that no known mistake gives, the rest cannot change the answer")


def test_a_foreign_diagnosis_fails_the_audit_as_a_missed_mutant_does():
    from bertlab_grader.authoring.audit import Row, judge

    told_right = Row("cka_no_centering", "mutant", "cka", lost={"cka": 3.0}, hint="ok", named_own=True)
    judge(told_right)
    assert told_right.ok and told_right.verdict == "caught"
    blamed = Row("cka_zscored", "mutant", "cka", lost={"cka": 3.0}, hint="ok",
                 foreign=("test_linear_cka_matches_reference: cka_no_float64",))
    judge(blamed)
    assert not blamed.ok and "FOREIGN diagnosis: test_linear_cka_matches_reference: cka_no_float64" in blamed.verdict


@pytest.mark.slow  # the whole audit: every mutant and variant graded
def test_audit(capsys):
    """`bertlab audit` over the whole bank: every mutant caught in its own task only, every variant
    full marks outside performance, every hint recognised, no message or hint naming a mistake the
    entry does not make (exit code 0), and the table printed."""
    code = run_audit(workers=2)
    table = capsys.readouterr().out
    assert code == 0, table
    assert "caught" in table and "MISSED" not in table and "FOREIGN" not in table
    assert "Messages: 0 foreign diagnosis(es)" in table
