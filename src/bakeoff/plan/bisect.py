"""``bisect``: the grid, fewest changes first, and when a combination fails although each of
its single changes passed, the smallest sub-combination that fails — usually a pair.

A failed combination (its run wrong or crashed) is bisected by running its sub-combinations
(every other axis at the baseline; each one is itself a grid cell) smallest first, before the
grid goes on. A set of changes is *incompatible* when its configuration failed and every
smaller set inside it passed; it is reported through ``learned`` to the pipeline's known-bad
gate, which then skips only configurations holding the whole set — one holding just one of
its values still runs. Sets are recomputed from the stored history on every ask, so a resumed
search knows what the killed one had found.
"""

from __future__ import annotations

import itertools

from bakeoff.plan import config_key
from bakeoff.plan import space
from bakeoff.plan.base import Strategy, untried


class Bisect(Strategy):
    name = "bisect"
    adaptive = True

    def __init__(self, spec) -> None:
        super().__init__(spec)
        self._found: dict[frozenset, str] = {}

    def order(self) -> list[dict]:
        """The configurations to cover, in order; bisection goes first whenever it has work."""
        return space.grid(self.spec)

    def ask(self, history, running, n):
        spec = self.spec
        done = space.by_key(history)
        self._found = {}
        probes: list[dict] = []
        for t in sorted(history, key=lambda t: t.idx):
            if len(t.changed) < 2 or not space.failed(t):
                continue
            ch = space.changes(spec, t.config)
            subs = [frozenset(s) for k in range(1, len(ch)) for s in itertools.combinations(sorted(ch), k)]
            unknown = [s for s in subs if config_key(space.with_changes(spec, s)) not in done]
            if unknown:
                probes += [space.with_changes(spec, s) for s in unknown]
                continue
            self._minimal(ch, t, done)
        todo = untried(probes, history, running) + untried(self.order(), history, running)
        if not todo and not running:
            found = "; ".join(f"{{{', '.join(f'{a}={v}' for a, v in sorted(s))}}}" for s in self._found) or "none"
            self.why_done = f"bisect: every configuration of the grid ran or was pruned; incompatible: {found}"
        return todo[:n]

    def _minimal(self, ch: frozenset, t, done) -> None:
        """Register the smallest failing subsets of ``ch`` whose own subsets all passed."""
        spec = self.spec
        failing = [frozenset(s) for k in range(1, len(ch) + 1) for s in itertools.combinations(sorted(ch), k)
                   if (r := done.get(config_key(space.with_changes(spec, frozenset(s))))) is not None and space.failed(r)]
        for s in failing:
            if len(s) < 2 or any(o < s for o in failing):
                continue  # a single value (the gate learns hard ones itself) or not minimal
            subs_ok = all((r := done.get(config_key(space.with_changes(spec, frozenset(p))))) is not None and space.passed(r)
                          for k in range(1, len(s)) for p in itertools.combinations(sorted(s), k))
            if subs_ok and not any(known <= s for known in self._found):
                r = done[config_key(space.with_changes(spec, s))]
                what = r.judged
                self._found[s] = (f"{' + '.join(f'{a}={v}' for a, v in sorted(s))} fail together ({what}"
                                  f"{', ' + r.cause if r.cause else ''} in trial {r.idx}) although each passed alone")

    def learned(self) -> dict[frozenset, str]:
        return dict(self._found)
