"""A lean async client for OpenAI-compatible servers: one streamed request -> a timeline.

Used by both the probes and the load generator, so both see exactly what the server sent.
The stream parser is on the benchmark's hot path (bench/client_ceiling.py measures it): one
split per network read, not per line; ``orjson`` when installed; logprobs only looked at when
present.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

try:  # optional speed-up; same results
    import orjson

    _loads = orjson.loads
    _DECODE_ERRORS: tuple[type[Exception], ...] = (orjson.JSONDecodeError, ValueError)
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads
    _DECODE_ERRORS = (ValueError,)

_perf = time.perf_counter


@dataclass
class Result:
    """What one request produced. Times are ``time.perf_counter()`` seconds.

    ``first_token``/``last_token``: arrival of the first/last chunk that carried text.
    ``end``: the stream finished (``[DONE]`` or failure). ``chunk_times``: every text chunk.
    """

    start: float = 0.0
    first_token: float | None = None
    end: float = 0.0
    chunk_times: list[float] = field(default_factory=list)
    text: str = ""
    tokens: list[dict] = field(default_factory=list)  # logprobs content entries
    logprobs_requested: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None
    last_token: float | None = None
    reasoning: str = ""  # a reasoning model's thinking (``reasoning_content`` / ``reasoning`` deltas)
    from_reasoning: bool = False  # the reply had no content: ``text`` is its thinking

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def generated(self) -> str:
        """Everything the model wrote: its thinking, then its answer."""
        return self.text if self.from_reasoning else self.reasoning + self.text

    @property
    def cut_while_thinking(self) -> bool:
        """All thinking, and ``max_tokens`` ended it: the answer never came (truncation, not a wrong answer)."""
        return self.from_reasoning and self.finish_reason == "length"


_api_key_env: str | None = None  # ``[server] api_key_env``: the variable whose value every request sends


def use_api_key_env(name: str | None) -> None:
    """Every request from now on sends ``Authorization: Bearer $name`` (bakeoff's environment,
    read at each session's start; ``None``: no header). The value is never shown: ``pipeline``
    remembers it as a secret."""
    global _api_key_env
    _api_key_env = name


def api_key() -> str | None:
    """The server's API key (``[server] api_key_env``'s value), or None."""
    return (os.environ.get(_api_key_env) or None) if _api_key_env else None


def auth_headers() -> dict[str, str]:
    """The headers every request to the server carries (``Authorization`` when a key is set)."""
    key = api_key()
    return {"Authorization": f"Bearer {key}"} if key else {}


def new_session(limit: int = 0, timeout_s: float = 120, *, fresh: bool = False) -> aiohttp.ClientSession:
    """One session per run: pooled keep-alive connections, no per-host limit by default
    (``fresh``: a new connection per request, closed after it); ``auth_headers`` on every request."""
    conn = aiohttp.TCPConnector(limit=limit, limit_per_host=0, ttl_dns_cache=300, force_close=fresh)
    return aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=timeout_s),
                                 json_serialize=_dumps, headers=auth_headers())


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


# ``[server] thinking`` -> the request fields that ask for it. ``chat_template_kwargs.enable_thinking``
# reaches the chat template in vLLM, SGLang and llama.cpp alike; llama.cpp also reads it to pick its
# reasoning parser's generation prompt (tools/server/server-common.cpp, "parse the enable_thinking kwarg").
THINKING_FIELDS: dict[str, dict] = {
    "auto": {},  # the server's (template's) default
    "on": {"chat_template_kwargs": {"enable_thinking": True}},
    "off": {"chat_template_kwargs": {"enable_thinking": False}},
}


def chat_body(messages: list[dict], *, max_tokens: int, top_logprobs: int = 0, model: str | None = None,
              stream: bool = True, extra: dict | None = None, thinking: str = "auto") -> dict:
    """A greedy chat request. ``top_logprobs`` < 0 asks for no logprobs at all; ``thinking``
    (``[server] thinking``) adds the fields of ``THINKING_FIELDS``."""
    body: dict[str, Any] = {"messages": messages, "max_tokens": max_tokens, "temperature": 0.0, "seed": 0, "stream": stream,
                            **THINKING_FIELDS[thinking]}
    if model:
        body["model"] = model
    if top_logprobs >= 0:
        body["logprobs"] = True
        if top_logprobs:
            body["top_logprobs"] = top_logprobs
    if stream:
        body["stream_options"] = {"include_usage": True}
    body.update(extra or {})
    return body


async def stream_request(session: aiohttp.ClientSession, url: str, body: dict, *, api: str = "chat") -> Result:
    """POST ``body`` with ``stream: true`` and collect the events (see ``_stream_once``).

    A pooled keep-alive connection the server already closed fails before a response came;
    that, and only that, is retried once, on a new connection of its own: another pooled one may
    be just as stale (llama-server closes several at once). The timeline keeps the first
    attempt's start, so a retry never makes a request look faster.
    """
    res = await _stream_once(session, url, body, api)
    if res.error and res.error.startswith("stale:"):
        start = res.start
        async with new_session(timeout_s=session.timeout.total, fresh=True) as fresh:
            res = await _stream_once(fresh, url, body, api)
        res.start = start
    if res.error and res.error.startswith("stale:"):
        res.error = res.error[len("stale:"):]
    return res


async def _stream_once(session: aiohttp.ClientSession, url: str, body: dict, api: str) -> Result:
    """POST ``body`` to ``url`` with ``stream: true`` and collect the server-sent events.

    A request that fails at any point, mid-stream included (connection dropped, no
    ``[DONE]``, an error event, an unparsable event), has ``error`` set: it is never counted
    as a (fast) success.
    """
    res = Result(logprobs_requested=bool(body.get("logprobs")))
    res.start = _perf()
    parts: list[str] = []
    thoughts: list[str] = []
    chat = api == "chat"
    try:
        try:
            ctx = await session.post(url, json=body)
        except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError) as err:
            res.error = f"stale:{type(err).__name__}: {err}"
            return res
        async with ctx as resp:
            if resp.status != 200:
                res.error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
                return res
            done = False
            buf = b""
            times = res.chunk_times
            async for chunk in resp.content.iter_any():
                now = _perf()
                if buf:
                    chunk = buf + chunk
                lines = chunk.split(b"\n")
                buf = lines.pop()  # an incomplete last line waits for the next read
                for line in lines:
                    if line[:5] != b"data:":
                        continue
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        done = True
                        continue
                    event = _loads(payload)
                    choices = event.get("choices")
                    if choices and len(choices) == 1 and "error" not in event:
                        # fast path: one choice, the usual shape
                        c = choices[0]
                        if chat:
                            delta = c.get("delta")
                            piece = delta.get("content") if delta else None
                            thought = (delta.get("reasoning_content") or delta.get("reasoning")) if delta else None
                            if thought:  # thinking tokens are output tokens: they count for TTFT and timing
                                if res.first_token is None:
                                    res.first_token = now
                                times.append(now)
                                thoughts.append(thought)
                        else:
                            piece = c.get("text")
                        if c.get("logprobs"):
                            _absorb_logprobs(res, c["logprobs"])
                        if piece:
                            if res.first_token is None:
                                res.first_token = now
                            times.append(now)
                            parts.append(piece)
                        if c.get("finish_reason"):
                            res.finish_reason = c["finish_reason"]
                        if event.get("usage"):
                            _absorb_usage(res, event["usage"])
                    else:
                        _absorb(res, event, parts, now, api, thoughts)
            if not done and res.finish_reason is None:
                # no [DONE] and no finish_reason: cut off (transformers serve sends no [DONE],
                # but a choice that reported its finish_reason is complete)
                res.error = "stream ended without [DONE]"
    except (aiohttp.ClientError, TimeoutError, KeyError, TypeError, AttributeError, *_DECODE_ERRORS) as err:
        res.error = f"{type(err).__name__}: {err}"
    res.end = _perf()
    res.reasoning = "".join(thoughts)
    # the answer is the content; a reply that is all thinking (a reasoning parser that never saw the
    # end of the thought, or thinking that used every token before any answer) is judged on its thinking
    answer = "".join(parts)
    res.from_reasoning = bool(thoughts) and not answer.strip()
    res.text = res.reasoning if res.from_reasoning else answer
    if res.chunk_times:
        res.last_token = res.chunk_times[-1]
    return res


def _absorb_usage(res: Result, usage: dict) -> None:
    res.prompt_tokens = usage.get("prompt_tokens")
    res.completion_tokens = usage.get("completion_tokens")


def _by_logprob(item: tuple) -> float:
    """Sort key: most likely first (a missing or non-numeric logprob last)."""
    v = item[1]
    return -v if isinstance(v, (int, float)) else float("inf")


def _absorb_logprobs(res: Result, lp) -> None:
    if not isinstance(lp, dict):
        return
    content = lp.get("content")
    if content:
        res.tokens.extend(content)
    elif lp.get("tokens"):  # completions-style logprobs: top_logprobs is one {token: logprob} per token
        n = len(lp["tokens"])
        tops = lp.get("top_logprobs") or [None] * n
        for tok, tlp, top in zip(lp["tokens"], lp.get("token_logprobs") or [None] * n, tops):
            alts = [{"token": t, "logprob": v} for t, v in sorted((top or {}).items(), key=_by_logprob)]
            res.tokens.append({"token": tok, "logprob": tlp, "top_logprobs": alts})


def _absorb(res: Result, event: dict, parts: list[str], now: float, api: str, thoughts: list[str] | None = None) -> None:
    """The general (slow) path: error events, usage-only events, several choices."""
    if "error" in event:
        raise ValueError(f"server error event: {str(event['error'])[:200]}")
    usage = event.get("usage")
    if usage:
        _absorb_usage(res, usage)
    for choice in event.get("choices") or ():
        if api == "chat":
            delta = choice.get("delta") or {}
            piece = delta.get("content") or ""
            thought = delta.get("reasoning_content") or delta.get("reasoning")
            if thought and thoughts is not None:
                if res.first_token is None:
                    res.first_token = now
                res.chunk_times.append(now)
                thoughts.append(thought)
        else:
            piece = choice.get("text") or ""
        lp = choice.get("logprobs")
        if lp:
            _absorb_logprobs(res, lp)
        if piece:
            if res.first_token is None:
                res.first_token = now
            res.chunk_times.append(now)
            parts.append(piece)
        if choice.get("finish_reason"):
            res.finish_reason = choice["finish_reason"]


async def _tokenize_answer(session: aiohttp.ClientSession, base_url: str, text: str) -> dict | None:
    """The server's ``/tokenize`` answer (llama.cpp takes ``content``, vLLM/SGLang ``prompt``)."""
    for body in ({"content": text}, {"prompt": text}):
        try:
            async with session.post(base_url + "/tokenize", json=body) as resp:
                if resp.status != 200:
                    continue
                data = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None
        if isinstance(data, dict) and (isinstance(data.get("tokens"), list) or isinstance(data.get("count"), int)):
            return data
    return None


