"""Measure: the streaming client, bakeoff's load generator (``bench``) and the engines' own
benchmark tools (``tools``), all producing the same per-level statistics."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bakeoff.measure.bench import LevelStats
    from bakeoff.spec import Bench


def run(base_url: str, cfg: Bench, **kw) -> list[LevelStats]:
    """The benchmark of one server: bakeoff's load generator, or the engine's own tool (``cfg.tool``)."""
    from bakeoff.measure.bench import _run_loop, run_async

    if cfg.tool != "bakeoff":
        from bakeoff.measure import tools

        from bakeoff.measure.bench import with_samples

        # the external tool runs ``repetitions`` times (no adaptive stop: each run is a process)
        runs = [tools.run_tool(base_url, cfg, model=kw.get("model"),
                               ignore_eos=cfg.sends_ignore_eos(kw.get("ignore_eos", False)),
                               expect_logprobs=kw.get("expect_logprobs", True))
                for _ in range(cfg.repetitions)]
        out = []
        for per in zip(*runs):
            bad = next((s for s in per if not s.valid), None)
            out.append(bad if bad is not None else with_samples(per[0], list(per), "fixed"))
        return out
    return _run_loop(run_async(base_url, cfg, **kw))


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
    import time

    from bakeoff.decide import baseline_runs
    from bakeoff.plan import Planned
    from bakeoff.run.executors.base import Recorder, runner_for

    trials = [t for t in store.current() if t.is_finished()]
    base = next((t for t in trials if t.is_baseline), None)
    if base is None or base.metrics.get("judged", base.verdict) not in ("ok", "slow"):
        return None
    if not any(t.changed and t.verdict != "skipped" for t in trials):
        return None
    if should_stop():
        return None
    runs = baseline_runs(store)
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
            from bakeoff.judge import probes

            out["answers"] = probes.launch_answers(probes.results_from_json(rec.artifacts["probes"], spec.probes.set), spec.probes)
    store.set_meta("baseline_runs", [*(store.meta("baseline_runs") or []), out])
    return out
