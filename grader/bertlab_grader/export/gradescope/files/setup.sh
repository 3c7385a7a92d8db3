#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder's image (docs/gradescope.md).
# It installs bubblewrap (the kit's sandbox) and the kit, OFFLINE: from the wheels that
# `bertlab gradescope` put in the zip's wheels/ folder, never from a package index.
#
# The kit's own tests run it against a temporary folder shaped like /autograder, with:
#   BERTLAB_AUTOGRADER_ROOT      the folder instead of /autograder
#   BERTLAB_SETUP_APT=0          no apt-get (the machine already has bubblewrap)
#   BERTLAB_SETUP_PYTHON         the interpreter the virtualenv is made from (default python3)
#   BERTLAB_SETUP_VENV_OPTIONS   extra `python -m venv` options (e.g. --system-site-packages)
#   BERTLAB_SETUP_PIP_OPTIONS    extra `pip install` options (e.g. --no-deps, with the machine's packages)
set -euo pipefail
ROOT="${BERTLAB_AUTOGRADER_ROOT:-/autograder}"
SOURCE="$ROOT/source"
VENV="$ROOT/bertlab-venv"

if [ "${BERTLAB_SETUP_APT:-1}" = 1 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends bubblewrap python3 python3-venv
fi

shopt -s nullglob
kit=("$SOURCE"/wheels/bertlab-*.whl)
if [ "${#kit[@]}" != 1 ]; then
  echo "setup.sh: expected exactly one bertlab-*.whl in $SOURCE/wheels, found ${#kit[@]}; rebuild the zip with \`bertlab gradescope\`." >&2
  exit 1
fi

# A virtualenv of its own: nothing of the image's Python is changed, and run_autograder knows
# exactly which interpreter holds the kit. No pip configuration file or PIP_* variable of the image
# can point the install anywhere but the zip's wheels (--isolated, and no configuration file).
"${BERTLAB_SETUP_PYTHON:-python3}" -m venv ${BERTLAB_SETUP_VENV_OPTIONS:-} "$VENV"
PIP_CONFIG_FILE=/dev/null "$VENV/bin/python" -m pip --isolated --disable-pip-version-check install --no-index \
  --find-links "$SOURCE/wheels" ${BERTLAB_SETUP_PIP_OPTIONS:-} "${kit[0]}"

# Fail the build now, not every submission later: the kit imports, and says whether bubblewrap can
# sandbox student code in this image (if not, run_autograder grades without it; see the doc).
"$VENV/bin/python" -I -m bertlab_grader.export.gradescope.autograder check --root "$ROOT"
