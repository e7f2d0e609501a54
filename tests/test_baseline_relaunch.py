"""When the sweep launches its baseline again (pipeline._relaunch_baseline): as many times as
decide.baseline_launches_wanted asks, spread among one-at-a-time trials, the last at the end.
The launches themselves are real elsewhere (test_reliability.py's Ctrl-C during one, on
llama-server); here ``relaunch`` appends the figure a launch would store, so that the
schedule alone is under test."""

from __future__ import annotations

from types import SimpleNamespace

from bakeoff import decide
from bakeoff.pipeline import _relaunch_baseline
from bakeoff.spec import Spec
from bakeoff.store import Store, TrialRecord

SPEC = {"name": "relaunch", "engine": "llamacpp", "model": {"path": "m.gguf"},
        "axes": [{"name": "x", "flag": "--x", "values": [0, 1]}], "baseline": {"x": 0}}


def rec(idx: int, samples: list[float] | None, changed: bool = True) -> TrialRecord:
    finished = samples is not None
    metrics = {"judged": "ok", "levels": [{"level": "c=4", "valid": True, "output_tok_s": sum(samples) / len(samples),
                                           "samples": {"output_tok_s": samples}}]} if finished else {}
    return TrialRecord(key=f"k{idx}", idx=idx, config={"x": idx}, changed=["x"] if changed else [], argv=["s"], env={},
                       identity="id", state="finished" if finished else "pending", verdict="ok" if finished else None,
                       metrics=metrics)


def sweep(store: Store, bench: dict, notes: list[str]) -> SimpleNamespace:
    spec = Spec.model_validate({**SPEC, "bench": bench})
    store.init_sweep("relaunch", spec.model_dump(mode="json"), {}, "id")

    def relaunch():
        runs = store.meta("baseline_runs") or []
        store.set_meta("baseline_runs", runs + [{"identity": "id", "levels": [
            {"level": "c=4", "valid": True, "output_tok_s": 100, "samples": {"output_tok_s": [100, 101, 99]}}]}])

    return SimpleNamespace(spec=spec, store=store, current=store.current, stopped=lambda: False,
                           events=SimpleNamespace(note=notes.append), relaunch=relaunch)


def launches(store: Store) -> int:
    return 1 + len(decide.baseline_runs(store))


def test_a_claim_spreads_the_baselines_launches_among_the_trials_and_ends_with_one(tmp_path):
    notes: list[str] = []
    with Store(tmp_path / "s", lock=True) as store:
        sw = sweep(store, {}, notes)
        store.save(rec(0, [100, 101, 99], changed=False))
        for i in range(1, 9):
            store.save(rec(i, None))
        seen = []
        for i in range(1, 9):  # trial i finishes, far faster than the baseline: a claim hangs on the noise
            store.save(rec(i, [130, 131, 129]))
            _relaunch_baseline(sw, at_end=False)
            seen.append(launches(store))
        assert seen == [1, 1, 2, 2, 2, 3, 3, 3]  # after trials 3 and 6 of 8
        _relaunch_baseline(sw, at_end=True)
        assert launches(store) == 4 and "4 of 4" in notes[-1]
        d = decide.load(store)
        assert d.launch_noise["source"] == "measured" and d.launch_noise["launches"] == 4


def test_no_claim_no_extra_launch_and_the_drift_guard_as_before(tmp_path):
    notes: list[str] = []
    with Store(tmp_path / "s", lock=True) as store:
        sw = sweep(store, {}, notes)
        store.save(rec(0, [100, 101, 99], changed=False))
        store.save(rec(1, [100, 102, 98]))
        _relaunch_baseline(sw, at_end=True)
        assert launches(store) == 1 and not notes
        for i in (2, 3):
            store.save(rec(i, [99, 101, 100]))
        _relaunch_baseline(sw, at_end=True)
        assert launches(store) == 2 and "drift guard" in notes[-1]


def test_a_resumed_sweep_tops_up_and_an_edited_spec_does_not_reuse_old_launches(tmp_path):
    with Store(tmp_path / "s", lock=True) as store:
        sw = sweep(store, {"baseline_launches": 3}, [])
        store.save(rec(0, [100, 101, 99], changed=False))
        store.save(rec(1, [130, 131, 129]))
        sw.relaunch()  # one made before the kill
        _relaunch_baseline(sw, at_end=True)
        assert launches(store) == 3
        store.init_sweep("relaunch", sw.spec.model_dump(mode="json"), {}, "edited")
        assert decide.baseline_runs(store) == []
