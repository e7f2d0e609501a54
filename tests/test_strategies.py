"""One contract, every strategy (``bakeoff.registry.STRATEGIES``): driven by the pipeline's loop in
miniature (``plan.replay``: baseline first, ask, the known-bad gate) against a table of outcomes,
each strategy proposes only configurations of the declared axes, never one twice, none while it
is given ``n = 0`` room, at most ``n`` at a time, and ends with a reason. No engine here: the
outcomes are the ones llama-server + SmolLM2 gave on this machine (as in test_search.py)."""

from __future__ import annotations

import pytest

from bakeoff import spec as S
from bakeoff.plan import config_key, space
from bakeoff.plan.base import Strategy, make_strategy
from bakeoff.plan.replay import record, replay
from bakeoff.registry import STRATEGIES


def mk(strategy: str, **plan) -> S.Spec:
    return S.Spec.model_validate({
        "name": "x", "engine": "generic", "engine_options": {"command": ["srv", "--port", "{port}"]}, "model": {"path": "m"},
        "axes": [{"name": "fa", "flag": "--flash-attn", "values": ["auto", "on", "off"]},
                 {"name": "ctv", "flag": "--cache-type-v", "values": ["f16", "q8_0"]},
                 {"name": "ub", "flag": "--ubatch-size", "range": [32, 512], "log": True, "points": 3}],
        "baseline": {"fa": "auto", "ub": 512}, "plan": {"strategy": strategy, **plan}})


def truth(cfg: dict):
    if cfg["fa"] == "off" and cfg["ctv"] == "q8_0":
        return record("crashed", cause="bad_args")
    return record("ok", 30.0 * (0.8 if cfg["fa"] == "off" else 1) * (1.15 if cfg["ctv"] == "q8_0" else 1)
                  * (1.0 if cfg["ub"] >= 200 else 0.9))


@pytest.fixture(params=STRATEGIES.names())
def name(request) -> str:
    return request.param


def test_every_registered_strategy_is_a_strategy_under_its_name(name):
    cls = STRATEGIES.get(name)
    assert issubclass(cls, Strategy) and cls.name == name
    strategy = make_strategy(mk(name, max_trials=8))
    assert isinstance(strategy, cls) and isinstance(strategy.learned(), dict)


def test_every_strategy_proposes_declared_values_never_twice_and_ends_with_a_reason(name):
    spec = mk(name, max_trials=12)
    r = replay(spec, truth, parallel=2)
    assert r.history[0].changed == []  # the baseline first
    keys = [config_key(t.config) for t in r.history]
    assert len(keys) == len(set(keys)), "a configuration was proposed twice"
    for t in r.history:
        assert set(t.config) == {a.name for a in spec.axes}
        for a in spec.axes:
            assert S.render(t.config[a.name]) in {S.render(v) for v in a.values} or (
                a.numeric and S.in_range(a, t.config[a.name])), (a.name, t.config)
    assert all(len(asked) <= 2 for asked in r.asks)
    assert r.launches <= 12 and r.why_done
    assert any(space.passed(t) for t in r.history)


def test_every_strategy_with_no_room_proposes_nothing(name):
    spec = mk(name, max_trials=8)
    first = replay(spec, truth, parallel=1).history[:1]
    assert make_strategy(spec).ask(first, [], 0) == []


def test_an_unknown_strategy_names_the_field_and_the_valid_ones():
    with pytest.raises(S.SpecError) as err:
        S.parse({"name": "x", "engine": "generic", "engine_options": {"command": ["srv", "--port", "{port}"]},
                 "model": {"path": "m"}, "plan": {"strategy": "gird"}})
    assert "plan.strategy: unknown strategy 'gird' (did you mean grid?); valid: " + ", ".join(STRATEGIES.names()) in str(err.value)
