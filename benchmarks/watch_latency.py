"""How soon a hand-in is graded: `bertlab grade --watch` from a hand-in's arrival to its results.json,
and a plain `bertlab grade` of a course in which one submission is new.

    python benchmarks/watch_latency.py [--workdir DIR]

A throwaway course (under DIR, else a temporary folder) is graded once with three students (the
reference and two correct submissions of the outside bank). Then:

1. twice, one more student's folder arrives and a plain `bertlab grade` runs: its wall time, end to
   end (start-up, the preflight, the grading, the gradebook, the export and the feedback), for the
   reference's files and for an outside-bank submission;
2. `bertlab grade --watch` starts, and five more students hand in, one after another, each folder
   arriving whole (a rename, as a finished copy lands): the seconds from each arrival to that
   student's results.json. Then Ctrl-C, and the watcher's exit code.

Every submission is correct (the reference with a comment of its own, or a correct one written apart
from the kit), so the figures are those of a correct submission; a slower correct submission adds its
own code's time (the outside bank's take 5 to 40 s more than the reference, in their own searches); the targets (docs/instructor-guide.md, "Grade hand-ins as
they arrive"): each hand-in within 10 s of its arrival, the plain run within 20 s, on 2 quiet cores.
Prints the figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENT = "week7"
OUTSIDE_BANK = KIT_ROOT / "tests" / "outside_bank"
#: Correct submissions: the outside bank's (written apart from the kit; each is graded at the speed of
#: its own code, e.g. correct_literal sorts every block of the memory test in full), and the reference.
CORRECT = {"literal": OUTSIDE_BANK / "correct_literal", "gram": OUTSIDE_BANK / "correct_gram",
           "batched": OUTSIDE_BANK / "correct_batched"}


def files_of(name: str) -> dict[str, str]:
    """``reference-N``: the reference with a comment of its own (files no earlier hand-in had, so it is
    graded and timed afresh, not taken as a copy); else the outside bank's submission ``name``."""
    from bertlab.tasks import EXERCISE_FILES
    from bertlab_grader.core.locations import reference_sources

    if name.startswith("reference"):
        return {f: text + f"\n# {name}\n" for f, text in reference_sources().items()}
    return {f: (CORRECT[name] / f).read_text() for f in EXERCISE_FILES}


def hand_in(root: Path, course: Path, student: str, name: str) -> float:
    """Write ``student``'s files beside the course, then move the folder in whole; the arrival time."""
    stage = root / "stage" / student / ASSIGNMENT
    stage.mkdir(parents=True)
    for filename, text in files_of(name).items():
        (stage / filename).write_text(text)
    target = course / "submitted" / student
    target.parent.mkdir(parents=True, exist_ok=True)
    stage.parent.rename(target)
    return time.monotonic()


def results_json(course: Path, student: str) -> Path:
    return course / "autograded" / student / ASSIGNMENT / "results.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="where the throwaway course goes (default: a temporary folder)")
    args = parser.parse_args()
    root = args.workdir or Path(tempfile.mkdtemp(prefix="bertlab-watch-"))
    shutil.rmtree(root, ignore_errors=True)
    course = root / "course"
    (course / "source" / ASSIGNMENT).mkdir(parents=True)

    for student, name in (("s1", "reference-1"), ("s2", "literal"), ("s3", "gram")):
        hand_in(root, course, student, name)
    started = time.monotonic()
    first = subprocess.run(["bertlab", "grade", str(course)], capture_output=True, text=True)
    print(f"first grading of 3 submissions: {time.monotonic() - started:.1f} s, exit {first.returncode}", flush=True)
    if first.returncode != 0:
        print(first.stdout[-2000:], first.stderr[-2000:])
        return 1

    for student, name in (("s4", "reference-2"), ("s4b", "batched")):
        hand_in(root, course, student, name)
        started = time.monotonic()
        plain = subprocess.run(["bertlab", "grade", str(course)], capture_output=True, text=True)
        print(f"plain `bertlab grade`, one new submission ({name}; the others unchanged): "
              f"{time.monotonic() - started:.1f} s wall, exit {plain.returncode}", flush=True)

    log_path = root / "watch.log"
    with open(log_path, "w") as log:
        # Ctrl-C's signal, as a terminal sends it: a benchmark started in the background (`cmd &`)
        # ignores SIGINT, and a child would inherit that and never stop.
        watcher = subprocess.Popen(["bertlab", "grade", str(course), "--watch"], stdout=log,
                                   stderr=subprocess.STDOUT, text=True,
                                   preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            while "watching" not in log_path.read_text().lower():
                if watcher.poll() is not None:
                    print(log_path.read_text()[-3000:])
                    return 1
                time.sleep(0.2)
            print("watcher ready", flush=True)
            waits = []
            for number, name in enumerate(("reference-3", "literal", "reference-4", "gram", "batched"), start=5):
                student = f"s{number}"
                arrived = hand_in(root, course, student, name)
                while not results_json(course, student).is_file():
                    if watcher.poll() is not None:
                        print(log_path.read_text()[-3000:])
                        return 1
                    time.sleep(0.05)
                waits.append(time.monotonic() - arrived)
                score = json.loads(results_json(course, student).read_text())["score"]
                print(f"hand-in {student} ({name}): results.json {waits[-1]:.1f} s after its arrival "
                      f"(score {score:g})", flush=True)
                time.sleep(2)
        finally:
            watcher.send_signal(signal.SIGINT)
            watcher.wait(timeout=120)
    print(f"--watch: {min(waits):.1f}-{max(waits):.1f} s from arrival to results.json over {len(waits)} "
          f"hand-ins; exit {watcher.returncode} after Ctrl-C")
    print(f"(the course: {course}; the watcher's log: {log_path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
