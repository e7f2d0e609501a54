"""Measure how far healthy changes move the benchmark's replies from the baseline's, on the real
llama-server (SmolLM2-135M Q4_1): what ``bakeoff.judge.bench_replies`` must tolerate.

    PYTHONPATH=src python bench/bench_replies.py OUT.json [--only flash_attn=on,...]

For each healthy change (bench/judge_margins.py's list) and both ``ignore_eos`` settings, every
bench reply against the baseline's same request: identical / prefix / near-tie / not a near-tie
(the chosen-token logprob bounds), the largest gap bound at a divergence, the share of replies
that diverged at all (what a text-only judge would see), new loops, and ``usage`` minus the
stream's logprobs entries. docs/notes/judge-thresholds.md quotes its output; the raw replies are
kept for offline re-judging.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from judge_margins import HEALTHY, argv, free_port, wait  # noqa: E402

from bakeoff import spec  # noqa: E402
from bakeoff.judge import bench_replies  # noqa: E402
from bakeoff.measure import bench as benchmod  # noqa: E402

BENCHES = {eos: spec.Bench(concurrency=[1, 4], requests_per_level=8, input_tokens=64, output_tokens=64, ignore_eos=eos,
                           repetitions=1, max_repetitions=1, warmup_requests=1) for eos in (False, True)}


def serve_and_bench(extra: list[str]) -> dict[bool, list[dict]]:
    port = free_port()
    proc = subprocess.Popen(argv(extra, port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait(url)
        return {eos: [lv.to_json() for lv in asyncio.run(benchmod.run_async(url, cfg, timeout_s=600))]
                for eos, cfg in BENCHES.items()}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def margins(levels: list[dict], base_levels: list[dict], eos: bool) -> dict:
    out = {}
    for lv, blv in zip(levels, base_levels):
        keys = [r["key"] if r else str(i) for i, r in enumerate(lv["replies"])]
        diffs = bench_replies.compare_level(lv["replies"], blv["replies"], keys)
        text = [bench_replies.compare_reply(d.key, {"text": b["text"]}, {"text": r["text"]})
                for d, r, b in zip(diffs, lv["replies"], blv["replies"])]
        gaps = [d.gap for d in diffs if d.gap is not None and math.isfinite(d.gap)]
        new, gone = benchmod.loop_pairs(lv, blv)
        checked = benchmod.check_against_baseline(lv, blv, max_tokens=BENCHES[eos].output_tokens, ignore_eos=eos)
        out[lv["level"]] = {
            "replies": len(diffs), "kinds": {k: sum(d.kind == k for d in diffs) for k in ("identical", "prefix", "near_tie", "not_tie")},
            "max_gap": max(gaps, default=0.0), "gaps": sorted(round(g, 2) for g in gaps),
            "text_diverged": sum(d.kind == "diverged" for d in text), "new_loops": len(new), "gone_loops": len(gone),
            "fault": checked.get("fault"), "why": (checked.get("why_invalid") or "")[:300],
            "not_tie": [d.detail[:240] for d in diffs if d.bad],
        }
    return out


def main() -> None:
    out_path = Path(sys.argv[1])
    only = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else [n for n in HEALTHY if n != "proxy"]
    base = serve_and_bench([])
    report = {"baseline": {str(k): v for k, v in base.items()}, "changes": []}
    out_path.write_text(json.dumps(report, default=str))
    print("baseline done", flush=True)
    for name in only:
        t0 = time.time()
        got = serve_and_bench(HEALTHY[name])
        for eos in (False, True):
            m = margins(got[eos], base[eos], eos)
            report["changes"].append({"change": name, "ignore_eos": eos, "margins": m, "levels": got[eos],
                                      "took_s": round(time.time() - t0, 1)})
            print(name, f"ignore_eos={eos}", json.dumps({k: {x: v[x] for x in ("kinds", "max_gap", "text_diverged", "new_loops",
                                                                               "gone_loops", "fault")} for k, v in m.items()}), flush=True)
        out_path.write_text(json.dumps(report, default=str))


if __name__ == "__main__":
    main()
