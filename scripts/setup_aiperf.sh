#!/usr/bin/env bash
# Set up NVIDIA's aiperf (the reference client bench/agreement.py compares with) in its own venv.
#
#   bash scripts/setup_aiperf.sh
#
# - creates <repo>/.venv-aiperf (never touches the project's own .venv): aiperf pulls pandas,
#   pyarrow, scipy, plotly and transformers, ~1.2 GB, so it is not a test dependency
# - installs aiperf pinned to the version the agreement was measured with
# Idempotent: nothing is installed when the pinned version is already there.
set -euo pipefail

AIPERF_VERSION="${AIPERF_VERSION:-0.13.0}"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${AIPERF_VENV:-$REPO_ROOT/.venv-aiperf}"

if [ -x "$VENV/bin/aiperf" ] && [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("aiperf"))' 2>/dev/null)" = "$AIPERF_VERSION" ]; then
    echo "aiperf $AIPERF_VERSION already in $VENV"
    exit 0
fi
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "aiperf==$AIPERF_VERSION"
"$VENV/bin/aiperf" --version >/dev/null 2>&1 || "$VENV/bin/aiperf" profile --help >/dev/null
echo "aiperf $AIPERF_VERSION in $VENV"
