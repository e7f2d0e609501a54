"""A configuration launched once more, outside the trial table: the baseline's relaunches
(``remeasure``: launch noise and drift) and a contender's launches in the race (``launch_again``,
``bench.resolve``). Both drive a trial runner as a trial is run and hand back what the decision
stores; the pipeline calls them, nothing below it does."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from bakeoff import decide
from bakeoff.judge import probes
from bakeoff.plan import Planned
from bakeoff.run.executors.base import Recorder, runner_for
from bakeoff.run.hosts import Host
from bakeoff.spec import Spec
from bakeoff.store import CORRECT, TrialRecord

RACE_RUN_IDX = 7000  # the race's n-th launch logs to logs/<7000 + n>-<key>.log


def launch_again(spec: Spec, host: Host, sweep_dir: Path, model_path: str, rec: TrialRecord, n: int, *,
                 progress=None, should_stop: Callable[[], bool] = lambda: False,
                 on_runner: Callable = lambda runner: None) -> dict | None:
    """Launch and benchmark ``rec``'s configuration once more, as a trial is (logs to
    ``logs/<7000 + n>-<key>.log``; nothing in the trial table changes); returns what the race
    stores: its objective's samples and name and the requests measured, or why it failed; None
    when stopped meanwhile (``on_runner``: see ``remeasure``)."""
    runner = runner_for(spec, host, Recorder(), sweep_dir, model_path, progress=progress, should_stop=should_stop)
    on_runner(runner)
    again = runner.run(rec.with_(state="pending", verdict=None, metrics={}, attempts=0),
                       Planned(RACE_RUN_IDX + n, rec.config, tuple(rec.changed)), None)
    if should_stop():
        return None
    obj = decide.objective_of(again) if again.verdict == "ok" else None
    if obj is None:
        return {"failed": f"{again.verdict}: {again.detail}", "finished": time.time()}
    return {"samples": obj.samples, "name": obj.name, "requests": decide.requests_measured(again.metrics, spec.bench.requests_per_level),
            "finished": time.time()}


BASELINE_RUN_IDX = 9000  # the baseline's n-th launch logs to logs/<9000 + n>-<key>.log (trials count from 0)


def remeasure(spec, store, host, sweep_dir, model_path: str, *, progress=None, should_stop=lambda: False,
              on_runner=lambda runner: None) -> dict | None:
    """Launch the baseline once more and benchmark it as before; its metrics are appended to the
    store's meta ``baseline_runs`` (tagged with the spec's identity), where ``decide`` pools the
    baseline's launches (the launch noise they show) and compares the last with the first (drift).

    Runs only when the baseline passed and some other configuration was launched after it.
    The re-run is not a trial: nothing in the trial table changes; its server log is
    ``logs/<9000 + launch number>-<baseline key>.log``. ``on_runner`` is handed the runner
    before its launch, so that a Ctrl-C can stop it as it stops a trial
    (``TrialRunner.abort_current``). Returns the stored metrics, or None (also when stopped: a
    cut re-run says nothing about the noise)."""
    trials = [t for t in store.current() if t.is_finished()]
    base = next((t for t in trials if t.is_baseline), None)
    if base is None or base.judged not in CORRECT:
        return None
    if not any(t.changed and t.verdict != "skipped" for t in trials):
        return None
    if should_stop():
        return None
    runs = decide.baseline_runs(store)
    rec = Recorder()
    runner = runner_for(spec, host, rec, sweep_dir, model_path, progress=progress, should_stop=should_stop)
    on_runner(runner)
    launch = len(runs) + 2
    again = runner.run(base.with_(state="pending", verdict=None, metrics={}, attempts=0),
                       Planned(BASELINE_RUN_IDX + launch, base.config, ()), None)
    if should_stop():
        return None
    meta = {"identity": store.meta("identity"), "launch": launch, "finished": time.time()}
    if again.verdict != "ok":
        out = {**meta, "failed": f"{again.verdict}: {again.detail}"}
    else:
        out = {**{k: v for k, v in again.metrics.items() if k != "probe"}, **meta}
        if rec.artifacts.get("probes"):  # what this launch answered right: the gates use only stable answers
            out["answers"] = probes.launch_answers(probes.results_from_json(rec.artifacts["probes"], spec.probes.set), spec.probes)
    store.set_meta("baseline_runs", [*(store.meta("baseline_runs") or []), out])
    return out
