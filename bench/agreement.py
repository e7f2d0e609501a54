#!/usr/bin/env python3
"""Does bakeoff's benchmark agree with `vllm bench serve` on the same server and workload?

Starts one real llama-server (SmolLM2, the llamacpp engine's binary, the model path of
examples/smollm2.toml), then alternates, for several rounds: bakeoff's load generator, then
`vllm bench serve` (client side only), on the same workload — the same prompts (vllm's
`random` dataset, dumped with vllm's own code and replayed by bakeoff), the same output length
with ignore_eos, the same concurrency. Prints per round and the median ratio of output tok/s and
of median TTFT (bakeoff / vllm). Target: within +-3%.

    python bench/agreement.py [--rounds 3] [--vllm-python .venv-vllm/bin/python]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bakeoff import bench, benchtools
from bakeoff.engines.llamacpp import LlamaCpp
from bakeoff.spec import Bench, load

ROOT = Path(__file__).resolve().parent.parent
DUMP_PROMPTS = """
import json, sys
from vllm.benchmarks.datasets import RandomDataset
from vllm.tokenizers import get_tokenizer
tok = get_tokenizer(sys.argv[1])
n, inp, out, seed = map(int, sys.argv[2:6])
reqs = RandomDataset(random_seed=seed).sample(tokenizer=tok, num_requests=n, input_len=inp, output_len=out, range_ratio=0.0)
json.dump([r.prompt for r in reqs], sys.stdout)
"""


def start_server(port: int, log: Path) -> subprocess.Popen:
    spec = load(ROOT / "examples" / "smollm2.toml")
    argv = [LlamaCpp().resolve_binary(), "--model", spec.model.resolve(), "--host", "127.0.0.1", "--port", str(port),
            "--alias", "smollm2", *spec.server.args,
            "--no-cache-prompt", "--cache-ram", "0"]  # no prompt cache: the second tool of a round gains nothing
    proc = subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"llama-server exited {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("llama-server not ready in 180 s")


def vllm_prompts(python: str, tokenizer: str, n: int, inp: int, out: int, seed: int) -> list[str]:
    res = subprocess.run([python, "-c", DUMP_PROMPTS, tokenizer, str(n), str(inp), str(out), str(seed)],
                         capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--input-tokens", type=int, default=32)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--vllm-python", default=str(ROOT / ".venv-vllm" / "bin" / "python"))
    ap.add_argument("--tokenizer", default=str(ROOT / ".cache" / "smollm2-hf"))
    ap.add_argument("--port", type=int, default=18433)
    args = ap.parse_args()

    cfg = Bench(concurrency=[args.concurrency], requests_per_level=args.requests, warmup_requests=1,
                input_tokens=args.input_tokens, output_tokens=args.output_tokens, ignore_eos=True, seed=0)
    work = Path(tempfile.mkdtemp(prefix="bakeoff-agreement-"))
    # vllm's warm-up reuses its first prompt; so does bakeoff's here
    prompts = vllm_prompts(args.vllm_python, args.tokenizer, args.requests, args.input_tokens, args.output_tokens, cfg.seed)
    proc = start_server(args.port, work / "llama-server.log")
    base = f"http://127.0.0.1:{args.port}"
    rows = []

    def run_ours():
        return asyncio.run(bench.run_async(base, cfg, model="smollm2", ignore_eos=True, expect_logprobs=False,
                                           prompts=[prompts[0], *prompts]))[0]

    def run_theirs(d: Path):
        d.mkdir()
        argv = benchtools.vllm_argv(base, cfg, concurrency=args.concurrency, rate=None, num_prompts=args.requests,
                                    result_dir=str(d), result_name="result.json", model="smollm2",
                                    tokenizer=args.tokenizer, ignore_eos=True,
                                    prefix=benchtools.vllm_module_prefix(args.vllm_python))
        run = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
        if run.returncode != 0:
            print(run.stdout[-2000:], run.stderr[-2000:], file=sys.stderr)
            raise SystemExit(f"vllm bench serve failed ({run.returncode})")
        return benchtools.parse_vllm(json.loads((d / "result.json").read_text()), f"c={args.concurrency}", ignore_eos=True)

    try:
        for rnd in range(args.rounds):
            if rnd % 2 == 0:  # alternate who goes first
                ours, theirs = run_ours(), run_theirs(work / f"round{rnd}")
            else:
                theirs = run_theirs(work / f"round{rnd}")
                ours = run_ours()
            r_tok = ours.output_tok_s / theirs.output_tok_s
            r_ttft = ours.ttft_ms["p50"] / theirs.ttft_ms["p50"]
            rows.append((r_tok, r_ttft))
            print(f"round {rnd}: bakeoff {ours.output_tok_s:.2f} tok/s ttft_p50 {ours.ttft_ms['p50']:.1f} ms "
                  f"(valid={ours.valid}, errors={ours.errors}, out={ours.output_tokens}) | vllm {theirs.output_tok_s:.2f} tok/s "
                  f"ttft_p50 {theirs.ttft_ms['p50']:.1f} ms (out={theirs.output_tokens}) | ratio tok/s {r_tok:.3f} ttft {r_ttft:.3f}",
                  flush=True)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
    tok = statistics.median(r for r, _ in rows)
    ttft = statistics.median(t for _, t in rows)
    ok = abs(tok - 1) <= 0.03 and abs(ttft - 1) <= 0.03
    print(f"RATIO output tok/s bakeoff/vllm = {tok:.3f}; median TTFT bakeoff/vllm = {ttft:.3f} "
          f"(median of {len(rows)} rounds; target 1.00 +- 0.03: {'PASS' if ok else 'FAIL'})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
