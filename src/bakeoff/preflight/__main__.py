"""``python -m bakeoff.preflight [--only GLOB ...] [--reps N]``: run probes, print one JSON object.

Runs under any Python that has torch; needs nothing else from bakeoff's dependencies (the
sweep starts it with the engine's interpreter, so the probes see the engine's libraries).
"""

from __future__ import annotations

import argparse
import json
import sys

from bakeoff.preflight import run_all


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bakeoff.preflight")
    ap.add_argument("--only", nargs="*", default=None, help="probe name globs (default: all)")
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    json.dump(run_all(a.only, a.reps), sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
