"""``bakeoff run``: resolve spec -> plan -> for each trial: run, triage, record -> report.

A killed sweep resumes: finished trials are kept, a trial left "running" by a killed bakeoff
has its server stopped (pid and process group are in the store) and runs again. Ctrl-C: see
``StopFlag``. The current trial and phase are mirrored in the store (``Store.progress``). One bad
configuration never stops the sweep; only bakeoff's own bugs propagate.
"""

from __future__ import annotations

import json
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from bakeoff.report import markdown as report
from bakeoff.run.engines.base import get_engine
from bakeoff.run.fingerprint import for_spec as fingerprint_for
from bakeoff.run.hosts import Host, command_line, get_host
from bakeoff.run.hosts.checks import on_host as checks_on_host
from bakeoff.plan import Planned, make_plan, pruned_by
from bakeoff.judge.probes import results_from_json
from bakeoff.redact import redact_env, redact_obj, remember
from bakeoff.spec import Spec, render
from bakeoff.store import Store, TrialRecord
from bakeoff.run.trial import TrialRunner, build_launch


@dataclass
class Events:
    """Callbacks for live progress; all optional."""

    trial_start: Callable[[Planned, int], None] = lambda p, n: None
    phase: Callable[[str, str], None] = lambda phase, line: None
    trial_end: Callable[[TrialRecord], None] = lambda rec: None
    note: Callable[[str], None] = lambda msg: None


