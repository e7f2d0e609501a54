"""The statistics of the paired correctness tests (the task gate, the lm-eval gate): Wilson
intervals, the exact one-sided McNemar test and which items a baseline's own launches disagree on."""

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
