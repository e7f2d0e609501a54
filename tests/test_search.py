"""Adaptive strategies (tiered, bisect, optuna) and numeric axes, over recorded outcomes — no
engine here (the real-engine resume tests are in test_search_resume.py).

The outcome table mirrors what llama-server + SmolLM2 did on this machine
(bench/search_efficiency.py): flash attention off with a q8_0 V cache fails at context creation,
each alone runs; q8_0 caches and flash attention are faster."""

import pytest

from bakeoff import spec as S
from bakeoff.errors import SpecError
from bakeoff.plan import config_key, make_plan, space
from bakeoff.plan.base import make_strategy
from bakeoff.plan.replay import record, replay


def mk(strategy, **plan):
    return S.Spec.model_validate({
        "name": "x", "engine": "generic", "engine_options": {"command": ["srv", "--port", "{port}"]}, "model": {"path": "m"},
        "axes": [{"name": "fa", "flag": "--flash-attn", "values": ["auto", "on", "off"]},
                 {"name": "ctk", "flag": "--cache-type-k", "values": ["f16", "q8_0"]},
                 {"name": "ctv", "flag": "--cache-type-v", "values": ["f16", "q8_0"]},
                 {"name": "ub", "flag": "--ubatch-size", "range": [32, 512], "log": True, "points": 4}],
        "baseline": {"fa": "auto", "ub": 512}, "plan": {"strategy": strategy, **plan}})


def truth(cfg):
    """Deterministic outcomes; the best correct configuration is fa!=off, both caches q8_0, ub>=203."""
    if cfg["fa"] == "off" and cfg["ctv"] == "q8_0":
        return record("crashed", cause="bad_args")
    f = 30.0 * (0.8 if cfg["fa"] == "off" else 1) * (1.15 if cfg["ctv"] == "q8_0" else 1) \
        * (1.12 if cfg["ctk"] == "q8_0" else 1) * (1.0 if cfg["ub"] >= 200 else 0.9)
    return record("ok", f)


BEST = 30.0 * 1.15 * 1.12


def best_of(history):
    return max((t for t in history if space.passed(t)), key=space.figure)


# -- numeric axes ---------------------------------------------------------------------------
def numeric_spec(axis: dict, baseline: dict | None):
    data = {"name": "x", "engine": "generic", "engine_options": {"command": ["srv", "--port", "{port}"]}, "model": {"path": "m"},
            "axes": [{"name": "u", "flag": "--u", **axis}]}
    if baseline is not None:
        data["baseline"] = baseline
    return S.parse(data)


def test_numeric_axis_points_bounds_mid_and_baseline():
    assert numeric_spec({"range": [32, 512]}, {"u": 100}).axes[0].values == [32, 100, 272, 512]
    assert numeric_spec({"range": [32, 512], "log": True}, {"u": 512}).axes[0].values == [32, 128, 512]
    assert numeric_spec({"range": [0.70, 0.95], "step": 0.05}, {"u": 0.9}).axes[0].values == [0.7, 0.8, 0.9, 0.95]
    ints = numeric_spec({"range": [1, 9], "points": 5}, {"u": 4}).axes[0]
    assert ints.is_int and ints.values == [1, 3, 4, 5, 7, 9]


@pytest.mark.parametrize("axis, baseline, says", [
    ({"range": [512, 32]}, {"u": 64}, "low < high"),
    ({"range": [32, 512], "step": 100}, {"u": 32}, "does not fit"),
    ({"range": [32, 512], "step": 0}, {"u": 32}, "step must be > 0"),
    ({"range": [0, 512], "log": True}, {"u": 64}, "positive bounds"),
    ({"range": [1, 8], "log": True, "step": 1}, {"u": 2}, "either 'step' or 'log"),
    ({"range": [32, 512]}, None, "needs a baseline value inside"),
    ({"range": [32, 512]}, {"u": 600}, "600 is outside range [32, 512]"),
    ({"range": [32, 512]}, {"u": 33.5}, "not an integer"),
    ({"range": [32, 512], "step": 32}, {"u": 40}, "not on step 32"),
    ({"range": [32, 512]}, {"u": "big"}, "not a number"),
    ({"range": [1]}, {"u": 1}, "two numbers"),
    ({"values": [1, 2], "log": True}, {"u": 1}, "need 'range"),
])
def test_numeric_axis_errors_name_the_field(axis, baseline, says):
    with pytest.raises(SpecError) as err:
        numeric_spec(axis, baseline)
    assert says in str(err.value) and "u" in str(err.value)


def test_numeric_axis_round_trips_through_the_store_dump():
    s = mk("grid")
    assert S.parse(s.model_dump(mode="json")).axes[3].values == s.axes[3].values == [32, 81, 203, 512]


# -- the fixed strategies see the points ------------------------------------------------------
def test_grid_sees_numeric_points():
    p = make_plan(mk("grid"))
    assert len(p) == 48 and {t.config["ub"] for t in p} == {32, 81, 203, 512}


