"""The benchmark's replies are evidence: each one judged against the baseline's reply to the same
request (same prompt by construction: ``measure.bench.request_key``; greedy on both sides).

The benchmark is exactly the load the winner is deployed at, so a configuration that answers the
probes well and writes garbage under load (after N requests, past the probes' ``max_tokens``,
only at the highest concurrency) must not come out ``ok``. What the benchmark can afford to ask
for is each chosen token's logprob and its runner-up (``measure.bench.BENCH_TOP_LOGPROBS`` = 2: a
few dozen bytes per token), so the differential notion is the probes' own (``probes.compare``: a
divergence is allowed at a near-tie, limit ``tie_gap`` nats), at the first token where the two
replies differ:

* both sides carry the runner-up: ``probes.compare``'s notion with each list cut at 2 — the
  other side's token within ``tie_gap`` of the chosen one, exactly where it is listed, else at
  least the list's spread (``_side_gap``);
* only the chosen tokens (a baseline stored by an older bakeoff): a bound — the baseline chose its
  token with probability p, so any other had at most 1 - p: the gap is at least log p - log(1 - p)
  (``logit_floor``), the same on the trial's side; either bound above ``tie_gap`` is not a near-tie;
* without logprobs (an engine that gives none, the load tools' saved texts) only the text is
  there, and a small model flips near-ties all the time (measured, below): a divergence is
  allowed, but when the reply began like the baseline's (``TEXT_MIN_SHARED`` words) what follows
  it must share words with what follows in the baseline's reply (``TEXT_MIN_OVERLAP``); word
  salad does not (``unlike``). A flip in the first words forks the reply and is not judged by text. A reply to another prompt in the
  model's own voice is not caught by text: that needs logprobs.

After a near-tie flip the two replies go separate ways and nothing past it is compared (the
absolute detectors still read it); a reply that reproduces the baseline's tokens with another
text is a ``text_mismatch``.

``judge_level`` turns the per-reply differences into the level's verdict: any reply that leaves
the baseline's where no near-tie explains it is ``bench_mismatch`` (the trial is ``wrong``), with
the request key, the level and the text at the divergence as evidence. Measured on the real
llama-server (SmolLM2-135M Q4_1, bench/bench_replies.py: the baseline relaunched, flash attention
on, KV cache q8_0): docs/notes/judge-thresholds.md (2026-12-04) and tests/test_bench_replies.py.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass


TIE_GAP = 1.5  # nats: probes.compare's near-tie limit (Probes.tie_gap's default)
# Without logprobs: the least word overlap (Dice, word multisets) between what follows a divergence
# in the trial's reply and in the baseline's. Measured on the real llama-server (SmolLM2, two
# launches of the same configuration, 32 requests, 64 tokens, bench/bench_replies.py): 18 replies
# diverged (all 8 at c=1), overlaps 0.20-0.91 after the divergence; replies to other prompts
# 0.11-0.82 (not separable by text). Half the healthy least.
TEXT_MIN_OVERLAP = 0.10
TEXT_MIN_WORDS = 5  # fewer words after the divergence on either side: too little to judge by text
# ...and fewer words shared before it: a flip in the first words forks the whole reply (a healthy
# bfloat16 change on transformers serve, no logprobs, began "I'm sorry for any misunderstanding" vs
# "I'm here to help you navigate": overlap 0.08 after word 1), so what follows says nothing; the
# absolute detectors still read it and the level counts it as a text divergence
TEXT_MIN_SHARED = 4
EXCERPT = 60  # characters of text shown either side of a divergence


@dataclass(frozen=True)
class ReplyDiff:
    """One reply against the baseline's reply to the same request."""

    key: str                   # the request key ("c=4/r1/3")
    kind: str                  # identical | prefix | near_tie | not_tie | diverged | unlike | text_mismatch
    at: int | None = None      # token (or word) index of the first divergence
    gap: float | None = None   # the larger lower bound of the two sides' gaps there (nats)
    detail: str = ""

    @property
    def bad(self) -> bool:
        return self.kind in ("not_tie", "text_mismatch", "unlike")


