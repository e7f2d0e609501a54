"""A reasoning model's stream (``--reasoning-parser`` in SGLang/vLLM, ``--reasoning-format`` in
llama.cpp) sends its thinking as ``delta.reasoning_content``: the client collects it, counts it
as output for timing, and a reply that is all thinking is judged on its thinking, never as an
empty answer. A **stub** SSE server (named so) for the shapes SmolLM2 cannot produce (thinking
*then* an answer: it never writes ``</think>``); tests/test_reasoning_llamacpp.py has the real
engine's parser. Below the stub: the judge's rules for such replies, on built ``Result``s, and
``[server] thinking`` at the spec's edge and in the request."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web

from bakeoff import spec as specmod
from bakeoff.decide import thinking_line
from bakeoff.errors import SpecError
from bakeoff.judge.probes import Prompt, absolute_floors, detect, judge, task_score, thinking_values
from bakeoff.measure.bench import request_body
from bakeoff.measure.client import Result, chat_body, new_session, stream_request
from bakeoff.spec import Probes
from bakeoff.store import TrialRecord


def _events(deltas: list[dict], finish: str = "stop") -> bytes:
    out = b""
    for d in deltas:
        out += b"data: " + json.dumps({"choices": [{"index": 0, "delta": d, "finish_reason": None}]}).encode() + b"\n\n"
    out += b"data: " + json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                                   "usage": {"prompt_tokens": 5, "completion_tokens": len(deltas)}}).encode() + b"\n\n"
    return out + b"data: [DONE]\n\n"


async def _serve(deltas: list[dict], finish: str = "stop"):
    async def handler(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_events(deltas, finish))
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}/v1/chat/completions"


def _ask(deltas: list[dict], finish: str = "stop"):
    async def go():
        runner, url = await _serve(deltas, finish)
        try:
            async with new_session() as s:
                return await stream_request(s, url, chat_body([{"role": "user", "content": "2+3?"}], max_tokens=16, top_logprobs=-1))
        finally:
            await runner.cleanup()
    return asyncio.run(go())


def test_thinking_then_answer_keeps_both_and_judges_the_answer():
    res = _ask([{"reasoning_content": "I add 2 and 3"}, {"reasoning_content": " to get 5."}, {"content": "5"}])
    assert res.ok and res.text == "5" and res.reasoning == "I add 2 and 3 to get 5." and not res.from_reasoning
    assert res.generated == "I add 2 and 3 to get 5.5"
    assert len(res.chunk_times) == 3 and res.first_token is not None  # thinking is output: TTFT is the first thought


def test_a_reply_that_is_all_thinking_is_not_empty():
    res = _ask([{"reasoning_content": "The user asks for 2+3, which is 5."}])
    assert res.text == "The user asks for 2+3, which is 5." and res.from_reasoning and not res.cut_while_thinking
    assert not [f for f in detect(res, expect_logprobs=False) if f.startswith("empty")]


def test_vllm_style_reasoning_field_too():
    res = _ask([{"reasoning": "thinking"}, {"content": "done"}])
    assert (res.text, res.reasoning) == ("done", "thinking")


def test_thinking_cut_by_max_tokens_before_any_answer_is_marked_so():
    """A whitespace-only content after the thought is no answer either."""
    res = _ask([{"reasoning_content": "Let me think about 2+3 step by step"}, {"content": "\n\n"}], finish="length")
    assert res.from_reasoning and res.cut_while_thinking and res.text == "Let me think about 2+3 step by step"


# -- the judge's rules (built Results) --------------------------------------------------------

CFG = Probes(set="quick", gate_items=0, concurrency=0)
ARITH = Prompt("arith", "What is 2+3?", r"\b5\b")


def _r(text: str = "", reasoning: str = "", finish: str = "stop") -> Result:
    """A reply as the client builds it: content, else (no content) the thought."""
    answered = bool(text.strip())
    return Result(text=text if answered else reasoning, reasoning=reasoning, from_reasoning=bool(reasoning) and not answered,
                  finish_reason=finish)


def _collected(single: dict[str, Result], thinking: str = "on") -> dict:
    prompts = [ARITH, Prompt("capital", "Capital of France?", "paris")]
    return {"prompts": prompts, "long": {}, "results": {"single": single},
            "info": {"thinking": {"mode": thinking, "room": 64}}}


def test_the_answer_is_the_content_not_the_thought():
    """5 in the thought but 4 in the answer: wrong; the answer after a wrong thought: right."""
    res = {"arith": _r("4", "2+3 is 5"), "capital": _r("Paris", "Is it Lyon?")}
    assert task_score([ARITH, Prompt("capital", "", "paris")], res) == (1, 2)


def test_a_reply_cut_while_thinking_is_not_scored():
    res = {"arith": _r("", "Let me add 2 and 3, carefully, first", "length"), "capital": _r("", "The capital is Paris.")}
    assert task_score(_collected(res)["prompts"], res) == (1, 1)  # capital judged on its thought; arith unanswered
    out = judge(_collected(res), CFG, None, role="baseline")
    assert out.passed, out.detail
    assert out.values["thinking"] == {"mode": "on", "room": 64, "replies": 2, "with_reasoning": 2, "judged_on_reasoning": 2,
                                      "cut_while_thinking": 1}
    assert any("1 replies cut by max_tokens while thinking" in c for c in out.checks_not_run)


def test_nothing_answered_is_no_evidence_of_being_right():
    cut = _r("", "Hmm, let me think", "length")
    out = judge(_collected({"arith": cut, "capital": cut}), CFG, None, role="trial")
    assert (out.passed, out.failed_mode, out.detector) == (False, "single", "thinking_cut"), out.detail
    assert "raise server.thinking_tokens" in out.detail
    assert absolute_floors(_collected({"arith": cut, "capital": cut}), CFG)[0].startswith("thinking_cut: the probe set")


def test_garbage_in_the_thought_is_garbage():
    res = _r("5", "\ufffd\ufffd\ufffd\x01\x02 thinking")
    assert [f for f in detect(res, expect_logprobs=False) if f.startswith("bad_characters")]


def test_no_thinking_values_for_a_model_that_does_not_think():
    assert thinking_values(_collected({"arith": _r("5")}, thinking="auto")) is None
    assert thinking_values(_collected({"arith": _r("5")}, thinking="off"))["with_reasoning"] == 0


# -- [server] thinking: the spec's edge, the request, the report's line --------------------------

SPEC = {"name": "t", "engine": "llamacpp", "model": {"path": "/dev/null"}}


def test_thinking_is_validated_at_the_edge():
    assert specmod.parse({**SPEC, "server": {"thinking": "on"}}).server.thinking_room == 256
    assert specmod.parse({**SPEC, "server": {"thinking": "auto", "thinking_tokens": 64}}).server.thinking_room == 64
    assert specmod.parse(SPEC).server.thinking_room == 0
    for bad, why in (({"server": {"thinking": "no"}}, "'auto', 'on' or 'off'"),
                     ({"server": {"thinking": "off", "thinking_tokens": 8}}, "no room is needed"),
                     ({"server": {"thinking": "off"}, "bench": {"tool": "vllm"}}, "needs bench.tool = 'bakeoff'")):
        with pytest.raises(SpecError, match=why):
            specmod.parse({**SPEC, **bad})


def test_every_request_carries_the_thinking_fields():
    off = {"chat_template_kwargs": {"enable_thinking": False}}
    assert chat_body([], max_tokens=4, thinking="off").items() >= off.items()
    assert "chat_template_kwargs" not in chat_body([], max_tokens=4)
    bench = specmod.parse(SPEC).bench
    assert request_body(bench, "hi", model=None, ignore_eos=True, thinking="off").items() >= off.items()
    on = request_body(bench, "hi", model=None, ignore_eos=False, thinking="on")
    assert on["chat_template_kwargs"] == {"enable_thinking": True}


def test_the_thinking_line():
    def trial(thought):
        return TrialRecord(key="k", idx=0, config={}, changed=[], argv=[], env={}, metrics={"probe": {"thinking": thought}})

    seen = {"mode": "auto", "room": 64, "replies": 4, "with_reasoning": 3, "judged_on_reasoning": 1, "cut_while_thinking": 1}
    line = thinking_line({"server": {"thinking": "auto", "thinking_tokens": 64}}, [trial(seen)])
    assert line == ("Thinking auto: the server's default (no thinking field sent); probe replies had 64 tokens more for the "
                    "thought; 3 of the sweep's 4 probe replies carried reasoning_content: 2 judged on their content (the answer "
                    "after the thought), 1 on their reasoning_content (no content); 1 cut by max_tokens while thinking, not "
                    "scored as tasks (raise server.thinking_tokens).")
    assert thinking_line({"server": {}}, []) == ""  # a model that does not think, left to its default: no line


def test_an_answer_only_in_reasoning_content_is_not_what_clients_read():
    """Content empty, the answer only in reasoning_content: every client reading ``content`` got
    "". Not ok unless the spec says the deployment thinks; the baseline is no excuse."""
    res = {"arith": _r("", "2+3 is 5"), "capital": _r("Paris", "Is it Lyon?")}
    for thinking in ("auto", "off"):
        out = judge(_collected(res, thinking), CFG, None, role="baseline")
        assert (out.passed, out.failed_mode, out.detector) == (False, "single", "answer_in_reasoning"), out.detail
        assert "single / prompt arith" in out.evidence[0] and "'2+3 is 5'" in out.evidence[0]
        assert out.values["answers_only_in_reasoning"] == 1
        base = _collected(res, thinking)
        assert judge(_collected(res, thinking), CFG, base, role="trial").detector == "answer_in_reasoning"
    assert judge(_collected(res, "on"), CFG, None, role="baseline").passed


def test_a_thought_cut_by_max_tokens_is_not_an_answer_hidden_in_reasoning():
    """Cut while thinking is truncation (unanswered), whatever ``thinking`` says."""
    res = {"arith": _r("5", "2+3"), "capital": _r("", "Let me think about France", "length")}
    assert judge(_collected(res, "auto"), CFG, None, role="baseline").passed
