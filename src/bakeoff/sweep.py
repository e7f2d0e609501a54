"""``bakeoff run``: resolve spec -> plan -> for each trial: run, triage, record -> report.

A killed sweep resumes: finished trials are kept, a trial left "running" by a killed bakeoff
has its server stopped (pid and process group are in the store) and runs again. One bad
configuration never stops the sweep; only bakeoff's own bugs propagate.
"""

from __future__ import annotations

import json
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from bakeoff import report
from bakeoff.engines.base import get_engine
from bakeoff.fingerprint import environment_fingerprint
from bakeoff.hosts.base import Host, get_host
from bakeoff.plan import Planned, make_plan, pruned_by
from bakeoff.probes import results_from_json
from bakeoff.redact import redact_env
from bakeoff.spec import Spec, render
from bakeoff.store import Store, TrialRecord
from bakeoff.trial import TrialRunner, build_launch


@dataclass
class Events:
    """Callbacks for live progress; all optional."""

    trial_start: Callable[[Planned, int], None] = lambda p, n: None
    phase: Callable[[str, str], None] = lambda phase, line: None
    trial_end: Callable[[TrialRecord], None] = lambda rec: None
    note: Callable[[str], None] = lambda msg: None


class StopFlag:
    """First Ctrl-C: stop the current trial cleanly and save. Second: default behaviour."""

    def __init__(self) -> None:
        self.stopped = threading.Event()
        self._old = None

    def __enter__(self) -> "StopFlag":
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.stopped.set()
        signal.signal(signal.SIGINT, self._old or signal.default_int_handler)

    def __exit__(self, *exc) -> None:
        if self._old is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._old)


def planned_records(spec: Spec, plan: list[Planned], model_path: str) -> list[TrialRecord]:
    engine = get_engine(spec.engine, **spec.engine_options)
    out = []
    for p in plan:
        port = spec.server.port or 0
        launch = build_launch(spec, engine, p, port or 8000, model_path)
        out.append(TrialRecord(key=p.key, idx=p.idx, config={k: v for k, v in p.config.items()},
                               changed=list(p.changed), argv=launch.argv, env=redact_env(launch.env)))
    return out


def recover_orphans(store: Store, host: Host, events: Events) -> int:
    """Stop servers left running by a bakeoff that was killed; put their trials back to pending."""
    n = 0
    for rec in store.trials():
        if rec.state != "running":
            continue
        if rec.pid and host.kill_orphan(rec.pid, rec.pgid or rec.pid, rec.argv0):
            n += 1
            events.note(f"stopped orphan server of trial {rec.idx} (pid {rec.pid})")
        if rec.port:
            waiter = getattr(host, "wait_port_free", None)
            if waiter:
                waiter(rec.port)
        store.save(rec.with_(state="pending", verdict=rec.verdict if rec.verdict == "interrupted" else None))
    return n


def run_sweep(spec: Spec, out_dir: Path, *, events: Events | None = None, executor: str | None = None,
              known_bad: dict[tuple[str, str], str] | None = None) -> Path:
    events = events or Events()
    out_dir = Path(out_dir)
    model_path = spec.model.resolve()
    plan = make_plan(spec)
    with Store(out_dir, lock=True) as store:
        store.init_sweep(spec.name, spec.model_dump(mode="json"), environment_fingerprint(spec.engine))
        host = get_host(spec.host)
        recover_orphans(store, host, events)
        for rec in planned_records(spec, plan, model_path):
            store.add_trial(rec)
        bad: dict[tuple[str, str], str] = dict(known_bad or {})
        for rec in store.trials():
            _learn(rec, bad)
        engine = get_engine(spec.engine, **spec.engine_options)
        with StopFlag() as stop:
            runner = TrialRunner(spec, engine, host, store, out_dir, model_path, events.phase, stop.stopped.is_set)
            for p in plan:
                if stop.stopped.is_set():
                    break
                rec = store.get(p.key)
                if rec.is_finished():
                    continue
                why = pruned_by(p, bad, spec.plan.force) if spec.plan.prune else None
                if why:
                    rec = rec.with_(state="finished", verdict="skipped", cause="pruned", detail=why)
                    store.save(rec)
                    events.trial_end(rec)
                    continue
                events.trial_start(p, len(plan))
                baseline = _baseline_results(store, plan, spec)
                rec = runner.run(rec, p, baseline if p.changed else None)
                rec = _judge_speed(rec, store, plan, spec)
                store.save(rec)
                events.trial_end(rec)
                _learn(rec, bad)
        report.write(out_dir, store)
    return out_dir / "report.md"


def _learn(rec: TrialRecord, bad: dict[tuple[str, str], str]) -> None:
    """A hard incompatibility in a single-change trial condemns that axis value."""
    if rec.verdict == "crashed" and rec.metrics.get("hard") and len(rec.changed) == 1:
        axis = rec.changed[0]
        value = render(rec.config[axis])
        bad.setdefault((axis, value), f"{axis}={value} failed in trial {rec.idx} with {rec.cause} (hard incompatibility)")


def _baseline_results(store: Store, plan: list[Planned], spec: Spec) -> dict | None:
    base = store.get(plan[0].key)
    if base is None or base.verdict not in ("ok", "slow"):
        return None
    data = store.artifact(base.key, "probes")
    return results_from_json(data, spec.probes.set) if data else None


def _judge_speed(rec: TrialRecord, store: Store, plan: list[Planned], spec: Spec) -> TrialRecord:
    """Correct but below ``bench.slow_fraction`` of the baseline's tok/s -> 'slow'."""
    if rec.verdict != "ok" or not rec.changed:
        return rec
    base = store.get(plan[0].key)
    b = (base.metrics or {}).get("output_tok_s") if base else None
    t = rec.metrics.get("output_tok_s")
    if not b or not t:
        return rec
    ratio = t / b
    metrics = {**rec.metrics, "ratio_vs_baseline": round(ratio, 3)}
    if ratio < spec.bench.slow_fraction:
        return rec.with_(verdict="slow", metrics=metrics,
                         detail=f"correct, but {ratio:.2f}x the baseline's output tok/s (threshold {spec.bench.slow_fraction})")
    return rec.with_(metrics=metrics)


def plan_json(spec: Spec) -> list[dict]:
    model_path = spec.model.resolve()
    return [
        {"idx": r.idx, "label": Planned(r.idx, r.config, tuple(r.changed)).label, "changed": r.changed,
         "argv": r.argv, "env": r.env}
        for r in planned_records(spec, make_plan(spec), model_path)
    ]


def dumps(obj) -> str:
    return json.dumps(obj, indent=2)
