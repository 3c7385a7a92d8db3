"""`bertlab similar`: the most similar pairs of submissions per task (grader/bertlab_grader/reporting/similarity.py).

A synthetic cohort of twelve submissions, built from files that already exist (the reference, the outside
bank, the red-team honest submission, the mutant bank's correct variants, the released stubs), with
one PLANTED near-copy: zed's cka.py is cho's (tests/outside_bank/correct_gram/cka.py) with every
name changed, independent lines and functions reordered, and other comments and docstrings. Only text
is written and read; nothing here imports a submission.
"""

from __future__ import annotations

import difflib
import io
import itertools
import json
import re
import zipfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from bertlab.errors import UsageError
from bertlab.tasks import EXERCISE_FILES, EXERCISE_TASKS, EXERCISES, exercise
from bertlab_grader.reporting import similarity
from bertlab_grader.mutants.bank import load_bank
from bertlab_grader.core.locations import reference_sources as stripped_solutions
from bertlab_grader.reporting.similarity import SimilarPair, compare_cohort, similar_pairs
from bertlab_grader.authoring.stubs import expected_exercises

TESTS = Path(__file__).resolve().parent
ASSIGNMENT = "week7"
UNTOUCHED = ("hal", "ivy")  # untouched stubs in every task
#: The tasks the hand-made cohort below covers (those of them this course has). A task added with
#: `bertlab new-task` is handed in by every student as its untouched stub: the kit's whole submissions
#: all hold its reference, so pairs of it would only repeat "identical files score 1.0".
COHORT_TASKS = tuple(task for task in ("cka", "pooling", "siamese", "retrieval") if task in EXERCISE_TASKS)
COHORT_FILES = tuple(exercise(task).filename for task in COHORT_TASKS)
PLANTED = ("cho", "zed")    # zed's cka.py is a disguised copy of cho's

# Written by hand from tests/outside_bank/correct_gram/cka.py as a student hiding a copy would: names
# changed, the helpers in another order, the checks of _check_pair swapped, two independent lines of
# cka_matrix swapped and the two nan assignments too, comments and docstrings rewritten or dropped.
PLANTED_CKA = '''"""My CKA, via Gram matrices."""

from __future__ import annotations

import torch
import numpy as np


def validate(A: np.ndarray, B: np.ndarray) -> None:
    if A.ndim != 2 or B.ndim != 2:
        raise ValueError(f"expected 2-D inputs, got {A.ndim}-D and {B.ndim}-D")
    if A.shape[0] < 2:
        raise ValueError("need at least 2 rows")
    if A.shape[0] != B.shape[0]:
        raise ValueError(f"row counts differ: {A.shape[0]} and {B.shape[0]}")


def as_array(T) -> np.ndarray:
    if isinstance(T, torch.Tensor):
        T = T.detach().cpu().to(torch.float64).numpy()  # numpy cannot hold bf16
    return np.array(T, dtype=np.float64)  # a fresh copy


def gram_centred(T: np.ndarray):
    """Gram matrix of the centred data, or None if it is constant."""
    centred = T - T.mean(axis=0, keepdims=True)
    if np.abs(centred).max(initial=0.0) <= 1e-10 * np.abs(T).max(initial=0.0):
        return None
    return centred @ centred.T


def score(G1, G2) -> float:
    if G1 is None or G2 is None:
        return float("nan")
    s = np.sum(G1 * G2) / (np.linalg.norm(G1) * np.linalg.norm(G2))
    return float(np.clip(s, 0.0, 1.0))


def linear_cka(X, Y) -> float:
    """CKA of two matrices."""
    A, B = as_array(X), as_array(Y)
    validate(A, B)
    return score(gram_centred(A), gram_centred(B))


def cka_matrix(reps):
    """All the pairs."""
    mats = [as_array(m) for m in reps]
    if not mats:
        raise ValueError("reps is empty")
    for m in mats:
        validate(mats[0], m)
    n = len(mats)
    grams = [gram_centred(m) for m in mats]
    out = np.ones((n, n))
    for a in range(n):
        for b in range(a + 1, n):
            out[a, b] = out[b, a] = score(grams[a], grams[b])
    for a, g in enumerate(grams):
        if g is None:
            out[:, a] = np.nan
            out[a, :] = np.nan
    return torch.from_numpy(out)
'''