def compact(res) -> dict:
    """What the store keeps of one benchmark reply to compare with later: its text and its
    chosen tokens with their logprobs and alternatives (``[[token, logprob, [[alt, logprob], ...]], ...]``;
    empty without logprobs)."""
    return {"text": res.generated, "toks": [[t.get("token"), t.get("logprob"),
                                             [[x.get("token"), x.get("logprob")] for x in t.get("top_logprobs") or []]]
                                            for t in res.tokens]}


def _alts(t: list) -> list:
    """The finite alternatives of a compacted token (``[token, logprob]``), at least two, or []."""
    alts = [a for a in (t[2] if len(t) > 2 else []) if isinstance(a[1], (int, float)) and math.isfinite(a[1])]
    return alts if len(alts) >= 2 else []


def _side_gap(own: list, other_token: str) -> tuple[float, str]:
    """How much likelier this side found its own token than the other side's choice: exact when
    that token is in its list; else at least the list's spread (chosen - last listed), as
    ``probes._spread`` bounds a cut list. Lenient on purpose: a three-way near-tie happens — two of
    63 healthy divergences measured (flash attention on, KV q8_0; bench/bench_replies.py) chose the
    baseline's third token, with the baseline's top-2 0.08 and 0.00 nats apart."""
    lp = own[1]
    if not isinstance(lp, (int, float)) or not math.isfinite(lp):
        return math.inf, "inf"
    listed = {a: x for a, x in _alts(own)}
    if other_token in listed:
        g = max(0.0, lp - listed[other_token])
        return g, f"{g:.2f}"
    g = max(0.0, lp - min(listed.values()))
    return g, f"≥{g:.2f}"


def _top(t: list) -> str:
    return ", ".join(f"{a!r} {x:.2f}" for a, x in _alts(t))


def logit_floor(lp) -> float:
    """A lower bound of how much likelier a token chosen with logprob ``lp`` was than any other:
    the others share at most 1 - p. ``inf`` when p is 1, 0 when unknown (no claim)."""
    if not isinstance(lp, (int, float)) or not math.isfinite(lp):
        return 0.0
    p = math.exp(min(lp, 0.0))
    return math.inf if p >= 1.0 else max(0.0, lp - math.log1p(-p))


