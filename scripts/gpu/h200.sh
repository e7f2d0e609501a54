#!/usr/bin/env bash
# One device call on the H200 (see docs/gpu.md): install carried wheels, fingerprint, preflight,
# build the random-weight models, run one or more real sweeps, pack everything into $OUT.
#   bash scripts/gpu/h200.sh [preflight] [moe] [dense] [fault]   (default: preflight moe dense)
# Each sweep runs under a wall-clock cap (SWEEP_CAP_S, default 400 s); a sweep cut short keeps
# its finished trials in the store and its report is rebuilt from it.
set -u
OUT=${OUT:-/tmp/bakeoff-out}; mkdir -p "$OUT"
STEPS=${*:-preflight moe dense}
CAP=${SWEEP_CAP_S:-400}
W=/tmp/bakeoff-work; mkdir -p $W /tmp/hfcache
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH=/tmp/site:$PWD/src
else
  export PYTHONPATH=$PWD/src
fi
export PYTHONUNBUFFERED=1 HF_HUB_CACHE=/tmp/hfcache HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
log() { echo "[h200 $(date +%T)] $*" | tee -a "$OUT/run.log"; }
log "steps: $STEPS"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $W/nvidia-smi.csv 2>&1
python3 - > $W/fingerprint.json 2>>"$OUT/run.log" <<'PY'
import json, subprocess, importlib.metadata as md
from bakeoff.run.fingerprint import environment_fingerprint
fp = environment_fingerprint("transformers")
fp["packages"] = {p: md.version(p) for p in ("torch", "transformers", "triton", "fastapi", "uvicorn", "pydantic", "openai")}
print(json.dumps(fp, indent=1, default=str))
PY
cp $W/fingerprint.json "$OUT/fingerprint.json"
for step in $STEPS; do
  case $step in
    preflight)
      log "preflight: all probes"
      timeout 240 python3 -m bakeoff.cli preflight --out "$OUT/preflight.json" > $W/preflight.md 2>>"$OUT/run.log"
      log "preflight rc=$?"; cat $W/preflight.md >> "$OUT/run.log" ;;
    moe|dense|fault)
      [ -d /tmp/models/dense ] || { log "building models"; python3 scripts/gpu/make_models.py /tmp/models > $W/make_models.log 2>&1 || tail -20 $W/make_models.log >> "$OUT/run.log"; }
      case $step in moe) spec=examples/gpu-moe.toml ;; dense) spec=examples/gpu-transformers.toml ;; *) spec=examples/gpu-serving-fault.toml ;; esac
      log "sweep $step ($spec), cap ${CAP}s"
      timeout -s INT $CAP python3 -m bakeoff.cli run $spec --out $W/$step > $W/$step.out 2>&1
      log "sweep $step rc=$?"
      python3 -m bakeoff.cli report $W/$step --html > /dev/null 2>>"$OUT/run.log"
      python3 -m bakeoff.cli export $W/$step >/dev/null 2>>"$OUT/run.log" \
        || python3 -c "import json,sys; from bakeoff.store import open_readonly
with open_readonly(sys.argv[1]) as s: json.dump([r.__dict__ if hasattr(r,'__dict__') else r for r in s.trials()], open(sys.argv[1]+'/trials.json','w'), indent=1, default=str)" $W/$step 2>>"$OUT/run.log"
      cat $W/$step/report.md >> "$OUT/run.log" 2>/dev/null
      # trim failure logs to their last 200 lines
      for f in $W/$step/logs/*.log; do tail -n 200 "$f" > "$f.tail" && mv "$f.tail" "$f"; done ;;
  esac
done
tar -C $W -czf "$OUT/results.tar.gz" --exclude='*.safetensors' . 2>>"$OUT/run.log"
log "done; $(du -sh "$OUT/results.tar.gz" | cut -f1)"
