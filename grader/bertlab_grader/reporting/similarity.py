"""`bertlab similar COURSE`: the most similar pairs of submissions, per task (docs/similarity.md).

Every student's file of a task (``cka.py``, ...) is compared with every other student's file of that
task by copydetect (winnowing fingerprints, MOSS's method). The code every student got is ignored: the
k-grams of the task's stub, as ``bertlab release`` writes it (``bertlab_grader.authoring.stubs.expected_exercises``,
generated from the installed kit's reference), and of the stub's "not started" forms (its
``raise NotImplementedYet(...)`` lines deleted or replaced by ``pass``, ``...``, ``return None`` or
``raise NotImplementedError``) are copydetect's boilerplate, removed from every file before comparing.

Definitions (a file's characters are those of copydetect's filtered text: names become ``V``/``F``/``O``,
strings ``S``, comments and whitespace dropped):

    own(x)          characters of x covered by a k-gram that is not boilerplate (x's own code)
    shared(x, y)    characters of own(x) covered by a k-gram that also occurs in y
    similarity      (shared(a, b) + shared(b, a)) / (own(a) + own(b)), in [0, 1], symmetric

A file with less than ``MIN_OWN_CHARS`` of own code (an untouched stub has none) is not compared.

Only the ``top`` most similar pairs of a task are wanted, so not every pair is compared in full: a
pre-screen gives every pair an upper bound of its similarity at once (sparse matrix products of the
files' k-gram counts, :func:`pair_bounds`), and the pairs are compared in full in the order of their
bounds until no bound left can reach the ``top``-th similarity found (:func:`rank_task`). The pairs,
their order and their values are those of comparing every pair (``rank_task(..., exhaustive=True)``).

Submissions are found as grading finds them (``course.scan_submitted``: folders or checked zips, the
zips extracted into a private temporary folder, never into the course) and read as text only
(``read_submission_sources``); student code is never imported or run. A refused submission or an
unreadable file is left out, and named in the report.

Public API: :class:`SimilarPair`, :func:`similar_pairs`; the command is :func:`similar_command`.
"""

from __future__ import annotations

import bisect
import io
import itertools
import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
import tempfile

from bertlab.errors import UsageError
from bertlab.tasks import EXERCISES
from bertlab_grader.authoring.stubs import expected_exercises
from bertlab_grader.course.preconditions import require_assignment_name, require_course_folder, require_submissions
from bertlab_grader.course.settings import CourseSettings
from bertlab_grader.course.submissions import read_submission_sources, scan_submitted, submitted_assignments

#: copydetect's noise threshold: the length, in filtered characters, of a fingerprinted k-gram. Below
#: copydetect's default of 25 because these files are short: half the filtered statements of the
#: reference and of the outside bank are 10-22 characters (median 16), so k = 20 is about one
#: statement and a copy with reordered statements is still found; a smaller k makes unrelated
#: solutions share the lesson's idioms. Figures: docs/similarity.md
#: (`python benchmarks/similarity_timing.py --sweep-k 15 20 25`).
K = 20
#: copydetect's winnowing window. 1 keeps every k-gram (copydetect's own default, noise = guarantee
#: threshold): the files are small enough, every match of K characters or more is found, and the
#: figures do not depend on Python's per-process string-hash seed (with a wider window, which k-gram
#: wins each window depends on the hash values, so two runs could print slightly different numbers).
WINDOW = 1
#: A file with less own code than this (filtered characters, about two statements) is not compared:
#: a pair sharing one statement is not evidence of anything.
MIN_OWN_CHARS = 2 * K

#: The lines of a stub that a student replaces: ``raise NotImplementedYet("task", "function")``.
_RAISE_STUB = re.compile(r"^([ \t]*)raise NotImplementedYet\(.*\)[ \t]*$", re.MULTILINE)
#: What a student who did not start a function may leave in the place of that line ("" deletes it).
_NOT_STARTED = ("", "pass", "...", "return None", "raise NotImplementedError")


@dataclass(frozen=True)
class SimilarPair:
    """Two students' files of one task, ``a`` < ``b`` (student ids), and their similarity in [0, 1]."""

    task: str
    a: str
    b: str
    similarity: float