def _not_started(stub: str, filler: str) -> str:
    """The stub with every ``raise NotImplementedYet(...)`` line replaced by ``filler``."""
    return re.sub(r"raise NotImplementedYet\(.*\)", filler, stub)


def _folder(folder: Path) -> dict[str, str]:
    return {name: (folder / name).read_text(encoding="utf-8") for name in COHORT_FILES}


def cohort_files() -> dict[str, dict[str, str | bytes]]:
    """{student: {filename: text (or bytes)}}: twelve students, every one with every task's file (a task
    a course removed with bertlab remove-task is left out; one outside COHORT_TASKS is the stub)."""
    reference, stubs = stripped_solutions(), expected_exercises()
    variants = {entry.name: (entry.path / entry.file).read_text(encoding="utf-8")
                for entry in load_bank(kinds=("variant",))}
    students = {
        "ana": reference,
        "ben": _folder(TESTS / "outside_bank" / "correct_literal"),
        "cho": _folder(TESTS / "outside_bank" / "correct_gram"),
        "dev": _folder(TESTS / "outside_bank" / "correct_batched"),
        "eli": _folder(TESTS / "redteam_submissions" / "correct"),
        "fay": {"cka.py": variants.get("var_cka_hsic"), "pooling.py": variants.get("var_pool_einsum"),
                "siamese.py": variants.get("var_sbert_normalize_dot"), "retrieval.py": variants.get("var_ret_loop")},
        "gus": {"cka.py": variants.get("var_cka_numpy"), "pooling.py": variants.get("var_pool_loop"),
                "siamese.py": variants.get("var_sbert_inline_pool"), "retrieval.py": variants.get("var_ret_chunked")},
        "hal": dict(stubs),
        "ivy": dict(stubs),
        # the reference again, handed in as a zip, with cka not started: identical to ana elsewhere
        "fro": {**reference, "cka.py": stubs["cka.py"]},
        # the planted copy; the other tasks not started, in the ways students leave a function empty
        "zed": {"cka.py": PLANTED_CKA, "pooling.py": _not_started(stubs["pooling.py"], "pass"),
                "siamese.py": _not_started(stubs["siamese.py"], "..."), "retrieval.py": stubs.get("retrieval.py")},
        # a cka.py saved in Latin-1: the grader cannot read it, so it is named and left out
        "uma": {**stubs, "cka.py": "# r\xe9sum\xe9\n".encode("latin-1") + reference["cka.py"].encode()},
    }
    others = {name: stubs[name] for name in EXERCISE_FILES if name not in COHORT_FILES}
    return {student: {**{name: text for name, text in files.items() if name in COHORT_FILES}, **others}
            for student, files in students.items()}


