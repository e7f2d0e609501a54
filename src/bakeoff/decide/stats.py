"""Statistics of speed: the interval of a ratio, and whether it says faster, slower or tied.

Each configuration's headline figure is measured in several independent repetitions (a
repetition is one full pass of the load level; warm-up excluded). Throughputs are positive and
their noise is multiplicative, so the comparison is made on logarithms: Welch's t-test (scipy)
on log(trial) against log(baseline) gives an interval for the difference of mean logs, whose
exponent is the interval of the ratio of geometric means. "Faster" and "slower" need the
interval to exclude 1; anything else is a tie. With fewer than two repetitions on either side
there is no interval, and no claim.
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import asdict, dataclass

from scipy import stats

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Ratio:
    """trial / baseline for one figure, with its interval and what it allows one to say."""

    ratio: float
    lo: float | None
    hi: float | None
    n_trial: int
    n_base: int
    higher_is_better: bool = True
    base_launches: int = 1  # the baseline's launches the comparison pooled (ratio_vs_launches)
    blocks: int = 0  # paired blocks (Paired: each a launch of both, side by side in time), 0 when not paired

    @property
    def call(self) -> str:
        """'better', 'worse' or 'tie' (the interval holds 1, or there is none)."""
        if self.lo is None or self.hi is None:
            return "tie"
        if self.lo > 1:
            return "better" if self.higher_is_better else "worse"
        if self.hi < 1:
            return "worse" if self.higher_is_better else "better"
        return "tie"

    def describe(self) -> str:
        """'1.12x (95 % CI 1.06–1.18, 5 vs 5 runs)'."""
        if self.lo is None:
            return f"{self.ratio:.2f}x (no interval: {min(self.n_trial, self.n_base)} run(s))"
        launches = f" in {self.base_launches} launches" if self.base_launches > 1 else ""
        if self.blocks:
            return f"{self.ratio:.2f}x (race-wide 98 % CI {self.lo:.2f}–{self.hi:.2f}, {self.blocks} paired launches each)"
        return (f"{self.ratio:.2f}x (95 % CI {self.lo:.2f}–{self.hi:.2f}, "
                f"{self.n_trial} vs {self.n_base} runs{launches})")

    @classmethod
    def from_json(cls, v: dict) -> "Ratio":
        return cls(**{k: v[k] for k in ("ratio", "lo", "hi", "n_trial", "n_base", "higher_is_better")},
                   base_launches=v.get("base_launches", 1), blocks=v.get("blocks", 0))

    def to_json(self) -> dict:
        return {**asdict(self), "call": self.call}


def ratio_interval(trial: list[float], base: list[float], *, higher_is_better: bool = True,
                   confidence: float = CONFIDENCE, between: float = 0.0) -> Ratio | None:
    """The ratio of geometric means of ``trial`` over ``base`` with its Welch interval.

    ``between``: the relative spread (sd of the log) of one configuration's mean from one launch,
    or one stretch of time, to another — what repetitions inside one trial cannot see, because
    they are measured minutes apart from the other trial's (a shared machine's load moves in
    between). It is added to each side's variance as a known term: se² = s_t²/n_t + s_b²/n_b
    + 2·between², with Satterthwaite's degrees of freedom (the known term counting as exact). bench/aa_test.py measures it; ``bench.launch_noise`` sets it."""
    lt, lb = _logs(trial), _logs(base)
    if not lt or not lb:
        return None
    ratio = math.exp(_mean(lt) - _mean(lb))
    if len(lt) < 2 or len(lb) < 2:
        return Ratio(ratio, None, None, len(lt), len(lb), higher_is_better)
    if between > 0:
        vt, vb = statistics.variance(lt) / len(lt), statistics.variance(lb) / len(lb)
        se2 = vt + vb + 2 * between ** 2
        sampled_df = vt ** 2 / (len(lt) - 1) + vb ** 2 / (len(lb) - 1)
        df = se2 ** 2 / sampled_df if sampled_df > 0 else math.inf  # the known term counts as infinitely many
        half = (stats.t.ppf(0.5 + confidence / 2, df) if math.isfinite(df) else stats.norm.ppf(0.5 + confidence / 2)) * math.sqrt(se2)
        d = _mean(lt) - _mean(lb)
        return Ratio(ratio, math.exp(d - half), math.exp(d + half), len(lt), len(lb), higher_is_better)
    if _spread(lt) == 0 and _spread(lb) == 0:  # identical repetitions: the interval is the point
        return Ratio(ratio, ratio, ratio, len(lt), len(lb), higher_is_better)
    res = stats.ttest_ind(lt, lb, equal_var=False)
    ci = res.confidence_interval(confidence_level=confidence)
    return Ratio(ratio, math.exp(ci.low), math.exp(ci.high), len(lt), len(lb), higher_is_better)


