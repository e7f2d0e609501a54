#!/usr/bin/env python3
"""Regenerate docs/screenshots/*.png from a real run of examples/smollm2.toml.

Runs the example sweep (real llama-server), captures `bakeoff status` while the second trial
is probing, renders the HTML report, and screenshots both with headless Chromium. Run it on a
quiet machine: the numbers in the pictures are whatever this machine measures.

    python scripts/screenshots.py [--out runs/screenshots]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

from bakeoff.report.status import from_store, render
from bakeoff.store import open_readonly

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "docs" / "screenshots"


def chromium_shot(url: str, png: Path, width: int, height: int) -> None:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not exe:
        raise SystemExit("headless Chromium is needed: apt-get install -y chromium")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
                        f"--user-data-dir={profile}", f"--window-size={width},{height}", f"--screenshot={png}", url],
                       check=True, capture_output=True, timeout=120)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "screenshots")
    args = ap.parse_args()
    if args.out.exists():
        shutil.rmtree(args.out)
    bakeoff = str(Path(sys.executable).with_name("bakeoff"))
    run = subprocess.Popen([bakeoff, "run", str(ROOT / "examples" / "smollm2.toml"), "--out", str(args.out)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    status_svg = None
    while run.poll() is None:
        time.sleep(0.5)
        if status_svg or not (args.out / "bakeoff.sqlite").exists():
            continue
        with open_readonly(args.out) as store:
            trials = store.trials()
            progress = store.progress() or {}
            if len(trials) > 1 and trials[1].state == "running" and progress.get("phase") == "probe":
                console = Console(record=True, width=100, file=open("/dev/null", "w"))
                console.print(f"$ bakeoff status {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
                console.print(render(from_store(store)))
                status_svg = console.export_svg(title="bakeoff status")
    if run.returncode != 0:
        raise SystemExit(f"bakeoff run exited {run.returncode}")
    subprocess.run([bakeoff, "report", str(args.out), "--html"], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    SHOTS.mkdir(parents=True, exist_ok=True)
    chromium_shot((args.out / "report.html").as_uri(), SHOTS / "report-full.png", 1280, 2300)
    if status_svg:
        svg = args.out / "status.svg"
        svg.write_text(status_svg, encoding="utf-8")
        chromium_shot(svg.as_uri(), SHOTS / "status.png", 1100, 340)
    else:
        print("the status was not caught during trial 2's probe (too quick); status.png left as it was")
    print(f"wrote {', '.join(p.name for p in sorted(SHOTS.glob('*.png')))} from {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
