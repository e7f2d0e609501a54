"""The differential against the baseline: every reply with a baseline counterpart (single,
long and every benchmark-shaped mode) compared token by token and judged whole.

Exact text equality is not correctness: a healthy backend may change a greedy continuation where
two tokens are near-tied. So at a divergence ``compare`` asks whether each side's token is in the
other's top-k within a small logprob gap; ``compare_whole`` then follows each teacher-forced
continuation (the trial re-anchored on the baseline's tokens, ``probes._teacher_force``), so a
reply that flips at a near-tie and then degrades fails. A reply that stops early (EOS where the
baseline's own token was far more likely than any alternative) or is truncated is an
``early_stop``, not "a prefix". Thresholds: ``bakeoff.judge.probes`` and
docs/notes/judge-thresholds.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from bakeoff.judge.checks import Evidence, Finding
from bakeoff.judge.stats import finite as _finite
from bakeoff.measure.client import Result
from bakeoff.spec import Probes

DIFF_MODES = ("single", "long")  # and every "bench c=N" mode: compared with the baseline reply by reply


@dataclass
class Diff:
    agreement: float          # common greedy prefix / longer length (whole-answer: matched / baseline length)
    consistent: bool          # identical, or every divergence a near-tie and no early stop
    diverge_at: int | None
    detail: str
    gap: float | None = None  # the largest logprob gap at a divergence
    early_stop: bool = False  # the trial stopped (or was cut) well before the baseline
    reanchored: int = 0       # divergences passed by teacher forcing the baseline's tokens
    whole: bool = True        # the whole answer was judged (False: a near-tie with nothing shown past it)


def _toks(r: Result) -> list:
    return [t.get("token") for t in r.tokens] if r.tokens else r.generated.split()


def compare(base: Result, trial: Result, *, top_k: int, tie_gap: float = 1.5, text_min_agreement: float = 0.9) -> Diff:
    """Greedy agreement of two replies to the same prompt, judged at the first divergence.

    * a divergence is consistent when each side's token is in the other's top-k within ``tie_gap``
      nats of its own choice on both sides (a near-tie);
    * the trial ending first (a prefix of the baseline) is consistent only when the baseline's
      token there was itself near-tied with stopping: its probability p leaves at most 1-p for
      EOS, so the gap is at least log p - log(1-p); above ``tie_gap`` it is an early stop. A
      trial cut by length before the baseline is truncated;
    * without logprobs (e.g. transformers serve) no near-tie can be shown, so the text test is
      stricter: consistent only when ``text_min_agreement`` of the words agree and the trial
      is not the shorter one by more than a quarter.
    """
    bt, tt = _toks(base), _toks(trial)
    n = 0
    while n < min(len(bt), len(tt)) and bt[n] == tt[n]:
        n += 1
    longest = max(len(bt), len(tt), 1)
    agreement = n / longest
    if n == len(bt) == len(tt):
        return Diff(1.0, True, None, "identical")
    logprobs = bool(base.tokens and trial.tokens)
    if n == len(tt) < len(bt):  # the trial ended first
        return _shorter(base, trial, n, agreement, tie_gap, logprobs, top_k)
    if n == len(bt) < len(tt):  # the baseline ended first: the trial went on (the detectors judge what it said)
        return Diff(agreement, True, n, f"same tokens, lengths {len(bt)} vs {len(tt)} (the trial went on)")
    if not logprobs:
        ok = agreement >= text_min_agreement
        return Diff(agreement, ok, n, f"diverged at word {n} of {longest} (no logprobs: text agreement {agreement:.2f}, "
                                      f"need {text_min_agreement})")
    b, t = base.tokens[n], trial.tokens[n]
    b_top = {x.get("token"): x.get("logprob") for x in (b.get("top_logprobs") or [])[:top_k]}
    t_top = {x.get("token"): x.get("logprob") for x in (t.get("top_logprobs") or [])[:top_k]}
    t_in_b = t.get("token") in b_top
    b_in_t = b.get("token") in t_top
    gap_b = _gap(b.get("logprob"), b_top.get(t.get("token")) if t_in_b else None)
    if b_in_t:
        gap_t = _gap(t.get("logprob"), t_top.get(b.get("token")))
        shown_t = f"{gap_t:.2f}"
    else:  # the baseline's token below the trial's cut list: its gap there is at least the list's own spread
        floor_t = _spread(t.get("logprob"), t_top, top_k)
        gap_t, shown_t = (math.inf, "inf") if floor_t is None else (floor_t, f"≥{floor_t:.2f}")
    gap = max(gap_b, gap_t)
    consistent = t_in_b and gap <= tie_gap
    detail = (
        f"diverged at token {n}: baseline {b.get('token')!r} vs {t.get('token')!r}; "
        f"in each other's top-{top_k}: {t_in_b}/{b_in_t}; logprob gaps {gap_b:.2f}/{shown_t} "
        f"({'near-tie' if consistent else 'not a near-tie'}, limit {tie_gap})"
    )
    return Diff(agreement, consistent, n, detail, gap)


def _spread(chosen, top: dict, k: int) -> float | None:
    """How far below the chosen token a full top-``k`` list ends: a lower bound of the gap to any
    token not in it (None when the list is shorter than ``k``: then nothing bounds that gap).

    Why a lower bound is enough in this one direction (``compare``): the trial's own token must
    still be in the *baseline's* list within ``tie_gap`` (the known-good model found it nearly as
    likely), and the trial's list, cut at ``k``, must not contradict a near-tie. Measured on the
    H200 (docs/results/h200-llamacpp): a healthy ``--cache-type-v q8_0`` chose ' any' where the
    baseline chose ' crafting' with ' any' 0.15 nats behind; ' crafting' was 6th or lower in the
    trial's top-5. A broken kernel's choice is what the baseline finds unlikely, caught by the
    other direction."""
    vals = [v for v in top.values() if _finite(v)]
    if len(vals) < k or not _finite(chosen):
        return None
    return max(0.0, chosen - min(vals))


# how engines spell an end-of-sequence token in a top_logprobs list (llama.cpp: the empty string)
EOS_TEXTS = {"", "<|im_end|>", "</s>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "<|end_of_text|>", "<eos>"}


def _shorter(base: Result, trial: Result, n: int, agreement: float, tie_gap: float, logprobs: bool,
             top_k: int = 5) -> Diff:
    """The trial is a strict prefix of the baseline: an EOS near-tie, or an early stop."""
    nb = len(_toks(base))
    if trial.finish_reason == "length":
        return Diff(agreement, False, n, f"truncated: cut by length after {n} tokens, the baseline gave {nb}", early_stop=True)
    if logprobs:
        lp = base.tokens[n].get("logprob")
        if _finite(lp):
            p = math.exp(lp)
            gap = max(0.0, lp - math.log1p(-p)) if p < 1 else math.inf  # EOS had at most 1-p
            top = [x for x in (base.tokens[n].get("top_logprobs") or []) if _finite(x.get("logprob"))]
            eos = [x["logprob"] for x in top if (x.get("token") or "").strip() in EOS_TEXTS]
            if eos:  # the baseline's own EOS probability there: the exact gap
                gap = max(0.0, lp - max(eos))
            elif len(top) >= top_k:  # EOS was not among the baseline's top-k: below the last of them
                gap = max(gap, lp - min(x["logprob"] for x in top))
            ok = gap <= tie_gap
            return Diff(agreement, ok, n, f"{'stopped at a near-tie' if ok else 'early stop'}: the trial ended after {n} tokens, "
                                          f"the baseline went on with {base.tokens[n].get('token')!r} (p={p:.2f}, gap to EOS "
                                          f"≥ {gap:.2f}, limit {tie_gap}) to {nb} tokens", gap, early_stop=not ok)
    ok = n >= 0.75 * nb
    return Diff(agreement, ok, n, f"the trial ended after {n} words, the baseline gave {nb}" + ("" if ok else " (early stop)"),
                early_stop=not ok)


def _gap(chosen, other) -> float:
    """How much more likely a side found its own token than the other side's (inf: unknown)."""
    if not (_finite(chosen) and _finite(other)):
        return math.inf
    return max(0.0, chosen - other)


