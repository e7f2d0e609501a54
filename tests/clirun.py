"""``bakeoff run`` as a child process of a test, stopped the way a user stops it when it runs too long.

``subprocess.run(..., timeout=N)`` SIGKILLs the child at the timeout: bakeoff then cannot stop the
servers it started (they run in their own process groups), and a llama-server is left holding a port
and a core for the rest of the suite. Here the timeout sends SIGTERM first — bakeoff's stop flag
tears its trials down and exits — and only a child still alive a minute later is killed. The
timeout is raised either way: the test fails as before."""

from __future__ import annotations

import signal
import subprocess


def run_cli(argv: list[str], *, timeout: float, capture_output: bool = True, text: bool = True,
            **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, capture_output=..., text=..., timeout=..., **kwargs)``, SIGTERM at the timeout."""
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE} if capture_output else {}
    with subprocess.Popen(argv, text=text, **pipes, **kwargs) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
