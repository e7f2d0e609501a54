#!/usr/bin/env python3
"""The race (``bench.resolve``) against today's fixed design, under the noise measured on real
machines: a simulation through bakeoff's own functions (``bakeoff.decide.stats``,
``bakeoff.decide.race``), not a copy of them.

One launch of a configuration measures n repetitions; its mean log tok/s = true value + the
machine's drift at that moment (a linear trend, per launch) + launch noise (sd σ_L) + the mean of
n repetitions (each sd s). Today's design ("fixed"): the baseline launched 4 times across a
10-launch sweep (``launch_noise = "auto"``), the change once at a random moment in between,
compared by ``ratio_vs_launches``. The race: the same screening round, then — when the change is a
contender (``race.contenders``) — blocks of one baseline and one change launch side by side
(``Race.next_launches``) until ``Race.status`` settles it or the budget is spent; the call is then
the paired one. Printed per noise model and planted effect: the share of right calls (A/A: no
"faster"/"slower"; planted: "slower"), the share called equivalent within ±resolve, left
unresolved, and the launches the comparison spent (mean and 90th percentile).

    python bench/resolve_sim.py [--trials 1000] [--resolve 0.05] [--budgets 24 48]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from bakeoff.decide import race as race_mod  # noqa: E402
from bakeoff.decide.race import Race, contenders  # noqa: E402
from bakeoff.decide.stats import launch_noise, ratio_vs_launches  # noqa: E402

# name: (launch noise σ_L, one repetition's sd s, repetitions per launch n, drift per launch), logs.
# The 2-core and 16-core figures are bench/README.md's (aa_test.py, planted_test.py). The H200
# (llama.cpp CUDA, SmolLM2, c=8): repetitions spread ±9.5 % over 5 runs (s ≈ 0.08,
# docs/results/h200-llamacpp run-1656), launch noise 12.1 % measured from 4 baseline launches of
# which the drift (the last launch 0.73-0.87x the first over an ~11-launch sweep) is a trend of
# log(0.80)/11 per launch, the rest (σ_L 0.06) random: together they give the 12 % measured.
MODELS = {
    "quiet 2-core": (0.032, 0.055, 4, 0.0),
    "loaded 2-core": (0.12, 0.164, 5, 0.0),
    "16-core device (A/A, 8 side by side)": (0.063, 0.065, 5, 0.0),
    "H200 llama.cpp c=8 (drifting)": (0.06, 0.08, 5, math.log(0.80) / 11),
}
SWEEP = 10  # launches in the screening round (the baseline's 4 spread over it)


def noise(rng: random.Random, sd: float, tails: str) -> float:
    """One draw of sd ``sd``: normal; Student's t with 4 degrees of freedom (variance 2, scaled to
    ``sd``); or a contaminated normal (1 in 10 draws from a normal 3 times wider, scaled so that
    the rms is ``sd``)."""
    if tails == "t4":
        return sd * rng.gauss(0, 1) / math.sqrt(rng.gammavariate(2, 2) / 4) / math.sqrt(2)
    if tails == "contam":
        return sd * rng.gauss(0, 3 if rng.random() < 0.1 else 1) / math.sqrt(1.8)
    return rng.gauss(0, sd)


class Machine:
    """Launches in time order: each one's samples carry the drift reached at that moment."""

    def __init__(self, rng: random.Random, sl: float, s: float, n: int, drift: float, tails: str = "normal") -> None:
        self.rng, self.sl, self.s, self.n, self.drift, self.tails = rng, sl, s, n, drift, tails

    def launch(self, t: int, effect: float) -> list[float]:
        shift = self.drift * t + noise(self.rng, self.sl, self.tails)
        return [100 * math.exp(effect + shift + noise(self.rng, self.s, self.tails)) for _ in range(self.n)]