@dataclass
class TaskComparison:
    """One task's comparison: its pairs (most similar first, at most ``top``), how many files were
    compared, how many pairs share code, the students whose file was left out (too little own code:
    an untouched stub), and how many pairs were compared in full (the rest were ruled out by the
    pre-screen)."""

    task: str
    pairs: list[SimilarPair]
    compared: int
    pairs_with_shared_code: int
    left_out: list[str] = field(default_factory=list)
    compared_in_full: int = 0


@dataclass
class CohortComparison:
    """Every task's comparison, and the submissions that could not be read (student -> why)."""

    course: Path
    assignment: str
    submissions: int
    tasks: list[TaskComparison]
    unreadable: dict[str, str] = field(default_factory=dict)

    def pairs(self) -> list[SimilarPair]:
        return [pair for task in self.tasks for pair in task.pairs]


# ---------------------------------------------------------------------------------------------------
# fingerprints


def code_fingerprint(text: str, filename: str, boilerplate=None):
    """copydetect's fingerprint of one file's text (a ``copydetect.CodeFingerprint``; tokenised as
    Python, never executed)."""
    import copydetect

    return copydetect.CodeFingerprint(filename, K, WINDOW, boilerplate=boilerplate, fp=io.StringIO(text),
                                      language="python")


def stub_variants(stub: str) -> list[str]:
    """The stub's text and its "not started" forms: each ``raise NotImplementedYet(...)`` line deleted
    or replaced by one of ``pass``, ``...``, ``return None``, ``raise NotImplementedError``."""
    out = [stub]
    for filler in _NOT_STARTED:
        out.append(_RAISE_STUB.sub(lambda m: m.group(1) + filler if filler else "", stub))
    return out


@lru_cache(maxsize=None)
def stub_boilerplate(filename: str):
    """The sorted, unique k-gram hashes (a numpy array) of the released stub ``filename`` and its
    "not started" forms: copydetect's boilerplate for that task's files."""
    import numpy as np

    stub = expected_exercises()[filename]
    hashes = set()
    for text in stub_variants(stub):
        hashes |= code_fingerprint(text, filename).hashes
    return np.array(sorted(hashes))


class Fingerprint:
    """One file's copydetect fingerprint, boilerplate removed, as arrays: ``own`` (own(x), characters),
    ``positions`` (where each own k-gram starts in the filtered text, ascending), ``position_hashes``
    (its hash) and ``unique_hashes`` (sorted). copydetect's object itself (:func:`code_fingerprint`,
    which :meth:`from_code` reads) is not kept: with its per-hash lists it takes about ten times the
    memory, and a cohort of 2,000 holds 2,000 fingerprints per task."""

    def __init__(self, text: str, filename: str, boilerplate=None):
        self._read(code_fingerprint(text, filename, boilerplate))

    @classmethod
    def from_code(cls, code) -> Fingerprint:
        """The fingerprint of a ``copydetect.CodeFingerprint``."""
        fingerprint = cls.__new__(cls)
        fingerprint._read(code)
        return fingerprint

    def _read(self, code) -> None:
        import numpy as np

        self.own = int(code.token_coverage)  # own(x): characters covered by non-boilerplate k-grams
        hashes = list(code.hash_idx)
        positions = [code.hash_idx[h] for h in hashes]
        self.unique_hashes = np.array(sorted(hashes), dtype=np.int64)
        position_hashes = np.repeat(np.array(hashes, dtype=np.int64), [len(p) for p in positions])
        flat = np.array([i for p in positions for i in p], dtype=np.int64)
        order = np.argsort(flat, kind="stable")
        self.positions, self.position_hashes = flat[order], position_hashes[order]


