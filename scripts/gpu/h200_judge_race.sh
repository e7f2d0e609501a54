#!/usr/bin/env bash
# Issue 23/24 runs on the H200, as the second call after `llamacpp_h200.sh start wait` built sm90:
# the model's other half, then side by side until END_S seconds from now:
#   * cores 0-3: examples/h200-longctx.toml (a long-context-only fault beside garbage), then
#     examples/h200-race-ubatch.toml (the race on a real single change), GPU sweeps one after the other;
#   * cores 4-15: bench/race_planted_aa.py on the CPU (the sm90 build with --n-gpu-layers 0 and the GPU
#     hidden): planted 10 % slowdowns and A/A pairs, the race against today's design.
# Everything lands in $OUT as it finishes (the longctx pack first), so a call cut short keeps what ran.
set -u
OUT=${OUT:-/tmp/bakeoff-out}; END_S=${END_S:-400}; T0=$(date +%s)
left() { echo $(( T0 + END_S - $(date +%s) )); }
bash scripts/gpu/llamacpp_h200.sh model || exit $?
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
mkdir -p /tmp/rpa
taskset -c 4-15 python3 bench/race_planted_aa.py --planted 10 --aa 20 --parallel 6 --cpus-per-run 2 \
  --deadline-s $(( $(left) - 100 )) --llama-server /tmp/ll/build-sm90/bin/llama-server \
  --model /tmp/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --work /tmp/rpa --out /tmp/rpa > /tmp/rpa/stdout.txt 2>&1 &
BENCH=$!
SWEEP_SPEC=examples/h200-longctx.toml SWEEP_NAME=longctx SWEEP_CAP_S=${LONGCTX_CAP_S:-110} \
  taskset -c 0-3 bash scripts/gpu/llamacpp_h200.sh sweep
SWEEP_SPEC=examples/h200-race-ubatch.toml SWEEP_NAME=race SWEEP_CAP_S=$(( $(left) - 40 )) \
  taskset -c 0-3 bash scripts/gpu/llamacpp_h200.sh sweep
# the bench stops starting runs at its deadline; what is still running is cut here
while kill -0 $BENCH 2>/dev/null && [ $(left) -gt 12 ]; do sleep 2; done
kill -INT $BENCH 2>/dev/null; sleep 3
cp /tmp/rpa/stdout.txt $OUT/racebench-stdout.txt; cp /tmp/rpa/race-planted-aa-*.txt $OUT/ 2>/dev/null
ls -la $OUT
