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

from bakeoff.client import Result, chat_body, new_session, stream_request, tokenize
from bakeoff.spec import Probes

# -- the prompt set ---------------------------------------------------------------------


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str
    answer: str | None = None
    json: bool = False


def load_prompt_set(name: str) -> tuple[list[Prompt], dict]:
    if name.endswith(".toml"):
        data = tomllib.loads(Path(name).read_text())
    else:
        data = tomllib.loads(resources.files("bakeoff.data.probes").joinpath(f"{name}.toml").read_text())
    return [Prompt(**p) for p in data["prompt"]], data.get("long", {})


# -- absolute detectors -----------------------------------------------------------------


def detect(res: Result, *, expect_logprobs: bool = True) -> list[str]:
    """Cheap absolute checks on one response; each finding is 'detector: evidence'."""
    if res.error:
        return [f"request_error: {res.error}"]
    found = []
    text = res.text
    if not text.strip():
        found.append("empty: the reply has no text")
    if expect_logprobs and res.logprobs_requested:
        if not res.tokens and text:
            found.append("missing_logprobs: logprobs requested, none returned")
        bad = [t for t in res.tokens if not _finite(t.get("logprob"))]
        if bad:
            found.append(f"nonfinite_logprobs: {len(bad)}/{len(res.tokens)} tokens have logprob {bad[0].get('logprob')!r}")
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


def compare(base: Result, trial: Result, *, top_k: int, tie_gap: float = 1.5) -> Diff:
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
    gap_b = (b.get("logprob") or 0) - b_top[t.get("token")] if t_in_b and _finite(b_top[t.get("token")]) else math.inf
    gap_t = (t.get("logprob") or 0) - t_top[b.get("token")] if b_in_t and _finite(t_top[b.get("token")]) else math.inf
    consistent = t_in_b and b_in_t and max(gap_b, gap_t) <= tie_gap
    detail = (
        f"diverged at token {n}: baseline {b.get('token')!r} vs {t.get('token')!r}; "
        f"in each other's top-{top_k}: {t_in_b}/{b_in_t}; logprob gaps {gap_b:.2f}/{gap_t:.2f}"
    )
    return Diff(agreement, consistent, n, detail)


# -- running the probes -------------------------------------------------------------------


@dataclass
class ProbeOutcome:
    passed: bool
    failed_mode: str | None = None   # single | long | concurrent
    detector: str | None = None
    detail: str = ""
    values: dict = field(default_factory=dict)
    results: dict = field(default_factory=dict)  # mode -> {prompt id -> Result as dict}

    def to_json(self) -> dict:
        return asdict(self)


def task_score(prompts: list[Prompt], results: dict[str, Result]) -> tuple[int, int]:
    right = total = 0
    for p in prompts:
        if p.answer is None and not p.json:
            continue
        total += 1
        text = results[p.id].text if p.id in results else ""
        if p.json:
            right += _is_json_object(text)
        elif re.search(p.answer, text, re.IGNORECASE):
            right += 1
    return right, total


def _is_json_object(text: str) -> bool:
    m = re.search(r"\{.*\}", text, re.DOTALL)
    if not m:
        return False
    try:
        return isinstance(json.loads(m.group(0)), dict)
    except ValueError:
        return False


async def _collect(base_url: str, cfg: Probes, model: str | None, ctx_size: int | None, timeout_s: float) -> dict:
    prompts, long_cfg = load_prompt_set(cfg.set)
    url = base_url + "/v1/chat/completions"

    def body(text: str, max_tokens: int | None = None) -> dict:
        return chat_body([{"role": "user", "content": text}], max_tokens=max_tokens or cfg.max_tokens,
                         top_logprobs=cfg.top_logprobs, model=model)

    out: dict[str, dict[str, Result]] = {"single": {}, "long": {}, "concurrent": {}}
    async with new_session(timeout_s=timeout_s) as session:
        for p in prompts:
            out["single"][p.id] = await stream_request(session, url, body(p.text))
        if long_cfg:
            text = await _long_prompt(session, base_url, long_cfg, cfg, ctx_size)
            out["long"]["long"] = await stream_request(session, url, body(text, 16))
        if cfg.concurrency:
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
    return asyncio.run(_collect(base_url, cfg, model, ctx_size, timeout_s))


