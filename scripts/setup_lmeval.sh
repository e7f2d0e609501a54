#!/usr/bin/env bash
# Set up EleutherAI's lm-evaluation-harness (the correctness judge's lm_eval gate) in its own venv.
#
#   bash scripts/setup_lmeval.sh
#
# - creates <repo>/.venv-lmeval (never touches the project's own .venv): lm-eval pulls datasets,
#   pyarrow, pandas, scikit-learn and evaluate, which bakeoff itself does not need
# - installs lm-eval[api] pinned: the `api` extra is all that its local-chat-completions model
#   needs; torch is only in lm-eval's `hf` extra, so none is installed (and a CUDA build never is)
# Idempotent: nothing is installed when the pinned version is already there.
# The judge finds this lm_eval by itself (bakeoff.judge.lmeval.default_command), or through
# $BAKEOFF_LM_EVAL, or through `command` in the spec's [probes.lm_eval] table.
set -euo pipefail

LM_EVAL_VERSION="${LM_EVAL_VERSION:-0.4.13}"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${LMEVAL_VENV:-$REPO_ROOT/.venv-lmeval}"
t_all=$SECONDS

installed() {
    "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("lm_eval"))' 2>/dev/null || true
}
if [ -x "$VENV/bin/lm_eval" ] && [ "$(installed)" = "$LM_EVAL_VERSION" ]; then
    echo "[setup_lmeval] lm-eval $LM_EVAL_VERSION already in $VENV"
    exit 0
fi
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --progress-bar off "lm-eval[api]==$LM_EVAL_VERSION"
if [ -n "$("$VENV/bin/python" -c 'import importlib.util as u; print(u.find_spec("torch") or "")')" ]; then
    echo "[setup_lmeval] ERROR: torch came into $VENV; lm-eval's API model must not need it" >&2
    exit 1
fi
"$VENV/bin/lm_eval" --help >/dev/null
echo "[setup_lmeval] lm-eval $LM_EVAL_VERSION in $VENV in $(( SECONDS - t_all )) s"
