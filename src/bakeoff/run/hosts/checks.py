"""Checks made where the servers run, before any launch.

For a remote host the controller's own file system and engine install say nothing: the model
path (and every model-axis path) must exist on the host, and every flag-axis value must be one
the engine's ``--help`` *on the host* accepts. That help is captured through the host once per
engine version and cached in ``<sweep dir>/engine-help/`` (``helptext.capture_on_host``).
For a local spec both checks already ran when the spec was parsed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from bakeoff.errors import InfraError, SpecError
from bakeoff.spec import Model, Spec


def on_host(spec: Spec, host, sweep_dir: Path, note: Callable[[str], None] = lambda m: None) -> str:
    """The model path as the servers get it, after checking it (and the axis values) on ``host``.
    A host that cannot be reached now is not a spec error: the trials then fail as the host's
    fault (``infra_error``, retried on resume), and these checks run again on the next start."""
    if not spec.is_remote:
        return spec.model_path(host)
    try:
        return _checked(spec, host, sweep_dir, note)
    except InfraError as err:
        note(f"could not check the model path and axis values on {host.describe}: {err}")
        return spec.model_path()


# systemd-logind removes a user's System V / POSIX IPC (the shared memory NCCL and the engines'
# workers use) when that user's last login session ends, unless the user lingers: a server
# started over ssh then loses it when bakeoff's ssh session closes. Root and system users are exempt.
IPC_CHECK = r"""
u=$(id -u); [ "$u" -lt 1000 ] && { echo exempt; exit 0; }
command -v loginctl >/dev/null 2>&1 || { echo exempt; exit 0; }
v=$(sed -n 's/^[[:space:]]*RemoveIPC[[:space:]]*=[[:space:]]*//p' /etc/systemd/logind.conf /etc/systemd/logind.conf.d/*.conf 2>/dev/null | tail -1)
case "$v" in no|false|0|off) echo exempt; exit 0;; esac
[ "$(loginctl show-user "$u" -p Linger --value 2>/dev/null)" = yes ] && echo exempt || echo "at-risk $(id -un)"
"""


def check_remove_ipc(host, note: Callable[[str], None]) -> bool:
    """Whether a server on ``host`` (a remote one) keeps its IPC after bakeoff's ssh session ends;
    when it may not (logind's RemoveIPC on, the user not lingering), a note says the one command
    that fixes it."""
    out = host.run_script(IPC_CHECK, 30).strip()
    if out.startswith("at-risk"):
        user = out.split()[-1]
        note(f"{host.describe}: systemd-logind's RemoveIPC is on and {user} does not linger: a server's shared memory "
             f"can vanish when bakeoff's ssh session ends; run `loginctl enable-linger {user}` there (as root), "
             "or set RemoveIPC=no in /etc/systemd/logind.conf")
        return False
    return True


def _checked(spec: Spec, host, sweep_dir: Path, note: Callable[[str], None]) -> str:
    check_remove_ipc(host, note)
    model_path = spec.model_path(host)
    where = f" on {host.describe}"
    for axis in spec.axes:
        if axis.model:
            for value in axis.values:
                try:
                    Model(path=str(value)).resolve(exists=host.path_exists, where=where)
                except SpecError as err:
                    raise SpecError(f"axes.{axis.name}: {err}") from None
    if not spec.engine_options.get("help_text") and any(a.flag and not isinstance(v, bool) for a in spec.axes for v in a.values):
        check_axis_values(spec, host, Path(sweep_dir) / "engine-help", note)
    return model_path


def check_axis_values(spec: Spec, host, cache_dir: Path, note: Callable[[str], None]) -> Path | None:
    """Every flag-axis value against the ``--help`` captured on ``host``; returns that file."""
    from bakeoff.run.engines.base import get_engine, option_names
    from bakeoff.run.engines.helptext import capture_on_host

    engine = get_engine(spec.engine, **spec.engine_options)
    if "help_text" not in option_names(type(engine)):
        return None  # an engine with no --help to read (generic)
    help_file = capture_on_host(engine, host.run_argv, cache_dir, host.describe)
    note(f"axis values checked against --help on {host.describe} ({help_file.name})")
    checker = get_engine(spec.engine, **{**spec.engine_options, "help_text": str(help_file)})
    checker.check_axis_values(spec.axes, f" (per --help on {host.describe})")
    return help_file