class StopFlag:
    """First Ctrl-C (or SIGTERM): stop the current trial now, save it as interrupted, write the
    report and exit. Second: SIGKILL every server at once and exit 130 (143 for SIGTERM) without
    waiting for anything; the store stays consistent (WAL) and the next run resumes."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, on_stop: Callable[[], None] = lambda: None, on_hard_stop: Callable[[], None] = lambda: None) -> None:
        self.stopped = threading.Event()
        self.on_stop = on_stop
        self.on_hard_stop = on_hard_stop
        self._old: dict[int, object] = {}

    def __enter__(self) -> "StopFlag":
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if not self.stopped.is_set():
            self.stopped.set()
            self.on_stop()
            return
        try:
            self.on_hard_stop()
        finally:
            raise SystemExit(128 + signum)

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()


def planned_records(spec: Spec, plan: list[Planned], model_path: str) -> list[TrialRecord]:
    engine = get_engine(spec.engine, **spec.engine_options)
    out = []
    for p in plan:
        port = spec.server.port or 0
        launch = build_launch(spec, engine, p, port or 8000, model_path)
        out.append(TrialRecord(key=p.key, idx=p.idx, config={k: v for k, v in p.config.items()},
                               changed=list(p.changed), argv=redact_obj(launch.argv), env=redact_env(launch.env)))
    return out


def remember_secrets(spec: Spec) -> None:
    """Secret-named env values of the spec (server.env and env axes) are masked everywhere."""
    remember(spec.server.env)
    for axis in spec.axes:
        if axis.env is not None:
            remember({axis.env: str(v) for v in axis.values if not isinstance(v, bool)})


def make_host(spec: Spec) -> Host:
    """The spec's host, with the spec's per-trial log cap."""
    host = get_host(spec.host)
    if hasattr(host, "max_log_bytes"):
        host.max_log_bytes = spec.server.max_log_bytes
    return host


def recover_orphans(store: Store, host: Host, events: Events) -> int:
    """Stop servers left running by a bakeoff that was killed; put their trials back to pending.

    A server is found from its trial's pid and process group in the store and, for one the
    store never got to record, from the sweep tag in its environment. Its port must be free
    again before the sweep goes on.
    """
    n = 0
    for rec in store.trials():
        if rec.is_finished() and rec.metrics.get("server_left_running"):  # its teardown could not reach the host
            if rec.pid and host.kill_orphan(rec.pid, rec.pgid or rec.pid, rec.argv0):
                n += 1
                events.note(f"stopped the server trial {rec.idx} left running (pid {rec.pid})")
            store.save(rec.with_(metrics={k: v for k, v in rec.metrics.items() if k != "server_left_running"}))
            continue
        if rec.is_finished() or not (rec.state == "running" or rec.pid):
            continue
        if rec.pid and host.kill_orphan(rec.pid, rec.pgid or rec.pid, rec.argv0):
            n += 1
            events.note(f"stopped orphan server of trial {rec.idx} (pid {rec.pid})")
        if rec.port:
            _confirm_port_free(host, rec.port, events)
        if rec.state == "running":
            store.save(rec.with_(state="pending", verdict=rec.verdict if rec.verdict == "interrupted" else None))
    finder = getattr(host, "find_orphans", None)
    for pid in finder(store.dir) if finder else []:
        if host.kill_orphan(pid, pid, None):
            n += 1
            events.note(f"stopped unrecorded orphan server (pid {pid})")
    return n


def _confirm_port_free(host: Host, port: int, events: Events) -> bool:
    waiter = getattr(host, "wait_port_free", None)
    free = waiter(port) if waiter else host.port_is_free(port)
    if not free:
        events.note(f"port {port} is still in use by another process")
    return free


MAX_HOST_FAILURES = 2


def run_sweep(spec: Spec, out_dir: Path, *, events: Events | None = None, executor: str | None = None,
              known_bad: dict[tuple[str, str], str] | None = None) -> Path:
    events = events or Events()
    out_dir = Path(out_dir)
    remember_secrets(spec)
    plan = make_plan(spec)
    host = make_host(spec)
    model_path = checks_on_host(spec, host, out_dir, events.note)  # model path and axis values, where servers run
    with Store(out_dir, lock=True) as store:
        store.init_sweep(spec.name, spec.model_dump(mode="json"), fingerprint_for(spec, host))
        recover_orphans(store, host, events)
        store.add_trials(planned_records(spec, plan, model_path))
        bad: dict[tuple[str, str], str] = dict(known_bad or {})
        from bakeoff.preflight.plan import for_sweep as preflight_bad

        for pair, why in preflight_bad(spec, out_dir, events.note, host=host).items():
            bad.setdefault(pair, why)
        for rec in store.trials():
            _learn(rec, bad)
        engine = get_engine(spec.engine, **spec.engine_options)
        current: list[str | None] = [None, None]  # trial key, phase: mirrored into the store

        def on_phase(phase: str, line: str) -> None:
            if phase != current[1]:
                current[1] = phase
                store.set_progress(current[0], phase)
            events.phase(phase, line)

        runner: TrialRunner | None = None
        stop = StopFlag(on_stop=lambda: runner and runner.abort_current(),
                        on_hard_stop=getattr(host, "kill_all", lambda: None))
        with stop:
            runner = TrialRunner(spec, engine, host, store, out_dir, model_path, on_phase, stop.stopped.is_set)
            host_failures = 0  # consecutive trials the host failed under
            for p in plan:
                if stop.stopped.is_set():
                    break
                if host_failures >= MAX_HOST_FAILURES:
                    events.note(f"stopping: the host failed {host_failures} trials in a row; the rest stay pending "
                                "and `bakeoff run` again resumes")
                    break
                rec = store.get(p.key)
                if rec.is_finished():
                    continue
                # known_bad also maps whole config keys (a failing combination) to their reason
                why = (pruned_by(p, bad, spec.plan.force) or (known_bad or {}).get(p.key)) if spec.plan.prune else None
                if why:
                    cause = ("known_bad" if why in (known_bad or {}).values()
                             else "preflight" if why.startswith("preflight:") else "pruned")
                    rec = rec.with_(state="finished", verdict="skipped", cause=cause, detail=why)
                    store.save(rec)
                    events.trial_end(rec)
                    continue
                events.trial_start(p, len(plan))
                if spec.server.port:
                    _confirm_port_free(host, spec.server.port, events)
                current[:] = [p.key, None]
                baseline = _baseline_results(store, plan, spec)
                rec = runner.run(rec, p, baseline if p.changed else None)
                host_failures = host_failures + 1 if rec.verdict == "infra_error" else 0
                rec = _judge_speed(rec, store, plan, spec)
                store.save(rec)
                events.trial_end(rec)
                _learn(rec, bad)
            host_failed = any(t.verdict == "infra_error" for t in store.trials())
            store.set_progress(None, "interrupted" if stop.stopped.is_set() else "host_failed" if host_failed else "done")
        report.write(out_dir, store)
        if stop.stopped.is_set():
            events.note("interrupted: the report shows what finished; `bakeoff run` again resumes")
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
    remember_secrets(spec)
    model_path = spec.model_path()  # a remote host's model is checked on it by `bakeoff run`
    plan = make_plan(spec)
    engine = get_engine(spec.engine, **spec.engine_options)
    out = []
    for p, r in zip(plan, planned_records(spec, plan, model_path)):
        launch = build_launch(spec, engine, p, spec.server.port or 8000, model_path)
        out.append({"idx": r.idx, "label": p.label, "changed": r.changed, "argv": r.argv, "env": r.env,
                    "command": command_line(spec.host, launch.argv, launch.env, f"{p.idx:03d}-{p.key}.log", spec.name)})
    return out


def dumps(obj) -> str:
    return json.dumps(obj, indent=2)
