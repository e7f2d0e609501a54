"""The sampled path (issue 23, item 7; bakeoff.judge.checks.sampled): replies drawn at
temperature > 0 with the same seeds as the baseline's, the chosen tokens' mean logprob compared
pair by pair with a healthy margin.

* when it runs: ``probes.sampled`` and the per-engine data list of sampling flags and variables;
* the verdict: a shift beyond the margin is ``wrong (sampled_path)`` with the pairs as evidence,
  the stored replies survive a round trip, an engine without logprobs or a baseline without
  sampled replies is said in ``checks_not_run``;
* on the real llama-server (SmolLM2): a healthy change (flash attention) passes, two real sampler
  faults fail — ``--samplers`` without the temperature stage (every request sampled at T = 1:
  too flat; in a whole judgement ``not_greedy`` fires first, since llama.cpp's greedy decoding is
  that stage at temperature 0) and ``--top-k 1`` (a server default that makes every sampled
  request greedy, invisible to every greedy probe: only this check sees it).
"""

from __future__ import annotations

import asyncio
import math

import pytest

import llamaserve

from bakeoff import spec
from bakeoff.judge import probes
from bakeoff.judge.checks import Evidence
from bakeoff.judge.checks import sampled as sampled_path
from bakeoff.judge.probes import load_prompt_set, messages
from bakeoff.measure.client import Result, chat_body, new_session

CFG = spec.Probes()


def axis(**kw) -> spec.Axis:
    return spec.Axis(name="x", values=[1, 2], **kw)


# -- when it runs ----------------------------------------------------------------------------------

def test_auto_runs_only_when_an_axis_may_change_sampling():
    assert sampled_path.touches_sampling("llamacpp", [axis(flag="--samplers"), axis(flag="--flash-attn")]) == ["x"]
    assert not sampled_path.wanted("auto", "llamacpp", [axis(flag="--flash-attn"), axis(flag="--threads")])
    assert sampled_path.wanted("auto", "llamacpp", [axis(flag="--top-k")])
    assert sampled_path.wanted("auto", "vllm", [axis(env="VLLM_USE_FLASHINFER_SAMPLER")])
    assert sampled_path.wanted("auto", "sglang", [axis(flag="--sampling-backend")])
    assert sampled_path.wanted("auto", "generic", [axis(env="MY_SAMPLER_KERNEL")])  # the name says sampling
    assert not sampled_path.wanted("auto", "vllm", [axis(flag="--top-k")])  # a llama.cpp flag, not vLLM's
    assert sampled_path.wanted("on", "llamacpp", [])
    assert not sampled_path.wanted("off", "llamacpp", [axis(flag="--samplers")])


def test_the_setting_is_validated_at_the_edge():
    with pytest.raises(ValueError, match="sampled"):
        spec.Probes(sampled="sometimes")
    with pytest.raises(ValueError, match="sampled_seeds"):
        spec.Probes(sampled_seeds=1)


# -- the verdict on synthetic replies ---------------------------------------------------------------

def sampled_reply(lps: list[float], top: float = -0.2) -> Result:
    toks = [{"token": f"t{i}", "logprob": lp, "top_logprobs": [{"token": "best", "logprob": max(top, lp)}]} for i, lp in enumerate(lps)]
    return Result(text=" ".join(t["token"] for t in toks), tokens=toks, logprobs_requested=True, finish_reason="length")


def draws(shift: float = 0.0, n: int = 24) -> dict[str, Result]:
    """Replies whose mean chosen logprob varies by pair (as real prompts and seeds do) plus ``shift``."""
    return {f"p{i // 4}@{i % 4 + 1}": sampled_reply([-1.0 - 0.05 * (i % 7) + shift + 0.02 * (j % 3) for j in range(12)])
            for i in range(n)}


def noisy(sd: float, seed: int = 1) -> dict[str, Result]:
    import random

    rng = random.Random(seed)
    return {k: sampled_reply([t["logprob"] + rng.gauss(0, sd) for t in r.tokens]) for k, r in draws().items()}


def test_same_distribution_passes_and_a_shift_beyond_the_margin_fails_both_ways():
    base = draws()
    values: dict = {}
    assert sampled_path.check(Evidence({"sampled": noisy(0.1)}, {"sampled": base}, CFG, values)) is None
    assert values["sampled_pairs"] == 24 and abs(values["sampled_shift"]) < CFG.sampled_margin
    assert values["sampled_shift_ci"][0] <= values["sampled_shift"] <= values["sampled_shift_ci"][1]
    flat = sampled_path.check(Evidence({"sampled": draws(-0.35)}, {"sampled": base}, CFG, {}))
    assert flat is not None and flat.mode == "sampled" and flat.detector == "sampled_path"
    assert "-0.350 nats" in flat.detail and "too flat" in flat.detail and len(flat.evidence) == 3
    greedy = sampled_path.check(Evidence({"sampled": draws(+0.3)}, {"sampled": base}, CFG, {}))
    assert greedy is not None and "too greedy" in greedy.detail
    # inside the margin: a real but small shift is healthy variation, not a fault
    assert sampled_path.check(Evidence({"sampled": draws(-0.05)}, {"sampled": base}, CFG, {})) is None


