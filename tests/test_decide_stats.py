"""decide's speed judgement: intervals of ratios over repetitions, ties inside the noise,
SLO goodput as the objective, the drift guard. Pure data (stored records), no server: the
measured side is tested in test_bench.py and on the real engine in test_slo_llamacpp.py."""

from __future__ import annotations

import pytest

from bakeoff.decide import decide, objective_of
from bakeoff.decide.stats import ratio_interval
from bakeoff.store import TrialRecord

SPEC = {"bench": {"slow_fraction": 0.8, "launch_noise": 0.03}}  # the mechanism, at a stated launch noise


def trial(idx: int, samples: list[float], *, changed: bool = True, objective: dict | None = None) -> TrialRecord:
    level = {"level": "c=4", "valid": True, "output_tok_s": sum(samples) / len(samples),
             "samples": {"output_tok_s": samples}}
    metrics = {"judged": "ok", "levels": [level]}
    if objective is not None:
        metrics["objective"] = objective
    return TrialRecord(key=f"k{idx}", idx=idx, config={"x": idx}, changed=["x"] if changed else [],
                       argv=["llama-server", "--x", str(idx)], env={}, state="finished", verdict="ok", metrics=metrics)


def test_a_single_noisy_sample_is_never_a_winner():
    base = trial(0, [100.0], changed=False)
    lucky = trial(1, [140.0])  # 1.4x, but one run: no interval, no claim
    d, final = decide(SPEC, [base, lucky])
    assert d.winner.key == "k0" and d.headline.startswith("Recommended: the baseline")
    assert final[1].metrics["vs_baseline"]["call"] == "tie" and final[1].verdict == "ok"
    assert any("fewer than two repetitions" in c for c in d.cautions)


def test_identical_samples_are_a_tie():
    r = ratio_interval([100.0, 100.0, 100.0], [100.0, 100.0, 100.0])
    assert (r.ratio, r.lo, r.hi, r.call) == (1.0, 1.0, 1.0, "tie")
    d, _ = decide(SPEC, [trial(0, [100, 100, 100], changed=False), trial(1, [100, 100, 100])])
    assert d.winner.key == "k0" and "no configuration is faster than the baseline beyond the noise" in d.headline


def test_a_noisy_but_higher_trial_stays_a_tie():
    """Means 1.05x apart with a 10 % spread per run (the spread measured on this machine, bench/README.md)."""
    base, t = [100, 110, 90, 105, 95], [105, 116, 95, 110, 99]
    d, final = decide(SPEC, [trial(0, base, changed=False), trial(1, t)])
    assert final[1].metrics["vs_baseline"]["call"] == "tie" and d.winner.key == "k0"
    assert "(±" in d.headline and "ranked by output tok/s at c=4" in d.headline


def test_a_clearly_separated_pair_is_better_and_recommended_with_its_interval():
    d, final = decide(SPEC, [trial(0, [100, 102, 98, 101], changed=False), trial(1, [120, 123, 118, 121])])
    vs = final[1].metrics["vs_baseline"]
    assert vs["call"] == "better" and 1 < vs["lo"] < vs["ratio"] < vs["hi"] < 1.5
    assert d.winner.key == "k1"
    assert "1.20x (95 % CI" in d.headline and "4 vs 4 runs" in d.headline and "output tok/s at c=4" in d.headline


def test_slow_needs_the_interval_below_one_and_the_ratio_below_the_threshold():
    base = trial(0, [100, 101, 99], changed=False)
    d, final = decide(SPEC, [base, trial(1, [50, 51, 49]), trial(2, [90, 91, 89]), trial(3, [40, 90, 140])])
    assert [t.verdict for t in final] == ["ok", "slow", "ok", "ok"]
    assert final[2].metrics["vs_baseline"]["call"] == "worse"  # significantly slower, yet above 0.8: not 'slow'
    assert final[3].metrics["vs_baseline"]["call"] == "tie"


def test_slo_goodput_is_the_objective_and_the_headline_names_it():
    name = "goodput: req/s meeting p99 TTFT \u2264 2000 ms, at the highest concurrency meeting it"
    base = trial(0, [300, 300], changed=False, objective={"name": name, "samples": [2.0, 2.1, 1.9], "level": "c=4"})
    better = trial(1, [250, 250], objective={"name": name, "samples": [3.0, 3.1, 2.9], "level": "c=8"})
    never = trial(2, [900, 900], objective={"name": name, "samples": [], "level": None, "why": "no level met the SLO"})
    d, final = decide(SPEC, [base, better, never])
    assert objective_of(final[1]).where == "c=8" and objective_of(final[2]) is None
    assert d.objective == name and d.winner.key == "k1"  # not k2, the highest tok/s: it meets no SLO level
    assert "c=8 vs the baseline's c=4" in d.headline and "1.50x" in d.headline
    assert all(p.key != "k2" for p in d.fallbacks)


