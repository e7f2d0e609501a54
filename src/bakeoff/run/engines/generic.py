"""Any OpenAI-compatible server, described in the spec.

Engine options:
  * ``command``: the argv as a list of strings (never one shell string). The placeholders
    ``{model}``, ``{host}``, ``{port}`` (and ``{served_model_name}``) are replaced inside each
    element by plain substitution; nothing else is interpreted, so braces in JSON arguments stay
    as they are. ``server.args`` and the axis arguments are appended.
  * ``health``: a path (``"/health"``) or a list of paths polled in order; default ``/v1/models``.
  * ``ready_pattern``: optional regex of a log line meaning "ready".
  * ``help_text``: optional captured ``--help`` file to validate axis values against.

Example::

    engine = "generic"
    [engine_options]
    command = ["my-server", "--weights", "{model}", "--bind", "{host}:{port}"]
    health = ["/health", "/v1/models"]
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from bakeoff.run.engines.base import Engine, LaunchContext
from bakeoff.run.engines.helptext import HelpValidated
from bakeoff.errors import SpecError

PLACEHOLDERS = ("{model}", "{host}", "{port}", "{served_model_name}")


class GenericOptions(BaseModel):
    """``engine_options`` for ``engine = "generic"``."""

    model_config = ConfigDict(extra="forbid")

    command: Any = None  # the rules on its values are the constructor's (each with its own message)
    health: Any = None
    ready_pattern: Any = None
    help_text: Any = None


class Generic(HelpValidated, Engine):
    kind = "generic"
    Options = GenericOptions
    program = "the server"

    def __init__(self, command: list[str] | None = None, health: str | list[str] | None = None,
                 ready_pattern: str | None = None, help_text: str | None = None) -> None:
        if command is None:
            raise SpecError("engine_options.command: required for engine 'generic' (a list of argv strings)")
        if isinstance(command, str):
            raise SpecError(
                "engine_options.command: must be a list of argv elements, not a shell string "
                f"(e.g. {command.split()!r})"
            )
        if not isinstance(command, list) or not command or not all(isinstance(c, (str, int, float)) for c in command):
            raise SpecError("engine_options.command: must be a non-empty list of strings")
        self.template = [str(c) for c in command]
        if health is None:
            paths = ["/v1/models"]
        elif isinstance(health, str):
            paths = [health]
        elif isinstance(health, list) and health and all(isinstance(p, str) for p in health):
            paths = list(health)
        else:
            raise SpecError("engine_options.health: must be a path or a list of paths")
        for p in paths:
            if not p.startswith("/"):
                raise SpecError(f"engine_options.health: {p!r} must start with '/'")
        self.health_paths = tuple(paths)
        if ready_pattern is not None:
            try:
                re.compile(ready_pattern)
            except re.error as err:
                raise SpecError(f"engine_options.ready_pattern: not a valid regex: {err}") from None
        self.ready_pattern = ready_pattern
        self.help_text = help_text

    def port_problem(self) -> str | None:
        if any("{port}" in part for part in self.template):
            return None
        return (f"engine_options.command: no {{port}} in {self.template!r}; bakeoff runs each trial on a port of its "
                "own and the command to deploy on server.port (e.g. \"--port\", \"{port}\")")

    def cannot_check_here(self) -> str | None:
        """A free-form command has no --help to read unless one was captured (``help_text``)."""
        return super().cannot_check_here() if self.help_text else None

    def command(self, ctx: LaunchContext) -> list[str]:
        values = {
            "{model}": ctx.model,
            "{host}": ctx.host,
            "{port}": str(ctx.port),
            "{served_model_name}": ctx.served_model_name or ctx.model,
        }
        # one pass, so a value that itself contains "{port}" is not substituted again
        pattern = re.compile("|".join(re.escape(k) for k in values))
        argv = [pattern.sub(lambda m: values[m.group(0)], element) for element in self.template]
        return argv + [str(a) for a in ctx.args] + [str(a) for a in ctx.axis_args]
