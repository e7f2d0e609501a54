"""Logprob drift: how far the trial's likelihood of the tokens both sides chose moved from the
baseline's, per probe mode.

The differential (``checks.differential``) judges a reply at its divergences only: a divergence
within ``max_tie_gap`` nats is a near-tie. A mildly wrong model (a rope base or rope scaling not
the model's, garbling far positions most) still picks the baseline's token almost everywhere and
diverges at near-ties, so it passes that test. But wherever both sides chose the same token, both
logprobs of that token are known: in the greedy prefix and in each teacher-forced continuation
(the trial re-anchored on the baseline's tokens, ``probes._teacher_force``) up to its own
divergence. Their differences ``d = lp_trial - lp_baseline`` are ~0 for a healthy change (kernel
rounding) and drift for a model that computes something else.

The statistic: per reply, the mean ``|d|`` over its matched tokens (``per_reply``); per mode, the
mean over the replies with at least ``MIN_TOKENS`` matched tokens and its one-sided ``t`` lower
bound at ``gate_alpha`` (only a drift above the limit is a fault). A mode fails when that bound is
above ``probes.max_drift`` (``max_drift_long`` for the long probe, whose healthy drift is
lower: its replies are mostly near-certain needle answers) (a minimum-effect test, like ``checks.sampled``: the drift is shown to
be larger than the healthy variation measured on the real engine, not just nonzero). The reply,
not the token, is the unit: a reply's tokens are not independent (one near-tie moves the ones
after it). Fewer than two replies: no bound, the mode is not judged (unknown, never a fault).
Margins: docs/notes/judge-thresholds.md ("logprob drift").

A lossy change (``lossy_axes``: a KV-cache or weight dtype, a quantization, another model file)
moves every logprob by design: fp8_e5m2 KV on vLLM drifts 0.09 nats per token on the long
document where a healthy kernel change drifts 0.007. The limits are for kernel changes, so for a
trial whose changed axes include a lossy one the drift is measured and reported
(``logprob_drift_lossy``, and a caution beside the ranking), not failed; the differential, the
task gate and the detectors judge it as any other.
"""

from __future__ import annotations

import re

from bakeoff.judge.checks import Evidence, Finding
from bakeoff.judge.checks.differential import _asked_differently, _diff_modes
from bakeoff.judge.stats import finite, t_bounds
from bakeoff.measure.client import Result

CAUSE = "logprob_drift"
MIN_TOKENS = 4  # a reply with fewer matched tokens says too little about its drift
NO_LOGPROBS = "logprob-drift check (no logprobs for the tokens both sides chose: their likelihoods cannot be compared)"

# Flags that change numeric precision whose names do not say so (read from each engine's --help);
# any flag or variable naming a dtype, a quantization or a cache type counts too (_SAYS_PRECISION).
PRECISION_KNOBS: dict[str, tuple[str, ...]] = {
    "vllm": ("-q",),
    "sglang": ("--torchao-config",),
    "llamacpp": ("-ctk", "-ctv", "-ctkd", "-ctvd"),
}
_SAYS_PRECISION = re.compile(r"dtype|quantiz|cache[-_]type", re.IGNORECASE)


def lossy_axes(engine: str, axes, changed=None) -> list[str]:
    """The axes (``spec.Axis``) that change numeric precision: ``lossy = true``, or unset and a
    precision flag or variable of ``engine`` (``PRECISION_KNOBS``, or one whose name says dtype,
    quantization or cache type), or a ``model = true`` axis (another model file). ``changed``: only
    those among a trial's changed axes."""
    knobs = set(PRECISION_KNOBS.get(engine, ()))
    return [a.name for a in axes if (changed is None or a.name in changed)
            and (a.lossy or (a.lossy is None and (a.model or any(k and (k in knobs or _SAYS_PRECISION.search(k))
                                                                 for k in (a.flag, a.env)))))]


def _tok(t: dict):
    return t.get("token")


def matched(base: Result, trial: Result, anchored: list[tuple[int, Result]] = ()) -> list[tuple[int, float | None, float | None]]:
    """(position in the baseline's reply, baseline logprob, trial logprob) of every token both
    sides chose: the common greedy prefix, then each teacher-forced continuation (``(k, reply)``:
    the trial given the baseline's first ``k`` tokens) up to its own first divergence."""
    bt, tt = base.tokens or [], trial.tokens or []
    out = []
    n = 0
    while n < min(len(bt), len(tt)) and _tok(bt[n]) == _tok(tt[n]):
        out.append((n, bt[n].get("logprob"), tt[n].get("logprob")))
        n += 1
    for k, cont in anchored:
        for j, t in enumerate(cont.tokens or []):
            if k + j >= len(bt) or _tok(bt[k + j]) != _tok(t):
                break
            out.append((k + j, bt[k + j].get("logprob"), t.get("logprob")))
    return out


