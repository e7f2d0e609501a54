"""Where a trial's server process runs: ``local`` (this machine) or ``ssh`` (a remote host).

``base.py`` is the contract; each kind is one module; :func:`get_host` picks one by ``kind``.
"""

from __future__ import annotations

from bakeoff.errors import SpecError
from bakeoff.run.hosts.base import Handle, Host

__all__ = ["Handle", "Host", "get_host"]


def get_host(options: dict) -> Host:
    opts = dict(options)
    kind = opts.pop("kind", "local")
    if kind == "local":
        from bakeoff.run.hosts.local import LocalHost

        if opts:
            raise SpecError(f"host: unknown keys for a local host: {', '.join(sorted(opts))}")
        return LocalHost()
    if kind == "ssh":
        from bakeoff.run.hosts.ssh import SSHHost

        try:
            return SSHHost(**opts)
        except TypeError as err:
            raise SpecError(f"host: {err}") from None
    raise SpecError(f"host.kind: unknown host kind {kind!r}; valid: local, ssh")
