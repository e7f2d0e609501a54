#!/usr/bin/env python3
"""A planted, known slowdown must be detected: bakeoff calls it "worse" in >= 9 of 10 runs.

The planted difference is a fixed delay: the trial runs llama-server behind
bench/delay_server.py, which holds each request ``BAKEOFF_DELAY_MS`` before the real server
sees it (the baseline: the same proxy with 0 ms). The delay is sized from a calibration (the
baseline's end-to-end time per request at the measured level) so that the expected tok/s ratio
is 1 - ``--effect``. Measured at concurrency 1, where tok/s scale with 1 / (E2E + delay); at c=4
a CPU-bound server hides the delay behind the other requests in flight (first try: a delay
sized for 10 % cost 2.3 % at c=4). Each run is one 2-trial
bakeoff sweep; prints one RATIO line per run, then the detection count and the measured ratios.

    nice -n 10 python bench/planted_test.py [--quick] [--runs 10] [--effect 0.10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from aa_test import launch_line, run_sweep, spec_text  # noqa: E402
from bakeoff.decide import objective_of  # noqa: E402
from bakeoff.decide.stats import ratio_interval  # noqa: E402

SIGMAS = (0.0, 0.03, 0.05, 0.08)  # launch noise values the stored samples are decided again with


def wrapper(dirpath: Path) -> Path:
    """A llama-server 'binary' that runs the real one behind the delay proxy."""
    from bakeoff.run.engines.llamacpp import LlamaCpp

    real = LlamaCpp().resolve_binary()
    path = dirpath / "llama-server-delayed"
    path.write_text(f'#!/bin/sh\nREAL_LLAMA_SERVER={real} exec {sys.executable} {ROOT / "bench" / "delay_server.py"} "$@"\n')
    path.chmod(0o755)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="kept for symmetry with aa_test.py: the level is c=1 either way")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--effect", type=float, default=0.10, help="planted slowdown of tok/s, e.g. 0.10 = 10 %%")
    ap.add_argument("--out", default=None)
    ap.add_argument("--parallel", type=int, default=1, help="runs at a time (a many-core machine; each server uses one thread)")
    args = ap.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="planted-"))
    out.mkdir(parents=True, exist_ok=True)
    binary = wrapper(out)
    opts = f'engine_options = {{ binary = "{binary}" }}'
    load0 = os.getloadavg()
    # calibration: the baseline alone, to size the delay
    trials, _, wall = run_sweep(spec_text("cal", "BAKEOFF_DELAY_MS", ["0"], quick=args.quick, engine_options=opts,
                                          levels="[1]"), out / "calibration")
    top = [lv for lv in trials[0].metrics["levels"] if lv["valid"]][-1]
    e2e = top["e2e_ms"]["mean"]
    delay = round(e2e * args.effect / (1 - args.effect))
    print(f"calibration: E2E mean {e2e:.0f} ms at {top['level']} -> delay {delay} ms for a {args.effect:.0%} slowdown "
          f"({wall:.0f} s)", flush=True)
    detected, ratios, walls = 0, [], []
    by_sigma = {sg: 0 for sg in SIGMAS}

    def one(r: int):
        t0 = time.monotonic()
        got = run_sweep(spec_text(f"planted-{r}", "BAKEOFF_DELAY_MS", ["0", str(delay)], quick=args.quick,
                                  engine_options=opts, levels="[1]"), out / f"run{r}")
        return r, got, time.monotonic() - t0

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, args.parallel)) as pool:
        for r, (trials, decision, wall), took in pool.map(one, range(args.runs)):
            walls.append(wall)
            slow = next((t for t in trials if t.changed), None)
            vs = (slow.metrics.get("vs_baseline") or {}) if slow else {}
            call = vs.get("call")
            detected += call == "worse"
            if vs:
                ratios.append(vs["ratio"])
            base = next((t for t in trials if not t.changed), None)
            ob, ot = (objective_of(base) if base else None), (objective_of(slow) if slow else None)
            if ob and ot:  # the first launches alone, at a fixed launch noise
                for sg in SIGMAS:
                    r2 = ratio_interval(ot.samples, ob.samples, higher_is_better=ot.higher_is_better, between=sg)
                    by_sigma[sg] += r2 is not None and r2.call == "worse"
            print(f"RATIO planted run={r} delay={delay}ms {vs.get('ratio', float('nan')):.3f} "
                  f"({vs.get('lo') or float('nan'):.3f}–{vs.get('hi') or float('nan'):.3f}) {call} "
                  f"n={vs.get('n_trial')} vs {vs.get('n_base')} in {vs.get('base_launches', 1)} baseline launch(es) "
                  f"({took:.0f} s); {launch_line(decision)}", flush=True)
    print()
    print(f"planted {args.effect:.0%} slowdown (delay {delay} ms): detected as 'worse' in {detected} of {args.runs} runs; "
          f"target >= 9")
    print("the first launches alone, decided with a fixed launch noise (bench.launch_noise = sigma_L): "
          + ", ".join(f"sigma_L={sg}: {n}/{args.runs} 'worse'" for sg, n in by_sigma.items()))
    if ratios:
        print(f"measured ratio: median {statistics.median(ratios):.3f}, range {min(ratios):.3f}–{max(ratios):.3f}")
    print(f"wall: {sum(walls):.0f} s; load average before {load0[0]:.2f}, after {os.getloadavg()[0]:.2f}")
    return 0 if detected >= 0.9 * args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
