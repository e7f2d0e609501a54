"""The host contract: where an engine process runs.

A host starts one server process (in its own process group / session) with its output going
to a log file, reports whether it is still alive, and stops the whole process tree. Its
``Options`` model is the spec's ``[host]`` table for its ``kind`` (named in
``bakeoff.registry.HOSTS``). Every method a caller uses is declared here, most with the
behaviour of this machine as the default: a host overrides only what differs.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from bakeoff.errors import SpecError

if TYPE_CHECKING:
    from bakeoff.spec import Model


class PathEdit(str):
    """An env value that adds elements to the host's own value of a PATH-like variable
    (spec ``server.env_prepend`` / ``env_append``). As text it reads as a shell would write it,
    ``/usr/local/cuda-13.0/bin:$PATH``; each host applies it to the value where the server runs
    (``apply`` on this machine, ``shell`` in the remote command)."""

    name: str
    before: tuple[str, ...]
    after: tuple[str, ...]

    def __new__(cls, name: str, before=(), after=()) -> "PathEdit":
        obj = super().__new__(cls, ":".join([*before, f"${name}", *after]))
        obj.name, obj.before, obj.after = name, tuple(before), tuple(after)
        return obj

    def __reduce__(self):
        return (PathEdit, (self.name, self.before, self.after))

    def apply(self, current: str | None) -> str:
        """The value on a host whose own value is ``current`` (absent/empty: the elements only)."""
        return ":".join([*self.before, *([current] if current else []), *self.after])

    def shell(self) -> str:
        """One shell word: ``"/a:/b:$PATH"``, each element escaped for double quotes."""
        def dq(text: str) -> str:
            return "".join("\\" + c if c in '\\"$`' else c for c in text)

        return '"' + ":".join([*map(dq, self.before), "$" + self.name, *map(dq, self.after)]) + '"'


def path_edit_of(name: str, value: str) -> PathEdit | None:
    """A stored env value that reads as a PathEdit (``/a:$PATH``, from the store's JSON) as one
    again, so that a command rendered from the store expands ``$PATH`` as `bakeoff plan`'s does."""
    parts = value.split(":")
    if f"${name}" not in parts:
        return None
    at = parts.index(f"${name}")
    return PathEdit(name, parts[:at], parts[at + 1:])


def shell_line(argv: list[str], env: dict[str, str]) -> str:
    """THE rendering of a launch command as one line to paste into a shell: ``K=V ... ARGV``, each
    argv element one quoted word, a PATH-like edit as ``"/a:$PATH"``, a secret (env or flag value)
    as a reference to the user's own variable (``"${HF_TOKEN:?}"``: never printed, and the shell
    stops rather than start without it). `bakeoff plan` (local host), the recommendation, the
    fallbacks and every report print this text."""
    from bakeoff.redact import argv_words, env_word

    words = []
    for k, v in env.items():
        edit = v if isinstance(v, PathEdit) else path_edit_of(k, v)
        words.append(f"{k}={edit.shell() if edit is not None else env_word(k, v)}")
    return " ".join([*words, *argv_words(argv)])


def host_env(env: dict[str, str], current: dict[str, str]) -> dict[str, str]:
    """``env`` applied on top of a host's ``current`` environment (PathEdit values added to it)."""
    out = dict(current)
    for k, v in env.items():
        out[k] = v.apply(current.get(k)) if isinstance(v, PathEdit) else v
    return out


@dataclass
class Handle:
    """A started server. ``pid``/``pgid`` are recorded in the store before we wait on it."""

    pid: int
    pgid: int
    log_path: Path
    host: str = "127.0.0.1"
    remote_log: str = ""  # the log's path where the server runs, when that is another machine
    tunnel: Any = field(default=None, repr=False)  # the ssh -L process that reaches the server, if any


class LocalOptions(BaseModel):
    """The spec's ``[host]`` table for ``kind = "local"``: nothing but the kind."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["local"] = "local"


class Host:
    kind = "base"
    address = "127.0.0.1"
    describe = "the host"  # how messages name it ("ssh host gpu1")
    is_remote: ClassVar[bool] = False  # another machine: run_script, run_argv, path_exists work there
    max_log_bytes: int = 20_000_000  # the cap of each trial's log (spec server.max_log_bytes)
    Options: ClassVar[type[BaseModel]] = LocalOptions

    # -- from the spec ---------------------------------------------------------------------
    @classmethod
    def parse_options(cls, table: dict, bind: str | None = None) -> BaseModel:
        """THE reading of the spec's ``[host]`` table for this kind: one SpecError naming the key.
        ``bind`` (``server.host``): a host that cannot reach a server binding it says so."""
        try:
            return cls.Options.model_validate(table)
        except ValidationError as err:
            e = err.errors()[0]
            where = ".".join(str(p) for p in e["loc"])
            msg = "unknown key" if e["type"] == "extra_forbidden" else e["msg"]
            raise SpecError(f"host.{where}: {msg}") from None

    @classmethod
    def create(cls, table: dict) -> "Host":
        """The host the ``[host]`` table describes."""
        cls.parse_options(table)
        return cls()

    @classmethod
    def command_line(cls, table: dict, argv: list[str], env: dict[str, str], log_name: str, sweep: str) -> str:
        """The command a person would type to start this server there, secrets masked."""
        return shell_line(list(argv), env)  # it masks secrets itself (references to the user's variables)

    def resolve_model(self, model: "Model") -> str:
        """``model.path`` resolved where the servers run (SpecError when it is not there)."""
        return model.resolve()

    def client_host(self, bind: str) -> str:
        """Where the HTTP client connects to a server that binds ``bind``."""
        return "127.0.0.1" if bind in ("0.0.0.0", "::", "") else bind

    # -- the lifecycle ---------------------------------------------------------------------

    def start(self, argv: list[str], env: dict[str, str], log_path: Path, cwd: str | None = None) -> Handle:
        """Start ``argv`` (a list, never a shell string) with ``env`` added to the host's env."""
        raise NotImplementedError

    def exit_code(self, handle: Handle) -> int | None:
        """None while running; else the exit status (negative = killed by that signal)."""
        raise NotImplementedError

    def stop(self, handle: Handle, grace_s: float = 10.0) -> None:
        """Stop the whole process tree: SIGTERM, then SIGKILL after ``grace_s``. Idempotent."""
        raise NotImplementedError

    def read_log(self, handle: Handle) -> str:
        return handle.log_path.read_text(encoding="utf-8", errors="replace") if handle.log_path.exists() else ""

    def free_port(self) -> int:
        raise NotImplementedError

    def port_is_free(self, port: int) -> bool:
        raise NotImplementedError

    def wait_port_free(self, port: int, timeout_s: float = 15.0) -> bool:
        """Whether ``port`` is free, waiting up to ``timeout_s`` for a stopped server to let go."""
        return self.port_is_free(port)

    def wait_gpu_free(self, pids: set[int], timeout_s: float = 30.0) -> bool:
        """Whether no GPU memory is held by ``pids`` any more (True where nothing can say)."""
        return True

    def kill_all(self) -> int:
        """SIGKILL every server this host started and has not stopped; how many."""
        return 0

    def find_orphans(self, sweep_dir) -> list[int]:
        """Pids of servers a killed bakeoff left running for ``sweep_dir`` and did not record."""
        return []

    # -- commands on another machine (``is_remote``) ---------------------------------------
    def run_script(self, script: str, timeout_s: float = 60.0) -> str:
        """Run a ``sh`` script there; its stdout."""
        raise NotImplementedError(f"{self.kind} host: only a remote host runs scripts for bakeoff")

    def run_argv(self, argv: list[str], timeout_s: float = 120.0, stdin: bytes = b"") -> tuple[int, str]:
        """Run ``argv`` there; (exit status, stdout+stderr)."""
        raise NotImplementedError(f"{self.kind} host: only a remote host runs commands for bakeoff")

    def kill_orphan(self, pid: int, pgid: int, argv0: str | None = None) -> bool:
        """Stop a server left by an earlier, killed bakeoff. True when something was stopped."""
        raise NotImplementedError