def _tail(r: Result, k: int) -> Result:
    """The reply from token ``k`` on (for comparing a teacher-forced continuation)."""
    toks = r.tokens[k:]
    return Result(text="".join(t.get("token") or "" for t in toks), tokens=toks, logprobs_requested=r.logprobs_requested,
                  finish_reason=r.finish_reason)


def compare_whole(base: Result, trial: Result, anchored: list[tuple[int, Result]], *, top_k: int, tie_gap: float,
                  text_min_agreement: float = 0.9) -> Diff:
    """The whole answer: the first divergence, then each teacher-forced continuation (the
    trial's reply given the baseline's tokens up to ``k``) against the baseline from ``k`` on.
    Agreement is the share of the baseline's tokens the trial reproduced greedily."""
    d = compare(base, trial, top_k=top_k, tie_gap=tie_gap, text_min_agreement=text_min_agreement)
    nb = max(len(_toks(base)), 1)
    if d.diverge_at is not None and d.diverge_at >= nb:  # the trial went on past the baseline's end
        d.agreement = 1.0
    if not d.consistent or d.diverge_at is None or d.early_stop or d.diverge_at >= nb:
        return d
    if not anchored:  # nothing shown past the divergence (no teacher forcing): not a whole answer
        d.whole = d.diverge_at >= nb - 1
        return d
    matched, gaps, details = d.diverge_at, [d.gap or 0.0], [d.detail]
    for k, cont in anchored:
        sub = compare(_tail(base, k), cont, top_k=top_k, tie_gap=tie_gap)
        matched += sub.diverge_at if sub.diverge_at is not None else len(_toks(cont))
        gaps.append(sub.gap or 0.0)
        if not sub.consistent:
            detail = f"after a near-tie at token {d.diverge_at}, teacher-forced from token {k}: {_shift(sub.detail, k)}"
            return Diff(matched / nb, False, d.diverge_at, detail, max(gaps), sub.early_stop, len(anchored))
        if sub.diverge_at is not None and sub.detail.startswith("same tokens"):
            break
        details.append(_shift(sub.detail, k))
    return Diff(min(1.0, matched / nb), True, d.diverge_at, "; then ".join(details), max(gaps), False, len(anchored))


