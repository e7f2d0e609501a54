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
        return (f"{self.ratio:.2f}x (95 % CI {self.lo:.2f}–{self.hi:.2f}, "
                f"{self.n_trial} vs {self.n_base} runs)")

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
    t = [x for x in trial if x and x > 0 and math.isfinite(x)]
    b = [x for x in base if x and x > 0 and math.isfinite(x)]
    if not t or not b:
        return None
    lt, lb = [math.log(x) for x in t], [math.log(x) for x in b]
    ratio = math.exp(_mean(lt) - _mean(lb))
    if len(t) < 2 or len(b) < 2:
        return Ratio(ratio, None, None, len(t), len(b), higher_is_better)
    if between > 0:
        vt, vb = statistics.variance(lt) / len(lt), statistics.variance(lb) / len(lb)
        se2 = vt + vb + 2 * between ** 2
        sampled_df = vt ** 2 / (len(lt) - 1) + vb ** 2 / (len(lb) - 1)
        df = se2 ** 2 / sampled_df if sampled_df > 0 else math.inf  # the known term counts as infinitely many
        half = (stats.t.ppf(0.5 + confidence / 2, df) if math.isfinite(df) else stats.norm.ppf(0.5 + confidence / 2)) * math.sqrt(se2)
        d = _mean(lt) - _mean(lb)
        return Ratio(ratio, math.exp(d - half), math.exp(d + half), len(t), len(b), higher_is_better)
    if _spread(lt) == 0 and _spread(lb) == 0:  # identical repetitions: the interval is the point
        return Ratio(ratio, ratio, ratio, len(t), len(b), higher_is_better)
    res = stats.ttest_ind(lt, lb, equal_var=False)
    ci = res.confidence_interval(confidence_level=confidence)
    return Ratio(ratio, math.exp(ci.low), math.exp(ci.high), len(t), len(b), higher_is_better)


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


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _spread(xs: list[float]) -> float:
    return max(xs) - min(xs)
