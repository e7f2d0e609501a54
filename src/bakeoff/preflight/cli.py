"""``bakeoff preflight``: run the probes (all, a glob, or what a spec needs) and show verdicts."""

from __future__ import annotations

import json
from pathlib import Path


def table(results: dict, pruned: dict | None = None) -> str:
    """A markdown table of verdicts (and, for a spec, what the planner would skip)."""
    dev = results.get("device", {})
    head = f"device: {dev.get('gpu') or dev.get('device', '?')} (torch {dev.get('torch')}, cuda {dev.get('cuda')})"
    if results.get("ran_on"):
        head += f" on {results['ran_on']}"
    lines = [head, "", "| probe | verdict | time ms | max abs err | reason |", "|---|---|---|---|---|"]
    for r in results.get("results", []):
        err = "" if r.get("max_abs_err") is None else f"{r['max_abs_err']:.3g}"
        ms = "" if r.get("time_ms") is None else f"{r['time_ms']:.3f}"
        reason = (r.get("reason") or "").replace("|", "/")[:160]
        lines.append(f"| {r['name']} | {r['verdict']} | {ms} | {err} | {reason} |")
    if pruned is not None:
        lines += ["", "pruned axis values:" if pruned else "pruned axis values: none"]
        lines += [f"  {a}={v}: {why}" for (a, v), why in sorted(pruned.items())]
    return "\n".join(lines)


def run_preflight(spec_path: Path | None, *, as_json: bool, out_file: Path | None, only: list[str]) -> str:
    from bakeoff.preflight import run_all

    pruned = None
    if spec_path is not None:
        from bakeoff import spec as specmod
        from bakeoff.preflight import plan

        spec = specmod.load(spec_path)
        need = sorted({g for globs in plan.required_probes(spec).values() for g in globs})
        host = None
        if spec.is_remote:  # the probes run where the spec's servers run
            from bakeoff.run.hosts import get_host

            host = get_host(spec.host)
        results = plan.run(spec, only or need or None, host=host)
        pruned = plan.bad_values(spec, results)
    else:
        results = run_all(only or None)
    if out_file is not None:
        Path(out_file).write_text(json.dumps(results, indent=1))
    if as_json:
        return json.dumps(results, indent=1)
    return table(results, pruned)