def write_course(course: Path, students: dict[str, dict[str, str | bytes]], zipped=("fro", "ivy")) -> Path:
    """An nbgrader course holding only submitted/<student>/week7/ (a zip for the ``zipped`` ones)."""
    for student, files in students.items():
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        if student in zipped:
            with zipfile.ZipFile(folder / "handin.zip", "w") as zf:
                for name, text in files.items():
                    zf.writestr(f"{student}_week7/{name}", text)
        else:
            for name, text in files.items():
                (folder / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    return course


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    students = cohort_files()
    course = write_course(tmp_path_factory.mktemp("similar") / "course", students)
    return {"course": course, "students": students, "result": compare_cohort(course, ASSIGNMENT, top=100)}


@pytest.fixture(scope="module")
def codes(cohort):
    """{task: {student: copydetect.CodeFingerprint}}: the cohort's files that are compared (own code
    enough, readable), and two more students per task to rank: abe, a copy of ana's file (pairs tied
    at 1.0, and every pair of ana's tied with abe's), and zoe, ana's file with its last line deleted
    (a near copy)."""
    out = {}
    for exercise in (e for e in EXERCISES if e.name in COHORT_TASKS):
        boilerplate = similarity.stub_boilerplate(exercise.filename)
        texts = {student: files[exercise.filename] for student, files in cohort["students"].items()
                 if isinstance(files[exercise.filename], str)}
        ana = texts["ana"]
        texts["abe"], texts["zoe"] = ana, ana.rstrip().rsplit("\n", 1)[0] + "\n"
        codes = {student: similarity.code_fingerprint(text, exercise.filename, boilerplate)
                 for student, text in texts.items()}
        out[exercise.name] = {student: code for student, code in codes.items()
                              if code.token_coverage >= similarity.MIN_OWN_CHARS}
    return out


@pytest.fixture(scope="module")
def fingerprints(codes):
    """{task: {student: Fingerprint}} of ``codes``."""
    return {task: {student: similarity.Fingerprint.from_code(code) for student, code in by_student.items()}
            for task, by_student in codes.items()}


def _by_task(pairs: list[SimilarPair]) -> dict[str, list[SimilarPair]]:
    out: dict[str, list[SimilarPair]] = {task: [] for task in EXERCISE_TASKS}
    for pair in pairs:
        out[pair.task].append(pair)
    return out


def test_the_planted_copy_is_disguised_not_verbatim(cohort):
    original = cohort["students"]["cho"]["cka.py"].splitlines()
    planted = PLANTED_CKA.splitlines()
    same_lines = sum(block.size for block in difflib.SequenceMatcher(None, original, planted).get_matching_blocks())
    assert same_lines < len(planted) / 2, "the planted copy shares most lines verbatim: it would test nothing"


def test_the_planted_pair_ranks_first_for_its_task(cohort):
    cka = _by_task(cohort["result"].pairs())["cka"]
    assert (cka[0].a, cka[0].b) == PLANTED, f"expected {PLANTED} first, got {cka[:3]}"
    assert cka[0].similarity > cka[1].similarity
    # and only there: zed wrote nothing of their own in the other tasks
    for task, pairs in _by_task(cohort["result"].pairs()).items():
        if task != "cka":
            assert all("zed" not in (p.a, p.b) for p in pairs), (task, pairs)


def test_untouched_and_not_started_stubs_never_pair_up(cohort):
    result = cohort["result"]
    for pair in result.pairs():
        assert not {pair.a, pair.b} & set(UNTOUCHED), pair
    for task in result.tasks:
        assert set(UNTOUCHED) <= set(task.left_out), task
    assert all("uma" not in (p.a, p.b) for p in result.pairs())
    assert result.unreadable.keys() == {"uma"} and "cka.py could not be read" in result.unreadable["uma"]
    assert result.submissions == len(cohort["students"])
    assert not (cohort["course"] / ".bertlab").exists(), "zips must be extracted outside the course"
    by_task = {task.task: task for task in result.tasks}
    assert "fro" in by_task["cka"].left_out
    for task in set(by_task) & {"pooling", "siamese", "retrieval"}:  # `pass`, `...`, untouched
        assert "zed" in by_task[task].left_out


def test_identical_files_score_one_and_the_score_is_symmetric(cohort):
    """fro handed in ana's files (as a zip) for three tasks: those pairs are 1.0, ranked first."""
    for task, pairs in _by_task(cohort["result"].pairs()).items():
        if task == "cka" or task not in COHORT_TASKS:
            continue
        assert (pairs[0].a, pairs[0].b, pairs[0].similarity) == ("ana", "fro", 1.0), (task, pairs[:2])
        assert pairs[1].similarity < 1.0
    stubs = expected_exercises()
    boilerplate = similarity.stub_boilerplate("cka.py")
    one, two = (similarity.Fingerprint(text, "cka.py", boilerplate)
                for text in (cohort["students"]["ana"]["cka.py"], cohort["students"]["fay"]["cka.py"]))
    forward, backward = similarity.pair_similarity(one, two), similarity.pair_similarity(two, one)
    assert 0.0 < forward < 1.0 and forward == backward
    assert similarity.Fingerprint(stubs["cka.py"], "cka.py", boilerplate).own == 0


def _with_compare_files(x, y) -> float:
    """The similarity from copydetect.compare_files itself (x, y: copydetect.CodeFingerprint): its two
    overlap fractions, weighted by size."""
    import copydetect

    _, (share_x, share_y), _ = copydetect.compare_files(x, y)
    return (share_x * x.token_coverage + share_y * y.token_coverage) / (x.token_coverage + y.token_coverage)


def test_the_overlap_is_copydetects(codes, fingerprints):
    """shared_chars gathers the common positions with numpy; every pair of the cohort, in every
    task, must get the value copydetect.compare_files gives."""
    checked = 0
    for task, prints in fingerprints.items():
        for a, b in itertools.combinations(sorted(prints), 2):
            expected = _with_compare_files(codes[task][a], codes[task][b])
            assert similarity.pair_similarity(prints[a], prints[b]) == pytest.approx(expected, abs=1e-12), (task, a, b)
            checked += 1
    assert checked >= 4 * 20


def _exact(prints) -> dict[tuple[str, str], float]:
    """{(a, b): similarity} for every pair of ``prints``, a < b."""
    return {(a, b): similarity.pair_similarity(prints[a], prints[b])
            for a, b in itertools.combinations(sorted(prints), 2)}


def test_the_prescreen_bounds_every_pair(fingerprints):
    """pair_bounds: a candidate for exactly the pairs whose similarity is above 0, each with a bound
    at or above its similarity, and the bound equal to it for files that share their code verbatim."""
    for task, prints in fingerprints.items():
        names = sorted(prints)
        i, j, bound = similarity.pair_bounds([prints[name] for name in names])
        bounds = {(names[a], names[b]): value for a, b, value in zip(i, j, bound)}
        exact = _exact(prints)
        assert set(bounds) == {pair for pair, value in exact.items() if value > 0.0}, task
        below = {pair: (bounds[pair], exact[pair]) for pair in bounds if bounds[pair] < exact[pair]}
        assert not below, (task, below)
        assert bounds[("abe", "ana")] == exact[("abe", "ana")] == 1.0, task
        assert bounds[("ana", "zoe")] == exact[("ana", "zoe")] < 1.0, task  # zoe's code is all in ana's
        assert sum(bounds.values()) < len(bounds), f"{task}: a bound of 1 for every pair would screen out nothing"
    # every k-gram in more than one file (no file with code of its own): two copies and nothing else
    ana = fingerprints["pooling"]["ana"]
    assert similarity.rank_task("pooling", {"abe": ana, "ana": ana}, top=3).pairs == \
        [SimilarPair("pooling", "abe", "ana", 1.0)]


@pytest.mark.tasks("cka", "pooling", "siamese", "retrieval")  # the cohort has tied pairs with the four tasks' files
def test_the_prescreen_gives_the_all_pairs_ranking(fingerprints):
    """rank_task compares only the pairs that can reach the top; for every top, the pairs, their
    order (ties in similarity by student ids) and their values are those of comparing every pair."""
    ties = 0
    for task, prints in fingerprints.items():
        full = similarity.rank_task(task, prints, top=10_000, exhaustive=True)
        assert full.compared_in_full == len(prints) * (len(prints) - 1) // 2
        ties += sum(1 for p in full.pairs if p.similarity == 1.0) >= 2  # abe, ana and fro (not in cka)
        for top in (1, 2, 3, 5, 8, 10_000):
            fast = similarity.rank_task(task, prints, top)
            assert fast.pairs == full.pairs[:top], (task, top)
            assert fast.with_shared_code == full.with_shared_code == len(full.pairs), (task, top)
            if top < 5:
                assert fast.compared_in_full < full.with_shared_code, f"{task}, top {top}: nothing screened out"
    assert ties >= 3, "the cohort must have tied pairs, for the ranking of ties to be tested"


def test_the_list_is_ordered_bounded_and_in_range(cohort):
    pairs = cohort["result"].pairs()
    assert pairs, "the cohort shares code: some pairs must be listed"
    order = [(EXERCISE_TASKS.index(p.task), -p.similarity) for p in pairs]
    assert order == sorted(order)
    for pair in pairs:
        assert pair.task in EXERCISE_TASKS and pair.a < pair.b and 0.0 < pair.similarity <= 1.0
    top2 = similar_pairs(cohort["course"], ASSIGNMENT, top=2)
    by_task = _by_task(pairs)
    assert top2 == [p for task in EXERCISE_TASKS for p in by_task[task][:2]]


def _cli(*args: str) -> tuple[int, str, str]:
    from bertlab.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def test_cli_json_is_the_api_list(cohort, monkeypatch):
    # the command recomputes; reuse the fixture's comparison so the test stays fast
    monkeypatch.setattr(similarity, "compare_cohort", lambda course, assignment, top: cohort["result"])
    code, out, err = _cli("similar", str(cohort["course"]), "--json")
    assert code == 0, err
    document = json.loads(out)
    assert isinstance(document, list) and document
    for row in document:
        assert set(row) == {"task", "a", "b", "similarity"}
        assert isinstance(row["similarity"], float) and 0.0 <= row["similarity"] <= 1.0
    assert [SimilarPair(**row) for row in document] == cohort["result"].pairs()


def test_cli_report_for_people(cohort, monkeypatch):
    monkeypatch.setattr(similarity, "compare_cohort", lambda course, assignment, top: cohort["result"])
    code, out, _ = _cli("similar", str(cohort["course"]))
    assert code == 0
    assert "not proof" in out and "similarity = " in out and "uma: cka.py could not be read" in out
    positions = [out.index(f"\n{task}: ") for task in EXERCISE_TASKS]
    assert positions == sorted(positions)
    cka_section = out[positions[0]:positions[1]]
    first_row = next(line for line in cka_section.splitlines() if re.match(r"\s+1\s", line))
    assert first_row.split()[2:] == list(PLANTED)


def test_a_course_without_submissions_is_one_usage_line(tmp_path):
    (tmp_path / "empty" / "submitted").mkdir(parents=True)
    with pytest.raises(UsageError, match="no submissions of week7"):
        similar_pairs(tmp_path / "empty")
    for course in (tmp_path / "empty", tmp_path / "missing"):
        code, out, err = _cli("similar", str(course))
        assert code == 2 and out == ""
        assert len(err.strip().splitlines()) == 1 and err.startswith("bertlab similar: "), err
    with pytest.raises(UsageError, match="--top"):
        similar_pairs(tmp_path / "empty", top=0)
    (tmp_path / "empty" / "submitted" / "zoe").mkdir()
    (tmp_path / "empty" / "submitted" / "zoe" / "cka.py").write_text("x = 1\n")
    with pytest.raises(UsageError, match="submitted/zoe: found cka.py directly in submitted/zoe/"):
        similar_pairs(tmp_path / "empty")


def test_each_task_has_its_stub_as_boilerplate():
    """The boilerplate comes from the installed kit's stubs (what `bertlab release` ships): every
    task's released stub, untouched or not started, has no own code left."""
    stubs = expected_exercises()
    for exercise in EXERCISES:
        boilerplate = similarity.stub_boilerplate(exercise.filename)
        for text in similarity.stub_variants(stubs[exercise.filename]):
            assert similarity.Fingerprint(text, exercise.filename, boilerplate).own == 0
        reference = stripped_solutions()[exercise.filename]
        assert similarity.Fingerprint(reference, exercise.filename, boilerplate).own >= similarity.MIN_OWN_CHARS
