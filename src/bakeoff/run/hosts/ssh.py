"""Run the engine on another machine over the system OpenSSH client.

Every remote action is one ``ssh ... sh -s`` call whose script arrives on stdin, built with
``shlex.quote`` for every value: argv elements and env values reach the server literally, and
env values (secrets included) appear neither in a local nor in a remote process list. The
server starts like the seed did it by hand: ``setsid nohup`` with the env exported, output to a
log file on the remote, stdin from /dev/null. A tiny ``sh`` wrapper leads the new session
(its pid is the process group), runs the server as its child, and writes the server's exit
status to ``<log>.rc`` when it ends. ``read_log`` copies new bytes of the remote log into the
local log file (size-capped, redacted). The remote side needs only POSIX ``sh``, ``setsid``,
``nohup``, ``tail``/``head`` and Linux ``/proc``; ``nvidia-smi`` is used when present.

Connections share one OpenSSH ControlMaster, so the per-call cost is a round trip, not a
handshake.

Reachability is decided from what the server binds (``reach``), before any launch: a server
bound to the remote's loopback (127.0.0.1, localhost, ::1) is reached through ``ssh -N -L``
opened per server (the local HTTP client talks to ``tunnel_bind`` on the same port number); one
bound to 0.0.0.0 is reached directly at ``client_address`` (default: ``address``). A combination
that cannot work (loopback with ``tunnel = false``; a specific other address with
``tunnel = true``) is a SpecError, not a 900 s hang.

``remote_command`` renders the line the remote shell runs (exports, ``setsid nohup``, the log
redirection) for ``bakeoff plan``; ``launch_script`` runs the same pieces.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import random
import re
import shlex
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bakeoff.errors import InfraError, LaunchError, SpecError
from bakeoff.run.hosts.base import Handle, Host, PathEdit
from bakeoff.run.hosts.logcap import CappedLogWriter
from bakeoff.redact import MASK, is_secret, mask_argv, redact_text, remember

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
FETCH_CAP = 4_000_000  # bytes of remote log copied per read_log call

# The wrapper that leads the new session: "$1" = rc file, "$2" = pid file, the rest = argv.
WRAPPER = (
    'rc=$1; pidf=$2; shift 2; "$@" & c=$!; '
    'echo "$$ $c" > "$pidf.tmp" && mv "$pidf.tmp" "$pidf"; '
    'wait "$c"; s=$?; echo "$s" > "$rc.tmp" && mv "$rc.tmp" "$rc"'
)

# Shell helpers shared by the scripts below. members G P: live (non-zombie) pids whose process
# group is G or that descend from P. alive P: P exists and is not a zombie.
HELPERS = r"""
alive() {
  [ -n "$1" ] || return 1
  if [ -r "/proc/$1/stat" ]; then
    read -r _s 2>/dev/null < "/proc/$1/stat" || return 1
    _s=${_s##*") "}; [ "${_s%% *}" != Z ]
  else kill -0 "$1" 2>/dev/null; fi
}
members() {
  { for _f in /proc/[0-9]*/stat; do
      read -r _s < "$_f" || continue
      _p=${_f#/proc/}; echo "${_p%/stat} ${_s##*") "}"
    done; } 2>/dev/null | awk -v g="$1" -v r="$2" '
    { st[$1] = $2; pp[$1] = $3; pg[$1] = $4 }
    END { for (p in st) { if (st[p] == "Z") continue
            hit = (g != "" && pg[p] == g); q = p; n = 0
            while (!hit && r != "" && (q in pp) && n < 256) { if (q == r) hit = 1; q = pp[q]; n++ }
            if (hit) print p } }'
}
"""

# stop / kill_orphan: TERM the group and the tree, wait, KILL what is left; print the tree.
STOP = r"""
G={pgid}; P={pid}; GRACE_TICKS={ticks}
ALL=$(members "$G" "$P")
[ -n "$ALL" ] || {{ echo "none"; exit 0; }}
[ -n "$G" ] && kill -TERM -"$G" 2>/dev/null
for p in $ALL; do kill -TERM "$p" 2>/dev/null; done
i=0; while [ $i -lt $GRACE_TICKS ] && [ -n "$(members "$G" "$P")" ]; do sleep 0.2; i=$((i+1)); done
if [ -n "$(members "$G" "$P")" ]; then
  [ -n "$G" ] && kill -KILL -"$G" 2>/dev/null
  for p in $(members "$G" "$P"); do kill -KILL "$p" 2>/dev/null; done
  i=0; while [ $i -lt 25 ] && [ -n "$(members "$G" "$P")" ]; do sleep 0.2; i=$((i+1)); done
fi
echo "tree: $(echo $ALL)"
echo "left: $(members "$G" "$P" | tr '\n' ' ')"
"""

LISTENING = r"""cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '$4 == "0A" { n = split($2, a, ":"); print a[n] }'"""


class SSHOptions(BaseModel):
    """The spec's ``[host]`` table for ``kind = "ssh"``."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["ssh"] = "ssh"
    address: str = Field(min_length=1)
    user: str | None = None
    port: int = Field(default=22, ge=1, le=65535)
    identity_file: str | None = None
    ssh_options: list[str] = Field(default=[], description="extra ssh argv, e.g. ['-o', 'UserKnownHostsFile=...']; "
                                                           "they come first, so they win over bakeoff's defaults")
    remote_dir: str = Field(default="~/.bakeoff", description="logs go to <remote_dir>/<sweep dir name>/logs/")
    connect_timeout: float = Field(default=10, gt=0)
    client_address: str | None = Field(default=None, description="what the local HTTP client connects to for a server "
                                                                 "bound to 0.0.0.0; default address")
    tunnel: bool | None = Field(default=None, description="forward each server's port over ssh -L; unset: exactly when "
                                                         "the server binds the remote's loopback")
    tunnel_bind: str = "127.0.0.1"
    control_persist_s: int = Field(default=60, ge=0, description="0 disables the shared ControlMaster connection")
    max_log_bytes: int = Field(default=20_000_000, gt=1000)


@dataclass
class SSHHandle(Handle):
    """A server started over ssh (``remote_log`` and ``tunnel`` set)."""


@dataclass
class _LogMirror:
    writer: CappedLogWriter
    offset: int = 0
    pending: bytes = b""
    freed: int = 0  # the remote log's first bytes handed back to the file system


def _check(argv: list[str], env: dict[str, str]) -> None:
    if not argv or not all(isinstance(a, str) for a in argv):
        raise LaunchError(f"argv must be a non-empty list of strings, got {argv!r}")
    bad = [k for k in env if not ENV_NAME.match(k)]
    if bad:
        raise LaunchError(f"env name {bad[0]!r} is not a valid shell variable name")


def exports(env: dict[str, str]) -> list[str]:
    """``export K=V`` per variable, V one quoted word (a PathEdit: ``"/a:/b:$PATH"``)."""
    return [f"export {k}={v.shell() if isinstance(v, PathEdit) else shlex.quote(v)}" for k, v in env.items()]


def detached(argv: list[str], log: str, wrapper: tuple[str, str] | None = None) -> str:
    """``setsid nohup ARGV > LOG 2>&1 < /dev/null &``, each argv element one quoted word;
    ``wrapper`` = (rc file, pid file) puts bakeoff's status-recording ``sh`` in front."""
    q = shlex.quote
    lead = f"sh -c {q(WRAPPER)} bakeoff-run {q(wrapper[0])} {q(wrapper[1])} " if wrapper else ""
    return f"setsid nohup {lead}{' '.join(q(a) for a in argv)} > {_path_word(log)} 2>&1 < /dev/null &"


def remote_command(argv: list[str], env: dict[str, str], log: str) -> str:
    """The line the remote shell runs to start the server, as an engineer would type it after
    ``ssh host``: the exports, then the detached server (what ``launch_script`` runs, without
    the mkdir/cd before it and the status-recording wrapper)."""
    _check(argv, env)
    return " && ".join([*exports(env), detached(argv, log)])


def _path_word(path: str) -> str:
    """A remote path as one shell word; a leading ``~/`` becomes ``"$HOME"/``."""
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def launch_script(argv: list[str], env: dict[str, str], log: str, cwd: str) -> str:
    """The ``sh`` script that starts ``argv`` detached on the remote and prints "PGID PID"."""
    _check(argv, env)
    q = shlex.quote
    rc, pidf = log + ".rc", log + ".pid"
    lines = [
        "exec 2>&1",  # errors come back in the answer
        f"mkdir -p {q(str(PurePosixPath(log).parent))} || exit 97",
        f"rm -f {q(rc)} {q(pidf)}",
        f"cd {q(cwd)} || exit 98",
        *exports(env),
        detached(argv, log, (rc, pidf)),
        "i=0",
        f'while [ ! -s {q(pidf)} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done',
        f"cat {q(pidf)} || exit 99",
    ]
    return "\n".join(lines) + "\n"


LOOPBACK = ("localhost", "::1")
WILDCARD = ("0.0.0.0", "::", "")


def is_loopback(bind: str) -> bool:
    return bind in LOOPBACK or bind.startswith("127.")


def reach(opts: SSHOptions, bind: str) -> tuple[bool, str]:
    """(tunnel?, the address the local client connects to) for a server binding ``bind`` on
    the remote. SpecError for a combination nothing here could reach."""
    if is_loopback(bind):
        if opts.tunnel is False:
            raise SpecError(f"server.host = {bind!r} binds the remote's loopback, which nothing here can reach with "
                            "host.tunnel = false; leave host.tunnel unset (bakeoff then tunnels) or bind '0.0.0.0'")
        if opts.client_address:
            raise SpecError(f"host.client_address = {opts.client_address!r} cannot reach a server bound to {bind!r} on "
                            "the remote (its loopback); drop client_address (bakeoff tunnels) or bind '0.0.0.0'")
        return True, opts.tunnel_bind
    if opts.tunnel:
        if bind not in WILDCARD:
            raise SpecError(f"server.host = {bind!r} with host.tunnel = true: the tunnel forwards to the remote's "
                            "127.0.0.1, where this server does not listen; bind '127.0.0.1' (tunnelled) or '0.0.0.0' (direct)")
        return True, opts.tunnel_bind
    if bind in WILDCARD:
        return False, opts.client_address or opts.address
    return False, opts.client_address or bind


def _tunnel_target(bind: str | None) -> str:
    """Where on the remote the tunnel delivers: the loopback address the server binds (``::1``
    in ssh's bracket form), else 127.0.0.1 (a server bound to every address listens there too)."""
    if bind is None or not is_loopback(bind):
        return "127.0.0.1"
    return "[::1]" if bind == "::1" else bind


def plan_command(opts: SSHOptions, argv: list[str], env: dict[str, str], log_name: str, sweep: str) -> str:
    """``ssh [opts] DEST 'REMOTE COMMAND'`` as ``bakeoff plan`` prints it (secrets masked by the caller)."""
    dest = f"{opts.user}@{opts.address}" if opts.user else opts.address
    log = str(PurePosixPath(opts.remote_dir) / sweep / "logs" / log_name)
    lead = ["ssh"] + (["-p", str(opts.port)] if opts.port != 22 else [])
    return shlex.join([*lead, dest]) + " " + shlex.quote(remote_command(argv, env, log))


def exit_status(rc: int) -> int:
    """A shell's ``$?``: 128+N means killed by signal N, which the Host contract writes as -N."""
    return -(rc - 128) if 128 < rc <= 128 + 64 else rc


class SSHHost(Host):
    kind = "ssh"
    is_remote = True
    Options = SSHOptions

    @classmethod
    def parse_options(cls, table: dict, bind: str | None = None) -> SSHOptions:
        opts = super().parse_options(table)
        if bind is not None:
            reach(opts, bind)
        return opts

    @classmethod
    def create(cls, table: dict) -> "SSHHost":
        return cls(cls.parse_options(table))

    @classmethod
    def command_line(cls, table: dict, argv: list[str], env: dict[str, str], log_name: str, sweep: str) -> str:
        """``ssh DEST 'export K=V && ... && setsid nohup ARGV > LOG 2>&1 < /dev/null &'``, secrets masked."""
        shown = {k: (v if isinstance(v, PathEdit) else MASK if is_secret(k) and v else v) for k, v in env.items()}
        return redact_text(plan_command(cls.parse_options(table), mask_argv(list(argv)), shown, log_name, sweep))

    def __init__(self, opts: SSHOptions) -> None:
        self.opts = opts
        o = self.opts
        self.describe = f"ssh host {o.user + '@' if o.user else ''}{o.address}"
        self.address = o.address
        self.client_address = o.tunnel_bind if o.tunnel else (o.client_address or o.address)
        self.dest = f"{o.user}@{o.address}" if o.user else o.address
        self._home: str | None = None
        self._logs: dict[int, _LogMirror] = {}
        self._trees: dict[int, set[int]] = {}  # server pid -> every pid of its tree, seen at stop
        self._started: dict[int, Handle] = {}  # servers started and not stopped yet (kill_all)
        self._lock = threading.Lock()
        self._control_dir = tempfile.mkdtemp(prefix="bkssh-") if o.control_persist_s else None
        if self._control_dir:
            atexit.register(self.close)

    # -- ssh plumbing ------------------------------------------------------------------------
    def ssh_argv(self, control: bool = True) -> list[str]:
        """``ssh`` and its options up to (and including) the destination."""
        o = self.opts
        argv = ["ssh", *o.ssh_options, "-p", str(o.port), "-o", "BatchMode=yes",
                "-o", f"ConnectTimeout={max(1, round(o.connect_timeout))}", "-o", "StrictHostKeyChecking=accept-new",
                "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=3", "-o", "LogLevel=ERROR"]
        if o.identity_file:
            argv += ["-i", os.path.expanduser(o.identity_file), "-o", "IdentitiesOnly=yes"]
        if control and self._control_dir:
            argv += ["-o", "ControlMaster=auto", "-o", f"ControlPath={self._control_dir}/%C",
                     "-o", f"ControlPersist={o.control_persist_s}"]
        else:
            argv += ["-o", "ControlPath=none"]
        return argv + [self.dest]

    @property
    def max_log_bytes(self) -> int:
        """The cap of each trial's log: the local copy's, and where the remote file starts to be freed."""
        return self.opts.max_log_bytes

    @max_log_bytes.setter
    def max_log_bytes(self, value: int) -> None:
        self.opts.max_log_bytes = int(value)

    def run_script(self, script: str, timeout_s: float = 60.0) -> str:
        """Run ``script`` with the remote ``sh`` (sent on stdin); return stdout. ssh's own
        failure (exit 255) raises InfraError; the script's exit status is not checked."""
        try:
            proc = subprocess.run([*self.ssh_argv(), "sh -s"], input=(HELPERS + script).encode(),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout_s + self.opts.connect_timeout)
        except subprocess.TimeoutExpired:
            raise InfraError(f"ssh {self.dest}: no answer within {timeout_s + self.opts.connect_timeout:.0f}s") from None
        except FileNotFoundError:
            raise LaunchError("ssh client not found (apt-get install openssh-client)") from None
        if proc.returncode == 255:
            err = redact_text(proc.stderr.decode("utf-8", "replace")).strip().splitlines()
            raise InfraError(f"ssh {self.dest}: {err[-1] if err else 'connection failed (exit 255)'}")
        return proc.stdout.decode("utf-8", "replace")

    def close(self) -> None:
        """Close the shared ControlMaster connection (also done at exit)."""
        if self._control_dir and os.path.isdir(self._control_dir):
            if os.listdir(self._control_dir):
                subprocess.run([*self.ssh_argv(), "-O", "exit"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=10, check=False)
            try:
                os.rmdir(self._control_dir)
            except OSError:
                pass

    def remote_path(self, path: str) -> str:
        if path == "~" or path.startswith("~/"):
            if self._home is None:
                self._home = self.run_script('printf "%s" "$HOME"\n', 30).strip() or "/tmp"
            path = self._home + path[1:]
        return path

    def remote_log_path(self, log_path: Path) -> str:
        """``<remote_dir>/<sweep dir name>/logs/<log file name>`` on the remote."""
        sweep = Path(log_path).parent.parent.name or "sweep"
        return str(PurePosixPath(self.remote_path(self.opts.remote_dir)) / sweep / "logs" / Path(log_path).name)

    # -- the Host contract -------------------------------------------------------------------
    def start(self, argv, env, log_path, cwd=None) -> Handle:
        remember(env)
        log_path = Path(log_path)
        remote_log = self.remote_log_path(log_path)
        script = launch_script(list(argv), dict(env), remote_log, cwd or str(PurePosixPath(remote_log).parent))
        out = self.run_script(script, 30).split()
        if len(out) != 2 or not all(x.isdigit() for x in out):
            raise LaunchError(f"ssh {self.dest}: could not start {argv[0]!r} (no pid came back; got {redact_text(' '.join(out))!r})")
        pgid, pid = int(out[0]), int(out[1])
        handle = SSHHandle(pid=pid, pgid=pgid, log_path=log_path, host=self.address, remote_log=remote_log)
        try:  # the server runs now: whatever fails after this stops it, or nothing would
            log_path.parent.mkdir(parents=True, exist_ok=True)
            self._logs[pid] = _LogMirror(CappedLogWriter(log_path, self.opts.max_log_bytes))
            self._started[pid] = handle
            bind = _flag_value(argv, "--host")
            if (bind is not None and reach(self.opts, bind)[0]) or (bind is None and self.opts.tunnel):
                handle.tunnel = self._open_tunnel(_port_of(argv), _tunnel_target(bind))
        except BaseException:
            try:
                self.stop(handle, 2.0)
            except Exception:  # the host itself gone: the store's pid lets the next run stop it
                pass
            raise
        return handle

    def kill_all(self) -> int:
        """A second Ctrl-C: SIGKILL every server this host started and has not stopped, close
        their tunnels; never blocks long (one ssh round trip per server, a short timeout)."""
        n = 0
        for pid, handle in list(self._started.items()):
            tunnel = handle.tunnel
            if tunnel is not None and tunnel.poll() is None:
                tunnel.kill()
            try:
                self._kill(handle.pid, handle.pgid, 0.2)
                n += 1
            except Exception:  # unreachable: the store's pid lets the next run stop it
                pass
            self._started.pop(pid, None)
        return n

    def client_host(self, bind: str) -> str:
        """Where the local HTTP client connects to a server that binds ``bind`` on the remote."""
        return reach(self.opts, bind)[1]

    def resolve_model(self, model) -> str:
        return model.resolve(exists=self.path_exists, where=f" on {self.describe}")

    def path_exists(self, path: str) -> bool:
        """Whether ``path`` exists on the remote (``~/`` is the remote user's home)."""
        return self.run_script(f"[ -e {_path_word(path)} ] && echo yes || echo no\n", 30).strip() == "yes"

    def run_argv(self, argv: list[str], timeout_s: float = 120.0, stdin: bytes = b"") -> tuple[int, str]:
        """Run ``argv`` on the remote (each element one quoted word); (exit status, stdout+stderr)."""
        script = " ".join(shlex.quote(a) for a in argv) + " 2>&1 < /dev/null; echo \"bakeoff-rc=$?\"\n"
        out = self.run_script(script, timeout_s)
        body, _, rc = out.rstrip().rpartition("bakeoff-rc=")
        return (int(rc) if rc.strip().isdigit() else 255), body

    def exit_code(self, handle: Handle) -> int | None:
        rc = shlex.quote(_remote_log(handle) + ".rc")
        out = self.run_script(
            f'if [ -s {rc} ]; then cat {rc}; elif alive {handle.pid}; then echo running; '
            f'else sleep 0.3; if [ -s {rc} ]; then cat {rc}; else echo gone; fi; fi\n', 30).strip()
        if out == "running":
            tunnel = handle.tunnel
            if tunnel is not None and tunnel.poll() is not None:  # the server is fine; the way to it is not
                raise InfraError(f"ssh tunnel to {self.dest} closed (exit {tunnel.returncode}) while the server runs")
            return None
        if out.lstrip("-").isdigit():
            return exit_status(int(out))
        return -1  # gone without a status: its session leader was killed too

    def stop(self, handle: Handle, grace_s: float = 10.0) -> None:
        try:
            self._kill(handle.pid, handle.pgid, grace_s)
            self._started.pop(handle.pid, None)
        finally:
            try:
                with self._lock:
                    mirror = self._logs.pop(handle.pid, None)
                    if mirror is not None:
                        self._sync(mirror, handle, final=True)
            finally:  # the tunnel goes even when the host cannot be reached
                tunnel = handle.tunnel
                if tunnel is not None and tunnel.poll() is None:
                    tunnel.terminate()
                    try:
                        tunnel.wait(5)
                    except subprocess.TimeoutExpired:
                        tunnel.kill()

    def read_log(self, handle: Handle) -> str:
        """Copy the remote log's new bytes into the local log file; return the local file."""
        with self._lock:
            mirror = self._logs.get(handle.pid)
            if mirror is not None:
                self._sync(mirror, handle)
        return super().read_log(handle)

    def wait_gpu_free(self, pids: set[int], timeout_s: float = 30.0) -> bool:
        """True once no pid of these servers' trees holds GPU memory (at once without nvidia-smi)."""
        want = set(pids).union(*(self._trees.get(p, set()) for p in pids))
        deadline = time.monotonic() + timeout_s
        while want & {pid for pid, _ in self.gpu_processes()}:
            if time.monotonic() > deadline:
                return False
            time.sleep(1.0)
        return True

    def free_port(self) -> int:
        """A port that nothing listens on at the remote (and, with a tunnel, locally too)."""
        busy = self._listening()
        for _ in range(200):
            port = random.randint(20000, 59999)
            if port not in busy and (self.opts.tunnel is False or _local_free(self.opts.tunnel_bind, port)):
                return port
        raise InfraError(f"ssh {self.dest}: no free port found")

    def port_is_free(self, port: int) -> bool:
        return port not in self._listening()

    def wait_port_free(self, port: int, timeout_s: float = 15.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self.port_is_free(port):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)
        return True

    def kill_orphan(self, pid: int, pgid: int, argv0: str | None = None) -> bool:
        """Stop a server left by an earlier bakeoff from its stored pid/pgid. A pid whose
        program is no longer ``argv0`` was reused by something else and is left alone."""
        if argv0:
            name = shlex.quote(os.path.basename(argv0))
            out = self.run_script(
                f'a=$(tr "\\0" "\\n" < /proc/{int(pid)}/cmdline 2>/dev/null | head -n 1); '
                f'[ "${{a##*/}}" = {name} ] && echo same || echo other\n', 30).strip()
            if out != "same":
                pid = 0
        return self._kill(pid or None, pgid, 5.0) is not None

    def gpu_processes(self) -> list[tuple[int, int]]:
        """(pid, used MiB) of every compute process on the remote GPUs; [] without nvidia-smi."""
        out = self.run_script("command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi "
                              "--query-compute-apps=pid,used_memory --format=csv,noheader,nounits\n", 30)
        rows = []
        for line in out.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                rows.append((int(parts[0]), int(parts[1])))
        return rows

    # -- helpers -----------------------------------------------------------------------------
    def _sync(self, mirror: _LogMirror, handle: Handle, final: bool = False) -> None:
        """Append the remote log's new bytes (whole lines; the rest too when ``final``)."""
        q = shlex.quote(_remote_log(handle))
        cmd = f"tail -c +{mirror.offset + 1} {q} 2>/dev/null | head -c {FETCH_CAP}"
        if mirror.offset > self.opts.max_log_bytes and mirror.offset > mirror.freed:
            # a server that floods its log must not fill the remote disk: what is already copied
            # here (whose head the local cap keeps) becomes a hole in the remote file. No race
            # with the server's writes, nothing moves; without fallocate the file just grows.
            cmd += f"; fallocate -p -o 0 -l {mirror.offset} {q} 2>/dev/null"
            mirror.freed = mirror.offset
        try:
            proc = subprocess.run([*self.ssh_argv(), cmd],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=30 + self.opts.connect_timeout)
            chunk = proc.stdout if proc.returncode != 255 else b""
        except subprocess.TimeoutExpired:
            chunk = b""
        mirror.offset += len(chunk)
        data = mirror.pending + chunk
        cut = len(data) if final or len(data) - data.rfind(b"\n") > 65536 else data.rfind(b"\n") + 1
        mirror.pending = data[cut:]
        for line in data[:cut].splitlines(keepends=True):
            mirror.writer.write_line(line)
        if final:
            mirror.writer.close()
        else:
            mirror.writer.flush()

    def _kill(self, pid: int | None, pgid: int | None, grace_s: float) -> list[int] | None:
        """None when nothing was running; else the pids still alive afterwards (normally [])."""
        script = STOP.format(pgid=int(pgid) if pgid else '""', pid=int(pid) if pid else '""',
                             ticks=max(1, int(grace_s * 5)))
        out = self.run_script(script, grace_s + 45)
        lines = out.strip().splitlines()
        if lines == ["none"]:
            return None
        for line in lines:
            if line.startswith("tree:") and pid:
                self._trees[pid] = {int(p) for p in line.removeprefix("tree:").split()}
        left = lines[-1].removeprefix("left:").split() if lines and lines[-1].startswith("left:") else []
        return [int(p) for p in left]

    def _listening(self) -> set[int]:
        out = self.run_script(LISTENING + "\n", 30)
        return {int(h, 16) for h in out.split() if re.fullmatch(r"[0-9A-Fa-f]{4}", h)}

    def _open_tunnel(self, port: int, target: str = "127.0.0.1") -> subprocess.Popen:
        o = self.opts
        argv = [*self.ssh_argv(control=False)[:-1], "-N", "-o", "ExitOnForwardFailure=yes",
                "-L", f"{o.tunnel_bind}:{port}:{target}:{port}", self.dest]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                preexec_fn=_die_with_parent)
        deadline = time.monotonic() + o.connect_timeout + 5
        while _local_free(o.tunnel_bind, port):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                err = redact_text(proc.communicate()[1].decode("utf-8", "replace")).strip()
                raise LaunchError(f"ssh tunnel {o.tunnel_bind}:{port} -> {self.dest}: {err or 'did not come up'}")
            time.sleep(0.1)
        return proc


def _remote_log(handle: Handle) -> str:
    remote = handle.remote_log
    if not remote:
        raise InfraError("this handle has no remote log (not started by an SSH host)")
    return remote


def _flag_value(argv: list[str], flag: str) -> str | None:
    """The value given to ``flag`` in ``argv`` (``--flag V`` or ``--flag=V``; the last one wins)."""
    found = None
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            found = argv[i + 1]
        elif a.startswith(flag + "="):
            found = a[len(flag) + 1:]
    return found


# servers whose argv may leave --port out when it is their default (SGLang's ServerArgs.port)
DEFAULT_PORTS = {"sglang.launch_server": 30000}


def _port_of(argv: list[str]) -> int:
    port = _flag_value(argv, "--port")
    if port is None:
        port = next((str(p) for prog, p in DEFAULT_PORTS.items() if prog in argv), None)
    if port is None or not port.isdigit():
        raise LaunchError("host.tunnel: cannot find the server's --port in its argv")
    return int(port)


def _local_free(bind: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((bind, port))
        except OSError:
            return False
    return True


def _die_with_parent() -> None:
    """The tunnel's ssh ends with bakeoff, even when bakeoff is killed (Linux prctl)."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
