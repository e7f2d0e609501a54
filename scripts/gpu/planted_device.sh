#!/usr/bin/env bash
# bench/planted_test.py on the lent device's 16 CPU cores (issue 16): llama.cpp's llama-server built for
# the CPU from the same source as scripts/gpu/llamacpp_h200.sh, SmolLM2 Q4_1, several planted runs side by
# side (--parallel; each server uses one thread). Results: docs/results/bench/planted-*-device-*.txt.
#
# Consecutive device calls (each within the 30 s a machine stays warm):
#   1. carry .gpu/llama.cpp-src.tar.xz .gpu/smollm2.part.00:   bash scripts/gpu/planted_device.sh build
#   2. carry .gpu/smollm2.part.01 .whl:   EFFECT=0.25 RUNS=10 PARALLEL=5 bash scripts/gpu/planted_device.sh model start wait
#   3. (no carry)                    bash scripts/gpu/planted_device.sh wait
#   A/A side by side: SWEEPS=3 bash scripts/gpu/planted_device.sh aa wait
# `wait` holds the machine until the test is done or WAIT_S (default 560) passed, then copies what exists to $OUT.
set -u
OUT=${OUT:-/tmp/bakeoff-out}; mkdir -p "$OUT"
LL=/tmp/ll; MD=/tmp/smollm2; W=/tmp/planted; mkdir -p $LL $MD
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src PATH=$LL/build-cpu/bin:$PATH
export BAKEOFF_BENCH_MODEL=$MD/SmolLM2-135M-Instruct.Q4_1.gguf
MODEL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
for step in "$@"; do case $step in
build)
  nproc; lscpu | grep -m1 "Model name"
  tar -C $LL -xJf .gpu/llama.cpp-src.tar.xz && cp .gpu/smollm2.part.00 $MD/ || exit 3
  t0=$(date +%s)
  cmake -S $LL/llama.cpp -B $LL/build-cpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF > $LL/cmake.log 2>&1 \
    && cmake --build $LL/build-cpu --target llama-server -j16 > $LL/build.log 2>&1; rc=$?
  echo "cpu build rc=$rc in $(( $(date +%s) - t0 )) s"; tail -3 $LL/build.log
  llama-server --version 2>&1 | tail -2 ;;
model)
  cp .gpu/smollm2.part.01 $MD/ && cat $MD/smollm2.part.00 $MD/smollm2.part.01 > $BAKEOFF_BENCH_MODEL && rm $MD/smollm2.part.0*
  [ "$(sha256sum $BAKEOFF_BENCH_MODEL | cut -d' ' -f1)" = $MODEL_SHA ] && echo "model OK" || exit 4
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  python3 -c "import bakeoff.cli, scipy, aiohttp, psutil; print('bakeoff imports')" || exit 3 ;;
start)
  mkdir -p $W; uptime > $W/load-before.txt
  setsid nohup nice -n 10 python3 bench/planted_test.py --quick --runs ${RUNS:-10} --effect ${EFFECT:-0.25} \
    --parallel ${PARALLEL:-5} --out $W/runs > $W/planted.txt 2>&1 < /dev/null &
  echo "planted test started (pid $!)" ;;
aa)  # bench/aa_test.py: SWEEPS single-sweep A/A runs side by side (6 launches of one configuration each)
  mkdir -p $W
  for i in $(seq 1 ${SWEEPS:-3}); do
    setsid nohup nice -n 10 python3 bench/aa_test.py --quick --sweeps 1 --replicas 6 --out $W/aa$i > $W/aa$i.txt 2>&1 < /dev/null &
  done
  echo "A/A sweeps started" ;;
wait)
  t0=$(date +%s)
  while pgrep -f "bench/(planted|aa)_test.py" > /dev/null && [ $(( $(date +%s) - t0 )) -lt ${WAIT_S:-560} ]; do
    sleep 20; echo "[$(date +%T)] $(grep -c '^RATIO' $W/planted.txt) runs done; load $(cut -d' ' -f1-3 /proc/loadavg)"
  done
  cp $W/planted.txt $W/aa*.txt $OUT/ 2>/dev/null; uptime | tee $OUT/load-after.txt; tail -25 $W/planted.txt ;;
esac; done
