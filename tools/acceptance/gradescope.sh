#!/usr/bin/env bash
# Outside check of `bertlab gradescope` (docs/gradescope.md), kept apart from the kit's tests: the zip is
# built, unpacked into a folder shaped like /autograder, set up by its own setup.sh (no apt-get; a
# virtualenv that sees this machine's packages, since the zip carries only the kit's wheel), and its
# run_autograder grades the reference solution and two mutants of the bank, then the reference once
# more with bubblewrap made unusable (the --unsafe-no-sandbox path). Each Gradescope results.json must
# match gradescope.schema.json and carry the points `bertlab grade-one --json` gives the same files.
# Prints PASS/FAIL per check, the times and the peak memory of each run; exits 1 on any failure.
# Needs bubblewrap and the kit installed (editable or not) in PYTHON. Takes several minutes.
#
#   bash tools/acceptance/gradescope.sh            (PYTHON defaults to python3)
set -uo pipefail
PYTHON="${PYTHON:-python3}"
PYTHON="$(command -v "$PYTHON")"
ORIGINAL_PATH="$PATH"
WORK="$(mktemp -d /tmp/bertlab-gradescope.XXXXXX)"
ROOT="$WORK/autograder"
MUTANTS=(pool_divide_by_length cka_no_centering)
failures=0
check() {  # check NAME COMMAND...: PASS when COMMAND exits 0
  local name="$1"; shift
  if "$@"; then echo "PASS  $name"; else echo "FAIL  $name"; failures=$((failures + 1)); fi
}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

start=$SECONDS
"$PYTHON" -m bertlab.cli gradescope "$WORK/autograder.zip" --kit-wheel-only >"$WORK/build.log" 2>&1
check "bertlab gradescope OUT.zip --kit-wheel-only ($((SECONDS - start)) s)" test -f "$WORK/autograder.zip"

# Gradescope's image build: the zip unpacked into source/, run_autograder copied beside it, setup.sh run.
mkdir -p "$ROOT/source" "$ROOT/submission"
"$PYTHON" - "$WORK/autograder.zip" "$ROOT/source" <<'PY'
import sys, zipfile
from pathlib import Path
with zipfile.ZipFile(sys.argv[1]) as z:
    for info in z.infolist():  # as unzip does: with the permissions the zip records
        path = Path(z.extract(info, sys.argv[2]))
        if (info.external_attr >> 16) & 0o777:
            path.chmod((info.external_attr >> 16) & 0o777)
PY
cp "$ROOT/source/run_autograder" "$ROOT/run_autograder"
# The wheelhouse's stand-in: PYTHON's own packages, lent to the autograder's venv by a .pth line
# (not --system-site-packages: PYTHON may itself be a virtualenv's, whose base lacks the kit's
# dependencies). setup.sh's `python -m venv` keeps an existing venv's site-packages.
"$PYTHON" -m venv --without-pip "$ROOT/bertlab-venv"
"$ROOT/bertlab-venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' >"$WORK/venv-purelib"
"$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' >"$(cat "$WORK/venv-purelib")/_machine_deps.pth"
start=$SECONDS
BERTLAB_AUTOGRADER_ROOT="$ROOT" BERTLAB_SETUP_APT=0 BERTLAB_SETUP_PYTHON="$PYTHON" \
  BERTLAB_SETUP_VENV_OPTIONS="--without-pip" \
  /usr/bin/time -f "%e s wall, %U s user + %S s sys" -o "$WORK/setup.time" \
  bash "$ROOT/source/setup.sh" >"$WORK/setup.log" 2>&1; rc=$?
check "setup.sh installs the kit from the zip's wheel ($(cat "$WORK/setup.time"))" test "$rc" = 0
grep '^Sandbox:' "$WORK/setup.log" | sed 's/^/      /'

# The submissions: the reference and the mutants, as four files each.
"$PYTHON" - "$WORK/files" "${MUTANTS[@]}" <<'PY'
import sys
from pathlib import Path
from bertlab_grader.core.locations import reference_sources
from bertlab_grader.mutants import load_bank
out = Path(sys.argv[1])
entries = {"reference": reference_sources()}
for name in sys.argv[2:]:
    entry, = load_bank(name, kinds=("mutant",))
    entries[name] = {f: (entry.path / f).read_text() for f in ("cka.py", "pooling.py", "siamese.py", "retrieval.py")}
for name, files in entries.items():
    (out / name).mkdir(parents=True)
    for f, text in files.items():
        (out / name / f).write_text(text)
PY

