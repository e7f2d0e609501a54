"""Correctness under launch-to-launch nondeterminism: a statistical gate's failure is confirmed on
a relaunch of the trial before it is called wrong.

Measured (H200, llama.cpp CUDA, SmolLM2-135M, ``--parallel 8``; docs/notes/judge-thresholds.md):
five identical launches of the baseline differed from each other in 19–36 of the 80 greedy gate
answers, and one of them was judged ``wrong (task_gate)`` against the baseline's single launch
(31/80 vs 38/80, lost 7, gained 0, exact McNemar p = 0.0078). The paired test takes the
baseline's launch as fixed truth; batched serving on a GPU is not deterministic from one launch
to the next, so that variation reads as a configuration effect. Two answers:

* the baseline's own relaunches (``relaunch.remeasure``) store what they answered right
  (``probes.launch_answers``); an item the baseline answered differently on two of its launches
  is no evidence either way and leaves the paired tests (``judge.checks.gate``, ``judge.checks.lm_eval``);
* a trial that failed *only* a statistical gate (``STATISTICAL``: every check before it passed)
  is launched once more (``pipeline``): failing again, by any check, is ``wrong`` with both
  launches' evidence; passing is ``unstable`` — said in every output, never ranked or
  recommended, and not called wrong. A real fault fails on every launch and stays ``wrong``.
"""

from __future__ import annotations

import time

from bakeoff.store import CORRECT, TrialRecord

STATISTICAL = ("task_gate", "lm_eval_task", "sampled_path", "logprob_drift")  # significance tests: a launch's own noise can fail them


def needs_confirming(rec: TrialRecord) -> bool:
    """A changed configuration that failed a statistical gate on its first launch."""
    return bool(rec.changed) and rec.verdict == "wrong" and rec.cause in STATISTICAL and not rec.metrics.get("first_launch")


def first_launch(rec: TrialRecord) -> dict:
    """What the first launch showed, kept beside the relaunch's verdict."""
    return {"verdict": rec.verdict, "cause": rec.cause, "detail": rec.detail, "evidence": list(rec.evidence[:8]),
            "probe": rec.metrics.get("probe"), "log_path": rec.log_path}


def to_confirm(rec: TrialRecord) -> TrialRecord:
    """``rec`` back to pending, to be launched once more; the first launch kept in its metrics
    (a resume that finds it confirms it the same way)."""
    return rec.with_(state="pending", verdict=None, cause=None, evidence=[], finished=None,
                     detail=f"launched again to confirm a statistical gate's failure: {rec.detail}",
                     metrics={"first_launch": first_launch(rec)})


def confirmed(second: TrialRecord, first: dict) -> TrialRecord:
    """The verdict over both launches: ``wrong`` when the relaunch fails too (by any check),
    ``unstable`` when it passes; a crash (or a host failure) stays what it is."""
    kept = {**second.metrics, "first_launch": first}
    if second.verdict == "wrong":
        return second.with_(detail=f"{second.detail} — confirmed on a relaunch (the first launch failed too: {first['detail']})",
                            evidence=[*second.evidence, "first launch:", *first["evidence"]],
                            metrics={**kept, "launches_judged": 2})
    if second.verdict not in CORRECT:
        return second.with_(metrics=kept)
    detail = (f"unstable: the first launch failed a statistical gate ({first['detail']}); launched again it passed every "
              f"check ({second.detail}). Its answers change from launch to launch beyond what the paired test allows "
              "against the baseline: not recommended, not called wrong; the first launch's evidence follows")
    return second.with_(verdict="unstable", cause=first["cause"], detail=detail, evidence=first["evidence"],
                        metrics={**kept, "launches_judged": 2, "judged": "unstable", "judged_detail": detail},
                        finished=second.finished or time.time())


def caution(label: str, rec: TrialRecord) -> str:
    """The decision's line for an ``unstable`` trial (every output prints the decision's cautions)."""
    return (f"UNSTABLE: {label} failed the {rec.cause} on one launch and passed on a relaunch: its answers change from "
            "launch to launch more than the baseline's; not recommended (relaunch it, or raise probes.gate_items, to settle it)")
