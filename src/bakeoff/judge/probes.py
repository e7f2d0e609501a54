"""Correctness probes: absolute detectors, differential comparison against the baseline, tasks.

The probe set runs three ways — one request at a time, one long prompt near the context
length, and N concurrent copies — because garbage often appears only under one of them. The
result says which way failed and which detector fired, with the measured values.

Exact text equality is not correctness: a healthy backend may change a greedy continuation
where two tokens are near-tied. So the differential check asks, at the first divergence,
whether each side's token is in the other's top-k and how large the logprob gap is.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import tomllib
import unicodedata
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

from bakeoff.measure.client import Result, chat_body, new_session, stream_request, tokenize
from bakeoff.spec import Probes

# -- the prompt set ---------------------------------------------------------------------


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str
    answer: str | None = None
    json: bool = False


def load_prompt_set(name: str) -> tuple[list[Prompt], dict]:
    """A built-in set by name, or a TOML file. A set may ``include`` another and keep ``only``
    some of its prompt ids; its own ``[[prompt]]`` entries and ``[long]`` are added on top."""
    if name.endswith(".toml"):
        data = tomllib.loads(Path(name).read_text())
    else:
        data = tomllib.loads(resources.files("bakeoff.data.probes").joinpath(f"{name}.toml").read_text())
    prompts: list[Prompt] = []
    long_cfg: dict = {}
    if "include" in data:
        prompts, long_cfg = load_prompt_set(data["include"])
        if "only" in data:
            prompts = [p for p in prompts if p.id in data["only"]]
    prompts = prompts + [Prompt(**p) for p in data.get("prompt", [])]
    return prompts, data.get("long", long_cfg)


# -- absolute detectors -----------------------------------------------------------------


def detect(res: Result, *, expect_logprobs: bool = True) -> list[str]:
    """Cheap absolute checks on one response; each finding is 'detector: evidence'."""
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
    if not text.strip():
        found.append("empty: the reply has no text")
    if text:
        repl = text.count("\ufffd")
        ctrl = sum(1 for ch in text if unicodedata.category(ch) == "Cc" and ch not in "\n\r\t")
        if repl + ctrl >= max(3, len(text) // 20):
            found.append(f"bad_characters: {repl} replacement and {ctrl} control characters in {len(text)}")
    toks = [t.get("token") for t in res.tokens] if res.tokens else text.split()
    if len(toks) >= 8 and len(set(toks)) == 1:
        found.append(f"all_same_token: {len(toks)} x {toks[0]!r}")
    elif (rep := repetition(toks)) is not None:
        found.append(f"degenerate_repetition: {rep}")
    return found


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


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


# -- differential -------------------------------------------------------------------------


@dataclass
class Diff:
    agreement: float          # common greedy prefix / longer length
    consistent: bool          # identical, or diverged at a near-tie
    diverge_at: int | None
    detail: str
    gap: float | None = None  # the larger of the two logprob gaps at the first divergence


def compare(base: Result, trial: Result, *, top_k: int, tie_gap: float = 1.5) -> Diff:
    """Greedy agreement of two replies to the same prompt, and whether their first divergence
    is a near-tie: each side's token in the other's top-k, within ``tie_gap`` nats of its own
    choice on both sides. A length difference alone (one reply a prefix of the other) is consistent."""
    bt = [t.get("token") for t in base.tokens] or base.text.split()
    tt = [t.get("token") for t in trial.tokens] or trial.text.split()
    n = 0
    while n < min(len(bt), len(tt)) and bt[n] == tt[n]:
        n += 1
    longest = max(len(bt), len(tt), 1)
    agreement = n / longest
    if n == len(bt) == len(tt):
        return Diff(1.0, True, None, "identical")
    if n == min(len(bt), len(tt)):
        # one is a prefix of the other: a length difference only (e.g. an EOS tie)
        return Diff(agreement, True, n, f"same tokens, lengths {len(bt)} vs {len(tt)}")
    if not base.tokens or not trial.tokens:
        return Diff(agreement, agreement >= 0.5, n, f"diverged at token {n} (no logprobs to judge)")
    b, t = base.tokens[n], trial.tokens[n]
    b_top = {x.get("token"): x.get("logprob") for x in (b.get("top_logprobs") or [])[:top_k]}
    t_top = {x.get("token"): x.get("logprob") for x in (t.get("top_logprobs") or [])[:top_k]}
    t_in_b = t.get("token") in b_top
    b_in_t = b.get("token") in t_top
    gap_b = _gap(b.get("logprob"), b_top.get(t.get("token")) if t_in_b else None)
    gap_t = _gap(t.get("logprob"), t_top.get(b.get("token")) if b_in_t else None)
    gap = max(gap_b, gap_t)
    consistent = t_in_b and b_in_t and gap <= tie_gap
    detail = (
        f"diverged at token {n}: baseline {b.get('token')!r} vs {t.get('token')!r}; "
        f"in each other's top-{top_k}: {t_in_b}/{b_in_t}; logprob gaps {gap_b:.2f}/{gap_t:.2f} "
        f"({'near-tie' if consistent else 'not a near-tie'}, limit {tie_gap})"
    )
    return Diff(agreement, consistent, n, detail, gap)


def _gap(chosen, other) -> float:
    """How much more likely a side found its own token than the other side's (inf: unknown)."""
    if not (_finite(chosen) and _finite(other)):
        return math.inf
    return max(0.0, chosen - other)


