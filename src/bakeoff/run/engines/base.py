"""The engine contract.

An engine adapter is one module in this package: a class with a unique ``kind`` that turns a
resolved configuration into an argv list and tells how to see that the server is ready.
Registering is ``@register`` on the class; ``get_engine(kind)`` fails with the known kinds.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import ClassVar

from bakeoff.errors import SpecError


@dataclass(frozen=True)
class Phase:
    """A startup phase seen in the log: ``name`` starts at the first line matching ``pattern``."""

    name: str
    pattern: str

    def matches(self, line: str) -> bool:
        return re.search(self.pattern, line) is not None


@dataclass
class LaunchContext:
    """Everything an engine needs to build its command line for one trial."""

    model: str
    host: str
    port: int
    args: list[str]
    # flag axis -> rendered argv fragment, in axis order
    axis_args: list[str]
    served_model_name: str | None = None
    extra: dict = field(default_factory=dict)


class Engine:
    """Base of every adapter. Subclasses set ``kind`` and implement ``command``.

    Contract (three things):
      * ``command(ctx)``: the argv list that starts the server. Never a shell string.
      * ``health_paths``: HTTP paths polled in order; all must answer 200 for "ready".
      * ``phases``: log phases, for the startup timeline.
    ``validate_value`` may reject an axis value before launch (from the engine's --help).
    """

    kind: ClassVar[str] = ""
    health_paths: ClassVar[tuple[str, ...]] = ("/v1/models",)
    phases: ClassVar[tuple[Phase, ...]] = ()
    # How the OpenAI-compatible API of this engine spells generation extras.
    supports_logprobs: ClassVar[bool] = True
    supports_ignore_eos: ClassVar[bool] = False
    # the port the engine serves on when no --port is given: a deploy command without a port in the
    # spec names this one (never a trial's throw-away port)
    default_port: ClassVar[int] = 8000
    # flags that take a whole number (a spec value such as "--threads 2.5" is refused before launch)
    int_flags: ClassVar[tuple[str, ...]] = ()
    # How the teacher-forcing probe gets the chat-templated prompt: a key of
    # bakeoff.judge.probes.PROMPT_RECIPES, or None (no way: the chat API's continue_final_message)
    templated_prompt: ClassVar[str | None] = None
    # log lines that mean "ready" even if the health endpoint is slow to say so
    ready_pattern: ClassVar[str | None] = None

    def command(self, ctx: LaunchContext) -> list[str]:
        raise NotImplementedError

    def validate_value(self, flag: str, value: str) -> None:
        """Raise SpecError if ``value`` is not a choice the engine accepts for ``flag``."""

    def version(self) -> str | None:
        """The installed engine's version, for the environment fingerprint."""
        return None

    def cannot_check_here(self) -> str | None:
        """Why axis values cannot be checked on this machine (the engine's --help cannot be read
        here: not installed, a wrong binary path), or None when they can or there is nothing to check."""
        return None

    def phase_of(self, line: str) -> str | None:
        for phase in self.phases:
            if phase.matches(line):
                return phase.name
        return None


_REGISTRY: dict[str, type[Engine]] = {}


def register(cls: type[Engine]) -> type[Engine]:
    if not cls.kind:
        raise TypeError(f"{cls.__name__} has no kind")
    _REGISTRY[cls.kind] = cls
    return cls


def known_engines() -> list[str]:
    _load_all()
    return sorted(_REGISTRY)


def get_engine(kind: str, **options) -> Engine:
    _load_all()
    if kind not in _REGISTRY:
        close = difflib.get_close_matches(kind, _REGISTRY, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise SpecError(f"engine: unknown engine {kind!r}{hint}; known: {', '.join(sorted(_REGISTRY))}")
    cls = _REGISTRY[kind]
    known = option_names(cls)
    for key in options:
        if key not in known:
            raise SpecError(f"engine_options.{key}: unknown option for engine {kind!r}{suggest(key, known)}; "
                            f"valid: {', '.join(known) or '(none)'}")
    return cls(**options)


def option_names(cls: type[Engine]) -> list[str]:
    """The ``engine_options`` keys an engine takes: its constructor's keyword parameters."""
    import inspect

    params = inspect.signature(cls.__init__).parameters.values()
    return [p.name for p in params if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _load_all() -> None:
    import importlib
    import pkgutil

    import bakeoff.run.engines as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if mod.name != "base":
            importlib.import_module(f"bakeoff.run.engines.{mod.name}")


def suggest(value: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(value, choices, n=1)
    return f" (did you mean {close[0]}?)" if close else ""