def shared_chars(x: Fingerprint, y: Fingerprint) -> int:
    """shared(x, y): the characters of x covered by a k-gram that also occurs in y.

    The same count as copydetect's ``compare_files`` (its ``token_overlap`` for x: the positions of
    the common hashes merged into slices by ``copydetect.utils.get_copied_slices``), with the
    positions gathered by one binary search in numpy rather than one small array per common hash, which made
    ``compare_files`` spend most of its time there (tests/test_similarity.py checks both agree)."""
    import numpy as np
    from copydetect.utils import get_copied_slices

    if y.unique_hashes.size == 0:
        return 0
    # membership in y's sorted hashes by binary search (numpy.isin sorts both arrays on every call)
    where = np.minimum(np.searchsorted(y.unique_hashes, x.position_hashes), y.unique_hashes.size - 1)
    idx = x.positions[y.unique_hashes[where] == x.position_hashes]
    if idx.size == 0:
        return 0
    slices = get_copied_slices(idx, K)
    return int(np.sum(slices[1] - slices[0]))


def pair_similarity(first: Fingerprint, second: Fingerprint) -> float:
    """The similarity of two files (see the module docstring): 0.0 when they share nothing."""
    own = first.own + second.own
    if own <= 0:
        return 0.0
    shared = shared_chars(first, second) + shared_chars(second, first)
    return min(1.0, max(0.0, shared / own))


# ---------------------------------------------------------------------------------------------------
# the pre-screen: an upper bound of every pair's similarity at once
#
# Why the bound holds. Let S be the positions of x's own k-grams (boilerplate removed) whose hash is
# also one of y's own k-grams. shared(x, y) is the number of characters covered by the k-grams
# starting in S (copydetect's slices: positions less than k apart merged into one run), that is the sum
# over p in S of min(k, the next position in S - p), k for the last. Let q be the next position of an
# own k-gram of x after p. If q is in S too, p adds exactly min(k, q - p) characters; otherwise it adds
# at most k. So, with
#
#     C(x, y) = |S|: the own k-grams of x (counted by position) whose hash occurs among y's, and
#     D(x, y) = the sum of k - (q - p) over the own k-grams p of x whose next own k-gram q is less
#               than k characters further and for which the pair of hashes (at p, at q) also occurs
#               as two successive own k-grams of y (then both hashes are y's: p and q are in S),
#
#     shared(x, y) <= k C(x, y) - D(x, y),   and shared(x, y) <= own(x) (S is part of x's own k-grams),
#
#     similarity(x, y) <= bound(x, y) = (min(own(x), k C(x, y) - D(x, y)) + min(own(y), k C(y, x) - D(y, x)))
#                                       / (own(x) + own(y)).
#
# The bound is exact where the two files share code verbatim (in the filtered text), across the gaps
# that the stub's k-grams leave: a shared run of L characters is L - k + 1 k-grams one character apart,
# k (L - k + 1) - (k - 1) (L - k) = L. It is above the similarity only where two successive k-grams
# of x both occur in y but not as successive k-grams there, or where a run of x's shared k-grams ends
# less than k characters before the next one.
#
# C and D for all pairs at once are products of sparse (file x hash) matrices: C = counts . presence^T,
# where counts holds how many times each hash occurs among a file's own k-grams and presence whether
# it occurs; D the same with the pairs of successive hashes, each weighted k - (q - p). Hashes held by
# exactly the same files are added up into one column first (the same products, much less work when
# students share code). The hashes are copydetect's own, so a hash collision counts in the bound as it
# counts in the comparison.
#
# Floating point: the bound and the similarity of a pair are each one correctly rounded division of
# integers by the same own(x) + own(y), the bound's numerator the larger, so the computed bound is
# never below the computed similarity.