def test_drift_of_the_baseline_measured_again_is_reported():
    base, t = trial(0, [100, 101, 99, 100], changed=False), trial(1, [100, 99, 101, 100])
    d, _ = decide(SPEC, [base, t], baseline_runs=[{"levels": base.metrics["levels"]}])
    assert d.drift["call"] == "tie" and not any("DRIFT" in c for c in d.cautions)
    slowed = {"levels": [{"level": "c=4", "valid": True, "output_tok_s": 80, "samples": {"output_tok_s": [80, 81, 79, 80]}}]}
    d, _ = decide(SPEC, [base, t], baseline_runs=[slowed])
    assert d.drift["call"] == "worse" and d.drift["ratio"] == pytest.approx(0.8, abs=0.01)
    assert any(c.startswith("DRIFT: the baseline measured again") and "0.80x" in c for c in d.cautions)


# Measured: bench/aa_test.py sweep 0 on this machine (2 shared cores, load average 6-11), the same
# configuration launched twice: the baseline's 3 repetitions happened to sit in a quiet minute.
AA_BASE = [15.16, 15.25, 15.22]
AA_REPLICA = [27.8, 23.2, 15.18, 19.25, 19.15]


def test_repetitions_alone_call_an_identical_relaunch_faster_launch_noise_does_not():
    assert ratio_interval(AA_REPLICA, AA_BASE).call == "better"  # the false winner the A/A test found
    assert ratio_interval(AA_REPLICA, AA_BASE, between=0.08).call == "tie"
    d, final = decide({"bench": {"launch_noise": 0.08}}, [trial(0, AA_BASE, changed=False), trial(1, AA_REPLICA)])
    assert final[1].metrics["vs_baseline"]["call"] == "tie" and d.winner.key == "k0"


def test_the_baselines_own_drift_raises_the_launch_noise():
    """No launch noise configured: the baseline measured again 20 % slower is what the machine
    does between launches, so a 15 % 'win' measured minutes apart is no win."""
    base, t = trial(0, [100, 101, 99, 100], changed=False), trial(1, [115, 116, 114, 115])
    again = {"levels": [{"level": "c=4", "valid": True, "output_tok_s": 80, "samples": {"output_tok_s": [80, 81, 79, 80]}}]}
    spec = {"bench": {"launch_noise": 0.0}}
    assert decide(spec, [base, t])[1][1].metrics["vs_baseline"]["call"] == "better"
    d, final = decide(spec, [base, t], baseline_runs=[again])
    assert final[1].metrics["vs_baseline"]["call"] == "tie" and d.winner.key == "k0"
    assert d.drift["between"] > 0.15
    assert d.launch_noise["source"] == "drift" and "drift between its first and last launches" in d.noise_line


# -- launch noise measured from the baseline's own launches (bench.launch_noise = "auto") --------
AUTO = {"bench": {"slow_fraction": 0.8}}  # the default: "auto"


def runs(*launches: list[float]) -> list[dict]:
    return [{"levels": [{"level": "c=4", "valid": True, "output_tok_s": sum(x) / len(x), "samples": {"output_tok_s": x}}]}
            for x in launches]


def test_a_baseline_whose_launches_move_keeps_an_identical_relaunch_a_tie():
    """Sweep 0's false winner (repetitions alone say 'better'); the baseline's later launches on
    that loaded machine moved as much as the replica did, so the launch noise measured says tie."""
    later = runs([19.8, 20.5, 18.9], [23.5, 22.0, 24.1], [16.1, 15.2, 17.3])
    d, final = decide(AUTO, [trial(0, AA_BASE, changed=False), trial(1, AA_REPLICA)], baseline_runs=later)
    vs = final[1].metrics["vs_baseline"]
    assert vs["call"] == "tie" and vs["base_launches"] == 4 and d.winner.key == "k0"
    assert d.launch_noise["source"] == "measured" and d.launch_noise["sd"] > 0.1
    assert "measured from the baseline's 4 launches" in d.headline
    # the baseline's own figure is the one every ratio is against: its mean over the 4 launches
    assert "18.3 output tok/s at c=4 (95 % CI" in d.headline and "4 launches, 12 runs)" in d.headline
    assert d.noise_line.startswith("Launch noise: 19.1 %, measured from the baseline's 4 launches")
    assert "the baseline's last launch was 1.06x" in d.noise_line and d.noise_line in d.summary_lines()


