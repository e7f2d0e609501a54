"""Replay a strategy against known outcomes, without an engine: the pipeline's loop in
miniature (baseline first, ask up to ``parallel`` at a time, the known-bad gate with the
strategy's ``learned`` sets, ``plan.max_trials``), each trial's outcome looked up in a table
of recorded results (e.g. a full grid's store). Used by the unit tests and by
``bench/search_efficiency.py --replay`` to count the launches a strategy needs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from bakeoff.plan import config_key, planned
from bakeoff.plan.base import make_strategy
from bakeoff.plan.prune import Gate
from bakeoff.spec import Spec
from bakeoff.store import TrialRecord

Outcome = Callable[[dict], TrialRecord]  # config -> its finished record (verdict, metrics)


@dataclass
class Replay:
    history: list[TrialRecord] = field(default_factory=list)
    why_done: str = ""
    learned: dict = field(default_factory=dict)
    asks: list[list[dict]] = field(default_factory=list)

    @property
    def launches(self) -> int:
        return sum(1 for t in self.history if t.verdict != "skipped")


def replay(spec: Spec, outcome: Outcome, *, parallel: int = 1, start: list[TrialRecord] | None = None) -> Replay:
    """Run ``spec``'s strategy to its end against ``outcome``; ``start`` is a stored history to
    resume from. With ``parallel`` > 1 the trials of one ask finish together, in order."""
    from bakeoff.decide import decide

    strategy = make_strategy(spec)
    gate = Gate.for_spec(spec)
    r = Replay(history=list(start or []))
    clock = [max((t.finished or 0 for t in r.history), default=0.0)]

    def finish(cfg: dict, verdict: str | None = None, why: tuple[str, str] | None = None) -> None:
        p = planned(len(r.history), cfg, spec)
        clock[0] += 1
        if verdict == "skipped":
            rec = TrialRecord(key=p.key, idx=p.idx, config=dict(cfg), changed=list(p.changed), argv=[], env={},
                              state="finished", verdict="skipped", cause=why[0], detail=why[1], finished=clock[0])
        else:
            got = outcome(cfg)
            rec = got.with_(key=p.key, idx=p.idx, config=dict(cfg), changed=list(p.changed), state="finished",
                            finished=clock[0])
        r.history.append(rec)
        gate.learn(rec)
        _, r.history[:] = decide(spec.model_dump(mode="json"), r.history)

    if not any(not t.changed for t in r.history):
        finish(spec.baseline_config())
    for rec in r.history:
        gate.learn(rec)
    while True:
        left = parallel if spec.plan.max_trials is None else min(parallel, spec.plan.max_trials - r.launches)
        if left <= 0:
            r.why_done = "the search budget ran out (plan.max_trials / plan.max_hours)"
            break
        asked = strategy.ask(list(r.history), [], left)
        r.asks.append(asked)
        for pairs, why in strategy.learned().items():
            gate.add(pairs, why, "incompatible")
        r.learned.update(strategy.learned())
        if not asked:
            r.why_done = strategy.why_done
            break
        for cfg in asked:
            skip = gate.skip(planned(0, cfg, spec))
            finish(cfg, "skipped" if skip else None, skip)
    return r


def table_outcome(records: list[TrialRecord]) -> Outcome:
    """Outcomes looked up by configuration in recorded trials (e.g. a grid's store)."""
    by = {config_key(t.config): t for t in records}

    def outcome(cfg: dict) -> TrialRecord:
        t = by.get(config_key(cfg))
        if t is None:
            raise KeyError(f"no recorded outcome for {cfg}")
        return t.with_(verdict=t.judged)
    return outcome


def record(verdict: str, tok_s: float | None = None, samples: list[float] | None = None, cause: str | None = None,
           hard: bool = False) -> TrialRecord:
    """A finished record with one figure (output tok/s at c=4), for tables of outcomes."""
    metrics: dict = {"judged": verdict}
    if tok_s is not None:
        lv = {"level": "c=4", "valid": True, "output_tok_s": tok_s}
        if samples:
            lv["samples"] = {"output_tok_s": samples}
        metrics["levels"] = [lv]
    if hard:
        metrics["hard"] = True
    return TrialRecord(key="", idx=0, config={}, changed=[], argv=[], env={}, state="finished", verdict=verdict,
                       cause=cause, metrics=metrics, finished=time.time())
