#!/usr/bin/env python3
"""How many streamed chunks per second can the benchmark client absorb? bakeoff's vs vllm's.

A benchmark client that is slower than the server under test measures itself. Against the STUB
server (bench/stub_server.py, pinned to CPU 1, streaming pre-encoded chunks as fast as it can),
this runs bakeoff's client (pinned to CPU 0) and `vllm bench serve`'s client (pinned to CPU 0)
on the same workload, alternating for several rounds, and prints chunks/s of each and the
median ratio bakeoff/vllm. Target: >= 1.0.

    python bench/client_ceiling.py [--rounds 3] [--vllm-python .venv-vllm/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from bakeoff.measure import tools as benchtools  # noqa: E402
from bakeoff.spec import Bench  # noqa: E402

BAKEOFF_RUN = """
import asyncio, json, os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
from bakeoff import measure
from bakeoff.spec import Bench
cfg = Bench.model_validate_json(sys.argv[3])
levels = measure.run(sys.argv[2], cfg, model="stub", expect_logprobs=False)
lv = levels[0]
print(json.dumps({"duration": lv.duration_s, "completed": lv.completed, "errors": lv.errors,
                  "chunks": lv.output_tokens}))
"""


def start_stub(python: str, cpu: int, batch: int) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([python, str(ROOT / "bench" / "stub_server.py"), "--port", "0", "--cpu", str(cpu),
                             "--batch", str(batch)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    line = proc.stdout.readline()
    m = re.search(r"http://\S+", line)
    if not m:
        proc.kill()
        raise SystemExit(f"stub did not start: {line!r}")
    return proc, m.group(0)


def pinned(cpu: int):
    return lambda: os.sched_setaffinity(0, {cpu})


def run_bakeoff(url: str, cfg: Bench, cpu: int) -> float:
    out = subprocess.run([sys.executable, "-c", BAKEOFF_RUN, str(cpu), url, cfg.model_dump_json()],
                         capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["errors"] == 0 and r["completed"] == cfg.requests_per_level, r
    # the stub reports one usage token per chunk, so output tokens == chunks received
    return r["chunks"] / r["duration"]


def run_vllm(url: str, cfg: Bench, cpu: int, python: str, tokenizer: str, work: Path, attempts: int = 3) -> float:
    """vllm's chunks/s. Its SSE parser strips every network read (`chunk_bytes.strip()` in
    vllm/benchmarks/lib/endpoint_request_func.py), so a read that ends between the two newlines
    of an event separator glues two events together -> JSONDecodeError, and that request fails.
    At thousands of chunks per response that happens now and then; such a run is repeated."""
    for attempt in range(1, attempts + 1):
        try:
            return _run_vllm_once(url, cfg, cpu, python, tokenizer, work)
        except _VllmRequestsFailed as err:
            print(f"  vllm run {attempt}/{attempts}: {err}; again", flush=True)
    raise SystemExit(f"vllm bench serve lost requests in {attempts} runs in a row")


class _VllmRequestsFailed(Exception):
    pass


def _run_vllm_once(url: str, cfg: Bench, cpu: int, python: str, tokenizer: str, work: Path) -> float:
    d = Path(tempfile.mkdtemp(dir=work))
    argv = benchtools.vllm_argv(url, cfg, concurrency=cfg.concurrency[0], rate=None, num_prompts=cfg.requests_per_level,
                                result_dir=str(d), result_name="r.json", model="stub", tokenizer=tokenizer,
                                ignore_eos=True, prefix=benchtools.vllm_module_prefix(python))
    run = subprocess.run(argv, capture_output=True, text=True, preexec_fn=pinned(cpu))
    if run.returncode != 0:
        raise SystemExit(f"vllm bench serve failed: {run.stderr[-2000:]}")
    data = json.loads((d / "r.json").read_text())
    if data["completed"] != cfg.requests_per_level:
        errs = sorted({e.strip().splitlines()[-1] for e in data.get("errors", []) if e})
        raise _VllmRequestsFailed(f"{cfg.requests_per_level - data['completed']} of {cfg.requests_per_level} requests failed: {errs}")
    chunks = sum(len(itl) + 1 for itl, err in zip(data["itls"], data["errors"]) if not err)
    return chunks / data["duration"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--chunks", type=int, default=4000, help="chunks per response")
    ap.add_argument("--batch", type=int, default=16, help="events per stub socket write")
    ap.add_argument("--vllm-python", default=str(ROOT / ".venv-vllm" / "bin" / "python"))
    ap.add_argument("--stub-python", default=sys.executable)
    ap.add_argument("--tokenizer", default=str(ROOT / ".cache" / "smollm2-hf"))
    args = ap.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("needs 2 CPUs: one for the stub, one for the client")
    client_cpu, stub_cpu = sorted(os.sched_getaffinity(0))[:2]
    cfg = Bench(concurrency=[args.concurrency], requests_per_level=args.requests, warmup_requests=1,
                input_tokens=16, output_tokens=args.chunks, ignore_eos=True)
    work = Path(tempfile.mkdtemp(prefix="bakeoff-ceiling-"))
    stub, url = start_stub(args.stub_python, stub_cpu, args.batch)
    ratios = []
    try:
        for rnd in range(args.rounds):
            ours = run_bakeoff(url, cfg, client_cpu)
            theirs = run_vllm(url, cfg, client_cpu, args.vllm_python, args.tokenizer, work)
            ratios.append(ours / theirs)
            print(f"round {rnd}: bakeoff {ours:,.0f} chunks/s | vllm {theirs:,.0f} chunks/s | ratio {ours / theirs:.2f}", flush=True)
    finally:
        os.killpg(stub.pid, 15)
        stub.wait(timeout=10)
    ratio = statistics.median(ratios)
    print(f"RATIO client ceiling bakeoff/vllm = {ratio:.2f} chunks/s (median of {len(ratios)} rounds; target >= 1.0: "
          f"{'PASS' if ratio >= 1.0 else 'FAIL'})")
    return 0 if ratio >= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
