"""No verdict without its baseline: trials judged while the baseline had not passed, judged again
once it has.

A trial that ran while the baseline was missing (its ``infra_error`` let the sweep go on, or it
failed and was fixed before a resume) was judged by the absolute checks only: no differential,
no task or gate comparison. When the baseline passes later, such a trial is re-judged against
the baseline's stored answers from its own stored answers (``probes.results_to_json``) and its
stored benchmark levels — the same ``probes.judge`` and ``bench.check_against_baseline`` a live
trial gets. What stored answers cannot settle goes back to ``pending`` and runs again with the
baseline: a near-tie divergence whose continuation was never teacher-forced (that needs the live
server), a trial with no stored answers, a model behaviour (a loop) that the baseline may excuse
but whose trial never reached its benchmark; a statistical gate's failure is confirmed on a
relaunch (``judge.confirm``) like a live one.

Until re-judged, ``decide`` keeps such a trial's caution (``without_baseline``): it is never
ranked as faster than a baseline its answers were not compared with.
"""

from __future__ import annotations

import time

from bakeoff.judge import confirm, probes
from bakeoff.judge.checks.drift import lossy_axes
from bakeoff.spec import Spec
from bakeoff.store import CORRECT, Store, TrialRecord

NOT_COMPARED = "differential vs a baseline (none healthy to compare with)"  # probes.judge's checks_not_run line
# failures that a teacher-forced continuation could excuse (a near-tie followed to the end of the answer)
NEEDS_LIVE_SERVER = ("task_accuracy", "long_context_task", "low_agreement")


def judged_without_baseline(rec: TrialRecord) -> bool:
    """A changed configuration whose answers were never compared with a passing baseline's."""
    m = rec.metrics or {}
    return bool(rec.changed) and (bool(m.get("without_baseline")) or NOT_COMPARED in (m.get("checks_not_run") or []))


def rejudge_all(store: Store, spec: Spec, *, expect_logprobs: bool, ignore_eos: bool,
                note=lambda msg: None) -> list[TrialRecord]:
    """Every current trial judged without its baseline, judged against the baseline now that it
    passed (nothing when it has not). Saves and returns the records it changed."""
    trials = store.current()
    todo = [t for t in trials if t.is_finished() and judged_without_baseline(t)]
    base = next((t for t in trials if t.is_baseline and t.is_finished()), None)
    if not todo or base is None or base.judged not in CORRECT:
        return []
    base_art = store.artifact(base.key, "probes")
    if base_art is None:
        return []
    baseline = probes.results_from_json(base_art, spec.probes.set)
    out = []
    for t in todo:
        art = store.artifact(t.key, "probes")
        new = rejudge(t, probes.results_from_json(art, spec.probes.set) if art else None, baseline, spec,
                      expect_logprobs=expect_logprobs, ignore_eos=ignore_eos)
        if new is t:
            continue
        store.save(new)
        note(f"trial {t.idx} ran while the baseline had not passed: "
             + (f"re-judged against it from its stored answers: {new.verdict}" if new.is_finished()
                else "its stored answers cannot settle it; it runs again against the baseline"))
        out.append(new)
    return out


def rejudge(rec: TrialRecord, collected: dict | None, baseline: dict, spec: Spec, *,
            expect_logprobs: bool, ignore_eos: bool = False) -> TrialRecord:
    """``rec`` judged against ``baseline`` from its stored answers ``collected``: ``wrong`` with the
    evidence, ``ok`` (decide rates its speed) with ``rejudged`` saying how, or ``pending`` (run
    again) where the stored answers cannot settle it. Unchanged when there is nothing to decide
    (a verdict no baseline can change: crashed, or wrong by an absolute check)."""
    first = rec.judged
    if first not in CORRECT and not (first == "wrong" and rec.cause in probes.MODEL_BEHAVIOUR):
        return rec.with_(metrics={**rec.metrics, "without_baseline": False}) if rec.metrics.get("without_baseline") else rec
    if collected is None:
        return _again(rec)
    lossy = lossy_axes(spec.engine, spec.axes, rec.changed)
    outcome = probes.judge(collected, spec.probes, baseline, expect_logprobs=expect_logprobs, role="trial", lossy=lossy)
    unfollowed = [k for k, d in (collected.get("_diffs") or {}).items() if not d.whole]
    how = ("re-judged against the baseline's stored answers once the baseline passed (this trial ran while it "
           "had not)")
    if not outcome.passed and (outcome.detector not in NEEDS_LIVE_SERVER or not unfollowed):
        wrong = rec.with_(state="finished", verdict="wrong", cause=outcome.detector,
                         detail=f"wrong in {outcome.failed_mode} mode ({outcome.detector}): {outcome.detail} — {how}",
                         evidence=outcome.evidence or [outcome.detail],
                         metrics={**_kept(rec), "probe": outcome.values, "failed_mode": outcome.failed_mode,
                                  "detector": outcome.detector, "checks_not_run": outcome.checks_not_run,
                                  "judged": "wrong", "rejudged": how},
                         finished=time.time())
        return confirm.to_confirm(wrong) if confirm.needs_confirming(wrong) else wrong  # a paired test: a relaunch confirms
    if not outcome.passed or unfollowed or first not in CORRECT:
        return _again(rec)  # a near-tie never followed (or a loop the baseline excuses): the live server decides
    levels, fault = _bench_against(rec.metrics.get("levels") or [], baseline, spec, ignore_eos)
    if fault:
        mode = f"bench {fault['level']}"
        return rec.with_(verdict="wrong", cause=fault["fault"],
                         detail=f"wrong in {mode} mode ({fault['fault']}): {fault['why_invalid']} — {how}",
                         evidence=[fault["why_invalid"] or ""],
                         metrics={**_kept(rec), "levels": levels, "failed_mode": mode, "detector": fault["fault"],
                                  "judged": "wrong", "rejudged": how})
    return rec.with_(verdict="ok", detail=outcome.detail,
                     metrics={**_kept(rec), "levels": levels, "probe": outcome.values, "checks_not_run":
                              [*outcome.checks_not_run, "teacher-forced continuation (re-judged from stored answers: "
                               "no divergence needed one)"] if expect_logprobs else outcome.checks_not_run,
                              "judged": "ok", "judged_detail": outcome.detail, "rejudged": how})


def _kept(rec: TrialRecord) -> dict:
    """The stored metrics without what the first judgement said."""
    return {k: v for k, v in rec.metrics.items()
            if k not in ("without_baseline", "judged", "judged_detail", "unverified", "vs_baseline", "ratio_vs_baseline")}


def _again(rec: TrialRecord) -> TrialRecord:
    """Back to pending: the next dispatch runs it with the baseline's answers."""
    return rec.with_(state="pending", verdict=None, cause=None, detail="runs again: it was judged while the baseline "
                     "had not passed", evidence=[], metrics={}, finished=None)


def _bench_against(levels: list[dict], baseline: dict, spec: Spec, ignore_eos: bool) -> tuple[list[dict], dict | None]:
    """The stored benchmark levels judged against the baseline's same levels (early stops, loops)."""
    from bakeoff.measure import bench

    cfg = spec.bench
    base_levels = {lv["level"]: lv for lv in (baseline.get("bench") or [])}
    eos = cfg.sends_ignore_eos(ignore_eos)
    out = [bench.check_against_baseline(lv, base_levels.get(lv.get("level")), early_stop_ratio=cfg.early_stop_ratio,
                                        max_tokens=cfg.output_tokens, ignore_eos=eos,
                                        early_stop_share=cfg.early_stop_share) for lv in levels]
    return out, next((lv for lv in out if lv.get("fault")), None)