# -- running the probes -------------------------------------------------------------------


@dataclass
class ProbeOutcome:
    passed: bool
    failed_mode: str | None = None   # single | long | concurrent
    detector: str | None = None
    detail: str = ""
    values: dict = field(default_factory=dict)
    evidence: list[str] = field(default_factory=list)  # lines that show the failure

    def to_json(self) -> dict:
        return asdict(self)


def task_score(prompts: list[Prompt], results: dict[str, Result]) -> tuple[int, int]:
    """(right, total) over the prompts that are tasks (a checkable answer or a JSON reply)."""
    tasks = [p for p in prompts if p.answer is not None or p.json]
    return sum(_task_right(p, results) for p in tasks), len(tasks)


def _task_right(p: Prompt, results: dict[str, Result]) -> bool:
    text = results[p.id].text if p.id in results else ""
    if p.json:
        return _is_json_object(text)
    return p.answer is not None and re.search(p.answer, text, re.IGNORECASE) is not None


def _is_json_object(text: str) -> bool:
    m = re.search(r"\{.*\}", text, re.DOTALL)
    if not m:
        return False
    try:
        return isinstance(json.loads(m.group(0)), dict)
    except ValueError:
        return False


def _unexcusable(results: dict[str, Result], expect_logprobs: bool) -> bool:
    """A finding no baseline can excuse (NaN, errors, missing logprobs): no need to probe on."""
    return any(_name(f) not in MODEL_BEHAVIOUR for r in results.values() for f in detect(r, expect_logprobs=expect_logprobs))


async def _collect(base_url: str, cfg: Probes, model: str | None, ctx_size: int | None, timeout_s: float,
                   expect_logprobs: bool = True) -> dict:
    """Single requests, then the long prompt, then N concurrent copies; a mode that shows a
    finding no baseline can excuse ends the collection there."""
    prompts, long_cfg = load_prompt_set(cfg.set)
    url = base_url + "/v1/chat/completions"

    def body(text: str, max_tokens: int | None = None) -> dict:
        return chat_body([{"role": "user", "content": text}], max_tokens=max_tokens or cfg.max_tokens,
                         top_logprobs=cfg.top_logprobs, model=model)

    out: dict[str, dict[str, Result]] = {"single": {}, "long": {}, "concurrent": {}}
    async with new_session(timeout_s=timeout_s) as session:
        for p in prompts:
            out["single"][p.id] = await stream_request(session, url, body(p.text))
        if _unexcusable(out["single"], expect_logprobs):
            return {"prompts": prompts, "long": long_cfg, "results": out}  # e.g. NaN: judged already
        if long_cfg:
            text = await _long_prompt(session, base_url, long_cfg, cfg, ctx_size)
            out["long"]["long"] = await stream_request(session, url, body(text, 16))
        if cfg.concurrency and not _unexcusable(out["long"], expect_logprobs):
            jobs = [(f"{p.id}#{i}", p.text) for i in range(cfg.concurrency) for p in prompts]
            results = await asyncio.gather(*(stream_request(session, url, body(t)) for _, t in jobs))
            out["concurrent"] = dict(zip((j for j, _ in jobs), results))
    return {"prompts": prompts, "long": long_cfg, "results": out}


async def served_context(session, base_url: str) -> int | None:
    """The per-request context the server reports (llama.cpp meta.n_ctx, vLLM max_model_len)."""
    try:
        async with session.get(base_url + "/v1/models") as resp:
            data = await resp.json(content_type=None)
        first = (data.get("data") or [{}])[0]
        return (first.get("meta") or {}).get("n_ctx") or first.get("max_model_len")
    except Exception:  # noqa: BLE001 - any odd answer just means "unknown"
        return None


