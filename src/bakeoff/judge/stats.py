"""The statistics of the correctness tests: Wilson intervals, the exact one-sided McNemar test and
which items a baseline's own launches disagree on (the task gate, the lm-eval gate); the mean of
per-reply figures with its Student's t bounds (the sampled path, logprob drift)."""

from __future__ import annotations

import math


def finite(x) -> bool:
    """A real number, not NaN or infinite (llama.cpp sends NaN logits as ``"logprob": null``)."""
    return isinstance(x, (int, float)) and math.isfinite(x)


def wilson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of k successes in n."""
    if n == 0:
        return (0.0, 1.0)
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    return (round(float(ci.low), 3), round(float(ci.high), 3))


def mcnemar_worse(base_right: list[bool], trial_right: list[bool]) -> tuple[int, int, float]:
    """Paired items: (lost, gained, one-sided exact McNemar p that the trial is worse)."""
    from scipy.stats import binomtest

    lost = sum(b and not t for b, t in zip(base_right, trial_right))
    gained = sum(t and not b for b, t in zip(base_right, trial_right))
    p = binomtest(lost, lost + gained, 0.5, alternative="greater").pvalue if lost + gained else 1.0
    return lost, gained, float(p)


def unstable_items(first: dict[str, bool], launches: list[dict[str, bool]]) -> set[str]:
    """Items some later launch of the baseline answered otherwise (right vs wrong) than ``first``."""
    return {k for run in launches for k, v in run.items() if k in first and v != first[k]}


def mean_se(xs: list[float]) -> tuple[float, float]:
    """The mean of ``xs`` (non-empty) and its standard error (infinite with one value)."""
    n = len(xs)
    mean = sum(xs) / n
    if n < 2:
        return mean, math.inf
    return mean, math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1)) / math.sqrt(n)


def t_bounds(xs: list[float], alpha: float) -> tuple[float, float, float]:
    """(mean, lower, upper): Student's t bounds of the mean of ``xs`` (two or more), each one-sided
    at ``alpha`` (a two-sided interval at 1 - 2·alpha)."""
    from scipy.stats import t as student

    mean, se = mean_se(xs)
    q = float(student.ppf(1 - alpha, len(xs) - 1))
    return mean, mean - q * se, mean + q * se