def test_adaptive_plan_prints_its_first_round():
    first = make_plan(mk("tiered"))
    assert len(first) == 1 + 7 and all(len(t.changed) <= 1 for t in first)
    assert len(make_plan(mk("bisect"))) == 48  # the grid in order, fewest changes first
    assert len(make_plan(mk("optuna"))) == 1 + 4  # the sampler's random start, one per axis


# -- tiered -----------------------------------------------------------------------------------
def test_tiered_finds_the_winning_combination_in_under_30_percent_of_the_grid():
    r = replay(mk("tiered"), truth)
    assert r.launches <= 0.30 * 48, r.launches
    assert space.figure(best_of(r.history)) == pytest.approx(BEST)
    assert "exhausted" in r.why_done


def test_tiered_combines_only_changes_that_helped():
    r = replay(mk("tiered"), truth)
    tier2 = r.asks[1] if len(r.asks[0]) == 6 else None
    singles = {config_key(c) for c in space.singles(mk("tiered"))}
    multi = [t for t in r.history if len(t.changed) >= 2]
    assert multi and all(config_key(t.config) not in singles for t in multi)
    # fa=off and ub=32/81 were slower: no combination before tier 3 holds them
    first_combo = next(t for t in r.history if len(t.changed) >= 2)
    assert first_combo.config["fa"] != "off" and first_combo.config["ub"] == 512
    assert tier2 is None or tier2


def test_tiered_waits_for_tier_one_before_combining():
    s = mk("tiered")
    strat = make_strategy(s)
    r = replay(mk("tiered", max_trials=4), truth)  # baseline + 3 singles
    running = space.singles(s)[3:]
    assert strat.ask(r.history, running, 5) == []


def test_tiered_patience_stops_early_and_says_why():
    r = replay(mk("tiered", patience=1), truth)
    full = replay(mk("tiered"), truth)
    assert r.launches < full.launches and "plan.patience = 1" in r.why_done


# -- bisect ------------------------------------------------------------------------------------
def test_bisect_names_the_pair_and_loses_no_working_configuration():
    r = replay(mk("bisect"), truth)
    assert list(r.learned) == [frozenset({("fa", "off"), ("ctv", "q8_0")})]
    skipped = [t for t in r.history if t.verdict == "skipped"]
    assert len(skipped) == 7 and all(truth(t.config).verdict == "crashed" for t in skipped)
    assert r.launches == 48 - 7
    # every configuration with only one of the two values ran
    ran = {config_key(t.config) for t in r.history if t.verdict != "skipped"}
    one_of = [c for c in space.grid(mk("grid")) if (c["fa"] == "off") != (c["ctv"] == "q8_0")]
    assert all(config_key(c) in ran for c in one_of)
    assert "ctv=q8_0, fa=off" in r.why_done


def test_bisect_runs_sub_combinations_of_a_failed_combination_first():
    """A triple that failed (e.g. recorded by an earlier grid order) whose parts are unknown:
    bisect asks for its sub-combinations before anything else."""
    s = mk("bisect")
    base = truth(s.baseline_config()).with_(changed=[], config=s.baseline_config())
    trip = {"fa": "off", "ctk": "q8_0", "ctv": "q8_0", "ub": 512}
    failed = truth(trip).with_(config=trip, changed=["fa", "ctk", "ctv"], idx=1, key=config_key(trip))
    asked = make_strategy(s).ask([base, failed], [], 6)
    assert sorted(len(space.changes(s, c)) for c in asked) == [1, 1, 1, 2, 2, 2]


def test_bisect_resumes_with_what_was_learned():
    part = replay(mk("bisect", max_trials=20), truth)
    rest = replay(mk("bisect"), truth, start=part.history)
    assert list(rest.learned) == [frozenset({("fa", "off"), ("ctv", "q8_0")})]
    keys = [config_key(t.config) for t in rest.history]
    assert len(keys) == len(set(keys)) == 48  # nothing ran twice, everything covered


def test_bisect_does_not_blame_a_pair_whose_single_failed():
    def single_bad(cfg):
        return record("wrong") if cfg["ctk"] == "q8_0" else truth(cfg)
    r = replay(mk("bisect"), single_bad)
    assert all(("ctk", "q8_0") not in s for s in r.learned)


# -- optuna ------------------------------------------------------------------------------------
def test_optuna_numeric_values_stay_in_range_and_are_ints():
    r = replay(mk("optuna", max_trials=12), truth)
    ubs = [t.config["ub"] for t in r.history]
    assert all(isinstance(u, int) and 32 <= u <= 512 for u in ubs)
    assert len({u for u in ubs}) > 4  # it samples the range, not only the grid's points
    assert r.launches == 12 and "budget" in r.why_done