async def _long_prompt(session, base_url: str, long_cfg: dict, cfg: Probes, ctx_size: int | None) -> str:
    ctx = await served_context(session, base_url) or ctx_size
    target = cfg.long_prompt_tokens or (int(ctx * 0.75) if ctx else 1024)
    filler = long_cfg["filler"]
    per = await tokenize(session, base_url, filler) or max(1, len(filler) // 4)
    reps = max(1, (target - 64) // per)
    half = reps // 2
    return filler * half + long_cfg["fact"] + " " + filler * (reps - half) + "\n\n" + long_cfg["question"]


def run_probes(base_url: str, cfg: Probes, *, model: str | None = None, ctx_size: int | None = None,
               timeout_s: float = 120, expect_logprobs: bool = True) -> dict:
    """Run the probe set three ways against a ready server; return raw results per mode."""
    return asyncio.run(_collect(base_url, cfg, model, ctx_size, timeout_s, expect_logprobs))


# Detectors that can be the model's own behaviour on a prompt (SmolLM2 loops on some): in a
# trial they count only where the baseline did not show the same thing on the same prompt.
MODEL_BEHAVIOUR = ("degenerate_repetition", "all_same_token", "empty", "bad_characters")


def judge(collected: dict, cfg: Probes, baseline: dict | None, *, expect_logprobs: bool = True) -> ProbeOutcome:
    """Turn collected results (and the baseline's, if any) into a pass/fail with evidence.

    Order: absolute detectors in every mode; (with a baseline) greedy agreement and top-k
    consistency per prompt, and task accuracy; concurrent copies vs this server's single
    answers; the long-prompt task. The first failure decides; ``values`` holds what was measured.
    """
    prompts: list[Prompt] = collected["prompts"]
    texts = {p.id: p.text for p in prompts}
    res = collected["results"]
    base_res = baseline["results"] if baseline else None
    top_k = cfg.top_logprobs or 5
    values: dict = {"requests": {mode: len(items) for mode, items in res.items() if items}}
    # 1. absolute detectors, each mode
    for mode, items in res.items():
        for pid, r in items.items():
            found = detect(r, expect_logprobs=expect_logprobs)
            if base_res is not None and found:
                shown = _baseline_detectors(base_res, mode, pid, expect_logprobs)
                found = [f for f in found if not (_name(f) in MODEL_BEHAVIOUR and _name(f) in shown)]
            if found:
                evidence = [f"{mode} / prompt {pid}: {found[0]}",
                            f"prompt: {texts.get(pid.split('#')[0], '(long prompt)')[:100]!r}",
                            f"reply: {r.text[:200]!r}"]
                if r.tokens:
                    evidence.append("first tokens: " + ", ".join(f"{t.get('token')!r} {t.get('logprob')}" for t in r.tokens[:4]))
                evidence += [f"also: {f}" for f in found[1:]]
                return ProbeOutcome(False, mode, _name(found[0]), f"{mode} / prompt {pid}: {found[0]}; text {r.text[:120]!r}",
                                    values, evidence=evidence)
    # 2. differential vs baseline + tasks (single requests: the main signal)
    if base_res is not None:
        diffs = {p.id: compare(base_res["single"][p.id], res["single"][p.id], top_k=top_k, tie_gap=cfg.max_tie_gap)
                 for p in prompts if p.id in base_res["single"] and base_res["single"][p.id].ok and p.id in res["single"]}
        if diffs:
            agree = sum(d.agreement for d in diffs.values()) / len(diffs)
            cons = sum(d.consistent for d in diffs.values()) / len(diffs)
            gaps = [d.gap for d in diffs.values() if d.gap is not None]
            values.update(agreement=round(agree, 3), topk_consistency=round(cons, 3),
                          diverged=f"{sum(d.diverge_at is not None for d in diffs.values())}/{len(diffs)}")
            if gaps:
                values["max_divergence_gap"] = round(max(gaps), 3) if math.isfinite(max(gaps)) else "inf"
            bad = [(pid, d) for pid, d in diffs.items() if not d.consistent]
            # near-ties alone never fail (a healthy kernel change flips them); a real
            # divergence fails when there are too many, or when greedy agreement is low too
            if cons < cfg.min_topk_consistency or (bad and agree < cfg.min_agreement):
                evidence = []
                for pid, d in bad[:4]:
                    evidence += [f"{pid}: {d.detail}", f"  baseline: {base_res['single'][pid].text[:100]!r}",
                                 f"  trial:    {res['single'][pid].text[:100]!r}"]
                return ProbeOutcome(False, "single", "divergence",
                                    f"token agreement {agree:.2f} (need {cfg.min_agreement}), top-k consistency {cons:.2f} "
                                    f"(need {cfg.min_topk_consistency}); {bad[0][0]}: {bad[0][1].detail}", values, evidence=evidence)
        right, total = task_score(prompts, res["single"])
        bright, _ = task_score(prompts, base_res["single"])
        values.update(task_accuracy=f"{right}/{total}", task_accuracy_baseline=f"{bright}/{total}")
        if total and (bright - right) / total > cfg.max_task_drop:
            missed = [p.id for p in prompts if _task_right(p, base_res["single"]) and not _task_right(p, res["single"])]
            return ProbeOutcome(False, "single", "task_accuracy",
                                f"tasks right {right}/{total} vs baseline {bright}/{total} (allowed drop {cfg.max_task_drop:.0%})",
                                values, evidence=[f"{pid}: baseline {base_res['single'][pid].text[:80]!r}, trial {res['single'][pid].text[:80]!r}"
                                                  for pid in missed])
    else:
        right, total = task_score(prompts, res["single"])
        values["task_accuracy"] = f"{right}/{total}"
    # 3. concurrent copies vs the same server's single answers (greedy: should agree)
    agreements = {}
    for pid, r in res.get("concurrent", {}).items():
        single = res["single"].get(pid.split("#")[0])
        if single is not None and single.ok:
            agreements[pid] = compare(single, r, top_k=top_k, tie_gap=cfg.max_tie_gap)
    if agreements:
        cons = sum(d.consistent for d in agreements.values()) / len(agreements)
        values["concurrent_consistency"] = round(cons, 3)
        if cons < cfg.min_topk_consistency:
            bad = [f"{pid}: {d.detail}" for pid, d in agreements.items() if not d.consistent]
            return ProbeOutcome(False, "concurrent", "concurrency_divergence",
                                f"concurrent answers consistent with single ones in {cons:.0%} (need {cfg.min_topk_consistency:.0%}); {bad[0]}",
                                values, evidence=bad[:6])
    # 4. long prompt task
    long_cfg = collected.get("long") or {}
    if "long" in res.get("long", {}) and long_cfg.get("answer"):
        lr = res["long"]["long"]
        values["long_prompt_tokens"] = lr.prompt_tokens
        values["long_answer_ok"] = bool(re.search(long_cfg["answer"], lr.text, re.IGNORECASE))
        if base_res is not None and "long" in base_res.get("long", {}):
            base_ok = bool(re.search(long_cfg["answer"], base_res["long"]["long"].text, re.IGNORECASE))
            values["long_answer_baseline"] = base_ok
            if base_ok and not values["long_answer_ok"]:
                return ProbeOutcome(False, "long", "long_context_task",
                                    f"baseline found the fact in the long prompt ({lr.prompt_tokens} tokens), this trial answered {lr.text[:80]!r}",
                                    values, evidence=[f"baseline: {base_res['long']['long'].text[:120]!r}", f"trial: {lr.text[:120]!r}"])
    return ProbeOutcome(True, values=values, detail=_summary(values))


def _name(finding: str) -> str:
    return finding.split(":")[0]


def _baseline_detectors(base_res: dict, mode: str, pid: str, expect_logprobs: bool) -> set[str]:
    """Detectors that fire on the baseline's own reply to the same prompt (any copy of it)."""
    root = pid.split("#")[0]
    same = [base_res.get(mode, {}).get(pid), base_res.get("single", {}).get(root)]
    return {_name(f) for r in same if r is not None for f in detect(r, expect_logprobs=expect_logprobs)}


def _summary(values: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def results_to_json(collected: dict) -> dict:
    return {
        "results": {m: {k: asdict(r) for k, r in items.items()} for m, items in collected["results"].items()},
        "long": collected.get("long", {}),
    }


def results_from_json(data: dict, prompt_set: str) -> dict:
    prompts, _ = load_prompt_set(prompt_set)
    return {
        "prompts": prompts,
        "long": data.get("long", {}),
        "results": {m: {k: Result(**r) for k, r in items.items()} for m, items in data["results"].items()},
    }
