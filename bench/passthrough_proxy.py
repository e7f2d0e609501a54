"""A reverse proxy that changes nothing: every request is forwarded to the upstream server and
its response streamed back byte for byte. A healthy "change" for measuring the judge's false
alarms (docs/notes/judge-thresholds.md): `python bench/passthrough_proxy.py PORT UPSTREAM_URL`."""

from __future__ import annotations

import sys

import aiohttp
from aiohttp import web


def app(upstream: str) -> web.Application:
    async def forward(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        async with request.app["session"].request(request.method, upstream + request.path_qs, data=body,
                                                  headers={"Content-Type": request.headers.get("Content-Type", "application/json")}) as up:
            resp = web.StreamResponse(status=up.status, headers={"Content-Type": up.headers.get("Content-Type", "application/json")})
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp

    async def start(a: web.Application) -> None:
        # a new upstream connection per request: llama-server drops idle keep-alive ones
        a["session"] = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None),
                                             connector=aiohttp.TCPConnector(force_close=True))

    async def stop(a: web.Application) -> None:
        await a["session"].close()

    a = web.Application(client_max_size=64 << 20)
    a.router.add_route("*", "/{tail:.*}", forward)
    a.on_startup.append(start)
    a.on_cleanup.append(stop)
    return a


if __name__ == "__main__":
    web.run_app(app(sys.argv[2].rstrip("/")), host="127.0.0.1", port=int(sys.argv[1]), print=None)