def judge(collected: dict, cfg: Probes, baseline: dict | None, *, expect_logprobs: bool = True) -> ProbeOutcome:
    """Turn collected results (and the baseline's, if any) into a pass/fail with evidence."""
    prompts: list[Prompt] = collected["prompts"]
    res = collected["results"]
    base_res = baseline["results"] if baseline else None
    values: dict = {}
    # 1. absolute detectors, each mode
    for mode, items in res.items():
        for pid, r in items.items():
            found = detect(r, expect_logprobs=expect_logprobs)
            if base_res is not None and found:
                # repetition the baseline shows on the same prompt is the model, not the backend
                bpid = pid.split("#")[0]
                bsame = base_res.get("single", {}).get(bpid) if mode == "concurrent" else base_res.get(mode, {}).get(pid)
                if bsame is not None:
                    bfound = {f.split(":")[0] for f in detect(bsame, expect_logprobs=expect_logprobs)}
                    found = [f for f in found if not (f.startswith("degenerate_repetition") and "degenerate_repetition" in bfound)]
            if found:
                det = found[0].split(":")[0]
                return ProbeOutcome(False, mode, det, f"{mode} / prompt {pid}: {found[0]}; text {r.text[:120]!r}", values)
    # 2. concurrent copies vs the same server's single answers (greedy: should agree)
    agreements = []
    for pid, r in res.get("concurrent", {}).items():
        single = res["single"].get(pid.split("#")[0])
        if single is not None and single.ok:
            agreements.append(compare(single, r, top_k=cfg.top_logprobs or 5))
    if agreements:
        cons = sum(d.consistent for d in agreements) / len(agreements)
        values["concurrent_consistency"] = round(cons, 3)
        if cons < cfg.min_topk_consistency:
            worst = next(d for d in agreements if not d.consistent)
            return ProbeOutcome(False, "concurrent", "concurrency_divergence",
                                f"concurrent answers consistent with single ones in {cons:.0%} (need {cfg.min_topk_consistency:.0%}); {worst.detail}", values)
    # 3. long prompt task
    long_cfg = collected.get("long") or {}
    if "long" in res.get("long", {}) and long_cfg.get("answer"):
        lr = res["long"]["long"]
        values["long_answer_ok"] = bool(re.search(long_cfg["answer"], lr.text, re.IGNORECASE))
        if base_res is not None and "long" in base_res.get("long", {}):
            base_ok = bool(re.search(long_cfg["answer"], base_res["long"]["long"].text, re.IGNORECASE))
            values["long_answer_baseline"] = base_ok
            if base_ok and not values["long_answer_ok"]:
                return ProbeOutcome(False, "long", "long_context_task",
                                    f"baseline found the fact in the long prompt, this trial answered {lr.text[:80]!r}", values)
    # 4. differential vs baseline + tasks
    if base_res is not None:
        diffs = {p.id: compare(base_res["single"][p.id], res["single"][p.id], top_k=cfg.top_logprobs or 5)
                 for p in prompts if p.id in base_res["single"] and base_res["single"][p.id].ok}
        if diffs:
            agree = sum(d.agreement for d in diffs.values()) / len(diffs)
            cons = sum(d.consistent for d in diffs.values()) / len(diffs)
            values.update(agreement=round(agree, 3), topk_consistency=round(cons, 3))
            if cons < cfg.min_topk_consistency and agree < cfg.min_agreement:
                worst = next(f"{pid}: {d.detail}" for pid, d in diffs.items() if not d.consistent)
                return ProbeOutcome(False, "single", "divergence",
                                    f"token agreement {agree:.2f} (need {cfg.min_agreement}), top-k consistency {cons:.2f} (need {cfg.min_topk_consistency}); {worst}", values)
        right, total = task_score(prompts, res["single"])
        bright, _ = task_score(prompts, base_res["single"])
        values.update(task_accuracy=f"{right}/{total}", task_accuracy_baseline=f"{bright}/{total}")
        if total and (bright - right) / total > cfg.max_task_drop:
            return ProbeOutcome(False, "single", "task_accuracy", f"tasks right {right}/{total} vs baseline {bright}/{total}", values)
    else:
        right, total = task_score(prompts, res["single"])
        values["task_accuracy"] = f"{right}/{total}"
    return ProbeOutcome(True, values=values, detail=_summary(values))


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