def per_reply(pairs: list[tuple[int, float | None, float | None]]) -> float | None:
    """The mean |d| over the matched tokens with finite logprobs on both sides (None: fewer than
    ``MIN_TOKENS`` of them)."""
    ds = [lt - lb for _, lb, lt in pairs if finite(lb) and finite(lt)]
    return sum(abs(d) for d in ds) / len(ds) if len(ds) >= MIN_TOKENS else None


def mode_stats(collected: dict, baseline: dict, cfg) -> dict[str, dict]:
    """Per mode with a baseline counterpart: replies judged, matched tokens, the mean |d| per reply
    and its one-sided bounds (``mean``, ``ci``: lower, upper), the signed mean d and the largest |d| of one token; the
    replies without logprobs on a matched token are counted in ``no_logprobs``."""
    res, base_res = collected["results"], baseline["results"]
    anchored = collected.get("anchored") or {}
    out: dict[str, dict] = {}
    for mode in _diff_modes(res):
        reps: dict[str, float] = {}
        tokens, signed, worst, blind = 0, [], 0.0, 0
        for pid, r in res[mode].items():
            b = base_res.get(mode, {}).get(pid)
            if b is None or not b.ok or not r.ok or _asked_differently(collected, baseline, mode, pid):
                continue
            if not b.tokens or not r.tokens:  # a side without per-token logprobs
                blind += 1
                continue
            pairs = matched(b, r, anchored.get(mode, {}).get(pid, []))
            ds = [lt - lb for _, lb, lt in pairs if finite(lb) and finite(lt)]
            if pairs and not ds:
                blind += 1
            tokens += len(ds)
            signed += ds
            worst = max([worst] + [abs(d) for d in ds])
            s = per_reply(pairs)
            if s is not None:
                reps[pid] = s
        if not reps and not blind:
            continue
        st: dict = {"replies": len(reps), "tokens": tokens, "per_reply": {k: round(v, 4) for k, v in reps.items()},
                    "signed_mean": round(sum(signed) / len(signed), 4) if signed else None, "max_abs": round(worst, 4)}
        if blind:
            st["no_logprobs"] = blind
        if len(reps) >= 2:
            mean, lo, hi = t_bounds(list(reps.values()), cfg.gate_alpha)
            st.update(mean=round(mean, 4), ci=[round(lo, 4), round(hi, 4)])
        out[mode] = st
    return out


def check(ev: Evidence) -> Finding | None:
    """Per mode, the mean |d| of the matched tokens' logprobs against the baseline's; a mode
    whose interval lies above ``max_drift`` fails (see the module docstring)."""
    if ev.baseline is None:
        return None  # nothing to compare with (the judge lists the differential as not run)
    if not ev.expect_logprobs:
        ev.not_run.append(NO_LOGPROBS)
        return None
    stats = mode_stats(ev.collected, ev.baseline, ev.cfg)
    if not stats:
        return None
    if any(st.get("no_logprobs") for st in stats.values()) and not any(st["replies"] for st in stats.values()):
        ev.not_run.append(NO_LOGPROBS)
        return None
    ev.values["logprob_drift"] = {m: {"mean_abs_d": st.get("mean"), "ci": st.get("ci"), "replies": st["replies"],
                                      "tokens": st["tokens"]} for m, st in stats.items()}
    def limit_of(mode: str) -> float:
        return ev.cfg.max_drift_long if mode == "long" else ev.cfg.max_drift

    bad = [(m, st) for m, st in stats.items() if "ci" in st and st["ci"][0] > limit_of(m)]
    if not bad:
        return None
    mode, st = max(bad, key=lambda ms: ms[1]["ci"][0] - limit_of(ms[0]))
    limit = limit_of(mode)
    if ev.lossy:  # expected of a lower precision: said, not failed
        ev.values["logprob_drift_lossy"] = {"axes": list(ev.lossy), "mode": mode, "mean_abs_d": st["mean"],
                                            "ci": st["ci"], "limit": limit}
        return None
    worst = sorted(st["per_reply"].items(), key=lambda kv: -kv[1])[:3]
    base_res, res = ev.baseline["results"], ev.collected["results"]
    evidence = [f"{mode} / {pid}: mean |d| = {v:.3f} nats; baseline {base_res[mode][pid].text[:70]!r}; "
                f"trial {res[mode][pid].text[:70]!r}" for pid, v in worst]
    return Finding(mode, CAUSE,
                   f"{mode}: on the tokens both sides chose, the trial's logprobs differ from the baseline's by "
                   f"{st['mean']:.3f} nats per token on average over {st['replies']} replies ({st['tokens']} tokens; "
                   f"{1 - ev.cfg.gate_alpha:.0%} bounds {st['ci'][0]:.3f} to {st['ci'][1]:.3f}, beyond the healthy limit "
                   f"{limit}; signed mean {st['signed_mean']:+.3f}): the model computes something else than the baseline's",
                   evidence)