def _weights_and_presence(items: list, weights: list, files: int):
    """From each file's item ids and their weights: a sparse (file x group) matrix of the summed weights,
    and a sparse (group x file) matrix with 1 where the file has the group's items (whatever their
    weight), for a product (file x file) = sum over items of weight(file, item) * has(other file, item).

    Items of a single file are dropped: they pair nobody. Items held by exactly the same files are one
    group (their weights add up): a piece of code several students share is many k-grams in the same
    files, and the product then does its work once per group instead of once per k-gram."""
    import numpy as np
    from scipy import sparse

    file_of = np.repeat(np.arange(files), [len(r) for r in items])
    columns, column_of = np.unique(np.concatenate(items), return_inverse=True)
    held = np.sort(column_of * files + file_of)  # (item, file), then once per file holding the item
    held = held[np.concatenate(([True], held[1:] != held[:-1]))]
    item_of, file_in = held // files, (held % files).astype(np.int32)  # by item, then file
    starts = np.searchsorted(item_of, np.arange(columns.size + 1))
    groups: dict[bytes, int] = {}
    group_of = np.fromiter((groups.setdefault(file_in[a:b].tobytes(), len(groups)) if b - a >= 2 else -1
                            for a, b in zip(starts[:-1], starts[1:])), dtype=np.int64, count=columns.size)
    by_item = sparse.csr_matrix((np.ones(held.size, dtype=np.int32), file_in, starts), shape=(columns.size, files))
    group_ids, first_items = np.unique(group_of, return_index=True)
    presence = by_item[first_items[group_ids >= 0]]  # one item per group, in the order of the group ids
    kept = group_of[column_of] >= 0
    weighted = sparse.csr_matrix((np.concatenate(weights)[kept].astype(np.int32),
                                  (file_of[kept], group_of[column_of[kept]])), shape=(files, len(groups)))
    weighted.eliminate_zeros()
    return weighted, presence


def pair_bounds(prints: list[Fingerprint]):
    """For the files ``prints`` (indexed 0..n-1): arrays ``(i, j, bound)`` over every pair i < j that
    shares at least one own k-gram (exactly the pairs whose similarity is above 0), with ``bound`` >=
    their :func:`pair_similarity` (the argument above this function)."""
    import numpy as np

    n = len(prints)
    if n < 2:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0)
    # one id per hash across the files; one id per pair of successive hashes (positions are ascending)
    hash_values, hash_ids = np.unique(np.concatenate([fp.position_hashes for fp in prints]), return_inverse=True)
    ids = np.split(hash_ids.astype(np.int64), np.cumsum([fp.positions.size for fp in prints])[:-1])
    pairs = [kgram[:-1] * hash_values.size + kgram[1:] for kgram in ids]
    pair_weights = [np.maximum(0, K - np.diff(fp.positions)) for fp in prints]
    kgram_counts, kgram_presence = _weights_and_presence(ids, [np.ones(kgram.size) for kgram in ids], n)
    pair_counts, pair_presence = _weights_and_presence(pairs, pair_weights, n)
    # C[x, y] and D[x, y] as defined above, dense n x n int32 (16 MB each for 2,000 files): a source
    # file is at most 1 MiB (submissions.MAX_SOURCE_BYTES), so k C and D stay below k * 2**20 << 2**31
    C = (kgram_counts @ kgram_presence).toarray()
    D = (pair_counts @ pair_presence).toarray()
    own = np.array([fp.own for fp in prints], dtype=np.int64)
    side = np.minimum(own[:, None], K * C - D)  # side[x, y] >= shared(x, y)
    del D
    i, j = np.nonzero(np.triu(C > 0, k=1))
    numerator = side[i, j] + side[j, i]
    bound = np.minimum(1.0, numerator.astype(np.float64) / (own[i] + own[j]).astype(np.float64))
    return i, j, bound


@dataclass
class Ranking:
    """A task's ranked pairs (at most ``top``, most similar first), how many pairs share code (have
    a similarity above 0), and how many were compared in full."""

    pairs: list[SimilarPair]
    with_shared_code: int
    compared_in_full: int


def _all_pairs(task: str, prints: dict[str, Fingerprint], top: int) -> Ranking:
    """Every pair compared in full: the definition the pre-screened ranking must match."""
    scored = []
    for a, b in itertools.combinations(sorted(prints), 2):
        similarity = pair_similarity(prints[a], prints[b])
        if similarity > 0.0:
            scored.append(SimilarPair(task, a, b, similarity))
    scored.sort(key=lambda p: (-p.similarity, p.a, p.b))
    total = len(prints) * (len(prints) - 1) // 2
    return Ranking(scored[:top], len(scored), total)


