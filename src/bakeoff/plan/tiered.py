"""``tiered``: one change at a time, then the changes that helped together, then the
neighbourhood of the best — a winning combination without the grid.

1. every single change from the baseline (as ``ofat``);
2. once those finished: every combination of two or more single changes that helped (faster
   than the baseline beyond the noise, ``space.helped``), at most one value per axis, the
   combinations of the biggest single gains first;
3. hill climbing: the neighbours of the best correct configuration so far (one axis changed; a
   numeric axis to the adjacent point), leaving out a change that on its own failed or was
   slower beyond the noise; when a neighbour becomes the best, its neighbours follow.

It stops when the best's neighbourhood is exhausted, or after ``plan.patience`` finished trials
of tiers 2–3 without a new best. Every decision is recomputed from the stored history, so a
resumed search takes the same path.
"""

from __future__ import annotations

import itertools
import math

from bakeoff.plan import config_key
from bakeoff.plan import space
from bakeoff.plan.base import Strategy, untried
from bakeoff.spec import render


class Tiered(Strategy):
    name = "tiered"
    adaptive = True

    def ask(self, history, running, n):
        spec = self.spec
        base = space.baseline_of(spec, history)
        running_keys = {config_key(c) for c in running}
        tier1 = space.singles(spec)
        todo = untried(tier1, history, running)
        if todo:
            return todo[:n]
        if running_keys & {config_key(c) for c in tier1} or base is None:
            return []  # tier 2 needs every single change's result
        done = space.by_key(history)
        tier2 = self._combinations(history, base)
        todo = untried(tier2, history, running)
        if todo:
            return todo[:n]
        if running_keys & {config_key(c) for c in tier2}:
            return []
        if self._out_of_patience(history, {config_key(c) for c in tier1}):
            return []
        best = self._best(history)
        if best is None:
            self.why_done = "tiered: no configuration passed correctness, so there is no neighbourhood to search"
            return []
        bad = {(k, v) for t in history if len(t.changed) == 1 and space.hurt(t, base)
               for k, v in space.changes(spec, t.config)}
        nbrs = [c for c in space.neighbours(spec, best.config)
                if not any((a, render(c[a])) in bad for a in c if render(c[a]) != render(best.config[a]))]
        todo = untried(nbrs, history, running)
        if not todo and not running:
            self.why_done = (f"tiered: the neighbourhood of the best configuration ({_label(best)}) is exhausted "
                             f"after {len(done)} trials")
        return todo[:n]

    def _combinations(self, history, base) -> list[dict]:
        """Tier 2: combinations of the single changes that helped, biggest summed gain first."""
        spec = self.spec
        gains: dict[str, list[tuple[str, float]]] = {}
        for t in history:
            if len(t.changed) == 1 and space.helped(t, base):
                (axis, value), = space.changes(spec, t.config)
                gains.setdefault(axis, []).append((value, math.log(space.gain(t, base).ratio)))
        axes = sorted(gains)
        options = [[None] + sorted(gains[a], key=lambda vg: -vg[1]) for a in axes]
        combos = []
        for pick in itertools.product(*options):
            chosen = [(a, vg) for a, vg in zip(axes, pick) if vg is not None]
            if len(chosen) >= 2:
                combos.append((-sum(g for _, (_, g) in chosen), space.with_changes(spec, [(a, v) for a, (v, _) in chosen])))
        combos.sort(key=lambda sc: sc[0])
        return [c for _, c in combos]

    def _best(self, history):
        scored = [(space.figure(t), t) for t in history if space.passed(t) and space.figure(t) is not None]
        return max(scored, key=lambda ft: ft[0])[1] if scored else None

    def _out_of_patience(self, history, tier1_keys: set[str]) -> bool:
        """``plan.patience`` finished trials past tier 1 without a new best."""
        patience = self.spec.plan.patience
        if not patience:
            return False
        order = sorted(history, key=lambda t: (t.finished or 0, t.idx))
        best, since = None, 0
        for t in order:
            f = space.figure(t) if space.passed(t) else None
            improved = f is not None and (best is None or f > best)
            if improved:
                best = f
            if config_key(t.config) in tier1_keys or not t.changed:
                continue
            since = 0 if improved else since + 1
        if since >= patience:
            self.why_done = f"tiered: no new best in the last {since} trials (plan.patience = {patience})"
            return True
        return False


def _label(rec) -> str:
    return ", ".join(f"{a}={render(rec.config[a])}" for a in rec.changed) or "the baseline"
