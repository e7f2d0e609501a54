"""The host contract: where an engine process runs.

A host starts one server process (in its own process group / session) with its output going
to a log file, reports whether it is still alive, and stops the whole process tree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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
