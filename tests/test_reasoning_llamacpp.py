"""Reasoning on the real engine: llama-server's own reasoning parser, SmolLM2's real text.

llama-server runs with ``--jinja --chat-template-file tests/data/templates/chatml-think.jinja
--reasoning-format deepseek``: SmolLM2's ChatML with a Qwen3-style thought, whose generation
prompt opens ``<think>\\n``. llama.cpp's differential template analysis finds the markers
(common/chat-diff-analyzer.cpp) and its generated parser streams what the model writes up to
``</think>`` as ``delta.reasoning_content`` (SmolLM2 never writes ``</think>``: all of it).
Nothing is stubbed: the engine parses the real model's text.

Two small sweeps (baseline, ``--flash-attn on``), one per ``[server] thinking``:

* ``on``: every request sends ``chat_template_kwargs.enable_thinking = true``, the probes get
  ``thinking_tokens`` more; every answer arrives as reasoning_content and is judged on it; the
  long "explain" reply is cut by max_tokens while thinking (unanswered, not wrong); both ``ok``.
* ``off``: ``enable_thinking = false`` reaches the template (the thought is closed empty) and
  llama.cpp's parser alike: plain content, no reasoning; both ``ok``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bakeoff import spec as specmod
from bakeoff.decide import load as load_decision
from bakeoff.pipeline import run_sweep
from bakeoff.report.html import recommendation
from bakeoff.store import Store

pytestmark = pytest.mark.engine

DATA = Path(__file__).parent / "data"
TEMPLATE = DATA / "templates" / "chatml-think.jinja"
PROBES = DATA / "probes" / "thinking.toml"
ROOM = 16  # probe max_tokens 24 + 16: the short answers end inside it, "explain" is cut while thinking


def spec_data(eng, thinking: str) -> dict:
    return {
        "name": f"reasoning-{thinking}", "engine": "llamacpp", "engine_options": {"binary": eng.binary},
        "model": {"path": eng.model, "name": "smollm2"},
        "server": {"args": ["--ctx-size", "512", "--parallel", "1", "--threads", "1", "--no-webui", "--jinja",
                            "--chat-template-file", str(TEMPLATE), "--reasoning-format", "deepseek"],
                   "thinking": thinking, **({"thinking_tokens": ROOM} if thinking != "off" else {}),
                   "startup_timeout_s": 120, "request_timeout_s": 300},
        "probes": {"set": str(PROBES), "max_tokens": 24, "concurrency": 0, "gate_items": 0},
        "bench": {"concurrency": [1], "requests_per_level": 2, "warmup_requests": 0, "input_tokens": 32,
                  "output_tokens": 16, "repetitions": 1, "max_repetitions": 1, "slow_fraction": 0.05},
        "axes": [{"name": "flash_attn", "flag": "--flash-attn", "values": ["off", "on"]}],
        "plan": {"strategy": "ofat"},
    }


def _sweep(eng, d: Path, thinking: str) -> dict:
    t0 = time.monotonic()
    report = run_sweep(specmod.parse(spec_data(eng, thinking)), d / "run")
    took = time.monotonic() - t0
    with Store(d / "run") as store:
        trials = store.trials()
        artifacts = {t.key: store.artifact(t.key, "probes") for t in trials}
        html = recommendation(load_decision(store))  # the HTML report's recommendation block
    return {"trials": trials, "artifacts": artifacts, "report": report.read_text(), "html": html, "took": took}


@pytest.fixture(scope="module")
def thinking_on(real_llamacpp, tmp_path_factory):
    return _sweep(real_llamacpp, tmp_path_factory.mktemp("think-on"), "on")


@pytest.fixture(scope="module")
def thinking_off(real_llamacpp, tmp_path_factory):
    return _sweep(real_llamacpp, tmp_path_factory.mktemp("think-off"), "off")


def _replies(sweep: dict) -> list[tuple[str, str, dict]]:
    """(trial key, mode/prompt, stored reply) of every probe reply of the sweep."""
    return [(key, f"{mode}/{pid}", r) for key, art in sweep["artifacts"].items()
            for mode, items in art["results"].items() for pid, r in items.items()]


def test_a_reasoning_parser_sweep_is_ok_for_a_healthy_change(thinking_on):
    got = [(t.idx, dict(t.config), t.verdict) for t in thinking_on["trials"]]
    assert got == [(0, {"flash_attn": "off"}, "ok"), (1, {"flash_attn": "on"}, "ok")], \
        [t.detail for t in thinking_on["trials"]]
    fa = thinking_on["trials"][1]
    assert "agreement=" in fa.detail and fa.metrics["probe"]["task_accuracy"] == "3/3", fa.detail  # judged vs the baseline
    assert thinking_on["took"] < 90, thinking_on["took"]


def test_answers_really_arrived_as_reasoning_content(thinking_on):
    """The client fills ``reasoning`` only from ``delta.reasoning_content``/``reasoning``: every
    stored reply came from the engine's reasoning parser, none from content."""
    replies = _replies(thinking_on)
    assert len(replies) == 10  # 4 prompts + the bench-shaped one, 2 trials
    for key, where, r in replies:
        assert r["error"] is None and r["reasoning"].strip() and r["from_reasoning"], (key, where, r["text"])
        assert r["text"] == r["reasoning"] and r["tokens"], (key, where)  # logprobs for the thought's tokens too
    base = next(a for k, a in thinking_on["artifacts"].items() if k == thinking_on["trials"][0].key)
    assert "paris" in base["results"]["single"]["capital"]["reasoning"].lower()


