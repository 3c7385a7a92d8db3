"""Grades kept from an earlier version of the kit, and how today's grades may differ from them.

A snapshot (``tests/fixtures/grade_snapshots/<name>.json``) holds, per student, every hidden test's
outcome, points, message and hint as an earlier kit graded them: ``python tests/grade_snapshots.py
COURSE OUT.json KIT`` writes one from a course graded by kit KIT: `bertlab demo --keep`, and `python
tests/test_outside_bank.py COURSE`; a message the snapshot already holds, the same within round-off,
keeps its old digits. test_demo.py and test_outside_bank.py compare today's grading of the
same submissions with it, test by test, so a change that was meant to make grading faster cannot
quietly change what a grade means.

The two kept here are kit ef32b14's (issue 41), regenerated from kit 710aedd's (issue 30) with
`python tests/grade_snapshots.py`. Against 710aedd's, test by test, only this moved: every speed
test keeps only whether it earned points (its points, outcome and message follow the measured ratio);
the outside bank's correct_gram, and the 9 entries that take its retrieval.py, lose
test_search_memory_stays_bounded (2 points: its search holds a Python tuple a corpus row, more than
the forbidden [Q, N] matrix, and passes the 30 s limit of a call at a million rows; before, a search
that slow was judged on its answer only) and now earn some speed points for that search (47x to 95x:
nothing under the old bands, a little on the points curve); hostile_search_valueerror's memory
message names the first call of the test as it is now ([32, 52,400]: the untimed warm-up call is
gone). Messages the same within round-off keep their old digits. Regenerated again for issue 42
(messages that name a cause only where a check confirmed it): no outcome or point moved in either
snapshot; in the outside bank, hostile_cka_constant's nine CKA messages now give the symptom and the
first step to recheck instead of a cause (float64, the formula) that no check had confirmed, and
wrong_sbert_two_encoders's one-side-cut message says where to look instead of quoting the detach
mistake's hint. For issue 45 nine entries of the outside bank took correct_literal as their base in
place of correct_gram (tests/outside_bank/bank.toml says why): each keeps its own records for the task
of its own file (its one file, graded as before), and takes correct_literal's records, graded by the
same kit, for the others (the same files now). Only test_search_memory_stays_bounded moved: passed,
2 points, where correct_gram's search had run out its time.

What may differ, and only this:

- a test whose submission did not return in time: since a call that timed out is no longer made
  again with the same kind of inputs, its later tests fail at once with the first timeout's message
  (the points are 0 either way, so only the outcome and the message may change, never to a pass);
- the performance task's points, outcome and message: a snapshot keeps only whether each speed test
  earned points at all (``PERFORMANCE_KEPT``), since the points follow the measured ratio on a
  continuous curve and the message quotes milliseconds (issue 41: two gradings of the same files
  give speed points within 0.1, a property the slow test tests/test_grade_repeatability.py checks);
- the non-integer numbers a message quotes, within float round-off (a relative 1e-6, plus one unit
  of the last printed digit; integers such as shapes and counts exactly): a float32 result's last
  digits depend on the CPU's vector instructions (seen, for the same submission and test on two
  machines: ``0.942123537`` and ``0.9421235365``; ``0.834181`` and ``0.83418``);
- each snapshot names its kit version, and nothing else;
- a task the snapshot does not grade (added by `bertlab new-task` since) is left out of the comparison
  (``bertlab remove-task`` drops a removed task's tests from the snapshots itself).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

SNAPSHOTS = Path(__file__).resolve().parent / "fixtures" / "grade_snapshots"
KEPT = ("task", "outcome", "points", "max_points", "message", "hint")


#: What a snapshot keeps of a performance test: whether it earned speed points at all (a right answer,
#: and a ratio under the points curve's end), never the points, outcome or message: those follow the
#: measured time ratio (a continuous curve, so a few hundredths from run to run and machine to machine)
#: and the message quotes milliseconds. Regenerating a snapshot on another machine, quiet or busy,
#: therefore changes only what a change to the kit changed.
PERFORMANCE_KEPT = ("task", "max_points", "scored")


def kept(test: dict) -> dict:
    """What a snapshot keeps of one test of a results.json."""
    if test["task"] == "performance":
        return {"task": test["task"], "max_points": test.get("max_points"),
                "scored": bool((test.get("points") or 0) > 0)}
    return {k: test.get(k) for k in KEPT}


def snapshot(results: dict[str, dict]) -> dict[str, dict]:
    """{student: {test name: {task, outcome, points, max_points, message, hint}}} of {student: results.json};
    a performance test keeps PERFORMANCE_KEPT only."""
    return {student: {t["name"]: kept(t) for t in result["tests"]}
            for student, result in sorted(results.items())}


def load(name: str) -> dict:
    return json.loads((SNAPSHOTS / f"{name}.json").read_text(encoding="utf-8"))


_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def same_message(a: str | None, b: str | None) -> bool:
    """The same words, and the same numbers (integers exactly, others within round-off)."""
    if a == b:
        return True
    if a is None or b is None or _NUMBER.split(a) != _NUMBER.split(b):
        return False
    return all(_same_number(x, y) for x, y in zip(_NUMBER.findall(a), _NUMBER.findall(b)))


def _same_number(x: str, y: str) -> bool:
    """Integers (shapes, counts, indices) exactly; other numbers within round-off."""
    if x.lstrip("+-").isdigit() and y.lstrip("+-").isdigit():
        return int(x) == int(y)
    return abs(float(x) - float(y)) <= 1e-6 * max(abs(float(x)), abs(float(y))) + max(_last_place(x), _last_place(y))


def _last_place(number: str) -> float:
    """The value of a printed number's last digit (``0.83418`` -> 1e-05, ``1e-06`` -> 1e-06): two
    roundings of nearly the same value can differ by that much."""
    mantissa, _, exponent = number.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 10.0 ** (int(exponent or 0) - decimals)


def _same_test(a: dict, b: dict) -> bool:
    return all(same_message(a.get(k), b.get(k)) if k == "message" else a.get(k) == b.get(k) for k in KEPT)


def _is_timeout_change(before: dict, after: dict) -> bool:
    """A change item 3 of the timeouts allows: no points either way, and a timeout on one side."""
    return (before["points"] == after["points"] == 0 and "timeout" in (before["outcome"], after["outcome"])
            and "passed" not in (before["outcome"], after["outcome"]))


def differences(before: dict, results: dict[str, dict]) -> list[str]:
    """How today's ``results`` ({student: results.json}) differ from the snapshot ``before``; [] when
    they agree (see the module docstring for what may differ)."""
    from bertlab.tasks import GRADED_TASKS

    # A task added since the snapshot (bertlab new-task) has no grades in it, and one removed since
    # (bertlab remove-task, which also drops its tests from the snapshots) is not graded any more:
    # both sides are compared on the tasks they share.
    shared = {t["task"] for tests in before["grades"].values() for t in tests.values()} & set(GRADED_TASKS)
    before = dict(before, grades={s: {n: t for n, t in tests.items() if t["task"] in shared}
                                  for s, tests in before["grades"].items()})
    results = {s: dict(r, tests=[t for t in r["tests"] if t["task"] in shared]) for s, r in results.items()}
    now = snapshot(results)
    lines = []
    for student in sorted(set(before["grades"]) & set(now)):  # (grade_differences names the others)
        old, new = before["grades"][student], now[student]
        for name in sorted(set(old) | set(new)):
            a, b = old.get(name), new.get(name)
            if a is None or b is None:
                lines.append(f"{student}: {name} is in only one of the two")
                continue
            if a["task"] == "performance":
                # (an older snapshot's full entry compares by whether it earned points at all)
                if ("scored" in a and a["scored"] != b["scored"]) or ("scored" not in a and (a["points"] > 0) != b["scored"]):
                    lines.append(f"{student}: {name}: speed points {'earned' if b['scored'] else 'none'} now, "
                                 f"{'none' if b['scored'] else 'earned'} in the snapshot")
                continue
            if _same_test(a, b) or _is_timeout_change(a, b):
                continue
            changed = [k for k in KEPT if a.get(k) != b.get(k)]
            lines.append(f"{student}: {name}: {', '.join(f'{k} {a.get(k)!r} -> {b.get(k)!r}' for k in changed)}")
    lines += [f"{student}: graded in only one of the two" for student in sorted(set(before["grades"]) ^ set(now))]
    return lines


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4):
        print("usage: python tests/grade_snapshots.py COURSE OUT.json [KIT]   (COURSE graded by `bertlab grade` "
              "of kit KIT, a commit; default: this checkout's)")
        return 2
    import subprocess

    course, out = Path(argv[1]), Path(argv[2])
    results = {p.parent.parent.name: json.loads(p.read_text(encoding="utf-8"))
               for p in sorted(course.glob("autograded/*/week7/results.json"))}
    kit = argv[3] if len(argv) == 4 else subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                                        text=True, cwd=Path(__file__).resolve().parent).stdout.strip()
    grades = snapshot(results)
    if out.exists():  # a message the same within round-off keeps its old digits: the diff shows real changes only
        old = json.loads(out.read_text(encoding="utf-8"))["grades"]
        for student, tests in grades.items():
            for name, test in tests.items():
                before = old.get(student, {}).get(name, {})
                if "message" in test and before.get("message") != test["message"] \
                        and same_message(before.get("message"), test["message"]):
                    test["message"] = before["message"]
    out.write_text(json.dumps({"kit": kit, "grades": grades}, indent=1,
                              sort_keys=True) + "\n", encoding="utf-8")
    print(f"{out}: {len(results)} students, kit {kit}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