def rank_task(task: str, prints: dict[str, Fingerprint], top: int, exhaustive: bool = False) -> Ranking:
    """The ``top`` most similar pairs of one task's files ``prints`` ({student: fingerprint}), ordered
    by similarity (highest first), then by student ids; only pairs with a similarity above 0.

    The candidates (pairs sharing a k-gram) are compared in full in the order of their best possible
    rank, key (-bound, a, b), and the search stops at the first candidate whose best possible key
    comes after the ``top``-th key found, (-similarity, a, b): every later candidate's key is at least
    its best possible one (similarity <= bound), which is at least this candidate's, so no pair left
    can enter the ``top`` (ties in similarity are ranked by student ids, in both orders alike).
    ``exhaustive`` compares every pair in full instead: the same result, slower."""
    import numpy as np

    if exhaustive:
        return _all_pairs(task, prints, top)
    names = sorted(prints)
    fingerprints = [prints[name] for name in names]
    i, j, bound = pair_bounds(fingerprints)
    order = np.lexsort((j, i, -bound))  # ascending (-bound, i, j): names are sorted, so (i, j) ~ (a, b)
    best: list[tuple[float, str, str]] = []  # the top keys so far, (-similarity, a, b), ascending
    compared = 0
    for index in order:
        a, b = names[i[index]], names[j[index]]
        if len(best) == top and (-bound[index], a, b) > best[-1]:
            break
        similarity = pair_similarity(fingerprints[i[index]], fingerprints[j[index]])
        compared += 1
        key = (-similarity, a, b)
        if len(best) < top or key < best[-1]:
            bisect.insort(best, key)
            del best[top:]
    pairs = [SimilarPair(task, a, b, -negative) for negative, a, b in best]
    return Ranking(pairs, int(i.size), compared)


# ---------------------------------------------------------------------------------------------------
# the cohort


def _check_course(course: Path, assignment: str, top: int) -> None:
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise UsageError(f"--top must be a whole number of pairs, 1 or more (got {top!r}).")
    require_assignment_name(assignment)
    settings = CourseSettings(course, assignment)
    require_course_folder(settings)
    require_submissions(settings, purpose="to compare", empty_ok=True)  # (it names "no submissions")


def _read_cohort(course: Path, assignment: str) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """({student: {filename: text}}, {student: why a file or the submission was left out}) for every
    submission of ``assignment``; raises UsageError when there is none.

    The scan extracts zips; it runs on a private shadow of the course (its ``submitted/`` linked in),
    so the course is only read and a ``bertlab grade`` running at the same time never sees its
    staging folder replaced."""
    with tempfile.TemporaryDirectory(prefix="bertlab-similar-") as tmp:
        shadow = Path(tmp)
        (shadow / "submitted").symlink_to((course / "submitted").resolve(), target_is_directory=True)
        submissions, layout = scan_submitted(CourseSettings(shadow, assignment))
        if not submissions:
            others = sorted(submitted_assignments(course) - {assignment})
            hint = (f"; the course has submissions of {', '.join(others)} (pass --assignment)" if others else
                    f"; {len(layout)} folder(s) there hold none in the expected layout, e.g. {layout[0]}"
                    if layout else "")
            raise UsageError(f"no submissions of {assignment} in {course / 'submitted'}: each student's files "
                             f"go in submitted/<student>/{assignment}/ (or a zip of them){hint}.")
        cohort, unreadable = {}, {}
        for submission in submissions:
            if submission.error:
                unreadable[submission.student] = submission.error
                continue
            sources = read_submission_sources(submission.path)
            for name, problem in sources.problems.items():
                unreadable[submission.student] = "; ".join(filter(None, (unreadable.get(submission.student),
                                                                         problem)))
                del sources[name]
            cohort[submission.student] = dict(sources)
    return cohort, unreadable


