#!/usr/bin/env bash
# Outside check of "grading that never lies", kept apart from the kit's tests: a fresh clone in a new
# folder under /tmp (with a space in its path), a fresh virtualenv beside it that is never activated,
# the README's set-up, then the situations an instructor meets. Prints PASS/FAIL per check and exits 1
# on any failure. Needs bubblewrap. Takes a few minutes (the virtualenv install dominates).
#
#   bash tools/acceptance/grading_trust.sh [REPO]      (REPO defaults to this checkout)
set -uo pipefail
REPO="$(cd "${1:-$(dirname "$0")/../..}" && pwd)"
ROOT="$(mktemp -d /tmp/bertlab-acceptance.XXXXXX)"
KIT="$ROOT/kit clone"
VENV="$ROOT/venv"
BL="$VENV/bin/bertlab"
failures=0
check() {  # check NAME COMMAND...: PASS when COMMAND exits 0
  local name="$1"; shift
  if "$@"; then echo "PASS  $name"; else echo "FAIL  $name"; failures=$((failures + 1)); fi
}
results() { find "$1/autograded" -name results.json 2>/dev/null | sed 's#.*/autograded/\([^/]*\)/.*#\1#' | sort | tr '\n' ' '; }
export -f results

git clone -q "$REPO" "$KIT"
python3 -m venv "$VENV"
export PATH="/usr/bin:/bin"   # never activated: the venv's bin is not on PATH
cd "$KIT"
# The README's first command, with the venv's pip (CI and new users run the same two commands).
"$VENV/bin/pip" install -q torch==2.13.0 && "$VENV/bin/pip" install -q -e ".[dev]" >"$ROOT/install.log" 2>&1
check "install" test -x "$BL"

cd "$ROOT"
"$BL" demo --keep "$ROOT/demo course" >"$ROOT/demo.out" 2>"$ROOT/demo.err"; rc=$?
check "demo exits 0" test "$rc" = 0
check "demo: alice at full marks outside performance" "$VENV/bin/python" - "$ROOT/demo course" <<'PY'
import json, sys
r = json.load(open(f"{sys.argv[1]}/autograded/alice/week7/results.json"))
bad = [t for t in r["tests"] if t["task"] != "performance" and t["points"] < t["max_points"]]
assert not bad and r["sandboxed"] is True, bad
PY
check "no kit path in any results.json or feedback" bash -c "! grep -rl -e '$KIT' -e '$VENV' -e 'bertlab_grader/sandbox' '$ROOT/demo course/autograded' '$ROOT/demo course/feedback'"

C="$ROOT/course"
mkdir -p "$C/submitted/s1/week7" "$C/submitted/s2/week7" "$C/submitted/loose" "$C/submitted/nb/week7"
cp "$KIT"/exercises/{cka,pooling,siamese,retrieval}.py "$C/submitted/s1/week7/"
cp "$KIT"/exercises/{cka,pooling,siamese,retrieval}.py "$C/submitted/s2/week7/"
cp "$KIT/exercises/cka.py" "$C/submitted/loose/"
echo '{}' > "$C/submitted/nb/week7/week7.ipynb"

"$BL" grade "$C" --assignment week8 >"$ROOT/typo.out" 2>&1; rc=$?
check "unknown assignment: exit 2, lists week7, course untouched" bash -c "[ $rc = 2 ] && grep -q week7 '$ROOT/typo.out' && [ ! -e '$C/gradebook.db' ] && [ ! -e '$C/source' ]"

mkdir -p "$ROOT/empty/submitted"
"$BL" grade "$ROOT/empty" >"$ROOT/empty.out" 2>&1; rc=$?
check "empty submitted/: exit 2, one line" bash -c "[ $rc = 2 ] && [ \$(wc -l < '$ROOT/empty.out') = 1 ] && ! grep -q Traceback '$ROOT/empty.out'"

mkdir -p "$ROOT/broken-bin"
printf '#!/bin/sh\ncase "$*" in *bertlab_sandbox.server*) echo "bwrap: no permission" >&2; exit 1;; esac\nexec /usr/bin/bwrap "$@"\n' > "$ROOT/broken-bin/bwrap"
chmod +x "$ROOT/broken-bin/bwrap"
PATH="$ROOT/broken-bin:$PATH" "$BL" grade "$C" --workers 1 >"$ROOT/broken.out" 2>&1; rc=$?
check "broken sandbox: exit 1, no results.json" bash -c "[ $rc = 1 ] && [ -z \"\$(results '$C')\" ] && grep -q 'not graded because of the grader: 2' '$ROOT/broken.out'"

"$BL" grade "$C" --workers 1 >"$ROOT/rerun.out" 2>&1; rc=$?
check "rerun with the real sandbox grades exactly s1 s2" bash -c "[ $rc = 0 ] && [ \"\$(results '$C')\" = 's1 s2 ' ]"
check "summary names the misplaced folders" bash -c "grep -q 'submitted/loose: found cka.py directly' '$ROOT/rerun.out' && grep -q 'submitted/nb/week7: found notebook' '$ROOT/rerun.out'"

echo "# fixed" >> "$C/submitted/s2/week7/pooling.py"
"$BL" grade "$C" --workers 1 >"$ROOT/resubmit.out" 2>&1; rc=$?
check "resubmission regraded, the other skipped" bash -c "[ $rc = 0 ] && grep -q 'graded: 1 (s2)' '$ROOT/resubmit.out' && grep -q 'unchanged since last grading (skipped): 1' '$ROOT/resubmit.out'"

mkdir -p "$ROOT/beside/zoe" && cp "$KIT"/exercises/*.py "$ROOT/beside/zoe/" && python3 -m venv "$ROOT/beside/venv"
"$BL" grade-one "$ROOT/beside/zoe" >"$ROOT/one.out" 2>&1; rc=$?
check "grade-one beside a venv: sandboxed" bash -c "[ $rc = 0 ] && ! grep -q 'NOT isolated' '$ROOT/one.out'"

"$BL" release "$ROOT/bundle" >/dev/null 2>&1
echo "# my work" >> "$ROOT/bundle/exercises/pooling.py"
"$BL" release "$ROOT/bundle" --force >"$ROOT/release.out" 2>&1; rc=$?
check "release --force keeps the student's pooling.py" bash -c "[ $rc = 2 ] && grep -q 'exercises/pooling.py' '$ROOT/release.out' && grep -q '# my work' '$ROOT/bundle/exercises/pooling.py'"

echo "outputs in $ROOT"
echo "$failures check(s) failed"
[ "$failures" = 0 ]
