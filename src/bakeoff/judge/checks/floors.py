"""Absolute floors, for every trial, the baseline included: evidence of being right whatever
the baseline did (the set's tasks, JSON replies, the task gate's accuracy, the long document's
needles). The baseline below them is ``baseline_below_floor``: nothing known-good exists."""

from __future__ import annotations

from bakeoff.judge.checks import Evidence, Finding
from bakeoff.judge.probeset import Prompt, gate_items, needle_found, scored_tasks, task_right, task_score, unanswered
from bakeoff.judge.stats import wilson
from bakeoff.spec import Probes


def absolute_floors(collected: dict, cfg: Probes) -> list[str]:
    """Findings 'floor_name: evidence' where this server's own answers fall below what any
    healthy model of the family must reach, whatever the baseline did:

    * ``task_floor``: the probe set's checkable tasks right < ``min_task_accuracy``;
    * ``json_floor``: a JSON prompt answered with no JSON object;
    * ``gate_floor``: the task gate's accuracy < ``min_gate_accuracy`` (with its Wilson interval);
    * ``long_floor``: fewer than ``min_needles`` of the long document's needles found;
    * ``thinking_cut``: the set's tasks (or the gate's items) were asked and none was answered,
      every reply cut by ``max_tokens`` while thinking: no evidence of being right.
    """
    res = collected["results"]
    prompts: list[Prompt] = collected["prompts"]
    found = []
    single = res.get("single", {})
    right, total = task_score(prompts, single)
    asked = [p for p in prompts if (p.answer or p.json) and p.id in single]
    if asked and not total:
        found.append(f"thinking_cut: the probe set: all {len(asked)} checkable tasks were cut by max_tokens while thinking "
                     f"(no answer to judge); raise server.thinking_tokens")
    if total and right / total < cfg.min_task_accuracy:
        missed = [p.id for p in scored_tasks(prompts, single) if not task_right(p, single)]
        found.append(f"task_floor: {right}/{total} checkable tasks right (floor {cfg.min_task_accuracy:.0%}); missed {missed}")
    for p in scored_tasks(prompts, single):  # a JSON object (or a thought) cut at max_tokens is no evidence either way
        if p.json and p.id in single and not task_right(p, single):
            found.append(f"json_floor: prompt {p.id} asked for a JSON object, got {res['single'][p.id].text[:80]!r}")
    gate = res.get("gate") or {}
    if gate:
        items = [p for p in gate_items(cfg.gate_items, cfg.gate_seed) if p.id not in unanswered(gate)]
        k = sum(task_right(p, gate) for p in items)
        lo, hi = wilson(k, len(items))
        if not items:
            found.append(f"thinking_cut: the task gate: all {len(gate)} items were cut by max_tokens while thinking "
                         f"(no answer to judge); raise server.thinking_tokens")
        elif k / len(items) < cfg.min_gate_accuracy:
            found.append(f"gate_floor: task gate {k}/{len(items)} right ({k / len(items):.0%}, 95% CI {lo:.0%}–{hi:.0%}), "
                         f"floor {cfg.min_gate_accuracy:.0%}")
    long_cfg = collected.get("long") or {}
    if res.get("long") and long_cfg.get("needles") and set(res["long"]) - unanswered(res["long"]):
        keys = [key for key in res["long"] if key not in unanswered(res["long"])]
        hits = sum(needle_found(long_cfg, k, res["long"][k].text) for k in keys)
        need = min(cfg.min_needles, len(keys))
        if hits < need:
            found.append(f"long_floor: {hits}/{len(keys)} needles found in the long document (floor {need}); "
                         f"e.g. {keys[0]}: {res['long'][keys[0]].text[:80]!r}")
    return found


def check(ev: Evidence) -> Finding | None:
    collected, cfg, values, role = ev.collected, ev.cfg, ev.values, ev.role
    _gate_values(collected, cfg, values)
    floors = absolute_floors(collected, cfg)
    if not floors:
        return None
    mode = {"task": "single", "json": "single", "gate": "gate", "long": "long",
            "thinking": "gate" if "the task gate" in floors[0] else "single"}[floors[0].split(":")[0].split("_")[0]]
    if role == "baseline":
        return Finding(mode, "baseline_below_floor",
                f"the baseline itself is below the absolute floors, so nothing known-good exists: {floors[0]}", floors)
    return Finding(mode, floors[0].split(":")[0], f"below the absolute floor: {floors[0]}", floors)


def _gate_values(collected, cfg, values) -> None:
    gate = collected["results"].get("gate") or {}
    if gate:
        items = [p for p in gate_items(cfg.gate_items, cfg.gate_seed) if p.id not in unanswered(gate)]
        k = sum(task_right(p, gate) for p in items)
        values["gate_accuracy"] = f"{k}/{len(items)}"
        values["gate_ci95"] = list(wilson(k, len(items)))
