#!/usr/bin/env python3
"""Does bakeoff's benchmark agree with `vllm bench serve` (and aiperf) on the same server and workload?

Starts one real llama-server (SmolLM2, the llamacpp engine's binary, the model path and args of
examples/smollm2.toml, prompt cache off), pinned to the last CPU, the clients to the others.
Then, for several rounds and for each concurrency: bakeoff's load generator, `vllm bench serve`
(client side only) and, when installed (scripts/setup_aiperf.sh), `aiperf profile` back to back,
who goes first rotating, on the same workload — the same prompts (vllm's `random` dataset,
dumped with vllm's own code and replayed by bakeoff and aiperf), the
same output length with ignore_eos, the same concurrency, one warm-up request each. Prints each
round and, per tool and concurrency, the median over rounds of the ratios bakeoff/tool of output tok/s
and of median TTFT. Target: within +-3%. bench/README.md explains the numbers.

    python bench/agreement.py [--rounds 5] [--concurrency 1 4] [--requests 16] [--no-pin]
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

from bakeoff.measure import bench
from bakeoff.measure import tools as benchtools
from bakeoff.run.engines.llamacpp import LlamaCpp
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
# `vllm bench serve` reuses pooled keep-alive connections and does not retry one the server has
# already closed: llama-server (cpp-httplib) closes a connection after a few requests, so about
# one request in four failed with "Server disconnected" and vllm's run was a different workload
# (fewer requests, freed concurrency slots). bakeoff's client retries exactly that case once; for
# vllm we give its session a fresh connection per request instead (localhost connect: ~0.1 ms).
VLLM_FRESH_CONNECTIONS = (
    "import aiohttp\n"
    "class _Fresh(aiohttp.TCPConnector):\n"
    "    def __init__(self, *a, **kw):\n"
    "        kw.pop('keepalive_timeout', None); kw['force_close'] = True\n"
    "        super().__init__(*a, **kw)\n"
    "aiohttp.TCPConnector = _Fresh\n")


def start_server(port: int, log: Path, cpus: set[int] | None) -> subprocess.Popen:
    spec = load(ROOT / "examples" / "smollm2.toml")
    argv = [LlamaCpp().resolve_binary(), "--model", spec.model.resolve(), "--host", "127.0.0.1", "--port", str(port),
            "--alias", "smollm2", *spec.server.args,
            "--no-cache-prompt", "--cache-ram", "0"]  # no prompt cache: the second tool of a round gains nothing
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    proc = subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=pin)
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
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--input-tokens", type=int, default=32)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--vllm-python", default=str(ROOT / ".venv-vllm" / "bin" / "python"))
    ap.add_argument("--aiperf", default=str(ROOT / ".venv-aiperf" / "bin" / "aiperf"),
                    help="aiperf's executable (scripts/setup_aiperf.sh); left out when it is missing")
    ap.add_argument("--tokenizer", default=str(ROOT / ".cache" / "smollm2-hf"))
    ap.add_argument("--port", type=int, default=18433)
    ap.add_argument("--no-pin", action="store_true",
                    help="do not pin the server to the last CPU and the clients to the others")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bakeoff-agreement-"))
    prompts = vllm_prompts(args.vllm_python, args.tokenizer, args.requests, args.input_tokens, args.output_tokens, 0)
    dataset = work / "prompts.jsonl"
    dataset.write_text("".join(json.dumps({"text": p}) + "\n" for p in prompts))
    tools = {"vllm": run_vllm}
    if Path(args.aiperf).exists():
        tools["aiperf"] = run_aiperf
    else:
        print(f"aiperf not found at {args.aiperf}: comparing with vllm only (bash scripts/setup_aiperf.sh)", flush=True)
    cpus = sorted(os.sched_getaffinity(0))
    pinned = not args.no_pin and len(cpus) >= 2
    # server and clients apart: no client can steal the server's core (the tools' subprocesses
    # inherit this process's CPUs)
    proc = start_server(args.port, work / "llama-server.log", {cpus[-1]} if pinned else None)
    if pinned:
        os.sched_setaffinity(0, set(cpus[:-1]))
        print(f"server on CPU {cpus[-1]}, clients on CPU {','.join(map(str, cpus[:-1]))}", flush=True)
    base = f"http://127.0.0.1:{args.port}"
    rows: dict[tuple[str, int], list[tuple[float, float, float]]] = {(t, c): [] for t in tools for c in args.concurrency}
    names = ["bakeoff", *tools]

    try:
        for rnd in range(args.rounds):
            for c in args.concurrency:
                cfg = _cfg(args, c)
                order = names[rnd % len(names):] + names[:rnd % len(names)]  # who goes first rotates
                got = {}
                for name in order:
                    if name == "bakeoff":
                        got[name] = run_ours(base, cfg, prompts)
                    else:
                        got[name] = tools[name](args, base, cfg, work / f"{name}-c{c}-round{rnd}", dataset)
                ours = got["bakeoff"]
                line = [f"c={c} round {rnd} ({' then '.join(order)}): bakeoff {_fmt(ours)}"]
                for name in tools:
                    theirs = got[name]
                    r = (ours.output_tok_s / theirs.output_tok_s, ours.ttft_ms["p50"] / theirs.ttft_ms["p50"],
                         ours.ttft_ms["mean"] / theirs.ttft_ms["mean"])
                    rows[(name, c)].append(r)
                    line.append(f"{name} {_fmt(theirs)} -> ratio tok/s {r[0]:.3f} ttft p50 {r[1]:.3f} mean {r[2]:.3f} "
                                f"(tpot p50 {ours.tpot_ms['p50'] / theirs.tpot_ms['p50']:.3f}: the server's own pace)")
                print("\n    ".join(line), flush=True)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
    ok = True
    for (name, c), rs in rows.items():
        tok, p50, mean = (statistics.median(r[i] for r in rs) for i in range(3))
        good = abs(tok - 1) <= 0.03 and abs(p50 - 1) <= 0.03
        ok &= good
        print(f"RATIO c={c} bakeoff/{name}: output tok/s = {tok:.3f}; median TTFT = {p50:.3f} "
              f"(mean TTFT {mean:.3f}; median of {len(rs)} rounds; target 1.00 +- 0.03: {'PASS' if good else 'FAIL'})")
    return 0 if ok else 1


def _fmt(st) -> str:
    return (f"{st.output_tok_s:.2f} tok/s, ttft p50 {st.ttft_ms['p50']:.1f} mean {st.ttft_ms['mean']:.1f} ms, "
            f"out={st.output_tokens}")


def run_ours(base: str, cfg: Bench, prompts: list[str]):
    # the reference tools warm up on their first prompt; so does bakeoff here
    st = asyncio.run(bench.run_async(base, cfg, model="smollm2", ignore_eos=True, expect_logprobs=False,
                                     prompts=[prompts[0], *prompts]))[0]
    if not st.valid or st.errors:
        raise SystemExit(f"bakeoff's level {st.level} is not a measurement: errors={st.errors} "
                         f"invalid={st.invalid} ({st.why_invalid or st.first_error})")
    return st


def run_vllm(args, base: str, cfg: Bench, d: Path, dataset: Path):
    d.mkdir()
    c = cfg.concurrency[0]
    argv = benchtools.vllm_argv(base, cfg, concurrency=c, rate=None, num_prompts=args.requests,
                                result_dir=str(d), result_name="result.json", model="smollm2",
                                tokenizer=args.tokenizer, ignore_eos=True,
                                prefix=[args.vllm_python, "-c", VLLM_FRESH_CONNECTIONS + benchtools.VLLM_SHIM])
    _call(argv, "vllm bench serve")
    data = json.loads((d / "result.json").read_text())
    if data.get("failed"):
        errs = sorted({e.strip().splitlines()[-1] for e in data.get("errors", []) if e})
        raise SystemExit(f"vllm bench serve: {data['failed']} of {args.requests} requests failed: {errs}")
    return benchtools.parse_vllm(data, f"c={c}", ignore_eos=True)


def run_aiperf(args, base: str, cfg: Bench, d: Path, dataset: Path):
    c = cfg.concurrency[0]
    argv = benchtools.aiperf_argv(base, cfg, concurrency=c, rate=None, num_prompts=args.requests, artifact_dir=str(d),
                                  model="smollm2", tokenizer=args.tokenizer, ignore_eos=True,
                                  prefix=[args.aiperf, "profile"], dataset_path=str(dataset))
    # aiperf's own switch for what VLLM_FRESH_CONNECTIONS does to vllm (llama-server drops pooled ones)
    _call([*argv, "--connection-reuse-strategy", "never", "--ui-type", "none"], "aiperf profile")
    st = benchtools.parse_result_dir("aiperf", d, f"c={c}", ignore_eos=True)
    if st.errors or st.completed != args.requests:
        raise SystemExit(f"aiperf: {st.errors} errors, {st.completed} of {args.requests} completed: {st.first_error}")
    return st


def _call(argv: list[str], what: str) -> None:
    run = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if run.returncode != 0:
        print(run.stdout[-2000:], run.stderr[-2000:], file=sys.stderr)
        raise SystemExit(f"{what} failed ({run.returncode})")


def _cfg(args, c: int) -> Bench:
    return Bench(concurrency=[c], requests_per_level=args.requests, warmup_requests=1,
                 input_tokens=args.input_tokens, output_tokens=args.output_tokens, ignore_eos=True, seed=0)


if __name__ == "__main__":
    sys.exit(main())