def one(m: Machine, effect: float, resolve: float, budget: int, order_effect: float = 0.0) -> tuple[str, str, int, int]:
    """(today's call, the race's call, today's launches, the race's launches) for one comparison."""
    base = [m.launch(t, 0.0) for t in (0, SWEEP // 3, 2 * SWEEP // 3, SWEEP)]
    trial = m.launch(m.rng.randint(1, SWEEP - 1), effect)
    noise = launch_noise(base)
    r = ratio_vs_launches(trial, noise, n_base=4 * m.n)
    fixed = r.call
    h = noise.tie_half_width()
    if not contenders({"t": r}, (math.exp(h) - math.exp(-h)) / 2):
        return fixed, fixed, 5, 5
    race, t = Race.start("b", ["t"], resolve, budget), SWEEP
    while keys := race.next_launches():
        for i, k in enumerate(keys):  # the launch second in its block gains ``order_effect`` (log)
            t += 1
            race.record(k, {"samples": m.launch(t, (effect if k == "t" else 0.0) + (order_effect if i else 0.0))})
    state = race.status()["t"]
    call = "equivalent" if state == "equivalent" else race.paired("t").ratio().call
    return fixed, call if state != "unresolved" else f"unresolved:{call}", 5, 5 + race.launches()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=24)
    ap.add_argument("--resolve", type=float, default=0.05)
    ap.add_argument("--budgets", type=int, nargs="+", default=[24, 48], help="bench.max_extra_launches values")
    ap.add_argument("--tails", choices=("normal", "t4", "contam"), default="normal",
                    help="the launch noise's law: normal, Student's t(4), or a contaminated normal (10 %% at 3x), same rms")
    ap.add_argument("--block-sd-range", type=float, nargs=2, default=None, metavar=("LO", "HI"),
                    help="instead of --models: each comparison's machine has a block sd drawn uniformly from LO-HI (log)")
    ap.add_argument("--alphas", type=float, nargs="+", default=[race_mod.ALPHA],
                    help=f"the race's error rate over its looks (race.ALPHA, default {race_mod.ALPHA})")
    ap.add_argument("--order-effect", type=float, default=0.0,
                    help="what launching second in a block adds to a launch's mean log (an order effect; default 0)")
    ap.add_argument("--no-header", dest="header", action="store_false")
    ap.add_argument("--models", nargs="+", default=list(MODELS), help="noise models (default: all)")
    ap.add_argument("--block-sd", type=float, nargs="+", default=[], help="instead of --models: machines given by the "
                    "sd (log) of one paired block's difference, as bench/race_planted_aa.py measures it (each launch "
                    "one value with launch noise sd / sqrt(2), no drift)")
    args = ap.parse_args(argv)
    if args.block_sd:
        for sd in args.block_sd:
            MODELS[f"block sd {sd * 100:.0f} %"] = (sd / math.sqrt(2), 0.0, 1, 0.0)
        args.models = [f"block sd {sd * 100:.0f} %" for sd in args.block_sd]
    if args.block_sd_range:
        lo, hi = args.block_sd_range
        args.models = [f"block sd {lo * 100:.1f}-{hi * 100:.0f} %, {args.tails}"]
    if args.header:
        print(f"{args.trials} simulated comparisons per row; resolve = {args.resolve}; tails {args.tails}; 'right' = A/A: "
              "no faster/slower call, planted: called slower; launches = the baseline's and the change's, screening included")
        print(f"{'machine':38s} {'case':12s} {'design':22s} {'right':>6s} {'false':>6s} {'equiv':>6s} {'unres':>6s} "
              f"{'launches mean':>13s} {'p90':>4s}")
    designs = [(a, b) for a in args.alphas for b in args.budgets]
    for name in args.models:
        for effect, case in ((0.0, "A/A"), (math.log(0.90), "planted 10%")):
            rows: dict[str, list[tuple[str, int]]] = {"fixed (today)": []}
            for a, b in designs:
                rows[f"race a={a:g}, {b} extra"] = []
            rng = random.Random(args.seed)
            for _ in range(args.trials):
                if args.block_sd_range:  # this comparison's machine: its block sd drawn from the measured range
                    sd = rng.uniform(*args.block_sd_range)
                    sl, s, n, drift = sd / math.sqrt(2), 0.0, 1, 0.0
                else:
                    sl, s, n, drift = MODELS[name]
                state = rng.getstate()
                for a, b in designs:
                    rng.setstate(state)  # every design sees the same screening round
                    race_mod.ALPHA = a
                    fixed, raced, lf, lr = one(Machine(rng, sl, s, n, drift, args.tails), effect, args.resolve, b,
                                                 args.order_effect)
                    rows[f"race a={a:g}, {b} extra"].append((raced, lr))
                rows["fixed (today)"].append((fixed, lf))
            for design, out in rows.items():
                calls = [c.split(":")[-1] for c, _ in out]
                right = sum((c in ("tie", "equivalent")) if effect == 0 else c == "worse" for c in calls)
                false = sum(c in ("better", "worse") if effect == 0 else c == "better" for c in calls)
                eq = sum(c == "equivalent" for c, _ in out)
                unres = sum(c.startswith("unresolved") or c == "tie" for c, _ in out)
                spent = sorted(x for _, x in out)
                k = args.trials
                print(f"{name:38s} {case:12s} {design:22s} {right / k:6.1%} {false / k:6.1%} {eq / k:6.1%} "
                      f"{unres / k:6.1%} {statistics.mean(spent):13.1f} {spent[int(0.9 * (k - 1))]:4d}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
