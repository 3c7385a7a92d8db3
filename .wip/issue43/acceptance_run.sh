set -e
cd /tmp/nt3
python3 -m venv --clear /tmp/nt3venv
. /tmp/nt3venv/bin/activate
date
apt-get update -qq && apt-get install -y -qq bubblewrap postgresql chromium >/dev/null && pip install -q torch==2.13.0 && pip install -q -e ".[dev]" && bertlab demo | tail -12
date
time bertlab new-task mean_reciprocal_rank
python /work/main/.wip/issue43/fill_mrr.py  # (after unpacking .wip/issue43/mrr-task-files.tgz into /tmp/nt2)
bertlab audit --only mrr | tail -3
git status --short
date
set +e
time python -m pytest -q -rfE --durations=30
echo "PYTEST EXIT $?"
date