def test_a_quiet_baselines_launches_let_a_planted_25_percent_slowdown_be_called():
    """Quiet-machine figures (bench/README.md: repetition sd ~5.5 %, launch noise ~3 %): the
    planted run 3 of 2026-12-03 (0.79x) was a tie at the fixed 0.08; its launches measured say slower."""
    base = [10.0, 11.0, 9.2, 10.6, 9.4]
    slowed = [7.5, 8.8, 7.6, 8.3]
    assert decide({"bench": {"launch_noise": 0.08}}, [trial(0, base, changed=False), trial(1, slowed)])[1][1] \
        .metrics["vs_baseline"]["call"] == "tie"
    later = runs([10.5, 9.6, 10.1, 11.0], [9.5, 10.4, 9.9], [10.4, 10.9, 9.4, 10.0])
    d, final = decide(AUTO, [trial(0, base, changed=False), trial(1, slowed)], baseline_runs=later)
    vs = final[1].metrics["vs_baseline"]
    assert vs["call"] == "worse" and vs["hi"] < 0.95 and vs["base_launches"] == 4
    assert d.launch_noise["sd"] < 0.05


def test_auto_with_fewer_than_three_launches_uses_the_default_and_says_so():
    base, t = trial(0, [100, 101, 99, 100], changed=False), trial(1, [109, 110, 108, 109])
    d, final = decide(AUTO, [base, t], baseline_runs=runs([100, 99, 101]))
    assert d.launch_noise["source"] == "default" and d.launch_noise["sd"] == pytest.approx(0.08)
    assert final[1].metrics["vs_baseline"]["call"] == "tie" and "fewer than 3 launches" in d.headline
    assert d.noise_line.startswith("Launch noise: 8 % (the default: fewer than 3 launches")


def test_how_many_baseline_launches_a_sweep_wants():
    from bakeoff.decide import baseline_launches_wanted
    base = trial(0, [100, 101, 99], changed=False)
    assert baseline_launches_wanted(AUTO, [base]) == 1  # nothing to compare with
    assert baseline_launches_wanted(AUTO, [base, trial(1, [100, 102, 98])]) == 1  # no claim hangs on it
    assert baseline_launches_wanted(AUTO, [base, trial(1, [120, 121, 119])]) == 4  # a claim: measure the noise
    fixed = {"bench": {"launch_noise": 0.05, "baseline_launches": 6}}
    assert baseline_launches_wanted(fixed, [base, trial(1, [120, 121, 119])]) == 1
    assert baseline_launches_wanted(fixed, [base] + [trial(i, [120, 121, 119]) for i in (1, 2, 3)]) == 2  # drift guard
    assert baseline_launches_wanted({"bench": {"baseline_launches": 6}}, [base, trial(1, [120, 121, 119])]) == 6


def test_a_baseline_failing_on_a_relaunch_is_a_caution():
    base, t = trial(0, [100, 101, 99], changed=False), trial(1, [100, 99, 101])
    d, _ = decide(AUTO, [base, t], baseline_runs=[{"failed": "crashed: CUDA error: an illegal memory access", "launch": 2}])
    assert any(c.startswith("FLAKY BASELINE") and "illegal memory access" in c for c in d.cautions)


def test_a_lossy_winner_is_ranked_with_its_drift_said():
    """A lossy axis's drift (judge.checks.drift: beyond the kernel-change limits, not failed) goes
    with the configuration wherever it is ranked: '(ok, lossy)' and a LOSSY caution."""
    fp8 = trial(1, [120, 123, 118, 121])
    said = {"axes": ["x"], "mode": "long", "mean_abs_d": 0.0897, "ci": [0.0542, 0.1253], "limit": 0.045}
    fp8 = fp8.with_(metrics={**fp8.metrics, "probe": {"logprob_drift_lossy": said}})
    d, _ = decide(SPEC, [trial(0, [100, 102, 98, 101], changed=False), fp8, trial(2, [100, 101, 99, 100])])
    assert d.winner.key == "k1" and "(ok, lossy)" in d.winner.sentence
    lossy = [c for c in d.cautions if c.startswith("LOSSY: ")]
    assert len(lossy) == 1 and "0.090 nats per token" in lossy[0] and "long mode" in lossy[0] and "lossy = false" in lossy[0]
    assert all("lossy" not in f.sentence for f in d.fallbacks)