def test_optuna_is_reproducible_and_resume_is_exact():
    """The same seed and outcomes give the same path; asked from any stored prefix of that path,
    a fresh strategy proposes what the uninterrupted search ran next."""
    a = replay(mk("optuna", max_trials=10, seed=3), truth)
    b = replay(mk("optuna", max_trials=10, seed=3), truth)
    assert [t.config for t in a.history] == [t.config for t in b.history]
    for k in (2, 5, 8):
        nxt = make_strategy(mk("optuna", seed=3)).ask(a.history[:k], [], 1)
        assert nxt == [a.history[k].config]


def test_optuna_treats_failures_as_infeasible_not_slow():
    s = mk("optuna", max_trials=10)
    r = replay(s, truth)
    study, _ = make_strategy(s).study(r.history, [])
    for ft, t in zip(study.trials, sorted(r.history, key=lambda t: (t.finished, t.idx))):
        assert ft.system_attrs["constraints"] == [1.0 if t.verdict == "crashed" else 0.0]


def test_optuna_asks_several_distinct_for_parallel_executors():
    s = mk("optuna")
    base = truth(s.baseline_config()).with_(changed=[], config=s.baseline_config())
    running = [{"fa": "on", "ctk": "f16", "ctv": "f16", "ub": 512}]
    asked = make_strategy(s).ask([base], running, 4)
    keys = {config_key(c) for c in asked}
    assert len(asked) == 4 == len(keys) and config_key(running[0]) not in keys


def test_optuna_patience_and_exhausted_space():
    flat = lambda cfg: record("ok", 30.0)  # noqa: E731 — nothing ever improves
    r = replay(mk("optuna", patience=3), flat)
    assert r.launches == 4 and "plan.patience = 3" in r.why_done
    small = S.Spec.model_validate({"name": "x", "engine": "generic", "model": {"path": "m"},
                                   "axes": [{"name": "a", "flag": "--a", "values": ["1", "2"]}],
                                   "plan": {"strategy": "optuna"}})
    r = replay(small, lambda cfg: record("ok", 30.0 + int(cfg["a"])))
    assert r.launches == 2 and "every configuration of the space ran" in r.why_done


def test_optuna_finds_a_near_best_configuration_within_30_percent():
    """Within 14 launches (29 % of the grid), a configuration within 5 % of the best in most seeds.
    Measured 6/10 seeds (0..9) on these outcomes; uniform random sampling of the same space
    expects about 5/10 (p ~ 0.057 per trial), so this checks that the search works, not that TPE
    beats chance by much on so few trials."""
    hits = 0
    for seed in range(10):
        r = replay(mk("optuna", max_trials=14, seed=seed), truth)
        assert r.launches == 14
        hits += space.figure(best_of(r.history)) >= 0.95 * BEST
    assert hits >= 4


# -- what was left unexplored -------------------------------------------------------------------
def test_unexplored_sentence_counts_grid_cells():
    r = replay(mk("tiered"), truth)
    line = space.unexplored(mk("tiered"), r.history)
    assert line.startswith(f"{r.launches} launch(es) of a 48-configuration grid")
    assert f"{48 - r.launches} grid configuration(s) never ran" in line
    b = replay(mk("bisect"), truth)
    assert "7 skipped as known-bad; no grid configuration was left unexplored" in space.unexplored(mk("bisect"), b.history)


# -- the report: numeric axis as a curve, why the search stopped -----------------------------------
def test_report_numeric_curve_table_and_plot():
    from bakeoff.report import curves, html

    s = mk("tiered")
    r = replay(s, truth)
    spec = s.model_dump(mode="json")
    table = curves.markdown_table(spec, r.history)
    assert table[1] == "### Numeric axis `ub`"
    rows = {ln.split("|")[1].strip(): ln for ln in table if ln.startswith("| ") and ln[2].isdigit()}
    assert set(rows) >= {"32", "81", "203", "512"}
    assert rows["512"].split("|")[2].strip() == f"{30.0:.1f}"  # the baseline's figure, others at baseline
    assert rows["81"].split("|")[2].strip() == f"{27.0:.1f}"
    svg = html.numeric_curve_plot(spec, r.history)
    assert 'id="numeric-curves"' in svg and "<svg" in svg
    assert html.numeric_curve_plot(mk("grid").model_dump(mode="json") | {"axes": []}, r.history) == ""
    lines = curves.search_lines(spec, r.history, r.why_done)
    assert lines[0].startswith("Search stopped: tiered: the neighbourhood") and lines[1].startswith("Explored: ")


@pytest.mark.parametrize("example, first_round", [("tiered", 1 + 6), ("optuna", 1 + 4), ("bisect", 36)])
def test_bakeoff_plan_prints_an_adaptive_first_round(example, first_round):
    from typer.testing import CliRunner

    from bakeoff.cli import app

    res = CliRunner().invoke(app, ["plan", f"examples/smollm2-{example}.toml"])
    assert res.exit_code == 0, res.output
    assert res.output.count("# trial ") == first_round
    assert "is adaptive: this is its first round; later rounds depend on results" in " ".join(res.output.split())
