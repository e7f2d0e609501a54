"""Where a trial's server process runs: ``local`` (this machine) or ``ssh`` (a remote host).

``base.py`` is the contract; each kind is one module, named in ``bakeoff.registry.HOSTS``, with
its ``Options`` model (the spec's ``[host]`` table); :func:`get_host` picks one by ``kind``.
``command_line`` renders what a host would run, for ``bakeoff plan``.
"""

from __future__ import annotations

from bakeoff.registry import HOSTS
from bakeoff.run.hosts.base import Handle, Host

__all__ = ["Handle", "Host", "get_host", "command_line"]


def get_host(options: dict) -> Host:
    """The host the spec's ``[host]`` table describes (SpecError naming the key when it is wrong)."""
    return HOSTS.get(options.get("kind", "local")).create(options)


def command_line(options: dict, argv: list[str], env: dict[str, str], log_name: str, sweep: str) -> str:
    """The command a person would type to start this server on the spec's host, secrets masked:
    ``K=V ... ARGV`` here; ``ssh DEST 'export K=V && ... && setsid nohup ARGV > LOG 2>&1 < /dev/null &'``
    for an SSH host. Each argv element is one quoted word."""
    return HOSTS.get(options.get("kind", "local")).command_line(options, argv, env, log_name, sweep)