def _shift(detail: str, k: int) -> str:
    return re.sub(r"token (\d+)", lambda m: f"token {int(m.group(1)) + k}", detail, count=1)



def _diff_modes(res: dict) -> list[str]:
    return [m for m in res if m in DIFF_MODES or m.startswith("bench ")]


def _asked_differently(collected: dict, baseline: dict, mode: str, pid: str) -> bool:
    """The trial's request was not the baseline's (the long document is sized to each server's
    served context, which a --parallel or --ctx-size axis changes): no differential for that
    reply; the absolute checks and floors still apply."""
    mine = (collected.get("texts") or {}).get(mode, {}).get(pid)
    theirs = (baseline.get("texts") or {}).get(mode, {}).get(pid)
    return mine is not None and theirs is not None and mine != theirs


def whole_diffs(collected: dict, baseline: dict, cfg: Probes) -> dict[tuple[str, str], Diff]:
    """Every reply with a baseline counterpart (single, long, bench modes), judged whole."""
    res, base_res = collected["results"], baseline["results"]
    anchored = collected.get("anchored") or {}
    top_k = cfg.top_logprobs or 5
    out = {}
    for mode in _diff_modes(res):
        for pid, r in res[mode].items():
            b = base_res.get(mode, {}).get(pid)
            if b is None or not b.ok or _asked_differently(collected, baseline, mode, pid):
                continue
            out[(mode, pid)] = compare_whole(b, r, anchored.get(mode, {}).get(pid, []), top_k=top_k,
                                             tie_gap=cfg.max_tie_gap, text_min_agreement=cfg.text_min_agreement)
    return out


def check(ev: Evidence) -> Finding | None:
    """Divergences beyond a near-tie, early stops and low whole-answer agreement (``ev.diffs``)."""
    collected, cfg, baseline, values, expect_logprobs = ev.collected, ev.cfg, ev.baseline, ev.values, ev.expect_logprobs
    if baseline is None:
        return None
    diffs = ev.diffs
    if not diffs:
        return None
    whole = [d for d in diffs.values() if d.whole]
    agree = sum(d.agreement for d in whole) / len(whole) if whole else 1.0
    cons = sum(d.consistent for d in diffs.values()) / len(diffs)
    gaps = [d.gap for d in diffs.values() if d.gap is not None]
    values.update(agreement=round(agree, 3), agreement_over=f"{len(whole)}/{len(diffs)} whole answers", topk_consistency=round(cons, 3),
                  diverged=f"{sum(d.diverge_at is not None for d in diffs.values())}/{len(diffs)}",
                  reanchored=sum(d.reanchored for d in diffs.values()))
    if gaps:
        values["max_divergence_gap"] = round(max(gaps), 3) if math.isfinite(max(gaps)) else "inf"
    base_res, res = baseline["results"], collected["results"]

    def show(keys):
        ev = []
        for mode, pid in keys[:4]:
            d = diffs[(mode, pid)]
            ev += [f"{mode} / {pid}: {d.detail}", f"  baseline: {base_res[mode][pid].text[:100]!r}",
                   f"  trial:    {res[mode][pid].text[:100]!r}"]
        return ev

    early = [k for k, d in diffs.items() if d.early_stop]
    if early:
        mode, pid = early[0]
        return Finding(mode, "early_stop", f"{mode} / {pid}: {diffs[early[0]].detail}", show(early))
    bad = [k for k, d in diffs.items() if not d.consistent]
    if not expect_logprobs:  # NO_LOGPROBS_DIFF: a text divergence is no evidence either way
        values["text_divergences"] = f"{len(bad)}/{len(diffs)}"
        return None
    if bad:
        mode, pid = bad[0]
        return Finding(mode, "divergence", f"{len(bad)}/{len(diffs)} replies diverge from the baseline beyond a near-tie "
                                    f"(token agreement {agree:.2f}); {mode} / {pid}: {diffs[bad[0]].detail}", show(bad))
    if agree < cfg.min_agreement:
        low = sorted((k for k in diffs if diffs[k].whole), key=lambda k: diffs[k].agreement)
        return Finding(low[0][0], "low_agreement", f"whole-answer token agreement {agree:.2f} with the baseline "
                                            f"(need {cfg.min_agreement}), though each divergence was a near-tie", show(low))
    return None
