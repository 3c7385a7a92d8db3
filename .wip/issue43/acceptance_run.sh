# Issue 43's acceptance run: a fresh clone and venv, the README's set-up, a task of our own added with
# `bertlab new-task` and filled in, then the whole suite. Run from a fresh clone of the kit:
#     bash .wip/issue43/acceptance_run.sh
set -e
cd "$(dirname "$0")/../.."
python3 -m venv --clear "${TMPDIR:-/tmp}/bertlab-acceptance-venv"
. "${TMPDIR:-/tmp}/bertlab-acceptance-venv/bin/activate"
date
pip install -q torch==2.13.0 && pip install -q -e ".[dev]" && bertlab demo | tail -12
date
time bertlab new-task mean_reciprocal_rank
python .wip/issue43/fill_mrr.py
bertlab audit --only mrr | tail -3
git status --short
date
set +e
time python -m pytest -q -rfE
echo "PYTEST EXIT $?"
date
