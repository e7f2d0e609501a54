"""Pruning: skip a configuration that contains a combination known to fail.

A known-bad combination is a set of (axis, value) pairs: one pair for a value that failed with a
hard incompatibility on its own (a single-change trial, a preflight probe, a ``--known-bad``
matrix), several for a combination that fails only together (a whole configuration from a
matrix, an incompatible pair found by bisection). A configuration is skipped when it holds every
pair of one such set, unless a pair is forced (``[plan] force = ["axis=value"]``). The baseline
is never skipped: without it nothing can be judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bakeoff.plan import Planned
from bakeoff.spec import Spec, render
from bakeoff.store import TrialRecord

Pairs = frozenset  # of (axis, rendered value)


@dataclass
class Gate:
    force: set[str] = field(default_factory=set)
    enabled: bool = True
    bad: dict[Pairs, tuple[str, str]] = field(default_factory=dict)  # pairs -> (cause, why)

    @classmethod
    def for_spec(cls, spec: Spec) -> "Gate":
        return cls(force=set(spec.plan.force), enabled=spec.plan.prune)

    def add(self, pairs: Pairs, why: str, cause: str = "pruned") -> bool:
        """Condemn a combination; False when it (or a smaller one inside it) was known already."""
        pairs = frozenset(pairs)
        if any(known <= pairs for known in self.bad):
            return False
        self.bad[pairs] = (cause, why)
        return True

    def learn(self, rec: TrialRecord) -> bool:
        """A hard incompatibility in a single-change trial condemns that axis value."""
        if rec.verdict == "crashed" and rec.metrics.get("hard") and len(rec.changed) == 1:
            axis = rec.changed[0]
            value = render(rec.config[axis])
            return self.add(frozenset([(axis, value)]),
                            f"{axis}={value} failed in trial {rec.idx} with {rec.cause} (hard incompatibility)")
        return False

    def skip(self, planned: Planned) -> tuple[str, str] | None:
        """(cause, why) when ``planned`` holds a known-bad combination that is not forced."""
        if not self.enabled or not planned.changed:
            return None
        mine = {(a, render(v)) for a, v in planned.config.items()}
        for pairs, (cause, why) in self.bad.items():
            if not any(a in planned.changed for a, _ in pairs):
                continue  # all at the baseline's values: the baseline ran, so this cannot be what fails
            if pairs <= mine and not any(f"{a}={v}" in self.force for a, v in pairs):
                return cause, why
        return None
