"""The strategy contract: propose the next configurations from the finished trials.

A strategy never runs anything. The pipeline runs the baseline first (every other verdict is
judged against it), then asks the strategy for up to ``n`` configurations at a time — ``n`` is
how many trials the executor can start now — and stops when it proposes nothing while nothing
runs. The history is the store's finished trials, so a resumed sweep asks again from what is
stored (ask/tell with the store as the "tell"). Strategies are registered by name, one module
each; an unknown name fails with the list of known ones.
"""

from __future__ import annotations

import difflib
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Callable

from bakeoff.errors import SpecError

if TYPE_CHECKING:
    from bakeoff.spec import Spec, Value
    from bakeoff.store import TrialRecord

Config = dict  # axis name -> value


class Strategy(ABC):
    """``ask`` is the whole contract. ``why_done`` says, once ``ask`` returns nothing, why."""

    name: str = "?"
    why_done: str = ""
    adaptive: bool = False  # proposals depend on results: `bakeoff plan` shows the first round only

    def __init__(self, spec: "Spec") -> None:
        self.spec = spec

    @abstractmethod
    def ask(self, history: list["TrialRecord"], running: list[Config], n: int) -> list[Config]:
        """Up to ``n`` configurations to run next, none of them in ``history`` or ``running``.
        ``history`` holds the finished trials of this spec, the baseline first. An empty list
        with nothing running ends the search."""

    def learned(self) -> dict[frozenset, str]:
        """Combinations found to fail together (sets of (axis, rendered value)) -> why, for the
        pipeline's known-bad gate; read after each ``ask``."""
        return {}


_REGISTRY: dict[str, Callable[["Spec"], Strategy]] = {}


def register(name: str):
    def deco(cls):
        cls.name = name
        _REGISTRY[name] = cls
        return cls
    return deco


def make_strategy(spec: "Spec") -> Strategy:
    _load_all()
    name = spec.plan.strategy
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, _REGISTRY, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise SpecError(f"plan.strategy: unknown strategy {name!r}{hint}; known: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name](spec)


def known() -> list[str]:
    _load_all()
    return sorted(_REGISTRY)


def _load_all() -> None:
    import importlib
    import pkgutil

    import bakeoff.plan as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if mod.name not in ("base", "prune", "space", "replay"):
            importlib.import_module(f"bakeoff.plan.{mod.name}")


def untried(configs: list[Config], history: list["TrialRecord"], running: list[Config]) -> list[Config]:
    """``configs`` less those already finished or running (compared by rendered values)."""
    from bakeoff.plan import config_key

    seen = {config_key(t.config) for t in history} | {config_key(c) for c in running}
    out, keys = [], set()
    for c in configs:
        k = config_key(c)
        if k not in seen and k not in keys:
            keys.add(k)
            out.append(c)
    return out


def values_differ(a: "Value", b: "Value") -> bool:
    from bakeoff.spec import render

    return render(a) != render(b)
