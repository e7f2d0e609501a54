"""Concurrent copies of the probe set vs the same server's single answers, zero tolerance."""

from __future__ import annotations

from bakeoff.judge.checks import Evidence, Finding
from bakeoff.judge.checks.differential import compare
from bakeoff.judge.probeset import task_right


def check(ev: Evidence) -> Finding | None:
    """Concurrent copies vs the same server's single answers: every copy must be identical or
    diverge at a near-tie (no early stop), and keep a task the single answer got right."""
    collected, cfg, values = ev.collected, ev.cfg, ev.values
    res, prompts = collected["results"], {p.id: p for p in collected["prompts"]}
    top_k = cfg.top_logprobs or 5
    diffs = {}
    for pid, r in res.get("concurrent", {}).items():
        single = res["single"].get(pid.split("#")[0])
        if single is not None and single.ok:
            diffs[pid] = compare(single, r, top_k=top_k, tie_gap=cfg.max_tie_gap, text_min_agreement=cfg.text_min_agreement)
    if not diffs:
        return None
    cons = sum(d.consistent for d in diffs.values()) / len(diffs)
    values["concurrent_consistency"] = round(cons, 3)
    why = {pid: d.detail for pid, d in diffs.items() if not d.consistent}
    for pid in diffs:
        p = prompts.get(pid.split("#")[0])
        if (p and (p.answer or p.json) and not res["concurrent"][pid].cut_while_thinking and task_right(p, res["single"])
                and not task_right(p, {p.id: res["concurrent"][pid]})):
            why.setdefault(pid, f"the single answer is right, this copy is not: {res['concurrent'][pid].text[:80]!r}")
    bad = [f"{pid}: {w}" for pid, w in why.items()]
    if bad:
        return Finding("concurrent", "concurrency_divergence",
                f"{len(bad)} of {len(diffs)} concurrent copies differ from the single answers beyond a near-tie; {bad[0]}", bad[:6])
    return None
