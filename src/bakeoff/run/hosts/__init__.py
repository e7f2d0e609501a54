"""Where a trial's server process runs: ``local`` (this machine) or ``ssh`` (a remote host).

``base.py`` is the contract; each kind is one module; :func:`get_host` picks one by ``kind``.
``command_line`` renders what a host would run, for ``bakeoff plan``.
"""

from __future__ import annotations


from bakeoff.errors import SpecError
from bakeoff.redact import MASK, is_secret, mask_argv, redact_text
from bakeoff.run.hosts.base import Handle, Host, PathEdit, shell_line

__all__ = ["Handle", "Host", "get_host", "command_line"]


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


def command_line(options: dict, argv: list[str], env: dict[str, str], log_name: str, sweep: str) -> str:
    """The command a person would type to start this server on the spec's host, secrets masked:
    ``K=V ... ARGV`` here; ``ssh DEST 'export K=V && ... && setsid nohup ARGV > LOG 2>&1 < /dev/null &'``
    for an SSH host. Each argv element is one quoted word."""
    if options.get("kind", "local") != "ssh":
        return shell_line(list(argv), env)  # it masks secrets itself (references to the user's variables)
    from bakeoff.run.hosts.ssh import plan_command

    shown = {k: (v if isinstance(v, PathEdit) else MASK if is_secret(k) and v else v) for k, v in env.items()}
    return redact_text(plan_command(options, mask_argv(list(argv)), shown, log_name, sweep))
