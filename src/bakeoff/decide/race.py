"""The race (``bench.resolve``): after the screening round, measure only the contenders until
each one's difference from the baseline is resolved — or the budget is spent.

Contenders are the correct configurations whose screening interval still overlaps the best
one's (the baseline's own band counts as its interval), plus the baseline itself. The race runs
in blocks: one launch of the baseline and one of each contender still racing, side by side in
time, the order reversed every other block (ABBA…), so that a machine whose speed drifts moves
both sides of a block alike. Each contender is compared with the baseline *within* each block
(``stats.Paired``). The race looks at the blocks on a fixed geometric schedule (``looks``) and
spends its error rate ``ALPHA`` (two-sided, over the whole race) across the looks by Lan and
DeMets' O'Brien–Fleming-like spending function α(t) = 2 − 2Φ(z_{1−α/2}/√t) of the information
fraction t = blocks / max_blocks (``stats.spent``): the look at 2 of 16 blocks may spend about
10⁻¹⁰, the one at 10 of 16 about 0.003, and the bounds are computed from the looks' exact joint
law (``stats.look_alphas``), so the last look's nominal α stays close to ALPHA (0.015 of 0.02 at
16 blocks) — not ALPHA / looks (0.003) as a Bonferroni split would give. A call of
"faster" or "slower" at look k needs the interval at that look's nominal α to exclude 1; the
equivalence (TOST) uses the same nominal α for each of its one-sided tests. Early looks thus
stop only a difference far beyond the noise; the measurement goes where the decision is.
``ALPHA`` = 0.02 and the default budget (``bench.max_extra_launches``) were chosen by
bench/resolve_sim.py under the block noise measured on real machines (bench/README.md).
A contender is settled at a look as:

* ``equivalent``: within ±resolve of the baseline by two one-sided tests (TOST);
* ``behind``: its interval lies below the best one's (clearly slower: dropped);
* ``better``: faster than the baseline beyond the race-wide interval, and no contender overlaps it;
* ``resolved``: its interval is narrower than ±resolve (a difference that size would show);
* ``unresolved``: its blocks reached the budget (``bench.max_extra_launches`` / 2) first.

Everything is stored in the sweep's meta ``race`` (one dict, written after every launch), so a
killed sweep resumes the race where it stopped: a block cut short is completed first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from bakeoff.decide.stats import Paired, Ratio, block_diffs, look_alphas

ALPHA = 0.02  # the race's error rate over all its looks, two-sided (bench/README.md, "The race": chosen there)
SETTLED = ("equivalent", "behind", "better", "resolved", "unresolved", "failed")


def looks(max_blocks: int) -> list[int]:
    """The block counts at which the race looks: 2, 3, then ×1.4 (rounded up) up to and
    including ``max_blocks`` — few looks, so each spends a larger share of α."""
    out, b = [], 2
    while b < max_blocks:
        out.append(b)
        b = max(b + 1, math.ceil(b * 1.4))
    return out + [max_blocks] if max_blocks >= 2 else out


def final_alpha(max_blocks: int) -> float:
    """The nominal α of the last look of a race of ``max_blocks`` blocks (``ALPHA`` spent over
    its looks): what a race of that size resolves at."""
    schedule = looks(max(2, max_blocks))
    return look_alphas(tuple(b / schedule[-1] for b in schedule), ALPHA)[-1]


def contenders(ratios: dict[str, Ratio], tie_band: float) -> list[str]:
    """The configurations the race keeps measuring after the screening round: those whose
    interval overlaps the best one's. The baseline's interval is its tie band 1 ± ``tie_band``;
    a configuration without an interval (one run) always races."""
    def interval(r: Ratio) -> tuple[float, float]:
        lo, hi = (r.lo, r.hi) if r.higher_is_better else (1 / r.hi, 1 / r.lo)
        return lo, hi

    known = {k: interval(r) for k, r in ratios.items() if r.lo is not None}
    best_lo = max([1 - tie_band] + [lo for lo, _ in known.values()])
    return [k for k in ratios if k not in known or known[k][1] >= best_lo]


@dataclass
class Race:
    """The race's stored state: the blocks run so far (each the keys in launch order and what
    each launch measured: ``{"samples": [...]}`` or ``{"failed": why}``) and its fixed design."""

    base_key: str
    resolve: float
    max_blocks: int
    max_launches: int
    blocks: list[dict] = field(default_factory=list)
    higher_is_better: bool = True
    identity: str = ""

    @classmethod
    def start(cls, base_key: str, keys: list[str], resolve: float, max_launches: int, identity: str = "",
              higher_is_better: bool = True) -> "Race":
        """A new race of ``keys`` against the baseline; ``max_launches`` pays for max_launches / 2
        blocks of one contender (the looks are fixed from that)."""
        race = cls(base_key, resolve, max(2, max_launches // 2), max_launches, [], higher_is_better, identity)
        race.blocks.append({"keys": [base_key, *keys], "runs": {}})
        return race

    @classmethod
    def from_json(cls, d: dict) -> "Race":
        return cls(**d)

    def to_json(self) -> dict:
        return {"base_key": self.base_key, "resolve": self.resolve, "max_blocks": self.max_blocks,
                "max_launches": self.max_launches, "blocks": self.blocks, "higher_is_better": self.higher_is_better,
                "identity": self.identity}

    # -- what was measured ------------------------------------------------------------------
    def launches(self) -> int:
        return sum(len(b["runs"]) for b in self.blocks)

    def keys(self) -> list[str]:
        """Every contender that raced, in their first block's order."""
        return [k for k in self.blocks[0]["keys"] if k != self.base_key] if self.blocks else []

    def complete(self) -> list[dict]:
        """The blocks in which every planned launch ran."""
        return [b for b in self.blocks if len(b["runs"]) == len(b["keys"])]

    def paired(self, key: str, upto: int | None = None) -> Paired:
        """``key`` against the baseline over the complete blocks it ran in (the first ``upto``)."""
        pairs = [(b["runs"][self.base_key].get("samples") or [], b["runs"][key].get("samples") or [])
                 for b in self.complete() if key in b["runs"]
                 and b["runs"][key].get("name") == b["runs"][self.base_key].get("name")][:upto]  # the same figure
        return Paired(block_diffs([p[0] for p in pairs], [p[1] for p in pairs]), len(looks(self.max_blocks)),
                      self.resolve, self.higher_is_better, confidence=1 - ALPHA,
                      look_alpha=self.look_alpha(len(pairs)), final_alpha=self.look_alpha(self.max_blocks))

    def look_alpha(self, blocks: int) -> float:
        """The nominal α of the look at ``blocks`` blocks (the last look reached before it when
        ``blocks`` falls between looks; the first look's below it): ``stats.look_alphas``."""
        schedule = looks(self.max_blocks)
        alphas = look_alphas(tuple(b / self.max_blocks for b in schedule), ALPHA)
        i = max((i for i, b in enumerate(schedule) if b <= blocks), default=0)
        return alphas[i]

    def failed(self, key: str) -> str | None:
        return next((r["failed"] for b in self.blocks if (r := b["runs"].get(key)) and r.get("failed")), None)

    # -- the decision at each look ----------------------------------------------------------
    def status(self) -> dict[str, str | None]:
        """Each contender's state: one of ``SETTLED``, or None while it races. A contender is
        settled at a look (``looks``) by what its blocks show up to that look, and stays settled."""
        out: dict[str, str | None] = {k: None for k in self.keys()}
        for k in out:
            if self.failed(k):
                out[k] = "failed"
        n = max((self.paired(k).blocks for k in out), default=0)
        for look in (b for b in looks(self.max_blocks) if b <= n):
            racing = [k for k, s in out.items() if s is None and self.paired(k, look).blocks == look]
            at = {k: self.paired(k, look) for k in racing}
            for k in racing:
                out[k] = settle(at[k], {j: p for j, p in at.items() if j != k}, self.higher_is_better)
        left = [k for k, s in out.items() if s is None]
        spent = self.launches() + 1 + len(left) > self.max_launches  # no budget for another block
        for k in left:
            if spent or self.paired(k).blocks >= self.max_blocks:
                out[k] = "unresolved"
        return out

    def racing(self) -> list[str]:
        return [k for k, s in self.status().items() if s is None]

    def next_launches(self) -> list[str]:
        """The keys to launch next, in order: what the open block still lacks, else a new block of
        the baseline and every contender still racing (order reversed every other block); [] when
        the race is over (nothing left racing, the baseline failed, or the budget is spent)."""
        if not self.blocks:
            return []
        last = self.blocks[-1]
        if len(last["runs"]) < len(last["keys"]):
            return [k for k in last["keys"] if k not in last["runs"]]
        if (last["runs"].get(self.base_key) or {}).get("failed"):
            return []
        keys = [self.base_key, *self.racing()]
        if len(keys) < 2 or self.launches() + len(keys) > self.max_launches:
            return []
        keys = keys if len(self.blocks) % 2 == 0 else keys[::-1]
        self.blocks.append({"keys": keys, "runs": {}})
        return keys

    def record(self, key: str, result: dict) -> None:
        """What the launch of ``key`` in the open block measured."""
        self.blocks[-1]["runs"][key] = result


def settle(p: Paired, others: dict[str, Paired], higher_is_better: bool = True) -> str | None:
    """A contender's state at a look, or None to keep racing (the rules in the module docstring).
    ``others``: the other contenders still racing, at the same look."""
    r = p.ratio()
    if r.lo is None:
        return None
    if p.equivalent:
        return "equivalent"
    lo, hi = _oriented(r)
    best_lo = max([1.0] + [_oriented(q.ratio())[0] for q in others.values() if q.ratio().lo is not None])
    if hi < best_lo:
        return "behind"
    overlapping = [q for q in others.values() if q.ratio().lo is not None and _oriented(q.ratio())[1] >= lo]
    if lo > 1 and not overlapping:
        return "better"
    if math.log(r.hi / r.lo) / 2 <= math.log1p(p.resolve):
        return "resolved"
    return None


def _oriented(r: Ratio) -> tuple[float, float]:
    """The interval with "higher is better" (a latency ratio inverted)."""
    return (r.lo, r.hi) if r.higher_is_better else (1 / r.hi, 1 / r.lo)