@dataclass(frozen=True)
class LaunchNoise:
    """What the baseline's own launches say about launch-to-launch noise (all on logs).

    ``var_launch``: the sample variance of its launches' mean logs (``launches - 1`` degrees of
    freedom): one launch's mean moves by this much, repetition noise included. ``within``: the
    part of it the repetitions explain (mean s²/n over launches). ``sd``: the launch noise left,
    √max(var_launch − within, 0)."""

    launches: int
    mean_log: float
    var_launch: float
    within: float

    @property
    def sd(self) -> float:
        return math.sqrt(max(self.var_launch - self.within, 0.0))

    @property
    def df(self) -> int:
        return self.launches - 1

    @property
    def pooled_var(self) -> float:
        """The variance of the mean over the launches (never below what the repetitions leave)."""
        return max(self.var_launch, self.within) / self.launches

    def figure(self, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
        """The geometric mean over the launches and its interval (t, launches − 1 degrees of freedom)."""
        half = self._t(confidence) * math.sqrt(self.pooled_var)
        return math.exp(self.mean_log), math.exp(self.mean_log - half), math.exp(self.mean_log + half)

    def half_width(self, trial_var: float, confidence: float = CONFIDENCE) -> float:
        """The half-width (log) of a one-launch trial's ratio to the mean over the launches, the
        trial's repetitions leaving ``trial_var`` (s_t²/n_t): se² = σ̂_L² + s_t²/n_t + pooled_var."""
        return self._t(confidence) * math.sqrt(self.sd ** 2 + trial_var + self.pooled_var)

    def tie_half_width(self, confidence: float = CONFIDENCE) -> float:
        """What a tie could hide here: the half-width for a trial that repeats like the baseline's launches."""
        return self.half_width(self.within, confidence)

    def _t(self, confidence: float) -> float:
        return stats.t.ppf(0.5 + confidence / 2, self.df)

    def to_json(self) -> dict:
        return {**asdict(self), "sd": self.sd, "df": self.df}


MIN_LAUNCHES = 3  # fewer baseline launches leave one degree of freedom: an interval too wide to say anything


def launch_noise(launches: list[list[float]]) -> LaunchNoise | None:
    """The launch noise of one configuration launched several times (each a list of repetition
    values); None with fewer than ``MIN_LAUNCHES`` launches that measured something."""
    logs = [ls for ls in map(_logs, launches) if ls]
    if len(logs) < MIN_LAUNCHES:
        return None
    means = [_mean(ls) for ls in logs]
    within = [statistics.variance(ls) / len(ls) for ls in logs if len(ls) > 1]
    return LaunchNoise(len(logs), _mean(means), statistics.variance(means), _mean(within) if within else 0.0)


def ratio_vs_launches(trial: list[float], noise: LaunchNoise, *, n_base: int, higher_is_better: bool = True,
                      confidence: float = CONFIDENCE) -> Ratio | None:
    """The ratio of ``trial`` (one launch, its repetitions) to the baseline's mean over its
    launches, with an interval that counts the launch noise as the baseline's launches measured it.

    The trial's mean log differs from the baseline's pooled mean by its own launch's noise
    (σ_L², estimated), its repetitions' (s_t²/n_t) and the pooled mean's (var_launch/R, at
    least within/R): se² = σ̂_L² + s_t²/n_t + var_launch/R. The interval takes Student's t with R − 1 degrees of
    freedom — those of the launch-noise estimate, the scarcest part; a conservative choice (the
    A/A simulation and runs in bench/README.md)."""
    t = _logs(trial)
    if not t:
        return None
    d = _mean(t) - noise.mean_log
    vt = statistics.variance(t) / len(t) if len(t) > 1 else noise.var_launch  # one run: a launch's whole spread
    half = noise.half_width(vt, confidence)  # 0 when nothing varied: the interval is the point
    ratio = math.exp(d)
    return Ratio(ratio, math.exp(d - half), math.exp(d + half), len(t), n_base, higher_is_better, noise.launches)


def mean_interval(xs: list[float], confidence: float = CONFIDENCE) -> tuple[float, float | None, float | None]:
    """Mean and its Student-t interval (None, None with fewer than two values)."""
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    if not xs:
        return float("nan"), None, None
    m = _mean(xs)
    if len(xs) < 2:
        return m, None, None
    sem = stats.sem(xs)
    if sem == 0:
        return m, m, m
    lo, hi = stats.t.interval(confidence, len(xs) - 1, loc=m, scale=sem)
    return m, float(lo), float(hi)


def relative_half_width(xs: list[float], confidence: float = CONFIDENCE) -> float | None:
    """Half the interval of the mean, as a fraction of the mean (the noise one run leaves)."""
    m, lo, hi = mean_interval(xs, confidence)
    if lo is None or not m:
        return None
    return (hi - lo) / 2 / abs(m)


def _logs(xs: list[float]) -> list[float]:
    """The logs of the positive, finite values (a failed repetition's 0 or None is no sample)."""
    return [math.log(x) for x in xs if x and x > 0 and math.isfinite(x)]


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _spread(xs: list[float]) -> float:
    return max(xs) - min(xs)


# -- resolving a difference: paired blocks, looks, equivalence (bench.resolve) ---------------
POWER = 0.90  # the power every "could resolve" figure is stated at


@dataclass(frozen=True)
class Paired:
    """A contender against the baseline measured in blocks, each block one launch of the baseline
    and one of the contender next to each other in time (ABAB…, the order alternating), compared
    within the block: ``diffs`` holds one difference of mean logs (contender − baseline) per block.

    The machine's drift moves both launches of a block alike and cancels in the difference; what
    is left is two launches' noise, which the blocks' own spread measures (Student's t, blocks − 1
    degrees of freedom). The race looks at the blocks up to ``looks`` times and sets each look's
    ``look_alpha`` from its α-spending function (``look_alphas``; bakeoff.decide.race), so that a
    false "faster" or "slower" over the whole race stays ≤ α however early it stops; without
    ``look_alpha`` each look spends α/looks (Bonferroni). ``resolve``: the margin of equivalence
    (±, a fraction)."""

    diffs: tuple[float, ...]
    looks: int
    resolve: float
    higher_is_better: bool = True
    confidence: float = CONFIDENCE
    look_alpha: float | None = None  # this look's nominal α from a spending function (``look_alphas``)
    final_alpha: float | None = None  # the last look's: what "could resolve" is stated at (else ``alpha``)

    @property
    def blocks(self) -> int:
        return len(self.diffs)

    @property
    def alpha(self) -> float:
        """The (two-sided, nominal) error rate of this look: ``look_alpha`` when the race's
        spending function set it, else α / looks (Bonferroni)."""
        if self.look_alpha is not None:
            return self.look_alpha
        return (1 - self.confidence) / max(self.looks, 1)

    @property
    def sd(self) -> float | None:
        """The sample standard deviation of the blocks' differences (None with one block)."""
        if self.blocks < 2:
            return None
        m = _mean(list(self.diffs))
        return math.sqrt(sum((x - m) ** 2 for x in self.diffs) / (self.blocks - 1))

    def half_width(self, two_sided_alpha: float | None = None) -> float | None:
        """The half-width (log) of the interval of the mean difference at this look."""
        if self.sd is None:
            return None
        a = self.alpha if two_sided_alpha is None else two_sided_alpha
        # an early look's α can be ~1e-15: Student's t with few degrees of freedom is then
        # astronomically wide; capped (log 50: the interval is everything) so it stays a number
        return min(_t_quantile(1 - a / 2, self.blocks - 1) * self.sd / math.sqrt(self.blocks), 50.0)

    def ratio(self) -> Ratio:
        """The contender's ratio to the baseline with this look's interval (a ``Ratio``: the same
        call, describe and storage as every other comparison)."""
        d = _mean(list(self.diffs))
        half = self.half_width()
        lo, hi = (None, None) if half is None else (math.exp(d - half), math.exp(d + half))
        return Ratio(math.exp(d), lo, hi, self.blocks, self.blocks, self.higher_is_better, blocks=self.blocks)

    @property
    def equivalent(self) -> bool:
        """Two one-sided tests (TOST) at this look's α: the interval at 1 − 2α lies within
        ±``resolve`` of the baseline (on logs: within ±log(1 + resolve))."""
        half = self.half_width(2 * self.alpha)
        if half is None:
            return False
        margin = math.log1p(self.resolve)
        return abs(_mean(list(self.diffs))) + half < margin

    def resolvable(self, power: float = POWER) -> float | None:
        """The smallest difference (a fraction) these blocks detect with ``power``: (t_{1−α/2} +
        t_power) · sd / √blocks, on logs (α: the last look's when the race's spending set it)."""
        if self.sd is None:
            return None
        a = self.alpha if self.final_alpha is None else self.final_alpha
        return math.expm1(min(mde(self.sd / math.sqrt(self.blocks), self.blocks - 1, a, power), 50.0))

    def blocks_to_resolve(self, power: float = POWER, cap: int = 10_000) -> int | None:
        """How many blocks in all would resolve ``resolve`` with ``power`` at this spread (at the
        last look's α when the race's spending set it)."""
        a = self.alpha if self.final_alpha is None else self.final_alpha
        return blocks_needed(self.sd, self.resolve, a, power, cap) if self.sd else None


def mde(se: float, df: float, alpha: float = 1 - CONFIDENCE, power: float = POWER) -> float:
    """The minimum detectable effect (log) of a two-sided test at ``alpha`` with ``power``, for a
    difference measured with standard error ``se`` (Student's t with ``df``; normal when infinite)."""
    q = (lambda p: _t_quantile(p, df)) if math.isfinite(df) and df > 0 else stats.norm.ppf
    return (q(1 - alpha / 2) + q(power)) * se


def blocks_needed(sd: float, resolve: float, alpha: float, power: float = POWER, cap: int = 10_000) -> int:
    """The fewest paired blocks whose minimum detectable effect is within ``resolve`` (a fraction),
    when one block's difference has standard deviation ``sd`` (log); ``cap`` when even that is not enough."""
    target = math.log1p(resolve)
    b = 2
    while b < cap and mde(sd / math.sqrt(b), b - 1, alpha, power) > target:
        b = b + 1 if b < 64 else int(b * 1.25)
    return min(b, cap)


@functools.lru_cache(maxsize=4096)
def _t_quantile(p: float, df: float) -> float:
    """Student's t quantile (cached: a race asks for the same few at every look)."""
    return float(stats.t.ppf(p, df))


def block_diffs(base: list[list[float]], trial: list[list[float]]) -> tuple[float, ...]:
    """One difference of mean logs per block (trial − baseline), over the blocks where both
    sides measured something."""
    out = []
    for b, t in zip(base, trial):
        lb, lt = _logs(b), _logs(t)
        if lb and lt:
            out.append(_mean(lt) - _mean(lb))
    return tuple(out)


# -- alpha spending over the looks (Lan-DeMets) -----------------------------------------------
def spent(t: float, alpha: float) -> float:
    """The error rate (two-sided) spent by information fraction ``t`` (0–1) under Lan and
    DeMets' O'Brien–Fleming-like function α(t) = 2 − 2Φ(z_{1−α/2} / √t): almost nothing at
    early looks, all of ``alpha`` at t = 1."""
    if t <= 0:
        return 0.0
    return float(2 * stats.norm.sf(stats.norm.isf(alpha / 2) / math.sqrt(min(t, 1.0))))


@functools.lru_cache(maxsize=256)
def look_alphas(fractions: tuple[float, ...], alpha: float) -> tuple[float, ...]:
    """The nominal two-sided α of each look, at the information fractions ``fractions``
    (increasing, the last 1), such that a statistic that moves as Brownian motion in the
    information crosses some look's bound with probability ``spent(t_k) − spent(t_{k−1})``
    first at look k — so ``spent(1) = alpha`` over the whole race, however early it stops.

    The bounds c_k come from the exact recursion of the look statistics' joint law (Armitage,
    McPherson and Rowe): the density of the unstopped score S(t) = Z·√t on a grid, carried
    from one look to the next by a normal kernel of variance t_k − t_{k−1}, the part beyond
    ±c_k·√t_k removed at each look. Each look's nominal α is 2·(1 − Φ(c_k)); the race uses it
    as the level of Student's t at that look (the usual group-sequential approximation)."""
    import numpy as np

    grid = np.linspace(-8.0, 8.0, 1601)
    h = grid[1] - grid[0]
    out, prev_t, prev_spent, dens = [], 0.0, 0.0, None
    for t in fractions:
        target = spent(t, alpha) - prev_spent
        dt = t - prev_t
        if dens is None:
            f = stats.norm.pdf(grid, scale=math.sqrt(dt))
        else:
            kernel = stats.norm.pdf(grid[:, None] - grid[None, :], scale=math.sqrt(dt))
            f = kernel @ dens * h
        # cumulative mass beyond |s| >= c·√t, as c grows: solve for the c that leaves ``target``
        sd = math.sqrt(t)

        def beyond(c: float) -> float:
            return float(f[np.abs(grid) >= c * sd].sum() * h)

        lo, hi = 0.0, 8.0 / sd
        if target <= 0 or beyond(hi) > target:
            c = hi
        else:
            for _ in range(60):
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if beyond(mid) > target else (lo, mid)
            c = hi
        out.append(float(2 * stats.norm.sf(c)))
        dens = np.where(np.abs(grid) < c * sd, f, 0.0)
        prev_t, prev_spent = t, spent(t, alpha)
    return tuple(out)