async def tokenize_ids(session: aiohttp.ClientSession, base_url: str, text: str) -> list[int] | None:
    """Token ids by the server's own tokenizer, where it offers one (llama.cpp, vLLM, SGLang)."""
    data = await _tokenize_answer(session, base_url, text)
    toks = data.get("tokens") if data else None
    if isinstance(toks, list) and all(isinstance(t, int) for t in toks):
        return toks
    return None


async def detokenize(session: aiohttp.ClientSession, base_url: str, ids: list[int]) -> str | None:
    """Text of token ``ids`` by the server (llama.cpp answers ``content``, vLLM ``prompt``)."""
    try:
        async with session.post(base_url + "/detokenize", json={"tokens": ids}) as resp:
            if resp.status != 200:
                return None
            data = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    if isinstance(data, dict):
        for key in ("content", "prompt", "text"):
            if isinstance(data.get(key), str):
                return data[key]
    return None


async def tokenize(session: aiohttp.ClientSession, base_url: str, text: str) -> int | None:
    """Count tokens with the server's own tokenizer, where it offers one (llama.cpp, vLLM, SGLang)."""
    data = await _tokenize_answer(session, base_url, text)
    if data is None:
        return None
    if isinstance(data.get("tokens"), list):
        return len(data["tokens"])
    return data["count"]