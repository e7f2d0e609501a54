"""A reasoning model's stream (``--reasoning-parser`` in SGLang/vLLM, ``--reasoning-format`` in
llama.cpp) sends its thinking as ``delta.reasoning_content``: the client collects it, counts it
as output for timing, and a reply that is all thinking is judged on its thinking, never as an
empty answer. A **stub** SSE server (named so): the SmolLM2 engines here do not think, so
the real ones cannot produce this stream."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from bakeoff.judge.probes import detect
from bakeoff.measure.client import chat_body, new_session, stream_request


def _events(deltas: list[dict]) -> bytes:
    out = b""
    for d in deltas:
        out += b"data: " + json.dumps({"choices": [{"index": 0, "delta": d, "finish_reason": None}]}).encode() + b"\n\n"
    out += b"data: " + json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                                   "usage": {"prompt_tokens": 5, "completion_tokens": len(deltas)}}).encode() + b"\n\n"
    return out + b"data: [DONE]\n\n"


async def _serve(deltas: list[dict]):
    async def handler(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_events(deltas))
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


def _ask(deltas: list[dict]):
    async def go():
        runner, url = await _serve(deltas)
        try:
            async with new_session() as s:
                return await stream_request(s, url, chat_body([{"role": "user", "content": "2+3?"}], max_tokens=16, top_logprobs=-1))
        finally:
            await runner.cleanup()
    return asyncio.run(go())


def test_thinking_then_answer_keeps_both_and_judges_the_answer():
    res = _ask([{"reasoning_content": "I add 2 and 3"}, {"reasoning_content": " to get 5."}, {"content": "5"}])
    assert res.ok and res.text == "5" and res.reasoning == "I add 2 and 3 to get 5."
    assert len(res.chunk_times) == 3 and res.first_token is not None  # thinking is output: TTFT is the first thought


def test_a_reply_that_is_all_thinking_is_not_empty():
    res = _ask([{"reasoning_content": "The user asks for 2+3, which is 5."}])
    assert res.text == "The user asks for 2+3, which is 5."
    assert not [f for f in detect(res, expect_logprobs=False) if f.startswith("empty")]


def test_vllm_style_reasoning_field_too():
    res = _ask([{"reasoning": "thinking"}, {"content": "done"}])
    assert (res.text, res.reasoning) == ("done", "thinking")
