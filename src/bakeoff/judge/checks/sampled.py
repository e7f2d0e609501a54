"""The sampled path: replies drawn at temperature > 0, compared with the baseline's.

Every other probe is greedy, so a sampler that is wrong only when it samples (vLLM PR #26859:
a sampling kernel wrong only at temperature > 0) passes them all. Here the baseline and the trial
each draw ``sampled_seeds`` replies per prompt of the probe set at ``sampled_temperature`` and
``sampled_top_p`` (the same seeds, the OpenAI fields only, so each server's own sampling defaults apply as they
do for its clients), with the chosen token's logprob under the model. A correct sampler draws
from the same distribution as the baseline's, so the mean logprob of the chosen tokens matches
the baseline's; a sampler that ignores the temperature (too flat: lower), samples too greedily
(higher) or draws wrong tokens (much lower) shifts it.

The test is paired by (prompt, seed): ``d`` = the trial's mean chosen-token logprob minus the
baseline's, and the trial fails when ``|mean d|`` exceeds ``sampled_margin`` by more than the
two-sided ``t`` quantile at ``gate_alpha`` times its standard error (a minimum-effect test: the
shift is shown to be larger than healthy variation, not just nonzero). Margins measured on
SmolLM2 / llama.cpp: docs/notes/judge-thresholds.md.

When it runs (``probes.sampled``): "on", "off", or "auto": when an axis of the sweep may change
sampling (``touches_sampling``: a flag or variable of ``SAMPLING_KNOBS``, or one whose name says
sampling); the baseline then collects the same replies, so every trial can be compared.
"""

from __future__ import annotations

import asyncio
import math
import re
from typing import Callable

from bakeoff.judge.checks import Evidence, Finding
from bakeoff.judge.stats import finite, mean_se, t_bounds
from bakeoff.measure.client import Result, stream_request

MODE = "sampled"
CAUSE = "sampled_path"

# Flags and environment variables that change how a server samples, per engine (read from each
# engine's --help and source). Any axis whose flag or variable says "sampl" counts too.
SAMPLING_KNOBS: dict[str, tuple[str, ...]] = {
    "llamacpp": ("--samplers", "--sampling-seq", "--sampler-seq", "--temp", "--temperature", "--top-k", "--top-p", "--min-p",
                 "--top-nsigma", "--typical", "--xtc-probability", "--xtc-threshold", "--mirostat", "--mirostat-lr",
                 "--mirostat-ent", "--repeat-penalty", "--repeat-last-n", "--presence-penalty", "--frequency-penalty",
                 "--dry-multiplier", "--dry-base", "--dry-allowed-length", "--dry-penalty-last-n", "--logit-bias", "-l",
                 "--ignore-eos", "--grammar", "--json-schema", "LLAMA_ARG_TEMPERATURE", "LLAMA_ARG_TOP_K", "LLAMA_ARG_TOP_P",
                 "LLAMA_ARG_MIN_P"),
    "vllm": ("VLLM_USE_FLASHINFER_SAMPLER", "VLLM_USE_TRITON_SAMPLER", "--generation-config", "--override-generation-config",
             "--logits-processors", "--logits-processor-pattern"),
    "sglang": ("--sampling-backend", "--sampling-defaults", "--enable-custom-logit-processor", "SGLANG_SAMPLING_BACKEND"),
    "trtllm": ("--backend",),
}
_SAYS_SAMPLING = re.compile(r"sampl", re.IGNORECASE)

NO_LOGPROBS = "sampled-path check (the engine gives no logprobs: the chosen tokens' likelihood cannot be compared)"


def touches_sampling(engine: str, axes) -> list[str]:
    """The axes (``spec.Axis``) that may change how ``engine`` samples."""
    knobs = set(SAMPLING_KNOBS.get(engine, ()))
    return [a.name for a in axes if any(k and (k in knobs or _SAYS_SAMPLING.search(k)) for k in (a.flag, a.env))]


def wanted(setting: str, engine: str, axes) -> bool:
    """Whether the sampled replies are collected in this sweep (``probes.sampled``)."""
    return setting == "on" or (setting == "auto" and bool(touches_sampling(engine, axes)))


def keys(prompts, seeds: int) -> list[tuple[str, object, int]]:
    """(key, prompt, seed) of every sampled reply: each prompt of the set with seeds 1..``seeds``."""
    return [(f"{p.id}@{s}", p, s) for p in prompts for s in range(1, seeds + 1)]


