"""One registry for everything a spec picks by name: engines, strategies, hosts, executors and
preflight probes (and the readers of the files a spec names: prompt sets, triage rules).

Each kind is a table of names -> ``"module:attr"`` written here, at the bottom layer, so that the
spec can check a name (and list the valid ones, with a "did you mean") without importing the
code that implements it; :meth:`Registry.get` imports that code on first use. Preflight probes
are the one kind whose names come from their modules (a probe module registers what its library
offers, ``Registry.add``), so that table lists modules to import instead.

Adding an engine, strategy, host or executor is one module plus one line in its table below.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any, Iterator

from bakeoff.errors import SpecError


def suggest(value: str, choices: list[str]) -> str:
    """`` (did you mean X?)`` for the closest of ``choices``, else nothing."""
    close = difflib.get_close_matches(value, choices, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


class Registry:
    """Names of one kind -> the object each names, loaded on first use.

    ``field`` is the spec field that names one (``plan.strategy``), ``noun`` what one is called
    in an error (``strategy``): an unknown name is one SpecError ``field: unknown noun 'x' (did
    you mean y?); valid: ...``."""

    def __init__(self, field: str, noun: str, refs: dict[str, str] | None = None, modules: tuple[str, ...] = ()) -> None:
        self.field, self.noun = field, noun
        self._refs = dict(refs or {})
        self._modules = modules  # imported before a lookup: they register with ``add``
        self._loaded: dict[str, Any] = {}

    def _import_modules(self) -> None:
        for mod in self._modules:
            importlib.import_module(mod)

    def names(self) -> list[str]:
        """Every name, sorted (a registry with ``modules`` imports them first)."""
        self._import_modules()
        return sorted({*self._refs, *self._loaded})

    def unknown(self, name: str) -> str | None:
        """Why ``name`` names nothing (without the field), or None when it is known."""
        names = self.names()
        if name in names:
            return None
        return f"unknown {self.noun} {name!r}{suggest(str(name), names)}; valid: {', '.join(names) or '(none)'}"

    def get(self, name: str) -> Any:
        """The object ``name`` names; SpecError naming the field (and the valid names) if none."""
        why = self.unknown(name)
        if why is not None:
            raise SpecError(f"{self.field}: {why}")
        if name not in self._loaded:
            module, _, attr = self._refs[name].partition(":")
            self._loaded[name] = getattr(importlib.import_module(module), attr)
        return self._loaded[name]

    def items(self) -> Iterator[tuple[str, Any]]:
        """(name, object) for every name, each loaded."""
        for name in self.names():
            yield name, self.get(name)

    def add(self, name: str, obj: Any) -> None:
        """Register ``obj`` under ``name`` at import time (preflight probes); twice is a bug."""
        if name in self._loaded or name in self._refs:
            raise ValueError(f"{self.noun} {name!r} registered twice")
        self._loaded[name] = obj


ENGINES = Registry("engine", "engine", {
    "generic": "bakeoff.run.engines.generic:Generic",
    "llamacpp": "bakeoff.run.engines.llamacpp:LlamaCpp",
    "sglang": "bakeoff.run.engines.sglang:SGLang",
    "transformers": "bakeoff.run.engines.transformers:TransformersServe",
    "trtllm": "bakeoff.run.engines.trtllm:TensorRTLLM",
    "vllm": "bakeoff.run.engines.vllm:VLLM",
})

STRATEGIES = Registry("plan.strategy", "strategy", {
    "baseline": "bakeoff.plan.fixed:Baseline",
    "bisect": "bakeoff.plan.bisect:Bisect",
    "grid": "bakeoff.plan.fixed:Grid",
    "ofat": "bakeoff.plan.fixed:OneAtATime",
    "optuna": "bakeoff.plan.optuna_search:OptunaSearch",
    "tiered": "bakeoff.plan.tiered:Tiered",
})

HOSTS = Registry("host.kind", "host kind", {
    "local": "bakeoff.run.hosts.local:LocalHost",
    "ssh": "bakeoff.run.hosts.ssh:SSHHost",
})

EXECUTORS = Registry("executor", "executor", {
    "local": "bakeoff.run.executors.local:Local",
    "ray": "bakeoff.run.executors.ray:RayExecutor",
})

# the readers of files a spec names, by the field that names the file: the spec checks that the
# file reads without importing the judge that reads it
SPEC_FILES = Registry("spec", "file reader", {
    "probes.set": "bakeoff.judge.probes:load_prompt_set",
    "triage.rules": "bakeoff.judge.triage:load_rules",
})

PREFLIGHT_PROBES = Registry("preflight.map", "preflight probe", modules=tuple(
    f"bakeoff.preflight.{m}" for m in ("torch_sdpa", "torch_fp8", "torch_grouped", "triton_kernel", "flashinfer", "flash_attn")))
