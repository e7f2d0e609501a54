"""Absolute detectors on every reply, zero tolerance: request errors, non-finite or missing
logprobs, a greedy request whose chosen token is not its own top entry (``not_greedy``, or an
``early_stop`` when that token was EOS), empty text, bad characters, one token repeated, a short
period looping. A detector that can be the model's own behaviour (``MODEL_BEHAVIOUR``) counts in
a trial only where the baseline did not show it on the same prompt."""

from __future__ import annotations

import re
import unicodedata

from bakeoff.judge.checks import Evidence, Finding
from bakeoff.judge.probeset import prompt_texts
from bakeoff.judge.stats import finite as _finite
from bakeoff.measure.client import Result


def detect(res: Result, *, expect_logprobs: bool = True, ignore_eos: bool = False) -> list[str]:
    """Cheap absolute checks on one response; each finding is 'detector: evidence'.
    ``ignore_eos``: the request forbade ending, so an end-of-generation token that the server
    lists as likelier than the chosen one was suppressed on purpose, not mis-sampled."""
    if res.error:
        return [f"request_error: {res.error}"]
    found = []
    text = res.text
    if expect_logprobs and res.logprobs_requested:
        bad = [t for t in res.tokens if not _finite(t.get("logprob"))]
        if bad:
            # llama.cpp sends NaN/inf logits as "logprob": null
            shown = "null" if bad[0].get("logprob") is None else repr(bad[0].get("logprob"))
            found.append(f"nonfinite_logprobs: {len(bad)}/{len(res.tokens)} tokens have logprob {shown} "
                         f"(first at token {res.tokens.index(bad[0])}, {bad[0].get('token')!r})")
        if not res.tokens and text:
            found.append("missing_logprobs: logprobs requested, none returned")
        if not bad and (skip := _not_greedy(res, ignore_eos=ignore_eos)):
            found.append(skip)
    if not text.strip():
        found.append("empty: the reply has no text")
    written = res.generated  # garbage in the thinking is garbage too
    if written:
        repl = written.count("\ufffd")
        ctrl = sum(1 for ch in written if unicodedata.category(ch) == "Cc" and ch not in "\n\r\t")
        if repl + ctrl >= max(3, len(written) // 20):
            found.append(f"bad_characters: {repl} replacement and {ctrl} control characters in {len(written)}")
    toks = [t.get("token") for t in res.tokens] if res.tokens else written.split()
    if len(toks) >= 8 and len(set(toks)) == 1:
        found.append(f"all_same_token: {len(toks)} x {toks[0]!r}")
    elif (rep := repetition(toks)) is not None:
        found.append(f"degenerate_repetition: {rep}")
    return found


GREEDY_SLACK = 0.05  # nats; the chosen token's own logprob may sit this far below its best alternative


_END_TOKEN = re.compile(r"^\s*$|^<[|/]?[\w.\-|]*[|]?>$")  # '' (an EOG token's text) or a special like <|im_end|>, </s>


def _not_greedy(res: Result, *, ignore_eos: bool = False) -> str | None:
    """Every request bakeoff judges is greedy (temperature 0): each chosen token must be the top
    of the server's own reported distribution. A token chosen below its best alternative means
    something between the model and the sampler changed the choice (a logit bias, a broken
    sampler, an EOS forced early): ``early_stop`` when that token ended the reply, else ``not_greedy``."""
    for i, t in enumerate(res.tokens):
        cands = [x for x in (t.get("top_logprobs") or []) if _finite(x.get("logprob"))
                 and not (ignore_eos and _END_TOKEN.match(x.get("token") or ""))]
        lp = t.get("logprob")
        if not cands or not _finite(lp) or lp >= max(x["logprob"] for x in cands) - GREEDY_SLACK:
            continue
        best = max(cands, key=lambda x: x["logprob"])
        gap = best["logprob"] - lp
        if i == len(res.tokens) - 1 and res.finish_reason == "stop" and not (t.get("token") or "").strip():
            return (f"early_stop: the reply ended at token {i} with EOS (logprob {lp:.2f}) though the model's own top choice "
                    f"there was {best.get('token')!r} ({best['logprob']:.2f}, {gap:.2f} nats more likely)")
        return (f"not_greedy: token {i} {t.get('token')!r} (logprob {lp:.2f}) was chosen over {best.get('token')!r} "
                f"({best['logprob']:.2f}) in a greedy request")
    return None


def repetition(toks: list, min_len: int = 24) -> str | None:
    """A short period (≤4 tokens) repeating over the last 75% of a long enough reply."""
    if len(toks) < min_len:
        return None
    tail = toks[len(toks) // 4:]
    for period in range(1, 5):
        unit = tail[-period:]
        reps = 0
        i = len(tail)
        while i - period >= 0 and tail[i - period:i] == unit:
            reps += 1
            i -= period
        if reps * period >= 0.9 * len(tail) and reps >= 6:
            return f"{''.join(map(str, unit))!r} repeated {reps} times"
    return None


# Detectors that can be the model's own behaviour on a prompt (SmolLM2 loops on some): in a
# trial they count only where the baseline did not show the same thing on the same prompt.
MODEL_BEHAVIOUR = ("degenerate_repetition", "all_same_token", "empty", "bad_characters")


def _name(finding: str) -> str:
    return finding.split(":")[0]


def _baseline_detectors(base_res: dict, mode: str, pid: str, expect_logprobs: bool) -> set[str]:
    """Detectors that fire on the baseline's own reply to the same prompt (any copy of it)."""
    root = pid.split("#")[0]
    same = [base_res.get(mode, {}).get(pid), base_res.get("single", {}).get(root)]
    return {_name(f) for r in same if r is not None for f in detect(r, expect_logprobs=expect_logprobs)}


def check(ev: Evidence) -> Finding | None:
    """The first reply, mode by mode, with a finding no baseline reply to the same prompt excuses."""
    collected, baseline, expect_logprobs = ev.collected, ev.baseline, ev.expect_logprobs
    texts = prompt_texts(collected["prompts"])
    base_res = baseline["results"] if baseline else None
    for mode, items in collected["results"].items():
        for pid, r in items.items():
            found = detect(r, expect_logprobs=expect_logprobs)
            if base_res is not None and found:
                shown = _baseline_detectors(base_res, mode, pid, expect_logprobs)
                found = [f for f in found if not (_name(f) in MODEL_BEHAVIOUR and _name(f) in shown)]
            if found:
                evidence = [f"{mode} / prompt {pid}: {found[0]}",
                            f"prompt: {texts.get(pid.split('#')[0], '(generated prompt)')[:100]!r}",
                            f"reply: {r.text[:200]!r}"]
                if r.tokens:
                    evidence.append("first tokens: " + ", ".join(f"{t.get('token')!r} {t.get('logprob')}" for t in r.tokens[:4]))
                evidence += [f"also: {f}" for f in found[1:]]
                return Finding(mode, _name(found[0]), f"{mode} / prompt {pid}: {found[0]}; text {r.text[:120]!r}", evidence)
    return None