def compare_reply(key: str, base: dict, trial: dict, *, tie_gap: float = TIE_GAP) -> ReplyDiff:
    """The trial's reply against the baseline's (both ``compact``): the first divergence and
    whether it can be a near-tie flip (see the module's docstring)."""
    bt, tt = base.get("toks") or [], trial.get("toks") or []
    if bt and tt:
        seq_b, seq_t = [x[0] for x in bt], [x[0] for x in tt]
    else:  # no logprobs on one side: words
        seq_b, seq_t = (base.get("text") or "").split(), (trial.get("text") or "").split()
    n = 0
    while n < min(len(seq_b), len(seq_t)) and seq_b[n] == seq_t[n]:
        n += 1
    if n == len(seq_b) == len(seq_t):
        if bt and tt and (base.get("text") or "") != (trial.get("text") or ""):
            # the same tokens cannot spell two texts: one stream's text is not its tokens'
            return ReplyDiff(key, "text_mismatch", detail=(
                f"the same {n} tokens as the baseline's, but another text: "
                f"{_excerpt((base.get('text') or '').split(), (trial.get('text') or '').split(), _common((base.get('text') or '').split(), (trial.get('text') or '').split()), False)}"))
        return ReplyDiff(key, "identical")
    if n == min(len(seq_b), len(seq_t)):  # one ended first: the early-stop rule (lengths) judges it
        return ReplyDiff(key, "prefix", n, detail=f"same tokens up to {n}, lengths {len(seq_b)} vs {len(seq_t)}")
    where = _excerpt(seq_b, seq_t, n, bool(bt and tt))
    if not (bt and tt):
        rest_b, rest_t = seq_b[n:], seq_t[n:]
        ov = overlap(rest_b, rest_t)
        judged = min(len(rest_b), len(rest_t)) >= TEXT_MIN_WORDS and n >= TEXT_MIN_SHARED
        kind = "unlike" if judged and ov < TEXT_MIN_OVERLAP else "diverged"
        return ReplyDiff(key, kind, n, detail=(
            f"diverged at word {n} (no logprobs), then {ov:.2f} word overlap with the baseline's reply "
            f"(least healthy {TEXT_MIN_OVERLAP}): {where}"))
    if _alts(bt[n]) and _alts(tt[n]):  # the runner-up is there: the probes' notion, each side's list cut at 2
        gap_b, shown_b = _side_gap(bt[n], tt[n][0])
        gap_t, shown_t = _side_gap(tt[n], bt[n][0])
        gap = max(gap_b, gap_t)
        kind = "not_tie" if gap > tie_gap else "near_tie"
        return ReplyDiff(key, kind, n, gap, detail=(
            f"diverged at token {n}: baseline {seq_b[n]!r} (its top-2 {_top(bt[n])}) vs {seq_t[n]!r} (its top-2 "
            f"{_top(tt[n])}); logprob gaps {shown_b}/{shown_t} ({'a near-tie' if kind == 'near_tie' else 'not a near-tie'}, "
            f"limit {tie_gap}): {where}"))
    gap_b, gap_t = logit_floor(bt[n][1]), logit_floor(tt[n][1])
    gap = max(gap_b, gap_t)
    kind = "not_tie" if gap > tie_gap else "near_tie"
    return ReplyDiff(key, kind, n, gap, detail=(
        f"diverged at token {n}: baseline {seq_b[n]!r} (logprob {_lp(bt[n][1])}) vs {seq_t[n]!r} (logprob "
        f"{_lp(tt[n][1])}); gap at least {gap:.2f} nats ({'a near-tie' if kind == 'near_tie' else 'not a near-tie'}, "
        f"limit {tie_gap}): {where}"))


def overlap(a: list, b: list) -> float:
    """Dice coefficient of two word multisets: 1 the same words, 0 none in common."""
    if not a and not b:
        return 1.0
    return 2 * sum((Counter(a) & Counter(b)).values()) / (len(a) + len(b))


def _common(a: list, b: list) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _lp(x) -> str:
    return f"{x:.2f}" if isinstance(x, (int, float)) else repr(x)


def _excerpt(seq_b: list, seq_t: list, n: int, tokens: bool) -> str:
    sep = "" if tokens else " "
    before = sep.join(map(str, seq_b[:n]))[-EXCERPT:]
    return (f"…{before!s}⟨baseline: {sep.join(map(str, seq_b[n:]))[:EXCERPT]!r} | "
            f"trial: {sep.join(map(str, seq_t[n:]))[:EXCERPT]!r}⟩")


def compare_level(replies: list, base_replies: list, keys: list[str], *, tie_gap: float = TIE_GAP) -> list[ReplyDiff]:
    """Every reply of a level against the baseline's same request (by index: the same key); a
    failed request (None) on either side, or one past the baseline's count, is not compared."""
    out = []
    for i, (r, b) in enumerate(zip(replies, base_replies)):
        if r is None or b is None:
            continue
        out.append(compare_reply(keys[i] if i < len(keys) else str(i), b, r, tie_gap=tie_gap))
    return out


def judge_level(level: str, diffs: list[ReplyDiff], n_replies: int) -> tuple[str, str] | None:
    """The level's finding from its replies' differences, or None: ``(fault, why)``. Any reply
    that left the baseline's where a near-tie cannot explain it (``ReplyDiff.bad``) is a
    ``bench_mismatch``: a healthy change flips near-ties, never a token the baseline was sure of."""
    bad = [d for d in diffs if d.bad]
    if not bad:
        return None
    d = bad[0]
    return "bench_mismatch", (f"bench_mismatch: {len(bad)}/{len(diffs)} replies at {level} left the baseline's reply "
                              f"to the same request where no near-tie explains it (request {d.key}: {d.detail})")
