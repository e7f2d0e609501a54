"""The task gate: the paired exact one-sided McNemar test of the generated items against the
baseline, over the items the baseline answered alike on each of its launches (its relaunches'
``launch_answers``); a gate-only failure is confirmed on a relaunch (``bakeoff.judge.confirm``)."""

from __future__ import annotations

from bakeoff.judge.checks import Evidence, Finding
from bakeoff.judge.probeset import gate_items, task_right, unanswered
from bakeoff.judge.stats import mcnemar_worse, unstable_items, wilson
from bakeoff.spec import Probes


def launch_answers(collected: dict, cfg: Probes) -> dict:
    """What one launch answered right: per task-gate item (answered ones) and per lm-eval
    document. The baseline's relaunches store it, so that the paired tests use only what the
    baseline answers the same way on every launch (``stable_only``)."""
    gate = collected["results"].get("gate") or {}
    out: dict = {"gate": {p.id: task_right(p, gate) for p in gate_items(cfg.gate_items, cfg.gate_seed)
                          if p.id in gate and p.id not in unanswered(gate)}}
    if collected.get("lm_eval"):
        out["lm_eval"] = {task: {d: bool(v[0]) for d, v in got["docs"].items()} for task, got in collected["lm_eval"]["tasks"].items()}
    return out


def check(ev: Evidence) -> Finding | None:
    """The paired exact McNemar test of the task gate against the baseline, over the items both
    answered and that the baseline answered the same way on each of its launches (its relaunches'
    ``launch_answers``, when any were made before this judgement): an item the baseline itself
    gets right on one launch and wrong on another is launch noise, not a reference."""
    collected, cfg, baseline, values = ev.collected, ev.cfg, ev.baseline, ev.values
    gate, base_gate = collected["results"].get("gate") or {}, (baseline or {}).get("results", {}).get("gate") or {}
    if not gate or not base_gate:
        return None
    cut = unanswered(gate) | unanswered(base_gate)  # paired items both sides answered
    items = [p for p in gate_items(cfg.gate_items, cfg.gate_seed) if p.id in gate and p.id in base_gate and p.id not in cut]
    runs = [a.get("gate") or {} for a in (baseline or {}).get("launch_answers") or []]
    if runs:
        shaky = unstable_items({p.id: task_right(p, base_gate) for p in items}, runs)
        items = [p for p in items if p.id not in shaky]
        values.update(gate_baseline_launches=1 + len(runs), gate_unstable_on_baseline=len(shaky))
    b = [task_right(p, base_gate) for p in items]
    t = [task_right(p, gate) for p in items]
    lost, gained, p = mcnemar_worse(b, t)
    values.update(gate_accuracy_baseline=f"{sum(b)}/{len(items)}", gate_ci95_baseline=list(wilson(sum(b), len(items))),
                  gate_lost=lost, gate_gained=gained, gate_p=round(p, 4))
    if p < cfg.gate_alpha:
        ev = [f"{q.id}: baseline {base_gate[q.id].text[:60]!r}, trial {gate[q.id].text[:60]!r}"
              for q, bb, tt in zip(items, b, t) if bb and not tt][:6]
        return Finding("gate", "task_gate", f"task gate {sum(t)}/{len(items)} {values['gate_ci95']} vs baseline "
                                     f"{sum(b)}/{len(items)} {values['gate_ci95_baseline']}: lost {lost}, gained {gained}, "
                                     f"exact McNemar p={p:.2g} < {cfg.gate_alpha}", ev)
    return None
