#!/usr/bin/env bash
# Outside check of issue 11's last acceptance bullet: the outside bank (tests/outside_bank/, written from
# the stub docstrings, never from the reference) graded as one cohort by `bertlab grade` in the sandbox.
# Prints one row per entry (points per task, performance for the record) and a verdict, then every
# entry that is not graded as its kind says, with the grader's own messages. Exits 1 on any failure.
# Needs bubblewrap and the kit installed in the running Python. Takes a few minutes.
#
#   bash tools/acceptance/outside_bank.sh [COURSE]     (COURSE: a new folder to keep; default: a temp one)
set -uo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$REPO" && exec "${PYTHON:-python3}" tests/test_outside_bank.py "$@"
