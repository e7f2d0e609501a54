"""The planner: baseline, one-factor-at-a-time and grid; pruning of known-bad values."""

from bakeoff import plan
from bakeoff.plan.prune import Gate
from bakeoff import spec


def make(strategy, **baseline):
    return spec.Spec.model_validate({
        "name": "p", "engine": "llamacpp", "model": {"path": "m.gguf"},
        "axes": [
            {"name": "a", "flag": "--a", "values": ["1", "2", "3"]},
            {"name": "b", "env": "B", "values": ["x", "y"]},
        ],
        "baseline": baseline, "plan": {"strategy": strategy},
    })


def test_baseline_only():
    p = plan.make_plan(make("baseline"))
    assert [t.config for t in p] == [{"a": "1", "b": "x"}]


def test_ofat_changes_exactly_one_axis():
    s = make("ofat", a="2")
    p = plan.make_plan(s)
    assert p[0].config == {"a": "2", "b": "x"} and p[0].changed == ()
    assert len(p) == 1 + 2 + 1
    for t in p[1:]:
        assert len(t.changed) == 1
        diff = [k for k in t.config if t.config[k] != p[0].config[k]]
        assert diff == list(t.changed)
    assert {t.label for t in p[1:]} == {"a=1", "a=3", "b=y"}


def test_grid_is_every_combination_baseline_first():
    p = plan.make_plan(make("grid"))
    assert len(p) == 6
    assert p[0].changed == ()
    assert len({t.key for t in p}) == 6


def test_keys_are_stable_and_order_free():
    assert plan.config_key({"a": "1", "b": "x"}) == plan.config_key({"b": "x", "a": "1"})


def _gate(bad: dict, force=()) -> Gate:
    g = Gate(force=set(force))
    for pairs, why in bad.items():
        g.add(frozenset(pairs), why)
    return g


def test_pruning_skips_values_known_bad_unless_forced():
    p = plan.make_plan(make("grid"))
    bad = {(("a", "3"),): "arch_unsupported in trial 2"}
    skipped = [t for t in p if _gate(bad).skip(t)]
    assert skipped and all(t.config["a"] == "3" for t in skipped)
    assert not [t for t in p if _gate(bad, ["a=3"]).skip(t)]


def test_an_incompatible_pair_prunes_only_configurations_holding_both():
    p = plan.make_plan(make("grid"))
    pair = {(("a", "3"), ("b", "y")): "wrong together"}
    skipped = [t for t in p if _gate(pair).skip(t)]
    assert skipped and all(t.config["a"] == "3" and t.config["b"] == "y" for t in skipped)
    assert any(t.config["a"] == "3" and t.config["b"] != "y" for t in p if not _gate(pair).skip(t))


def test_a_bad_pair_at_the_baseline_value_never_prunes_the_baseline():
    p = plan.make_plan(make("grid"))
    base = p[0]
    first = next(iter(base.config))
    bad = {((first, str(base.config[first])),): "x"}
    assert _gate(bad).skip(base) is None


def test_axis_env_and_args():
    s = make("ofat")
    args, env = plan.axis_env_and_args(s, {"a": "2", "b": "y"})
    assert args == ["--a", "2"] and env == {"B": "y"}