grade() {  # grade NAME LABEL [unsafe]: run_autograder on files/NAME, then grade-one (sandboxed) on the same files
  local name="$1" label="$2"
  rm -rf "$ROOT/submission" && mkdir -p "$ROOT/submission" && cp "$WORK/files/$name"/*.py "$ROOT/submission/"
  "$PYTHON" - "$ROOT" "$WORK/$label.gradescope.json" "$WORK/$label.run.log" "$WORK/$label.memory" <<'PY'
import os, shutil, subprocess, sys, time
from pathlib import Path
root, keep, log, memory = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]

def tree(pid):  # pid and its descendants (bwrap's namespaced children included)
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
    return out

def pss_mb(pids):
    total = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024

started, peak = time.monotonic(), 0.0
with open(log, "w") as out:
    proc = subprocess.Popen([root / "run_autograder"], cwd=root, stdout=out, stderr=subprocess.STDOUT,
                            env={**os.environ, "BERTLAB_AUTOGRADER_ROOT": str(root)})
    while proc.poll() is None:
        peak = max(peak, pss_mb(tree(proc.pid)))
        time.sleep(0.25)
Path(memory).write_text(f"{time.monotonic() - started:.0f} s wall, peak memory {peak:.0f} MB (PSS of the process tree)\n")
shutil.copy(root / "results" / "results.json", keep)
sys.exit(proc.returncode)
PY
  local rc=$?
  check "$label: run_autograder exits 0 ($(cat "$WORK/$label.memory"))" test "$rc" = 0
  PATH="$ORIGINAL_PATH" "$PYTHON" -m bertlab.cli grade-one "$WORK/files/$name" --json >"$WORK/$label.grade-one.json" 2>"$WORK/$label.grade-one.log"
  check "$label: bertlab grade-one --json exits 0" test $? = 0
  check "$label: results.json matches gradescope.schema.json; scores equal grade-one's" \
    "$PYTHON" - "$WORK/$label.gradescope.json" "$WORK/$label.grade-one.json" "$ROOT" "${3:-}" <<'PY'
import json, sys
from bertlab_grader.export.gradescope.autograder import check_gradescope_schema
from bertlab_grader.performance.timing import band_fraction
doc, kit, root, unsafe = (json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4] == "unsafe")
check_gradescope_schema(doc)
ok = [t["name"] for t in doc["tests"]] == [t["name"] for t in kit["tests"]]
print(f"      total: Gradescope {doc['score']:g}, grade-one {kit['score']:g} of {kit['max_score']:g}")
for ours, theirs in zip(doc["tests"], kit["tests"]):
    same = ours["score"] == theirs["points"] and ours["max_score"] == theirs["max_points"] and ours["tags"] == [theirs["task"]]
    if not same:
        r1, r2 = ours["extra_data"].get("ratio"), theirs.get("ratio")
        noise = theirs["task"] == "performance" and r1 and r2 and band_fraction(r1) != band_fraction(r2)
        print(f"      {'noise' if noise else 'DIFF '} {theirs['task']}/{theirs['name']}: Gradescope {ours['score']:g} "
              f"(ratio {r1}), grade-one {theirs['points']:g} (ratio {r2})")
        ok = ok and bool(noise)
ok = ok and doc["extra_data"]["bertlab"]["sandboxed"] is (not unsafe) and kit["sandboxed"] is True
ok = ok and doc["extra_data"]["bertlab"]["submission_digest"] == kit["submission_digest"]
if unsafe:
    ok = ok and "graded without the kit's bubblewrap sandbox" in doc["output"]
text = json.dumps(doc)
ok = ok and all(s not in text for s in (root, "site-packages", "def test_"))
exact = all(o["score"] == t["points"] for o, t in zip(doc["tests"], kit["tests"]))
print(f"      per test: {'all equal' if exact else 'equal except the lines above'}; "
      f"sandboxed: {doc['extra_data']['bertlab']['sandboxed']}")
sys.exit(0 if ok else 1)
PY
}

grade reference reference
for mutant in "${MUTANTS[@]}"; do grade "$mutant" "$mutant"; done

# bubblewrap that cannot create its namespaces, as in a container that forbids them: a bwrap first on
# PATH that fails the way bwrap does there.
mkdir -p "$WORK/nobwrap"
printf '#!/bin/sh\necho "bwrap: No permissions to create new namespace" >&2\nexit 1\n' >"$WORK/nobwrap/bwrap"
chmod +x "$WORK/nobwrap/bwrap"
PATH="$WORK/nobwrap:$PATH" grade reference reference-without-bubblewrap unsafe
grep -h 'WARNING\|locked away' "$WORK/reference-without-bubblewrap.run.log" | sed 's/^/      /'

echo "logs and files: $WORK"
[ "$failures" = 0 ] && echo "ALL PASS" || { echo "$failures FAILED"; exit 1; }