async def collect(session, url: str, prompts, cfg, body: Callable[[object], dict]) -> dict[str, Result]:
    """The sampled replies: ``body(prompt)`` is the greedy probe request of a prompt; each is
    sent with the sampling fields and its seed, ``concurrency`` at a time (as the task gate)."""
    sem = asyncio.Semaphore(max(1, cfg.concurrency))

    async def one(p, seed: int) -> Result:
        async with sem:
            return await stream_request(session, url, {**body(p), "temperature": cfg.sampled_temperature, "top_p": cfg.sampled_top_p,
                                                       "seed": seed})

    jobs = keys(prompts, cfg.sampled_seeds)
    return dict(zip((k for k, _, _ in jobs), await asyncio.gather(*(one(p, s) for _, p, s in jobs))))


def chosen_mean(r: Result) -> float | None:
    """The mean logprob of the tokens the server chose (None: no finite logprobs)."""
    lps = [t.get("logprob") for t in r.tokens]
    if not lps or not all(finite(x) for x in lps):
        return None
    return sum(lps) / len(lps)


def top_share(rs: list[Result]) -> float | None:
    """The share of chosen tokens that were the server's own top entry (greedy picks)."""
    toks = [t for r in rs for t in r.tokens if t.get("top_logprobs")]
    if not toks:
        return None
    return sum(t.get("token") == max(t["top_logprobs"], key=lambda x: x.get("logprob") or -math.inf).get("token")
               for t in toks) / len(toks)


def paired_shift(base: dict[str, Result], trial: dict[str, Result]) -> tuple[float, float, int, list[tuple[str, float]]]:
    """(mean d, its standard error, pairs, [(key, d)]) over the replies both sides drew
    with finite logprobs: d = the trial's mean chosen-token logprob minus the baseline's."""
    ds = []
    for k, r in trial.items():
        b = base.get(k)
        if b is None or not b.ok or not r.ok:
            continue
        mb, mt = chosen_mean(b), chosen_mean(r)
        if mb is not None and mt is not None:
            ds.append((k, mt - mb))
    if not ds:
        return 0.0, math.inf, 0, ds
    mean, se = mean_se([d for _, d in ds])
    return mean, se, len(ds), ds


def check(ev: Evidence) -> Finding | None:
    """Request errors and non-finite logprobs of the sampled replies, then the paired shift of
    the chosen tokens' mean logprob against the baseline's (see the module docstring)."""
    mine = ev.collected.get("sampled") or {}
    if not mine:
        return None
    for k, r in mine.items():
        if r.error:
            return Finding(MODE, "request_error", f"{MODE} / {k}: request_error: {r.error}", [f"{k}: {r.error}"])
        if r.tokens and chosen_mean(r) is None:
            return Finding(MODE, "nonfinite_logprobs", f"{MODE} / {k}: a sampled reply has non-finite logprobs",
                           [f"{k}: {r.text[:100]!r}"])
    ev.values["sampled_top_share"] = round(top_share(list(mine.values())) or 0.0, 3)
    base = ((ev.baseline or {}).get("sampled")) or {}
    if not base:
        return None
    _, _, n, ds = paired_shift(base, mine)
    if n < 2:
        return None
    mean, lo, hi = t_bounds([d for _, d in ds], ev.cfg.gate_alpha / 2)
    ev.values.update(sampled_shift=round(mean, 3), sampled_shift_ci=[round(lo, 3), round(hi, 3)], sampled_pairs=n,
                     sampled_top_share_baseline=round(top_share([base[k] for k, _ in ds]) or 0.0, 3))
    m = ev.cfg.sampled_margin
    if lo <= m and hi >= -m:
        return None
    way = ("too greedy or too peaked: the trial chose likelier tokens than the baseline" if mean > 0 else
           "too flat or wrong tokens: the trial chose less likely tokens than the baseline")
    worst = sorted(ds, key=lambda kd: -abs(kd[1]))[:3]
    evidence = [f"{k}: d = {d:+.2f} nats; baseline {base[k].text[:70]!r}; trial {mine[k].text[:70]!r}" for k, d in worst]
    return Finding(MODE, CAUSE,
                   f"at temperature {ev.cfg.sampled_temperature}, the chosen tokens' mean logprob moved {mean:+.3f} nats "
                   f"from the baseline's over {n} paired replies ({1 - ev.cfg.gate_alpha:.0%} CI {lo:+.3f} to {hi:+.3f}, "
                   f"beyond the healthy margin ±{m}): {way}; greedy picks {ev.values['sampled_top_share']:.0%} "
                   f"vs {ev.values['sampled_top_share_baseline']:.0%}", evidence)
