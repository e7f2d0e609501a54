"""The host contract: where an engine process runs.

A host starts one server process (in its own process group / session) with its output going
to a log file, reports whether it is still alive, and stops the whole process tree.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path


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


class Host:
    kind = "base"
    address = "127.0.0.1"

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

    def kill_orphan(self, pid: int, pgid: int, argv0: str | None = None) -> bool:
        """Stop a server left by an earlier, killed bakeoff. True when something was stopped."""
        raise NotImplementedError
