"""The engine contract.

An engine adapter is one module in this package: a class with a unique ``kind`` that turns a
resolved configuration into an argv list and tells how to see that the server is ready, and
its ``Options`` model (the spec's ``engine_options``, ``extra="forbid"``). Its name is one line
in ``bakeoff.registry.ENGINES``; ``get_engine(kind)`` fails with the valid kinds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from bakeoff.errors import SpecError
from bakeoff.registry import ENGINES, suggest
from bakeoff.spec import Axis, render


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


class NoOptions(BaseModel):
    """``engine_options`` of an engine that takes none."""

    model_config = ConfigDict(extra="forbid")


# marked values of a LaunchContext -> the spec field each comes from (``own_flags``)
_SENTINELS = {"\x00model\x00": "model.path", "\x00host\x00": "server.host", "1": "server.port",
              "\x00name\x00": "model.name"}


class Engine:
    """Base of every adapter. Subclasses set ``kind`` and implement ``command``.

    Contract (three things):
      * ``command(ctx)``: the argv list that starts the server. Never a shell string.
      * ``health_paths``: HTTP paths polled in order; all must answer 200 for "ready".
      * ``phases``: log phases, for the startup timeline.
    ``Options`` is its ``engine_options`` model (``extra="forbid"``: ``create`` refuses an
    unknown option naming it). ``validate_value`` may reject an axis value before launch (from
    the engine's --help). Every other method has a default here: an adapter overrides only what
    differs.
    """

    Options: ClassVar[type[BaseModel]] = NoOptions
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

    @classmethod
    def create(cls, options: dict) -> "Engine":
        """The engine built from the spec's ``engine_options``, validated by ``Options`` first."""
        return cls(**parse_options(cls, options).model_dump(exclude_unset=True))

    def command(self, ctx: LaunchContext) -> list[str]:
        raise NotImplementedError

    def validate_value(self, flag: str, value: str) -> None:
        """Raise SpecError if ``value`` is not a choice the engine accepts for ``flag``."""

    def check_axis_values(self, axes: list[Axis], suffix: str = "") -> None:
        """THE axis-value check: every value of each flag axis (booleans aside) through
        ``validate_value``; the first refused one is SpecError ``axes.NAME: why{suffix}``."""
        for axis in axes:
            if axis.flag is None:
                continue
            for value in axis.values:
                if isinstance(value, bool):
                    continue
                try:
                    self.validate_value(axis.flag, render(value))
                except SpecError as err:
                    raise SpecError(f"axes.{axis.name}: {err}{suffix}") from None

    def version(self) -> str | None:
        """The installed engine's version, for the environment fingerprint."""
        return None

    def cannot_check_here(self) -> str | None:
        """Why axis values cannot be checked on this machine (the engine's --help cannot be read
        here: not installed, a wrong binary path), or None when they can or there is nothing to check."""
        return None

    def known_flags(self) -> dict[str, list[str]]:
        """Flags of the engine's --help -> their declared choices ({} when it cannot be read or
        the engine has none)."""
        return {}

    def flag_choices(self, flag: str) -> list[str]:
        """The choices the engine's --help declares for ``flag`` ([] when none, or unreadable)."""
        return []

    def own_flags(self) -> dict[str, str]:
        """Flags bakeoff itself puts on the engine's command -> the spec field that sets them
        (``--port`` -> server.port), read from the engine's own command with marked values; for an
        engine whose program cannot be found here, just ``--host`` and ``--port``."""
        marks = {v: k for k, v in _SENTINELS.items()}
        ctx = LaunchContext(model=marks["model.path"], host=marks["server.host"], port=1, args=[], axis_args=[],
                            served_model_name=marks["model.name"])
        try:
            argv = self.command(ctx)
        except SpecError:
            return {"--host": "server.host", "--port": "server.port"}
        out = {}
        for flag, value in zip(argv, argv[1:]):
            for mark, field_name in _SENTINELS.items():
                if flag.startswith("-") and (value == mark or (mark != "1" and mark in value)):
                    out[flag] = field_name
        return out

    def port_problem(self) -> str | None:
        """Why this engine cannot run a trial on a port of bakeoff's choosing (None: it can)."""
        return None

    def default_env(self, ctx: LaunchContext) -> dict[str, str]:
        """Env the engine needs for this launch (the spec's env wins over it)."""
        return {}

    def request_model(self, served_name: str | None) -> str | None:
        """The ``model`` field the client sends: the served name."""
        return served_name

    def phase_of(self, line: str) -> str | None:
        for phase in self.phases:
            if phase.matches(line):
                return phase.name
        return None


def known_engines() -> list[str]:
    return ENGINES.names()


def get_engine(kind: str, **options) -> Engine:
    """The engine ``kind`` names (``bakeoff.registry.ENGINES``), built from its ``engine_options``
    validated by its ``Options`` model: one SpecError naming the field (the valid ones listed)."""
    return ENGINES.get(kind).create(options)


def parse_options(cls: type[Engine], options: dict) -> BaseModel:
    """``options`` validated by ``cls.Options``: the first error as one SpecError."""
    try:
        return cls.Options.model_validate(options)
    except ValidationError as err:
        e = err.errors()[0]
        key = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            known = option_names(cls)
            raise SpecError(f"engine_options.{key}: unknown option for engine {cls.kind!r}{suggest(key, known)}; "
                            f"valid: {', '.join(known) or '(none)'}") from None
        msg = e["msg"].removeprefix("Value error, ")
        if msg.startswith("engine_options."):  # a rule that names its own field
            raise SpecError(msg) from None
        got = f" (got {e['input']!r})" if "input" in e and e["type"] != "missing" else ""
        raise SpecError(f"engine_options.{key}: {msg}{got}") from None


def option_names(cls: type[Engine]) -> list[str]:
    """The ``engine_options`` keys an engine takes: its ``Options`` model's fields."""
    return list(cls.Options.model_fields)
