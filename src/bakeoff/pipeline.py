"""``bakeoff run``: resolve spec -> plan -> dispatch trials -> record -> decide -> report.

One loop for every executor. The baseline runs first and alone (every other verdict is judged
against its answers); then the strategy proposes configurations while the executor has room,
each one checked against the known-bad gate (``--known-bad`` matrices, preflight, hard
failures seen so far) before it is dispatched. Every finished trial is saved, taught to the gate,
and the decision (final verdicts, recommendation) is made again from the store, so a watcher
and an interrupted sweep see the same thing the report will say.

Resume: a trial whose identity (model, args, env, engine version, probe and bench settings)
matches the spec's is kept; a stale one is neither ranked nor reused. A trial left "running"
by a killed bakeoff has its server stopped and runs again. Ctrl-C: see ``StopFlag``. One bad
configuration never stops the sweep; only bakeoff's own bugs propagate.

No verdict without its baseline: a trial dispatched while the baseline had not passed is judged
against it once it passes (``judge.rejudge``). A trial that failed only a statistical gate is
launched again before it is called wrong (``judge.confirm``: ``wrong`` again, or ``unstable``).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from bakeoff import decide
from bakeoff.judge import lmeval
from bakeoff.judge import confirm
from bakeoff.plan import Planned, make_plan, planned
from bakeoff.plan.base import make_strategy
from bakeoff.plan.prune import Gate
from bakeoff.errors import SpecError
from bakeoff.measure.client import api_key, use_api_key_env
from bakeoff.redact import is_secret_flag, mask_argv, redact_env, remember, remember_argv, remember_values
from bakeoff.relaunch import launch_again, remeasure
from bakeoff.report import write_reports
from bakeoff.run.engines.base import get_engine
from bakeoff.run.executors import Context, Executor, Job, make_executor
from bakeoff.run.executors.base import Events  # noqa: F401  (callers import it from here)
from bakeoff.run.fingerprint import for_spec as fingerprint_for
from bakeoff.run.hosts import Host, command_line, get_host
from bakeoff.run.hosts.checks import on_host as checks_on_host
from bakeoff.run.trial import deploy_launch
from bakeoff.run.hosts.local import LocalHost
from bakeoff.spec import Spec
from bakeoff.run.identity import identity_of, spec_changes
from bakeoff.store import CORRECT, Store, TrialRecord

MAX_HOST_FAILURES = 2


class StopFlag:
    """First Ctrl-C (or SIGTERM): stop the current trials now, save them as interrupted, write
    the report and exit. Second: SIGKILL every server at once and exit 130 (143 for SIGTERM)
    without waiting for anything; the store stays consistent (WAL) and the next run resumes."""

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


# -- resolve -------------------------------------------------------------------------------
def remember_secrets(spec: Spec) -> None:
    """Secret-named env values of the spec (server.env and env axes), secret flags' values
    (``--api-key sk-...`` in server.args or a flag axis) and the API key bakeoff sends
    (``server.api_key_env``) are masked everywhere."""
    remember(spec.server.env)
    remember_argv(list(spec.server.args))
    for axis in spec.axes:
        if axis.env is not None:
            remember({axis.env: str(v) for v in axis.values if not isinstance(v, bool)})
        if axis.flag is not None and is_secret_flag(axis.flag):
            remember_values([str(v) for v in axis.values if not isinstance(v, bool)])
    use_api_key_env(spec.server.api_key_env)
    remember_values([api_key()] if api_key() else [])


def check_api_key(spec: Spec) -> None:
    """``server.api_key_env`` names a variable set in bakeoff's environment (else every request
    would be refused and every trial judged on 401s)."""
    name = spec.server.api_key_env
    if name is not None and not os.environ.get(name):
        raise SpecError(f"server.api_key_env: {name} is not set (or empty) in bakeoff's environment; "
                        f"export {name}=<the server's API key> before `bakeoff run`")


def make_host(spec: Spec) -> Host:
    """The spec's host, with the spec's per-trial log cap."""
    host = get_host(spec.host)
    host.max_log_bytes = spec.server.max_log_bytes
    return host


def record_for(spec: Spec, p: Planned, model_path: str, identity: str) -> TrialRecord:
    """The pending record of a planned trial: its argv and env as `bakeoff plan` shows them."""
    engine = get_engine(spec.engine, **spec.engine_options)
    launch = deploy_launch(spec, engine, p, model_path)
    return TrialRecord(key=p.key, idx=p.idx, config=dict(p.config), changed=list(p.changed),
                       argv=mask_argv(launch.argv), env=redact_env(launch.env), identity=identity)


def plan_json(spec: Spec) -> list[dict]:
    """What `bakeoff plan` prints: each trial's argv, env and, on a remote host, the command line
    run there (an adaptive strategy's first round)."""
    remember_secrets(spec)
    model_path = spec.model_path_here()  # a remote host's model is checked on it by `bakeoff run`
    engine = get_engine(spec.engine, **spec.engine_options)
    out = []
    for p in first_round(spec):
        r = record_for(spec, p, model_path, "")
        launch = deploy_launch(spec, engine, p, model_path)
        out.append({"idx": p.idx, "label": p.label, "changed": list(p.changed), "argv": r.argv, "env": r.env,
                    "command": command_line(spec.host, launch.argv, launch.env, f"{p.idx:03d}-{p.key}.log", spec.name)})
    return out


def first_round(spec: Spec) -> list[Planned]:
    """The plan's trials; a strategy whose package is missing here (optuna) shows the baseline
    alone and is listed in ``spec.unchecked``."""
    from bakeoff.errors import MissingExtra

    try:
        return make_plan(spec)
    except MissingExtra as err:
        spec._unchecked.append(f"{err}; only the baseline is shown")
        return [planned(0, spec.baseline_config(), spec)]


# -- orphans -------------------------------------------------------------------------------
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
            confirm_port_free(host, rec.port, events)
        if rec.state == "running":
            store.save(rec.with_(state="pending", verdict=rec.verdict if rec.verdict == "interrupted" else None))
    for pid in host.find_orphans(store.dir):
        if host.kill_orphan(pid, pid, None):
            n += 1
            events.note(f"stopped unrecorded orphan server (pid {pid})")
    if not isinstance(host, LocalHost):  # lm_eval runs here whatever the host: tagged like a server
        here = LocalHost()
        for pid in here.find_orphans(store.dir):
            if here.kill_orphan(pid, pid, None):
                n += 1
                events.note(f"stopped a process a killed bakeoff left running here (pid {pid}, lm_eval)")
    return n


def confirm_port_free(host: Host, port: int, events: Events) -> bool:
    free = host.wait_port_free(port)
    if not free:
        events.note(f"port {port} is still in use by another process")
    return free


# -- the sweep -----------------------------------------------------------------------------
def run_sweep(spec: Spec, out_dir: Path, *, events: Events | None = None,
              known_bad: dict[frozenset, str] | None = None) -> Path:
    """Run (or resume) the sweep of ``spec`` in ``out_dir``; returns the Markdown report's path."""
    events = events or Events()
    out_dir = Path(out_dir).resolve()
    remember_secrets(spec)
    check_api_key(spec)
    host = make_host(spec)
    model_path = checks_on_host(spec, host, out_dir, events.note)  # model path and axis values, where servers run
    fingerprint = fingerprint_for(spec, host)
    identity = identity_of(spec, fingerprint, host)
    with Store(out_dir, lock=True) as store:
        for line in spec_changes(store, spec, identity):
            events.note(line)
        store.init_sweep(spec.name, spec.model_dump(mode="json"), fingerprint, identity)
        recover_orphans(store, host, events)
        gate = _gate(spec, out_dir, known_bad, events, host)
        stop = StopFlag()
        ctx = Context(spec, store, host, out_dir, model_path, events, stop.stopped.is_set)
        with make_executor(spec.executor, ctx) as executor:
            stop.on_stop, stop.on_hard_stop = executor.interrupt, lambda: (lmeval.kill_running(), executor.kill_now())
            with stop:
                sweep = Sweep(spec, store, host, executor, gate, events, model_path, identity, stop.stopped.is_set)

                def relaunch() -> dict | None:  # a Ctrl-C meanwhile stops the baseline's server like a trial's
                    try:
                        return remeasure(spec, store, host, out_dir, model_path, progress=events.phase,
                                         should_stop=stop.stopped.is_set,
                                         on_runner=lambda runner: setattr(stop, "on_stop", runner.abort_current))
                    finally:
                        stop.on_stop = executor.interrupt

                sweep.relaunch = relaunch

                def race_launch(rec: TrialRecord, n: int) -> dict | None:  # bench.resolve: one launch in the race
                    try:
                        return launch_again(spec, host, out_dir, model_path, rec, n, progress=events.phase,
                                            should_stop=stop.stopped.is_set,
                                            on_runner=lambda runner: setattr(stop, "on_stop", runner.abort_current))
                    finally:
                        stop.on_stop = executor.interrupt

                sweep.race_launch = race_launch
                why = _loop(sweep)
                if why in ("done", "budget"):  # a budget caps trials; the baseline's relaunches are not trials
                    _relaunch_baseline(sweep, at_end=True)
                    _race(sweep)
            store.set_progress(None, why)
        decide.save(store)
        report = write_reports(out_dir, store)
        if stop.stopped.is_set():
            events.note("interrupted: the report shows what finished; `bakeoff run` again resumes")
    return report


def _gate(spec: Spec, out_dir: Path, known_bad: dict[frozenset, str] | None, events: Events, host: Host) -> Gate:
    """Known-bad combinations from ``--known-bad`` matrices and kernel preflight."""
    from bakeoff.preflight.plan import for_sweep as preflight_bad

    gate = Gate.for_spec(spec)
    for pairs, why in (known_bad or {}).items():
        gate.add(pairs, why, "known_bad")
    for pair, why in preflight_bad(spec, out_dir, events.note, host=host).items():
        gate.add(frozenset([pair]), why, "preflight")
    return gate


@dataclass
class Sweep:
    """The loop's state: everything it reads or writes, in one place."""

    spec: Spec
    store: Store
    host: Host
    executor: Executor
    gate: Gate
    events: Events
    model_path: str
    identity: str
    stopped: Callable[[], bool]
    started: float = 0.0
    gave_up: dict[str, dict] = field(default_factory=dict)  # key -> config: the host failed under it this run
    relaunch: Callable[[], dict | None] = lambda: None  # one more launch of the baseline (relaunch.remeasure)
    race_launch: Callable[[TrialRecord, int], dict | None] = lambda rec, n: None  # one launch in the race (launch_again)
    unbased: set[str] = field(default_factory=set)  # keys dispatched while the baseline had not passed
    confirming: dict[str, dict] = field(default_factory=dict)  # key -> its first launch: a relaunch confirms it

    def current(self) -> list[TrialRecord]:
        """This spec's trials (stale ones from an edited spec left out), in order."""
        return self.store.current()  # filtered by the identity init_sweep stored: this run's

    def history(self) -> list[TrialRecord]:
        return [t for t in self.current() if t.is_finished()]


def _loop(sw: Sweep) -> str:
    """Dispatch until the strategy has nothing more, the user stops, the host keeps failing or
    the budget is spent; returns why it stopped (also stored as the sweep's stop reason)."""
    for p in make_plan(sw.spec):  # what is known in advance is listed (and counted) from the start
        _trial(sw, p.config)
    _rejudge(sw)  # a resume after the baseline passed: trials judged while it had not
    for rec in sw.current():
        sw.gate.learn(rec)
    strategy = make_strategy(sw.spec)
    running: dict[str, Planned] = {}
    host_failures = 0
    sw.started = time.monotonic()
    while not sw.stopped():
        if host_failures >= MAX_HOST_FAILURES:
            sw.events.note(f"stopping: the host failed {host_failures} trials in a row; the rest stay pending "
                           "and `bakeoff run` again resumes")
            break
        proposals = _propose(sw, strategy, running)
        for pairs, why in strategy.learned().items():  # combinations a strategy found to fail together (bisect)
            sw.gate.add(pairs, why, "incompatible")
        for cfg in proposals:
            _dispatch(sw, cfg, running)
        if not running:
            if proposals:
                continue  # every proposal was skipped: ask again
            break
        for rec in sw.executor.wait():
            running.pop(rec.key, None)
            if rec.key in sw.confirming:  # the relaunch of a statistical gate's failure: judged over both launches
                rec = confirm.confirmed(rec, sw.confirming.pop(rec.key))
            elif confirm.needs_confirming(rec) and not sw.stopped():
                sw.events.note(f"trial {rec.idx} failed only a statistical gate ({rec.cause}): launching it again to "
                               "confirm (a launch's own nondeterminism can fail a paired test)")
                sw.store.save(rec)  # finished meanwhile: the baseline's relaunch counts it as a launched change
                _baseline_answers_again(sw, running)
                sw.store.save(confirm.to_confirm(rec))
                _dispatch(sw, rec.config, running)
                continue
            host_failures = host_failures + 1 if rec.verdict == "infra_error" else 0
            if rec.verdict == "infra_error":  # retried by the next `bakeoff run`, not by this one
                sw.gave_up[rec.key] = rec.config
            if rec.key in sw.unbased and rec.is_finished():  # judged by the absolute checks only
                rec = rec.with_(metrics={**rec.metrics, "without_baseline": True})
            sw.store.save(rec)
            if rec.is_baseline:
                _rejudge(sw)
            sw.gate.learn(rec)
            decide.save(sw.store)
            sw.events.trial_end(sw.store.get(rec.key))
        if not running and sw.executor.capacity() == 1:
            _relaunch_baseline(sw, at_end=False)
    why = ("interrupted" if sw.stopped() else "host_failed" if any(t.verdict == "infra_error" for t in sw.current())
           else "budget" if _budget_left(sw) == 0 else "done")
    sw.store.set_meta("stop_reason", {"done": strategy.why_done or "done",
                                      "budget": "the search budget ran out (plan.max_trials / plan.max_hours)"}.get(why, why))
    return why


def _baseline_answers_again(sw: Sweep, running: dict[str, Planned]) -> None:
    """Before a statistical gate's failure is confirmed: when no relaunch of the baseline has
    recorded its answers yet, launch it once more (one at a time, as its other relaunches), so
    that the confirming judgement pairs only the items the baseline answers alike on two launches."""
    if running or sw.executor.capacity() != 1 or any(r.get("answers") for r in decide.baseline_runs(sw.store)):
        return
    sw.events.note("launching the baseline again: which of its answers are stable from launch to launch")
    if sw.relaunch() is not None:
        decide.save(sw.store)


def _relaunch_baseline(sw: Sweep, at_end: bool) -> None:
    """Launch the baseline again as many times as the decision wants
    (``decide.baseline_launches_wanted``): at the end all of them; during a one-at-a-time sweep,
    spread among the trials (interleaved), so that the baseline's launches span the sweep's time
    like the trials they are compared with. The last one is always left for the end (the drift)."""
    trials = sw.current()
    wanted = decide.baseline_launches_wanted(sw.spec.model_dump(mode="json"), trials)
    why = ("the launch noise: a speed claim depends on it, bench.baseline_launches" if wanted > 2
           else "drift guard, bench.remeasure_after")
    start = have = 1 + len(decide.baseline_runs(sw.store))
    upto = wanted
    if not at_end:
        done = sum(1 for t in trials if t.changed and t.is_finished() and t.metrics.get("levels"))
        known = sum(1 for t in trials if t.changed and t.verdict != "skipped")
        if wanted <= 2 or not known:
            return
        upto = min(wanted - 1, 1 + (wanted - 1) * done // (known + 1))
    while have < upto and not sw.stopped():
        sw.events.note(f"launching the baseline again ({have + 1} of {wanted}: {why})")
        sw.relaunch()
        have += 1
    if have > start:
        decide.save(sw.store)


# -- the race (bench.resolve): measurement where the decision is ---------------------------------


def _race(sw: Sweep) -> None:
    """After the screening round, launch the contenders and the baseline again in paired blocks
    until each contender is settled or the budget is spent (bakeoff.decide.race). The race is
    stored in the meta ``race`` after every launch and decided again after every block, so a
    killed sweep resumes it where it stopped (a block cut short is completed first)."""
    race = _race_to_run(sw)
    if race is None:
        return
    by_key = {t.key: t for t in sw.current()}
    while not sw.stopped() and _hours_left(sw) and (keys := race.next_launches()):
        sw.store.set_meta("race", race.to_json())  # the block planned: a resumed race completes it
        for key in keys:
            if sw.stopped() or not _hours_left(sw):
                break
            n = race.launches() + 1
            sw.events.note(f"race (bench.resolve = {race.resolve:g}): launch {n} of at most {race.max_launches}: "
                           f"{decide.label(by_key[key])}, block {len(race.blocks)}")
            result = sw.race_launch(by_key[key], n)
            if result is None:  # stopped: a cut launch says nothing
                break
            race.record(key, result)
            sw.store.set_meta("race", race.to_json())
        decide.save(sw.store)


def _hours_left(sw: Sweep) -> bool:
    """Whether ``plan.max_hours`` allows another launch (the race's launches are not trials:
    ``plan.max_trials`` does not cap them, ``bench.max_extra_launches`` does)."""
    hours = sw.spec.plan.max_hours
    return hours is None or time.monotonic() - sw.started <= hours * 3600


def _race_to_run(sw: Sweep):
    """The stored race of this spec, resumed with the spec's resolve and budget; else a new race
    of the contenders the screening round left (``race.contenders``); None when the spec asks
    for none, the baseline did not pass, or nothing contends."""
    from bakeoff.decide.race import Race, contenders
    from bakeoff.decide.stats import Ratio

    bench = sw.spec.bench
    if bench.resolve is None or sw.stopped():
        return None
    stored = decide.race_of(sw.store)
    if stored:
        race = Race.from_json(stored)
        race.resolve, race.max_launches = bench.resolve, bench.max_extra_launches
        race.max_blocks = max(2, bench.max_extra_launches // 2)
        return race
    d = decide.save(sw.store)
    base = next((t for t in sw.current() if t.is_baseline), None)
    if base is None or not d.baseline_ok:
        return None
    ratios = {t.key: Ratio.from_json(t.metrics["vs_baseline"]) for t in sw.current()
              if t.changed and t.verdict == "ok" and t.metrics.get("vs_baseline")}
    keys = contenders(ratios, d.noise or 0.0)
    if not keys:
        return None
    higher = next(iter(ratios.values())).higher_is_better
    return Race.start(base.key, keys, bench.resolve, bench.max_extra_launches, sw.store.meta("identity") or "", higher)


def _propose(sw: Sweep, strategy, running: dict[str, Planned]) -> list[dict]:
    """The baseline first and alone; then what the strategy asks for, as far as the executor
    has room and the budget allows."""
    base_cfg = sw.spec.baseline_config()
    base = _trial(sw, base_cfg)
    if not base.is_finished() and base.key not in sw.gave_up:
        return [] if running else [base_cfg]
    n = min(sw.executor.capacity(), _budget_left(sw))
    busy = [p.config for p in running.values()] + list(sw.gave_up.values())
    return strategy.ask(sw.history(), busy, n) if n > 0 else []


def _dispatch(sw: Sweep, cfg: dict, running: dict[str, Planned]) -> None:
    """Skip ``cfg`` when it holds a known-bad combination, else hand it to the executor."""
    rec = _trial(sw, cfg)
    p = planned(rec.idx, cfg, sw.spec)
    skip = sw.gate.skip(p)
    if skip:
        rec = rec.with_(state="finished", verdict="skipped", cause=skip[0], detail=skip[1], finished=time.time())
        sw.store.save(rec)
        sw.events.trial_end(rec)
        return
    if sw.spec.server.port:
        confirm_port_free(sw.host, sw.spec.server.port, sw.events)
    running[rec.key] = p
    if rec.metrics.get("first_launch"):  # a relaunch to confirm (judge.confirm), also after a resume
        sw.confirming[rec.key] = rec.metrics["first_launch"]
    base = _trial(sw, sw.spec.baseline_config())
    reference = _baseline_probes(sw.store, base, p)
    if p.changed and reference is None:
        sw.unbased.add(rec.key)
    sw.executor.submit(Job(p, rec, reference))


def _rejudge(sw: Sweep) -> None:
    """Once the baseline passed: every trial judged while it had not is judged against it
    (``judge.rejudge``): from its stored answers, or run again."""
    from bakeoff.judge.rejudge import rejudge_all

    engine = get_engine(sw.spec.engine, **sw.spec.engine_options)
    if rejudge_all(sw.store, sw.spec, expect_logprobs=engine.supports_logprobs, ignore_eos=engine.supports_ignore_eos,
                   note=sw.events.note):
        decide.save(sw.store)


def _trial(sw: Sweep, cfg: dict) -> TrialRecord:
    """The stored record of ``cfg`` for this spec, added as pending when new. A record of an
    earlier spec (another identity) is kept as it is, stale, under a key of its own
    (``Store.retire``); the new trial gets the next index, so its log is a new file too. A spec
    edited back to an earlier identity finds that identity's trial again (``Store.restore``)."""
    p0 = planned(0, cfg, sw.spec)
    rec = sw.store.get(p0.key)
    if rec is not None and rec.identity == sw.identity:
        return rec
    if rec is not None:
        sw.store.retire(rec.key)
    back = sw.store.restore(p0.key, sw.identity)  # the spec edited back: its trial of then stands
    if back is not None:
        return back
    fresh = record_for(sw.spec, planned(sw.store.next_idx(), cfg, sw.spec), sw.model_path, sw.identity)
    sw.store.save(fresh)
    return fresh


def _budget_left(sw: Sweep) -> int:
    """How many more launches the plan's budget allows (a large number when it sets none).
    Skipped trials cost nothing; the baseline counts."""
    plan, left = sw.spec.plan, 1 << 30
    if plan.max_trials is not None:
        launched = sum(1 for t in sw.history() if t.verdict != "skipped")
        left = max(0, plan.max_trials - launched)
    if plan.max_hours is not None and time.monotonic() - sw.started > plan.max_hours * 3600:
        left = 0
    return left


def _baseline_probes(store: Store, base: TrialRecord, p: Planned) -> dict | None:
    """The baseline's stored answers, when it passed correctness; the reference for ``p``. With
    what its relaunches answered right (``launch_answers``): the paired tests use only the items
    the baseline answered the same way on every launch (``judge.confirm``)."""
    if not p.changed:
        return None
    base = store.get(base.key)
    if base is None or base.judged not in CORRECT:
        return None
    art = store.artifact(base.key, "probes")
    relaunched = [r["answers"] for r in decide.baseline_runs(store) if r.get("answers")]
    return {**art, "launch_answers": relaunched} if art is not None and relaunched else art


def dumps(obj) -> str:
    return json.dumps(obj, indent=2)
