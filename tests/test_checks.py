"""The Check contract (bakeoff.judge.checks): one module per correctness notion, each a
``check(ev: Evidence) -> Finding | None``, all of them in the judge's order (``probes.CHECKS``).
Run over every implementation: each module is registered once, and each answers a healthy
trial that matches its baseline with None and keeps to the contract's types."""

from __future__ import annotations

import importlib
import pkgutil

from bakeoff import spec
from bakeoff.judge import checks, probes
from bakeoff.judge.checks import Evidence, Finding
from bakeoff.measure.client import Result


def _modules() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(checks.__path__))


def test_every_check_module_is_in_the_judge_once_in_its_order():
    registered = [c.__module__.rsplit(".", 1)[1] for c in probes.CHECKS]
    assert sorted(registered) == _modules()
    assert registered == ["detectors", "content", "floors", "differential", "drift", "tasks", "gate", "concurrent", "sampled", "lm_eval"]


def _reply(text: str) -> Result:
    toks = [{"token": w, "logprob": -0.1, "top_logprobs": [{"token": w, "logprob": -0.1}]} for w in text.split(" ")]
    return Result(text=text, tokens=toks, logprobs_requested=True, finish_reason="stop")


def test_every_check_passes_a_trial_identical_to_its_baseline():
    prompts, long_cfg = probes.load_prompt_set("default")
    single = {p.id: _reply("The answer is 5 and Paris and {\"name\": \"Alice\"}") for p in prompts}
    col = {"prompts": prompts, "long": {}, "anchored": {}, "results": {"single": single},
           "sampled": {f"{p.id}@1": _reply("a b c") for p in prompts}}
    cfg = spec.Probes(gate_items=0, min_task_accuracy=0)
    for name in _modules():
        module = importlib.import_module(f"bakeoff.judge.checks.{name}")
        values: dict = {}
        ev = Evidence(col, col, cfg, values, diffs=probes.whole_diffs(col, col, cfg))
        assert module.check(ev) is None, name
    # and a finding is the contract's type, which the judge turns into its outcome
    broken = {**col, "results": {"single": {**single, prompts[0].id: Result(text="", error="HTTP 500")}}}
    found = importlib.import_module("bakeoff.judge.checks.detectors").check(Evidence(broken, col, cfg, {}))
    assert isinstance(found, Finding) and found.detector == "request_error" and found.mode == "single"