def test_a_reply_cut_while_thinking_is_unanswered_not_wrong(thinking_on):
    for t in thinking_on["trials"]:
        explain = thinking_on["artifacts"][t.key]["results"]["single"]["explain"]
        assert explain["finish_reason"] == "length" and explain["from_reasoning"]
        thought = t.metrics["probe"]["thinking"]
        assert thought == {"mode": "on", "room": ROOM, "replies": 5, "with_reasoning": 5, "judged_on_reasoning": 5,
                           "cut_while_thinking": thought["cut_while_thinking"]} and thought["cut_while_thinking"] >= 1
        assert any("cut by max_tokens while thinking" in c for c in t.metrics["checks_not_run"])


def test_the_report_says_answers_were_judged_on_reasoning_content(thinking_on):
    line = next(x for x in thinking_on["report"].splitlines() if x.startswith("Thinking on:"))
    assert "chat_template_kwargs.enable_thinking = true" in line and f"had {ROOM} tokens more" in line
    assert "10 of the sweep's 10 probe replies carried reasoning_content" in line and "10 on their reasoning_content" in line
    assert 'id="thinking">Thinking on:' in thinking_on["html"]


def test_thinking_off_reaches_the_template_and_the_parser(thinking_off):
    got = [(t.idx, t.verdict) for t in thinking_off["trials"]]
    assert got == [(0, "ok"), (1, "ok")], [t.detail for t in thinking_off["trials"]]
    for key, where, r in _replies(thinking_off):
        assert r["reasoning"] == "" and not r["from_reasoning"] and r["text"].strip(), (key, where, r)
    assert "Thinking off: every probe and benchmark request sent chat_template_kwargs.enable_thinking = false; " \
           "no probe reply carried reasoning_content" in thinking_off["report"]
    assert thinking_off["took"] < 90, thinking_off["took"]


def test_the_same_real_replies_without_thinking_on_are_answers_clients_never_see(thinking_on, real_llamacpp):
    """The thinking = "on" sweep's real stored replies (llama-server put every answer in
    reasoning_content, content empty), judged as if the spec had not said the deployment thinks:
    an OpenAI client reading ``content`` got "" — ``answer_in_reasoning``, for the baseline too."""
    from bakeoff.judge.probes import judge, results_from_json

    cfg = specmod.parse(spec_data(real_llamacpp, "on")).probes
    for t in thinking_on["trials"]:
        collected = results_from_json(thinking_on["artifacts"][t.key], str(PROBES))
        assert judge(collected, cfg, None, role="baseline").passed  # as stored: thinking on
        for mode in ("auto", "off"):
            collected["info"]["thinking"]["mode"] = mode
            out = judge(collected, cfg, None, role="baseline")
            assert (out.passed, out.detector) == (False, "answer_in_reasoning"), out.detail
            assert "a client reading content gets \"\"" in out.detail and "reasoning_content" in out.evidence[0]
