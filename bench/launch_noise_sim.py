#!/usr/bin/env python3
"""How often bakeoff's speed comparison calls a tie wrongly or misses a real difference, under
the noise measured on real machines: a simulation through bakeoff's own functions
(``bakeoff.decide.stats``), not a copy of them.

A configuration's mean log tok/s from one launch = its true value + launch noise (sd σ_L) +
the mean of n repetitions (each sd s). The baseline is launched R times when its launch noise is
measured (``bench.launch_noise = "auto"``: ``launch_noise`` + ``ratio_vs_launches``), once when
it is a fixed figure (``ratio_interval(between=σ)``). Printed per noise model: the false-call
rate of an identical configuration (A/A) and the detection rate of a planted slowdown.
The noise models are the figures measured in bench/README.md (aa_test.py, planted_test.py).

    python bench/launch_noise_sim.py [--trials 2000]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from bakeoff.decide.stats import launch_noise, ratio_interval, ratio_vs_launches  # noqa: E402

# name: (launch noise σ_L, one repetition's sd s, repetitions per launch n), all of log tok/s
MODELS = {
    "quiet 2-core (planted runs 16:18-17:44)": (0.032, 0.055, 4),
    "loaded 2-core (A/A 10:03-10:50)": (0.12, 0.164, 5),
    "16-core device (planted, 5 side by side)": (0.048, 0.056, 5),
    "16-core device (A/A, 8 side by side)": (0.063, 0.065, 5),
}


def launch(rng: random.Random, effect: float, sl: float, s: float, n: int) -> list[float]:
    shift = rng.gauss(0, sl)
    return [100 * math.exp(effect + shift + rng.gauss(0, s)) for _ in range(n)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=16)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    print("rates over", args.trials, "simulated comparisons; 'auto R' = the baseline launched R times, its launch noise measured")
    for name, (sl, s, n) in MODELS.items():
        for effect in (0.0, math.log(0.75), math.log(0.90)):
            counts: dict[str, int] = {}
            for _ in range(args.trials):
                bases = [launch(rng, 0.0, sl, s, n) for _ in range(5)]
                trial = launch(rng, effect, sl, s, n)
                calls = {f"fixed {sg}": ratio_interval(trial, bases[0], between=sg).call for sg in (0.0, 0.05, 0.08)}
                for r in (3, 4, 5):
                    noise = launch_noise(bases[:r])
                    calls[f"auto R={r}"] = ratio_vs_launches(trial, noise, n_base=r * n).call
                for k, c in calls.items():
                    counts[k] = counts.get(k, 0) + (c != "tie" if effect == 0 else c == "worse")
            what = "A/A false calls" if effect == 0 else f"planted {1 - math.exp(effect):.0%} detected"
            print(f"{name:38s} {what:22s} " + "  ".join(f"{k}: {v / args.trials:5.1%}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
