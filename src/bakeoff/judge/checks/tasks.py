"""Tasks and needles the baseline got right and the trial lost, by a divergence that is not a
near-tie (a loss along a near-tie chain shown to the end of the answer is the tie's)."""

from __future__ import annotations

from bakeoff.judge.checks import Evidence, Finding
from bakeoff.judge.checks.differential import _toks
from bakeoff.judge.probeset import needle_found, task_right, task_score, unanswered


def check(ev: Evidence) -> Finding | None:
    """A task (or needle) the baseline got right and the trial lost fails unless the trial's
    whole answer there stayed a chain of near-ties (then the loss is the tie's, not the engine's)."""
    collected, cfg, baseline, values, expect_logprobs = ev.collected, ev.cfg, ev.baseline, ev.values, ev.expect_logprobs
    prompts, res = collected["prompts"], collected["results"]
    right, total = task_score(prompts, res.get("single", {}))
    values["task_accuracy"] = f"{right}/{total}"
    long_cfg = collected.get("long") or {}
    if res.get("long") and long_cfg.get("needles"):
        values["needles_found"] = f"{sum(needle_found(long_cfg, k, r.text) for k, r in res['long'].items())}/{len(res['long'])}"
    if baseline is None:
        return None
    base_res = baseline["results"]
    bright, _ = task_score(prompts, base_res.get("single", {}))
    values["task_accuracy_baseline"] = f"{bright}/{total}"
    diffs = ev.diffs
    def excused(mode: str, pid: str) -> bool:  # a near-tie chain shown to the end of the answer
        d = diffs.get((mode, pid))
        return (d is not None and d.consistent and expect_logprobs
                and (d.reanchored > 0 or d.diverge_at is None or d.diverge_at >= len(_toks(base_res[mode][pid])) - 1))

    cut = unanswered(res.get("single", {})) | unanswered(base_res.get("single", {}))
    lost = [p.id for p in prompts if (p.answer or p.json) and p.id not in cut and task_right(p, base_res.get("single", {}))
            and not task_right(p, res.get("single", {})) and not excused("single", p.id)]
    if lost and len(lost) / max(total, 1) > cfg.max_task_drop:
        return Finding("single", "task_accuracy", f"tasks right {right}/{total} vs baseline {bright}/{total}; lost {lost} "
                                           f"by divergences that are not near-ties",
                [f"{pid}: baseline {base_res['single'][pid].text[:80]!r}, trial {res['single'][pid].text[:80]!r}" for pid in lost])
    if res.get("long") and base_res.get("long") and long_cfg.get("needles"):
        values["needles_found_baseline"] = (f"{sum(needle_found(long_cfg, k, r.text) for k, r in base_res['long'].items())}"
                                            f"/{len(base_res['long'])}")
        cut = unanswered(res["long"]) | unanswered(base_res["long"])
        lost = [k for k, r in res["long"].items() if k in base_res["long"] and k not in cut
                and needle_found(long_cfg, k, base_res["long"][k].text) and not needle_found(long_cfg, k, r.text) and not excused("long", k)]
        if lost:
            k = lost[0]
            return Finding("long", "long_context_task", f"the baseline found needle {k!r} in the long document "
                                                 f"({res['long'][k].prompt_tokens} tokens), this trial answered {res['long'][k].text[:80]!r}",
                    [f"baseline: {base_res['long'][k].text[:120]!r}", f"trial: {res['long'][k].text[:120]!r}"])
    return None
