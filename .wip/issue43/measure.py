"""Issue 43 item 5 figures: `bertlab grade --watch` arrival -> results.json for five hand-ins, and a
plain `bertlab grade` of a course in which one submission is new. Run from the kit's checkout."""
import json, os, shutil, signal, subprocess, sys, time
from pathlib import Path

KIT = Path.cwd()
sys.path.insert(0, str(KIT / "tests"))
from bertlab.tasks import EXERCISE_FILES
from bertlab_grader.core.locations import reference_sources

root = Path(sys.argv[1]); shutil.rmtree(root, ignore_errors=True)
course = root / "course"
(course / "source" / "week7").mkdir(parents=True)
folders = {"ref": None, "lit": KIT / "tests/outside_bank/correct_literal", "gram": KIT / "tests/outside_bank/correct_gram",
           "bat": KIT / "tests/outside_bank/correct_batched", "red": KIT / "tests/redteam_submissions/correct"}

def files_of(name):
    if folders[name] is None:
        return reference_sources()
    return {f: (folders[name] / f).read_text() for f in EXERCISE_FILES}

def hand_in(student, name):
    stage = root / "stage" / student / "week7"; stage.mkdir(parents=True)
    for f, text in files_of(name).items():
        (stage / f).write_text(text)
    target = course / "submitted" / student
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(stage.parent), str(target))  # arrives whole, at once (a rename)
    return time.monotonic()

def results(student):
    return course / "autograded" / student / "week7" / "results.json"

# 1. a course graded once: three students
for student, name in (("s1", "ref"), ("s2", "lit"), ("s3", "gram")):
    hand_in(student, name)
t = time.monotonic(); done = subprocess.run(["bertlab", "grade", str(course)], capture_output=True, text=True)
print(f"first grading of 3: {time.monotonic() - t:.1f} s, exit {done.returncode}", flush=True)
# 2. one new submission, plain grade
hand_in("s4", "bat")
t = time.monotonic(); done = subprocess.run(["bertlab", "grade", str(course)], capture_output=True, text=True)
plain = time.monotonic() - t
print(f"plain `bertlab grade` with one new submission (3 unchanged): {plain:.1f} s wall, exit {done.returncode}", flush=True)
print("\n".join(l for l in done.stderr.splitlines() + done.stdout.splitlines() if "Graded" in l or "s per submission" in l))
# 3. --watch: five hand-ins, one after another
log = open(root / "watch.log", "w")
proc = subprocess.Popen(["bertlab", "grade", str(course), "--watch"], stdout=log, stderr=subprocess.STDOUT, text=True)
while "watching" not in (root / "watch.log").read_text().lower() and proc.poll() is None:
    time.sleep(0.2)
print("watcher ready", flush=True)
for i, name in enumerate(["red", "ref", "lit", "gram", "bat"], start=5):
    student = f"s{i}"
    arrived = hand_in(student, name)
    while not results(student).is_file():
        time.sleep(0.05)
    took = time.monotonic() - arrived
    points = json.loads(results(student).read_text())
    print(f"hand-in {student} ({name}): results.json {took:.1f} s after arrival", flush=True)
    time.sleep(2)
proc.send_signal(signal.SIGINT); proc.wait(timeout=120)
print(f"watcher exit {proc.returncode}")
print((root / "watch.log").read_text()[-2500:])