def test_the_judge_calls_it_wrong_sampled_path_and_keeps_the_evidence():
    prompts, _ = load_prompt_set("default")
    single = {p.id: Result(text="ok", tokens=[], logprobs_requested=False) for p in prompts[:1]}
    col = {"prompts": prompts[:1], "long": {}, "anchored": {}, "results": {"single": single}}
    base = {**col, "sampled": draws()}
    cfg = spec.Probes(gate_items=0, min_task_accuracy=0)
    out = probes.judge({**col, "sampled": draws(-0.4)}, cfg, base, expect_logprobs=False)
    assert not out.passed and out.detector == "sampled_path" and out.failed_mode == "sampled"
    assert out.evidence and out.evidence[0].startswith("p")
    assert probes.judge({**col, "sampled": draws()}, cfg, base, expect_logprobs=False).passed
    # a baseline without sampled replies (probes.sampled off when it ran): said, not silently passed
    lone = probes.judge({**col, "sampled": draws(-0.4)}, cfg, col, expect_logprobs=False)
    assert lone.passed and any(n.startswith("sampled-path comparison") for n in lone.checks_not_run)


def test_sampled_replies_survive_the_store_and_errors_are_findings():
    prompts, _ = load_prompt_set("default")
    col = {"prompts": prompts, "long": {}, "results": {"single": {}}, "sampled": draws()}
    back = probes.results_from_json(probes.results_to_json(col), "default")
    assert back["sampled"] == col["sampled"]
    broken = {**draws(), "p0@1": Result(text="", error="HTTP 500")}
    found = sampled_path.check(Evidence({"sampled": broken}, {"sampled": draws()}, CFG, {}))
    assert found.detector == "request_error" and found.mode == "sampled"
    nan = {**draws(), "p0@1": sampled_reply([-1.0, math.nan])}
    assert sampled_path.check(Evidence({"sampled": nan}, None, CFG, {})).detector == "nonfinite_logprobs"


# -- the real llama-server ---------------------------------------------------------------------------

def _serve(real_llamacpp, *extra: str):
    return llamaserve.serve(real_llamacpp, "-c", "2048", "-t", "1", "-np", "4", "--flash-attn", "off", *extra)


def _draw(real_llamacpp, *extra: str) -> dict[str, Result]:
    """The sampled replies of the default probe set from a fresh llama-server with ``extra``."""
    prompts, _ = load_prompt_set("default")
    proc, url = _serve(real_llamacpp, *extra)

    async def run() -> dict[str, Result]:
        async with new_session(timeout_s=120) as session:
            return await sampled_path.collect(session, url + "/v1/chat/completions", prompts, CFG,
                                              lambda p: chat_body(messages(p), max_tokens=CFG.max_tokens,
                                                                  top_logprobs=CFG.top_logprobs))

    try:
        return asyncio.run(run())
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_real_sampler_faults_fail_and_a_healthy_change_passes(real_llamacpp):
    base = _draw(real_llamacpp)
    assert len(base) == 8 * CFG.sampled_seeds and all(r.ok and r.tokens for r in base.values())

    def judged(*extra: str):
        values: dict = {}
        return sampled_path.check(Evidence({"sampled": _draw(real_llamacpp, *extra)}, {"sampled": base}, CFG, values)), values

    healthy, hv = judged("--flash-attn", "on")
    assert healthy is None, healthy
    assert hv["sampled_pairs"] == 8 * CFG.sampled_seeds  # measured shifts: -0.02 to -0.05 (A/A +0.02)
    no_temp, nv = judged("--samplers", "top_k;top_p;min_p")  # the temperature stage left out of the chain
    assert no_temp is not None and no_temp.detector == "sampled_path" and nv["sampled_shift"] < 0, nv
    assert "too flat" in no_temp.detail
    greedy, gv = judged("--top-k", "1")  # requests send temperature and top_p, not top_k: the server's default applies
    assert greedy is not None and greedy.detector == "sampled_path" and gv["sampled_shift"] > 0, gv
    assert gv["sampled_top_share"] == 1.0 and gv["sampled_top_share_baseline"] < 0.9


def test_run_probes_draws_the_sampled_replies_or_says_why_not(real_llamacpp, tmp_path):
    """The collection path itself (``probes.run_probes(sampled=True)``) on the real server: with
    logprobs it draws prompt x seed replies and judges them; an engine said to give no logprobs
    lists the check in ``checks_not_run`` and draws nothing."""
    one = tmp_path / "one.toml"
    one.write_text("[[prompt]]\nid = \"capital\"\ntext = \"What is the capital of France?\"\n")
    cfg = spec.Probes(set=str(one), gate_items=0, concurrency=0, load_probe=False, sampled_seeds=3, max_tokens=16)
    proc, url = _serve(real_llamacpp)
    try:
        got = probes.run_probes(url, cfg, sampled=True)
        blind = probes.run_probes(url, cfg, sampled=True, expect_logprobs=False)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert sorted(got["sampled"]) == ["capital@1", "capital@2", "capital@3"]
    assert all(r.ok and r.tokens and r.tokens[0].get("top_logprobs") for r in got["sampled"].values())
    out = probes.judge(got, cfg, got)
    assert out.passed and out.values["sampled_shift"] == 0.0 and out.values["sampled_pairs"] == 3
    assert "sampled" not in blind
    judged = probes.judge(blind, cfg, None, expect_logprobs=False, role="baseline")
    assert sampled_path.NO_LOGPROBS in judged.checks_not_run
