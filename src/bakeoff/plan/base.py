"""The strategy contract: propose the next configurations from the finished trials.

A strategy never runs anything. The pipeline runs the baseline first (every other verdict is
judged against it), then asks the strategy for up to ``n`` configurations at a time — ``n`` is
how many trials the executor can start now — and stops when it proposes nothing while nothing
runs. The history is the store's finished trials, so a resumed sweep asks again from what is
stored (ask/tell with the store as the "tell"). A strategy is one module, named in
``bakeoff.registry.STRATEGIES``; an unknown name fails with the list of valid ones.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from bakeoff.registry import STRATEGIES

if TYPE_CHECKING:
    from bakeoff.spec import Spec, Value
    from bakeoff.store import TrialRecord

Config = dict  # axis name -> value


class Strategy(ABC):
    """``ask`` is the whole contract. ``why_done`` says, once ``ask`` returns nothing, why."""

    name: str = "?"  # its name in bakeoff.registry.STRATEGIES
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


def make_strategy(spec: "Spec") -> Strategy:
    """The strategy ``plan.strategy`` names (``bakeoff.registry.STRATEGIES``), for this spec."""
    return STRATEGIES.get(spec.plan.strategy)(spec)


def known() -> list[str]:
    return STRATEGIES.names()


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