def compare_cohort(course: str | Path, assignment: str = "week7", top: int = 10,
                   exhaustive: bool = False) -> CohortComparison:
    """Compare every pair of students' files, task by task (see the module docstring; ``exhaustive``:
    without the pre-screen, every pair in full, the same result).

    Raises UsageError (one line) for a missing course, a course without submissions of ``assignment``,
    or ``top`` < 1.
    """
    course = Path(course)
    _check_course(course, assignment, top)
    cohort, unreadable = _read_cohort(course, assignment)
    tasks = []
    for exercise in EXERCISES:
        boilerplate = stub_boilerplate(exercise.filename)
        prints, left_out, by_text = {}, [], {}
        for student in sorted(cohort):
            text = cohort[student].get(exercise.filename)
            if text is None:
                continue
            # identical files (a shared copy, an untouched stub) are tokenised once: tokenising is
            # most of the cost of a large cohort once the pre-screen spares most pairs
            fingerprint = by_text.get(text)
            if fingerprint is None:
                fingerprint = by_text[text] = Fingerprint(text, exercise.filename, boilerplate)
            if fingerprint.own < MIN_OWN_CHARS:
                left_out.append(student)
            else:
                prints[student] = fingerprint
        ranking = rank_task(exercise.name, prints, top, exhaustive)
        tasks.append(TaskComparison(exercise.name, ranking.pairs, len(prints), ranking.with_shared_code, left_out,
                                    ranking.compared_in_full))
    return CohortComparison(course, assignment, len(cohort.keys() | unreadable.keys()), tasks, unreadable)


def similar_pairs(course: Path, assignment: str = "week7", top: int = 10) -> list[SimilarPair]:
    """Per task (cka, pooling, siamese, retrieval), at most ``top`` pairs of students whose files of
    that task share code beyond the stub, most similar first; the whole list in task order, then by
    similarity (highest first), then by student ids. Raises UsageError as :func:`compare_cohort`."""
    return compare_cohort(course, assignment, top).pairs()


# ---------------------------------------------------------------------------------------------------
# the command

MEANING = ("similarity = the share of the two files' own code (the stub's code removed) that is also in the "
           "other file: 1.00 = all of it, 0.00 = none.")
CAVEAT = ("A high value is evidence to look at, not proof: short tasks and the lesson's idioms make honest "
          "solutions alike. Read the two files side by side before concluding anything.")


def _shown(similarity: float) -> str:
    """Two decimals, rounded down: 1.00 only for files that share all their own code."""
    return f"{math.floor(similarity * 100) / 100:.2f}"


def format_comparison(result: CohortComparison) -> str:
    """The human report: a header with what the number means, then one section per task with a
    ranked table (rank, similarity, the two students)."""
    lines = [f"Most similar pairs of submissions of {result.assignment} in {result.course} "
             f"({result.submissions} submission(s), compared task by task)",
             MEANING, CAVEAT]
    if result.unreadable:
        lines.append("Not compared (could not be read): " + "; ".join(
            f"{student}: {why}" for student, why in sorted(result.unreadable.items())))
    for task in result.tasks:
        total = task.compared * (task.compared - 1) // 2
        lines += ["", f"{task.task}: {task.compared} file(s) compared, {task.pairs_with_shared_code} of "
                      f"{total} pair(s) share code beyond the stub"]
        if task.left_out:
            lines.append(f"  left out (untouched stub, or under {MIN_OWN_CHARS} characters of own code): "
                         + ", ".join(task.left_out))
        if not task.pairs:
            lines.append("  no pair to show")
            continue
        width = max(len(p.a) for p in task.pairs)
        lines.append(f"  {'rank':>4}  {'similarity':>10}  students")
        for rank, pair in enumerate(task.pairs, 1):
            lines.append(f"  {rank:>4}  {_shown(pair.similarity):>10}  {pair.a:<{width}}  {pair.b}")
    return "\n".join(lines)


def pairs_json(pairs: list[SimilarPair]) -> str:
    """``--json``: a list of ``{"task", "a", "b", "similarity"}`` objects, in :func:`similar_pairs`' order."""
    return json.dumps([{"task": p.task, "a": p.a, "b": p.b, "similarity": p.similarity} for p in pairs], indent=1)


def similar_command(settings: CourseSettings, top: int = 10, as_json: bool = False) -> int:
    """`bertlab similar`: print the report (or ``--json``); returns the exit code, 0."""
    result = compare_cohort(settings.root, settings.assignment, top)
    print(pairs_json(result.pairs()) if as_json else format_comparison(result))
    return 0
