"""A lean async client for OpenAI-compatible servers: one streamed request -> a timeline.

Used by both the probes and the load generator, so both see exactly what the server sent.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp


@dataclass
class Result:
    """What one request produced. Times are ``time.perf_counter()`` seconds."""

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

    @property
    def ok(self) -> bool:
        return self.error is None


def new_session(limit: int = 0, timeout_s: float = 120) -> aiohttp.ClientSession:
    conn = aiohttp.TCPConnector(limit=limit, ttl_dns_cache=300, force_close=False)
    return aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=timeout_s))


def chat_body(messages: list[dict], *, max_tokens: int, top_logprobs: int = 0, model: str | None = None,
              stream: bool = True, extra: dict | None = None) -> dict:
    body: dict[str, Any] = {"messages": messages, "max_tokens": max_tokens, "temperature": 0.0, "seed": 0, "stream": stream}
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

    A pooled keep-alive connection the server already closed fails before anything was sent;
    that, and only that, is retried once on a fresh connection.
    """
    res = await _stream_once(session, url, body, api)
    if res.error and res.error.startswith("stale:"):
        res = await _stream_once(session, url, body, api)
    if res.error and res.error.startswith("stale:"):
        res.error = res.error[len("stale:"):]
    return res


async def _stream_once(session: aiohttp.ClientSession, url: str, body: dict, api: str) -> Result:
    """POST ``body`` to ``url`` with ``stream: true`` and collect the server-sent events.

    A request that fails at any point, mid-stream included, has ``error`` set: it is never
    counted as a (fast) success.
    """
    res = Result(logprobs_requested=bool(body.get("logprobs")))
    res.start = time.perf_counter()
    parts: list[str] = []
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
            async for chunk in resp.content.iter_any():
                now = time.perf_counter()
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    line = line.strip()
                    if not line.startswith(b"data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        done = True
                        continue
                    _absorb(res, json.loads(payload), parts, now, api)
            if not done:
                res.error = "stream ended without [DONE]"
    except (aiohttp.ClientError, TimeoutError, json.JSONDecodeError, ValueError) as err:
        res.error = f"{type(err).__name__}: {err}"
    res.end = time.perf_counter()
    res.text = "".join(parts)
    return res


def _absorb(res: Result, event: dict, parts: list[str], now: float, api: str) -> None:
    if "error" in event:
        raise ValueError(f"server error event: {str(event['error'])[:200]}")
    usage = event.get("usage")
    if usage:
        res.prompt_tokens = usage.get("prompt_tokens")
        res.completion_tokens = usage.get("completion_tokens")
    for choice in event.get("choices") or ():
        if api == "chat":
            delta = choice.get("delta") or {}
            piece = delta.get("content") or ""
        else:
            piece = choice.get("text") or ""
        lp = choice.get("logprobs")
        if lp:
            content = lp.get("content") if isinstance(lp, dict) else None
            if content:
                res.tokens.extend(content)
            elif isinstance(lp, dict) and lp.get("tokens"):  # completions-style logprobs
                for tok, tlp in zip(lp["tokens"], lp.get("token_logprobs") or [None] * len(lp["tokens"])):
                    res.tokens.append({"token": tok, "logprob": tlp, "top_logprobs": []})
        if piece:
            if res.first_token is None:
                res.first_token = now
            res.chunk_times.append(now)
            parts.append(piece)
        if choice.get("finish_reason"):
            res.finish_reason = choice["finish_reason"]


async def tokenize(session: aiohttp.ClientSession, base_url: str, text: str) -> int | None:
    """Count tokens with the server's own tokenizer, where it offers one (llama.cpp, vLLM, SGLang)."""
    for path, body in (("/tokenize", {"content": text}), ("/tokenize", {"prompt": text})):
        try:
            async with session.post(base_url + path, json=body) as resp:
                if resp.status != 200:
                    continue
                data = await resp.json()
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None
        toks = data.get("tokens")
        if isinstance(toks, list):
            return len(toks)
        if isinstance(data.get("count"), int):
            return data["count"]
    return None
