#!/usr/bin/env python3
"""A STUB OpenAI-compatible streaming server: no model, it streams canned words as fast as it can.

It exists to test the benchmark harness itself (error accounting, detectors, the client's
ceiling), never to stand in for an engine. Plain asyncio (uvloop if installed), pre-encoded
events, HTTP/1.1 keep-alive with chunked transfer encoding.

    python bench/stub_server.py [--port 0] [--batch 1]

prints ``stub listening on http://127.0.0.1:PORT`` once it accepts connections.

The request's ``model`` field steers it (comma-separated options):
  ``die_after=N``  close the connection after N text chunks (no [DONE]: a mid-stream failure)
  ``garbage``      stream replacement characters (the detectors must reject the response)
  ``same``         stream one word over and over
  ``no_usage``     omit the usage event
  ``tokens_per_chunk=K``  usage reports K tokens per text chunk (default 1)
  ``ttft_ms=X`` / ``itl_ms=X``  sleep before the first / between chunks
  ``ttft_per_inflight_ms=X``  sleep X ms per request in flight (this one included) before the first
                   chunk: latency that grows with load, for the SLO search's tests
  ``error_event``  send an error event mid-stream
  ``stale``        on a connection that already served a request, close it without answering
                   (a keep-alive connection the server dropped, as llama-server's httplib does)
``--fail-with-log FILE``: from the first completion request on, print FILE (an engine's log
excerpt) to stdout once and answer every completion with HTTP 500, staying up: an engine whose
worker died under a live API server.
Chunks per response: ``max_tokens`` (or ``max_completion_tokens``). ``--batch K`` writes K events
per socket write (the client-ceiling measurement uses it to make the stub cheaper than any client).
``/tokenize`` and ``/detokenize`` (one token per space-separated word) answer unless ``--no-tokenize``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliett kilo lima mike november oscar papa "
         "quebec romeo sierra tango uniform victor whiskey xray yankee zulu river mountain garden window "
         "story history music water company number group problem fact person year day thing world life").split()


def _event(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _chunk_events(api: str, words: list[str]) -> list[bytes]:
    out = []
    for w in words:
        if api == "chat":
            choice = {"index": 0, "delta": {"content": " " + w}, "finish_reason": None}
            obj = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0, "model": "stub", "choices": [choice]}
        else:
            choice = {"index": 0, "text": " " + w, "finish_reason": None, "logprobs": None}
            obj = {"id": "cmpl-stub", "object": "text_completion", "created": 0, "model": "stub", "choices": [choice]}
        out.append(_event(obj))
    return out


EVENTS = {"chat": _chunk_events("chat", WORDS), "completions": _chunk_events("completions", WORDS)}
GARBAGE = {"chat": _chunk_events("chat", ["\ufffd\ufffd"]), "completions": _chunk_events("completions", ["\ufffd\ufffd"])}


def _frame(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _options(model: str) -> dict:
    opts: dict = {}
    for part in (model or "").split(","):
        key, _, val = part.strip().partition("=")
        if key:
            opts[key] = val or True
    return opts


class Stub:
    def __init__(self, batch: int = 1, tokenize: bool = True, fail_log: str | None = None) -> None:
        self.batch = max(1, batch)
        self.tokenize = tokenize
        self.fail_log = fail_log
        self.failed = False
        self.inflight = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                keep = await self.route(method, path, body, writer, served)
                served += 1
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def route(self, method: str, path: str, body: bytes, writer: asyncio.StreamWriter, served: int = 0) -> bool:
        if method == "GET" and path in ("/health", "/v1/models"):
            data = {"status": "ok"} if path == "/health" else {"object": "list", "data": [{"id": "stub", "object": "model"}]}
            return await self.json(writer, data)
        if method == "POST" and path in ("/tokenize", "/detokenize") and self.tokenize:
            req = json.loads(body or b"{}")
            if path == "/tokenize":
                text = req.get("content", req.get("prompt", ""))
                return await self.json(writer, {"tokens": [hash(w) % 50000 for w in text.split()], "words": text.split()})
            return await self.json(writer, {"content": " ".join(WORDS[t % len(WORDS)] for t in req.get("tokens", []))})
        if method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            req = json.loads(body)
            if self.fail_log:
                if not self.failed:
                    self.failed = True
                    with open(self.fail_log, encoding="utf-8") as f:
                        sys.stdout.write(f.read())
                    sys.stdout.flush()
                return await self.json(writer, {"error": {"message": "stub: the engine is dead", "code": 500}},
                                       status=b"500 Internal Server Error")
            if served and "stale" in _options(str(req.get("model") or "")):
                writer.transport.abort()
                return False
            self.inflight += 1
            try:
                return await self.stream(writer, req, "chat" if "chat" in path else "completions")
            finally:
                self.inflight -= 1
        return await self.json(writer, {"error": {"message": f"no route {method} {path}"}}, status=b"404 Not Found")

    async def json(self, writer: asyncio.StreamWriter, data: dict, status: bytes = b"200 OK") -> bool:
        payload = json.dumps(data).encode()
        writer.write(b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (status, len(payload), payload))
        await writer.drain()
        return True

    async def stream(self, writer: asyncio.StreamWriter, req: dict, api: str) -> bool:
        opts = _options(str(req.get("model") or ""))
        n = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
        events = GARBAGE[api] if "garbage" in opts else EVENTS[api][:1] if "same" in opts else EVENTS[api]
        die_after = int(opts["die_after"]) if "die_after" in opts else None
        ttft = float(opts.get("ttft_ms", 0)) / 1000 + float(opts.get("ttft_per_inflight_ms", 0)) / 1000 * self.inflight
        itl = float(opts.get("itl_ms", 0)) / 1000
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        if ttft:
            await asyncio.sleep(ttft)
        pending: list[bytes] = []
        ne = len(events)
        for i in range(n):
            if die_after is not None and i >= die_after:
                writer.write(_frame(b"".join(pending)) if pending else b"")
                await writer.drain()
                writer.transport.abort()  # mid-stream death: no terminator, no [DONE]
                return False
            if "error_event" in opts and i == n // 2:
                pending.append(_event({"error": {"message": "stub: injected error", "code": 500}}))
            pending.append(events[i % ne])
            if len(pending) >= self.batch or itl:
                writer.write(_frame(b"".join(pending)))
                pending = []
                await writer.drain()
                if itl:
                    await asyncio.sleep(itl)
        finish = {"index": 0, "delta": {}, "finish_reason": "length"} if api == "chat" else {"index": 0, "text": "", "finish_reason": "length"}
        pending.append(_event({"id": "stub", "object": "chat.completion.chunk", "created": 0, "model": "stub", "choices": [finish]}))
        if "no_usage" not in opts:
            k = int(opts.get("tokens_per_chunk", 1))
            usage = {"prompt_tokens": 7, "completion_tokens": n * k, "total_tokens": 7 + n * k}
            pending.append(_event({"id": "stub", "object": "chat.completion.chunk", "created": 0, "model": "stub", "choices": [], "usage": usage}))
        pending.append(b"data: [DONE]\n\n")
        writer.write(_frame(b"".join(pending)) + b"0\r\n\r\n")
        await writer.drain()
        return True


async def serve(host: str, port: int, batch: int, tokenize: bool, fail_log: str | None = None) -> None:
    stub = Stub(batch=batch, tokenize=tokenize, fail_log=fail_log)
    server = await asyncio.start_server(stub.handle, host, port, limit=1 << 20, backlog=1024)
    bound = server.sockets[0].getsockname()[1]
    print(f"stub listening on http://{host}:{bound}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="STUB streaming OpenAI-compatible server (tests the harness only)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--batch", type=int, default=1, help="events per socket write")
    ap.add_argument("--no-tokenize", action="store_true", help="answer 404 on /tokenize")
    ap.add_argument("--cpu", type=int, default=None, help="pin this process to one CPU")
    ap.add_argument("--fail-with-log", default=None, metavar="FILE",
                    help="print FILE once at the first completion request, then answer completions with HTTP 500")
    args = ap.parse_args(argv)
    if args.cpu is not None:
        import os

        os.sched_setaffinity(0, {args.cpu})
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        runner(serve(args.host, args.port, args.batch, not args.no_tokenize, args.fail_with_log))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
