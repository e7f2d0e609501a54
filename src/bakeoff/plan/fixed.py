"""The fixed strategies: a list known before anything runs, proposed in order.

* ``baseline``: the baseline alone.
* ``ofat``: each other value of each axis with everything else at baseline — every trial
  differs from the baseline in exactly one axis.
* ``grid``: every combination.
"""

from __future__ import annotations

import itertools

from bakeoff.plan.base import Config, Strategy, untried, values_differ


class _Fixed(Strategy):
    def configs(self) -> list[Config]:
        raise NotImplementedError

    def ask(self, history, running, n):
        todo = untried(self.configs(), history, running)
        if not todo:
            self.why_done = f"{self.name}: every planned configuration ran"
        return todo[:n]


class Baseline(_Fixed):
    name = "baseline"

    def configs(self) -> list[Config]:
        return []


class OneAtATime(_Fixed):
    name = "ofat"

    def configs(self) -> list[Config]:
        base = self.spec.baseline_config()
        return [{**base, a.name: v} for a in self.spec.axes for v in a.values if values_differ(v, base[a.name])]


class Grid(_Fixed):
    name = "grid"

    def configs(self) -> list[Config]:
        base = self.spec.baseline_config()
        names = [a.name for a in self.spec.axes]
        combos = (dict(zip(names, c)) for c in itertools.product(*(a.values for a in self.spec.axes)))
        return [c for c in combos if any(values_differ(c[k], base[k]) for k in names)]
