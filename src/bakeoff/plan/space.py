"""What the adaptive strategies share: the search space, how a finished trial scores, and
what a stopped search left unexplored.

A trial *passed* when its final verdict is ok or slow; it *failed* when its run was wrong or
crashed (a skipped trial never ran and tells nothing about speed). Its figure is
``decide.objective_of`` (higher is better after the sign of the objective is applied), and
"helped" means faster than the baseline beyond the noise (``decide.stats.ratio_interval``
excludes 1). With one repetition there is no interval; then a change helps when its point
ratio exceeds ``1 + NO_INTERVAL_MARGIN`` (see the constant: a guess, not a measurement).
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

from bakeoff.spec import render
from bakeoff.store import CORRECT, FAILED

if TYPE_CHECKING:
    from bakeoff.spec import Spec, Value
    from bakeoff.store import TrialRecord

# Used only when a trial has one repetition (no interval). NOT a measured healthy spread: on the
# shared 2-core machine (2026-12-03, llama-server + SmolLM2-135M, c=4, 8 requests x 32 tokens,
# bench/search_efficiency.py) the same configuration launched in two sweeps differed by 0.80x,
# 1.04x and 1.97x (pooled SD of log tok/s 0.29, 3 dof) — load from other users, far above any
# flag's effect. 10 % is a guess for a quiet machine; set bench repetitions >= 2 so that
# ``ratio_interval`` decides instead.
NO_INTERVAL_MARGIN = 0.10


def passed(rec: "TrialRecord") -> bool:
    return rec.is_finished() and rec.verdict in CORRECT


def failed(rec: "TrialRecord") -> bool:
    """The run itself was wrong or crashed (not skipped, not interrupted)."""
    return rec.is_finished() and rec.judged in FAILED


def figure(rec: "TrialRecord") -> float | None:
    """The objective, oriented so that higher is better; None without one."""
    from bakeoff.decide import objective_of

    o = objective_of(rec)
    if o is None or not o.value or o.value <= 0:
        return None
    return o.value if o.higher_is_better else 1.0 / o.value


def gain(rec: "TrialRecord", base: "TrialRecord"):
    """``decide.stats.Ratio`` of ``rec`` over the baseline, or None without figures."""
    from bakeoff.decide import objective_at, objective_of
    from bakeoff.decide.stats import ratio_interval

    b = objective_of(base)
    o = objective_at(rec, b)[0]  # at the baseline's load level, never another
    if o is None or b is None:
        return None
    return ratio_interval(o.samples, b.samples, higher_is_better=o.higher_is_better)


def helped(rec: "TrialRecord", base: "TrialRecord") -> bool:
    """Correct and faster than the baseline beyond the noise."""
    r = gain(rec, base) if passed(rec) else None
    if r is None:
        return False
    if r.lo is None:  # one repetition: no interval; the measured spread stands in for it
        better = r.ratio > 1 + NO_INTERVAL_MARGIN if r.higher_is_better else r.ratio < 1 - NO_INTERVAL_MARGIN
        return better
    return r.call == "better"


def hurt(rec: "TrialRecord", base: "TrialRecord") -> bool:
    """Failed, or correct but slower than the baseline beyond the noise."""
    if failed(rec):
        return True
    r = gain(rec, base) if passed(rec) else None
    if r is None:
        return False
    if r.lo is None:
        return r.ratio < 1 - NO_INTERVAL_MARGIN if r.higher_is_better else r.ratio > 1 + NO_INTERVAL_MARGIN
    return r.call == "worse"


def baseline_of(spec: "Spec", history: list["TrialRecord"]) -> "TrialRecord | None":
    return next((t for t in history if not t.changed), None)


def by_key(history: list["TrialRecord"]) -> dict[str, "TrialRecord"]:
    from bakeoff.plan import config_key

    return {config_key(t.config): t for t in history}


def singles(spec: "Spec") -> list[dict]:
    """Every configuration one change away from the baseline (what ``ofat`` runs)."""
    base = spec.baseline_config()
    return [{**base, a.name: v} for a in spec.axes for v in a.values if render(v) != render(base[a.name])]


def grid(spec: "Spec") -> list[dict]:
    """Every combination but the baseline, fewest changes first (ties in product order)."""
    base = spec.baseline_config()
    names = [a.name for a in spec.axes]
    combos = [dict(zip(names, c)) for c in itertools.product(*(a.values for a in spec.axes))]
    n_changed = lambda c: sum(render(c[k]) != render(base[k]) for k in names)  # noqa: E731
    return sorted((c for c in combos if n_changed(c)), key=n_changed)


def grid_size(spec: "Spec") -> int:
    return math.prod(len(a.values) for a in spec.axes)


def neighbours(spec: "Spec", config: dict) -> list[dict]:
    """One axis changed: a categorical axis to each other value, a numeric axis to the points
    next to its current one."""
    out = []
    for a in spec.axes:
        cur = render(config[a.name])
        if a.numeric:
            pts = sorted(a.values)
            i = next((j for j, v in enumerate(pts) if render(v) == cur), None)
            if i is None:  # a value optuna sampled between the points: the points around it
                x = config[a.name]
                lower = [v for v in pts if v < x]
                upper = [v for v in pts if v > x]
                near = lower[-1:] + upper[:1]
            else:
                near = pts[max(0, i - 1):i] + pts[i + 1:i + 2]
        else:
            near = [v for v in a.values if render(v) != cur]
        out += [{**config, a.name: v} for v in near]
    return out


def changes(spec: "Spec", config: dict) -> frozenset:
    """The (axis, rendered value) pairs where ``config`` leaves the baseline."""
    base = spec.baseline_config()
    return frozenset((a.name, render(config[a.name])) for a in spec.axes if render(config[a.name]) != render(base[a.name]))


def with_changes(spec: "Spec", pairs) -> dict:
    """The baseline with ``pairs`` applied (values looked up by their rendering)."""
    cfg = spec.baseline_config()
    for axis, value in pairs:
        a = spec.axis(axis)
        cfg[axis] = next((v for v in a.values if render(v) == value), value)
    return cfg


def unexplored(spec: "Spec", history: list["TrialRecord"]) -> str:
    """One sentence for the report: how much of the grid the search did not run, and why not."""
    from bakeoff.plan import config_key

    total = grid_size(spec)
    keys = {config_key(c) for c in [spec.baseline_config(), *grid(spec)]}
    launched = [t for t in history if t.verdict != "skipped"]
    skipped = [t for t in history if t.verdict == "skipped" and config_key(t.config) in keys]
    in_grid = sum(1 for t in launched if config_key(t.config) in keys)
    off_grid = len(launched) - in_grid
    left = total - in_grid - len(skipped)
    numeric = [a.name for a in spec.axes if a.numeric]
    parts = [f"{len(launched)} launch(es) of a {total}-configuration grid"]
    if off_grid:
        parts.append(f"{off_grid} of them at numeric values between the grid's points")
    if skipped:
        parts.append(f"{len(skipped)} skipped as known-bad")
    tail = f"{left} grid configuration(s) never ran" if left else "no grid configuration was left unexplored"
    if numeric:
        tail += f" (numeric axes {', '.join(numeric)} seen at {', '.join(str(len(spec.axis(n).values)) for n in numeric)} point(s) in the grid)"
    return "; ".join(parts) + "; " + tail + "."
