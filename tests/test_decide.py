"""bakeoff.decide: final verdicts and the recommendation, made once and printed word for word
by every output. Recorded trial records, no engine (the real-engine sweeps check the same
through the CLI in test_e2e_llamacpp.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bakeoff import decide, spec
from bakeoff.decide.stats import ratio_interval
from bakeoff.plan import make_plan
from bakeoff.store import Store, TrialRecord


def _spec(**bench) -> spec.Spec:
    return spec.Spec.model_validate({"name": "d", "engine": "llamacpp", "model": {"path": "m.gguf"},
                                     "axes": [{"name": "t", "flag": "--threads", "values": ["1", "2", "3"]}],
                                     "bench": bench})


def _rec(p, verdict: str, samples: list[float] | None, **extra) -> TrialRecord:
    levels = [] if samples is None else [{"level": "c=4", "valid": True, "output_tok_s": sum(samples) / len(samples),
                                          "samples": {"output_tok_s": samples}}]
    return TrialRecord(key=p.key, idx=p.idx, config=dict(p.config), changed=list(p.changed), argv=["llama-server", "-t", p.config["t"]],
                       env={}, state="finished", verdict=verdict, metrics={"levels": levels, **extra}, identity="i")


def _store(tmp_path, s, recs) -> Store:
    store = Store(tmp_path)
    store.init_sweep(s.name, s.model_dump(mode="json"), {}, "i")
    for r in recs:
        store.save(r)
    decide.save(store)
    return store


def test_a_single_noisy_sample_never_makes_a_winner(tmp_path):
    s = _spec()
    p = make_plan(s)
    with _store(tmp_path, s, [_rec(p[0], "ok", [100.0]), _rec(p[1], "ok", [150.0]), _rec(p[2], "ok", [90.0])]) as store:
        d = decide.load(store)
    assert d.winner.key == p[0].key and d.headline.startswith("Recommended: the baseline")
    assert any("no interval" in c for c in d.cautions)


def test_faster_beyond_the_noise_wins_and_a_tie_does_not(tmp_path):
    s = _spec()
    p = make_plan(s)
    base = [100.0, 102.0, 98.0, 101.0, 99.0]
    # 1.5x: beyond the repetitions' spread and the launch noise (bench.launch_noise) together
    recs = [_rec(p[0], "ok", base), _rec(p[1], "ok", [150.0, 151.0, 149.0, 152.0, 148.0]),
            _rec(p[2], "ok", [101.0, 97.0, 103.0, 100.0, 99.0])]
    with _store(tmp_path, s, recs) as store:
        d = decide.load(store)
        final = {t.key: t for t in store.current()}
    assert d.winner.key == p[1].key
    assert "1.50x (95 % CI" in d.headline and "faster beyond the noise" in d.headline
    assert final[p[2].key].metrics["vs_baseline"]["call"] == "tie"
    assert [f.key for f in d.fallbacks] == [p[2].key, p[0].key] or [f.key for f in d.fallbacks] == [p[0].key, p[2].key]


def test_slow_needs_an_interval_below_the_threshold(tmp_path):
    s = _spec(slow_fraction=0.8)
    p = make_plan(s)
    recs = [_rec(p[0], "ok", [100.0, 101.0, 99.0]), _rec(p[1], "ok", [60.0, 61.0, 59.0]),
            _rec(p[2], "ok", [70.0])]  # one run: no interval, so not called slow
    with _store(tmp_path, s, recs) as store:
        final = {t.key: t for t in store.current()}
    assert final[p[1].key].verdict == "slow" and "significantly slower" in final[p[1].key].detail
    assert final[p[2].key].verdict == "ok"
    assert final[p[1].key].metrics["judged"] == "ok"  # the run's own verdict is kept


def test_a_broken_baseline_cautions_every_output(tmp_path):
    s = _spec()
    p = make_plan(s)
    recs = [_rec(p[0], "wrong", None), _rec(p[1], "ok", [120.0, 121.0]), _rec(p[2], "crashed", None)]
    with _store(tmp_path, s, recs) as store:
        d = decide.load(store)
        final = {t.key: t for t in store.current()}
    assert d.cautions and d.cautions[0].startswith("NOTHING KNOWN-GOOD")
    assert d.headline.startswith("Recommended, unverified:")
    assert final[p[1].key].metrics["unverified"] and final[p[1].key].detail.startswith("absolute checks only")


def test_ratio_interval_excludes_one_only_for_real_differences():
    assert ratio_interval([100, 101, 99], [100, 100.5, 99.5]).call == "tie"
    assert ratio_interval([110, 111, 109], [100, 101, 99]).call == "better"
    assert ratio_interval([10.0], [100.0]).call == "tie"  # no interval: no claim


def _cli(*args) -> str:
    res = subprocess.run([sys.executable, "-m", "bakeoff.cli", *args], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout + res.stderr


@pytest.mark.parametrize("baseline_verdict", ["ok", "wrong"])
def test_every_output_carries_the_same_decision_word_for_word(tmp_path, baseline_verdict):
    s = _spec()
    p = make_plan(s)
    recs = [_rec(p[0], baseline_verdict, [100.0, 101.0, 99.0] if baseline_verdict == "ok" else None),
            _rec(p[1], "ok", [120.0, 121.0, 119.0]), _rec(p[2], "ok", [101.0, 99.0, 100.0])]
    _store(tmp_path, s, recs).close()
    with Store(tmp_path) as store:
        d = decide.load(store)
    must = [d.headline, *d.cautions, *[f.sentence for f in d.fallbacks]]
    assert len(must) >= 3
    md = _cli("report", str(tmp_path), "--html")
    html_text = (tmp_path / "report.html").read_text()
    import html as h

    _cli("export", str(tmp_path), "-o", str(tmp_path / "m.json"))
    exported = "\n".join(json.loads((tmp_path / "m.json").read_text())["recommendation"])
    status = _cli("status", str(tmp_path))
    for text in must:
        assert text in md, text
        assert h.escape(text) in html_text or text in html_text, text
        assert text in exported, text
        assert " ".join(text.split()) in " ".join(status.split()), text


def test_tokens_per_joule_ride_with_the_recommendation_but_do_not_rank(tmp_path):
    s = _spec()
    p = make_plan(s)
    en = lambda tpj: {"energy": {"tok_per_j": tpj, "energy_j": 10.0}}  # noqa: E731 - as measure/power.py stores it
    # the winner by speed spends more energy per token than a tied trial: speed still ranks
    recs = [_rec(p[0], "ok", [100.0, 102.0, 98.0, 101.0, 99.0], **en(3.9)),
            _rec(p[1], "ok", [150.0, 151.0, 149.0, 152.0, 148.0], **en(4.18)),
            _rec(p[2], "ok", [101.0, 97.0, 103.0, 100.0, 99.0], **en(9.5))]
    with _store(tmp_path, s, recs) as store:
        d = decide.load(store)
    assert d.winner.key == p[1].key
    assert "4.18 tokens per joule (the baseline 3.9)" in d.headline
    assert any("9.5 tokens per joule" in f.sentence for f in d.fallbacks)
    with _store(tmp_path / "none", s, [_rec(p[0], "ok", [100.0, 101.0]), _rec(p[1], "ok", [99.0, 100.0])]) as store:
        d = decide.load(store)
    assert "per joule" not in d.headline
    # the baseline recommended: its own figure with its interval, not only the noise band
    assert d.headline.startswith("Recommended: the baseline — 100 output tok/s at c=4 (95 % CI 94.1–107, 2 runs); no configuration")


def _levels_rec(p, levels: dict) -> TrialRecord:
    """A trial with levels ``{name: samples or None}`` (None: invalid, one failed request)."""
    lvs = [{"level": name, "valid": xs is not None, "output_tok_s": sum(xs) / len(xs) if xs else 0.0,
            "samples": {"output_tok_s": xs} if xs else {},
            **({} if xs else {"why_invalid": "1/8 requests failed (12%), e.g. HTTP 500"})} for name, xs in levels.items()]
    return TrialRecord(key=p.key, idx=p.idx, config=dict(p.config), changed=list(p.changed), argv=["llama-server"],
                       env={}, state="finished", verdict="ok", metrics={"levels": lvs}, identity="i")


def test_a_trial_is_compared_with_the_baseline_at_the_same_level_only(tmp_path):
    """Issue 23 item 8: one failed request at c=4 moved the baseline's figure to c=1; two identical
    configurations then read "3.01x faster beyond the noise" (c=4 against c=1)."""
    s = _spec()
    p = make_plan(s)
    c1, c4 = [100.0, 101.0, 99.0, 100.5, 99.5], [300.0, 302.0, 298.0, 301.0, 299.0]
    recs = [_levels_rec(p[0], {"c=1": c1, "c=4": None}), _levels_rec(p[1], {"c=1": c1, "c=4": c4}),
            _levels_rec(p[2], {"c=1": c1, "c=4": c4})]
    with _store(tmp_path, s, recs) as store:
        d = decide.load(store)
        final = {t.key: t for t in store.current()}
    assert d.winner.key == p[0].key, d.headline
    assert final[p[1].key].metrics["vs_baseline"]["call"] == "tie"
    assert abs(final[p[1].key].metrics["ratio_vs_baseline"] - 1.0) < 0.01


def test_a_trial_that_could_not_hold_the_baselines_level_is_said_so_not_ranked(tmp_path):
    s = _spec()
    p = make_plan(s)
    c1, c4 = [100.0, 101.0, 99.0, 100.5, 99.5], [300.0, 302.0, 298.0, 301.0, 299.0]
    recs = [_levels_rec(p[0], {"c=1": c1, "c=4": c4}), _levels_rec(p[1], {"c=1": [150.0, 151.0, 149.0, 150.5, 149.5], "c=4": None}),
            _levels_rec(p[2], {"c=1": c1, "c=4": [290.0, 292.0, 288.0, 291.0, 289.0]})]
    with _store(tmp_path, s, recs) as store:
        d = decide.load(store)
        final = {t.key: t for t in store.current()}
    lost = final[p[1].key]
    assert d.winner.key == p[0].key
    assert "vs_baseline" not in lost.metrics and lost.verdict != "slow"
    assert "could not hold c=4" in lost.detail and "could not hold c=4" in d.verdicts[p[1].key]["caution"]
    assert [f.key for f in d.fallbacks][-1] == p[1].key  # after every trial measured at the baseline's level


def test_mid_sweep_the_headline_says_what_is_still_to_run_not_that_nothing_passed(tmp_path):
    """`bakeoff status` reads the decision saved after each trial: with only the baseline done it
    must not say that no other configuration passed correctness (issue 25)."""
    s = _spec()
    p = make_plan(s)
    pending = [TrialRecord(key=q.key, idx=q.idx, config=dict(q.config), changed=list(q.changed), argv=[], env={},
                           identity="i") for q in p[1:]]
    with _store(tmp_path, s, [_rec(p[0], "ok", [100.0, 101.0]), *pending]) as store:
        d = decide.load(store)
    assert "2 other configurations still to run" in d.headline and "passed correctness" not in d.headline
    with _store(tmp_path / "done", s, [_rec(p[0], "ok", [100.0, 101.0]), _rec(p[1], "wrong", None),
                                       _rec(p[2], "wrong", None)]) as store:
        assert "no other configuration passed correctness" in decide.load(store).headline
