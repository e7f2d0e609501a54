#!/usr/bin/env bash
# Issue 24 (and 23) on the H200, fourth session: after `BUILDS=sm90 llamacpp_h200.sh start wait` built sm_90,
# two calls of this script, each within a warm machine's life:
#   PART=1: the model's other half; then side by side until END_S seconds from now:
#     * cores 0-3: examples/h200-race-ubatch.toml (the race on a real single change, GPU), cut at the end;
#     * cores 4-15: bench/race_planted_aa.py on the CPU (sm90 build, --n-gpu-layers 0, GPU hidden):
#       the 10 planted 10 % slowdowns and the first 6 A/A pairs, 6 sweeps at once;
#   PART=2: the same race sweep resumed (same --out: a killed race resumes where it stopped), the other
#     14 A/A pairs, then (GPU) bench/judge_margins.py with the long-context drift figures if time is left;
#     the bench's totals over both calls (--combine).
# Everything lands in $OUT as it finishes, so a call cut short keeps what ran.
set -u
OUT=${OUT:-/tmp/bakeoff-out}; END_S=${END_S:-560}; T0=$(date +%s); PART=${PART:-1}
left() { echo $(( T0 + END_S - $(date +%s) )); }
if [ "$PART" = 1 ]; then bash scripts/gpu/llamacpp_h200.sh model || exit $?; fi
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
LS=/tmp/ll/build-sm90/bin/llama-server; M=/tmp/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p /tmp/rpa
if [ "$PART" = 1 ]; then RUNS="--planted 10 --aa 6"; else RUNS="--planted 0 --aa 14 --index-from 6"; fi
taskset -c 4-15 python3 bench/race_planted_aa.py $RUNS --parallel 6 --cpus-per-run 2 \
  --deadline-s $(( $(left) - 170 )) --llama-server $LS --model $M --work /tmp/rpa/w$PART --out /tmp/rpa \
  > /tmp/rpa/stdout-$PART.txt 2>&1 &
BENCH=$!
[ -z "${SKIP_SWEEP:-}" ] && SWEEP_SPEC=examples/h200-race-ubatch.toml SWEEP_NAME=race \
  SWEEP_CAP_S=$(( $(left) - ${MARGINS_S:-30} - 30 )) taskset -c 0-3 bash scripts/gpu/llamacpp_h200.sh sweep
if [ "$PART" = 2 ] && [ -n "${MARGINS:-}" ] && [ $(left) -gt 90 ]; then  # the judge's margins on the GPU
  PYTHONPATH=${MARGINS_PYTHONPATH:-$PYTHONPATH} timeout -s INT $(( $(left) - 25 )) taskset -c 0-3 python3 ${MARGINS_PY:-bench/judge_margins.py} /tmp/margins-gpu.json $MARGINS \
    > $OUT/judge-margins-gpu.txt 2>&1; echo "judge_margins rc=$?" >> $OUT/judge-margins-gpu.txt
fi
while kill -0 $BENCH 2>/dev/null && [ $(left) -gt 12 ]; do sleep 2; done
kill -INT $BENCH 2>/dev/null; sleep 3
cp /tmp/rpa/stdout-$PART.txt $OUT/; cp /tmp/rpa/race-planted-aa-*.txt /tmp/rpa/race-planted-aa-*.jsonl $OUT/ 2>/dev/null
[ "$PART" = 2 ] && python3 bench/race_planted_aa.py --combine /tmp/rpa/race-planted-aa-*.jsonl > $OUT/racebench-combined.txt 2>&1
ls -la $OUT
