"""Async streaming load generator and its metrics.

Per level — a fixed concurrency (closed loop) or a Poisson request rate (open loop, fixed
seed) — warm-up requests first (never counted), then N measured requests. Prompts are made
to a given token length with the served model's own tokenizer where the server offers
``/tokenize`` + ``/detokenize``, else a local HF tokenizer (``Bench.tokenizer``, when
transformers is installed), else an estimate; each level says which (``prompt_tokens_by``).

Definitions (the same as ``vllm bench serve``, so the two agree; bench/agreement.py checks):
  * duration: first request sent -> last request finished, Poisson arrival gaps included
  * TTFT: request sent -> first chunk that carries text
  * TPOT: (last text chunk - first text chunk) / (output tokens - 1), requests with > 1 token
  * ITL: gaps between consecutive text chunks, over all requests
  * E2E: request sent -> stream finished
  * output tokens: the server's ``usage`` (stream_options.include_usage), else the number of
    logprobs entries; never the number of chunks (one chunk may carry several tokens)
A request that fails at any point, mid-stream included, is an error: it is left out of the
latency figures and of the throughput numerator, but its time stays in the duration.

Judgement per reply and per level (``summarize``, ``check_against_baseline``):
  * every reply goes through the absolute detectors (``probes.detect``), logprob checks
    included: the requests ask for the chosen token's logprob (``logprobs: true`` without
    alternatives, a few bytes per token) where the engine gives logprobs. A finding makes the
    level invalid and is a ``fault``: the trial is not ok (the mode is named ``bench c=N``);
  * a failed request makes the level invalid for ranking; failures past ``max_error_share``
    of the level are a ``fault`` (``bench_errors``);
  * prompts are deterministic per request index (seed and index), so the baseline and a trial
    send the same requests; each level keeps its replies' lengths by index (``lens``). A reply
    far shorter than the baseline's for the same request (< ``early_stop_ratio``) is an
    ``early_stop`` fault: garbage that ends early never ranks as fast;
  * under ``ignore_eos`` a small model may loop past its EOS: repetition is excused only on the
    requests where the baseline looped too (``repeats``), and on the baseline itself.
"""

from __future__ import annotations

import asyncio
import random
import statistics
from dataclasses import asdict, dataclass, field

from bakeoff.measure.client import Result, chat_body, detokenize, new_session, stream_request, tokenize_ids
from bakeoff.judge.probes import detect
from bakeoff.spec import Bench

WORDS = (
    "time person year way day thing man world life hand part child eye woman place work week case point "
    "government company number group problem fact water river mountain music garden window story history"
).split()
TOKENS_PER_WORD_ESTIMATE = 1.3
# past EOS (ignore_eos) a small model may loop legitimately; those findings say nothing about the engine
IGNORE_EOS_TOLERATED = ("degenerate_repetition",)


def synthetic_prompt(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


# -- prompts ----------------------------------------------------------------------------------


async def make_prompts(session, base_url: str, n: int, input_tokens: int, seed: int,
                       tokenizer: str | None = None) -> tuple[list[str], str]:
    """``n`` prompts of ``input_tokens`` tokens each, and how they were counted.

    Returns ``(prompts, by)`` with ``by`` one of ``server``, ``local:<tokenizer>``, ``estimate``.
    """
    n_words = int(input_tokens / TOKENS_PER_WORD_ESTIMATE * 1.5) + 8  # surely long enough, then cut
    # one generator per request index: the same index gets the same prompt in every trial
    raw = [synthetic_prompt(random.Random(f"{seed}:{i}"), n_words) for i in range(n)]
    ids = await tokenize_ids(session, base_url, raw[0])
    if ids is not None and await detokenize(session, base_url, ids[:input_tokens]) is not None:
        out = []
        for text in raw:
            toks = await tokenize_ids(session, base_url, text)
            cut = await detokenize(session, base_url, (toks or [])[:input_tokens])
            if cut is None:
                break
            out.append(cut.strip())
        else:
            return out, "server"
    local = _local_tokenizer(tokenizer)
    if local is not None:
        return [local.decode(local.encode(t, add_special_tokens=False)[:input_tokens]).strip() for t in raw], f"local:{tokenizer}"
    words = max(1, round(input_tokens / TOKENS_PER_WORD_ESTIMATE))
    return [" ".join(t.split()[:words]) for t in raw], "estimate"


def _local_tokenizer(name: str | None):
    if not name:
        return None
    try:
        from transformers import AutoTokenizer  # optional
    except ImportError:
        return None
    try:
        return AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError):
        return None


# -- metrics ----------------------------------------------------------------------------------


@dataclass
class LevelStats:
    level: str
    requests: int
    errors: int
    invalid: int
    duration_s: float
    request_throughput: float
    output_tok_s: float
    total_tok_s: float
    ttft_ms: dict = field(default_factory=dict)
    tpot_ms: dict = field(default_factory=dict)
    itl_ms: dict = field(default_factory=dict)
    e2e_ms: dict = field(default_factory=dict)
    goodput: float | None = None
    valid: bool = True
    why_invalid: str | None = None
    completed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    tokens_by: str = "usage"          # usage | logprobs | none | <tool>
    prompt_tokens_by: str | None = None
    short_outputs: int = 0            # ignore_eos asked, fewer tokens than max_tokens came back
    tool: str = "bakeoff"
    first_error: str | None = None
    fault: str | None = None          # a detector/early_stop/bench_errors finding: the trial is not ok
    lens: list = field(default_factory=list)      # output tokens by request index (None: failed)
    repeats: list = field(default_factory=list)   # indices whose repetition was excused under ignore_eos

    def to_json(self) -> dict:
        return asdict(self)


def percentile(sorted_xs: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, what vllm reports)."""
    k = (len(sorted_xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (k - lo)


def dist(xs: list[float]) -> dict:
    if not xs:
        return {}
    s = sorted(xs)
    return {"mean": statistics.fmean(s), "p50": percentile(s, 50), "p90": percentile(s, 90), "p99": percentile(s, 99)}


def output_tokens(r: Result) -> int | None:
    """The server's count: usage first, else one logprobs entry per token. Never chunks."""
    if r.completion_tokens is not None:
        return r.completion_tokens
    if r.tokens:
        return len(r.tokens)
    return None


def ttft_s(r: Result) -> float | None:
    return None if r.first_token is None else r.first_token - r.start


def tpot_s(r: Result, n_out: int | None) -> float | None:
    """vllm's definition: decode time after the first token over the tokens after it."""
    if r.first_token is None or not n_out or n_out <= 1:
        return None
    last = r.last_token if r.last_token is not None else (r.chunk_times[-1] if r.chunk_times else r.end)
    return (last - r.first_token) / (n_out - 1)


def summarize(level: str, results: list[Result], wall_s: float, *, ttft_slo_ms: float | None = None,
              tpot_slo_ms: float | None = None, expect_logprobs: bool = True, ignore_eos: bool = False,
              max_tokens: int | None = None, prompt_tokens_by: str | None = None,
              prompt_len: int | None = None, max_error_share: float = 0.02) -> LevelStats:
    """Metrics of one level from its measured requests (warm-up already excluded), and its
    judgement: ``valid`` (may it be ranked) and ``fault`` (is the trial not ok)."""
    good = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    findings, repeats = [], []
    for i, r in enumerate(results):
        if not r.ok:
            continue
        found = detect(r, expect_logprobs=expect_logprobs)
        if ignore_eos and any(f.startswith(IGNORE_EOS_TOLERATED) for f in found):
            repeats.append(i)  # judged against the baseline's same request (check_against_baseline)
            found = [f for f in found if not f.startswith(IGNORE_EOS_TOLERATED)]
        findings.append(found)
    invalid = [(r, f) for r, f in zip(good, findings) if f]
    counts = [output_tokens(r) for r in good]
    tokens_by = ("usage" if all(r.completion_tokens is not None for r in good)
                 else "logprobs" if all(c is not None for c in counts) else "none")
    out_toks = sum(c or 0 for c in counts)
    in_toks = sum(r.prompt_tokens if r.prompt_tokens is not None else (prompt_len or 0) for r in good)
    ttft = [ttft_s(r) * 1000 for r in good if r.first_token is not None]
    tpots = [tpot_s(r, c) for r, c in zip(good, counts)]
    tpot = [t * 1000 for t in tpots if t is not None]
    e2e = [(r.end - r.start) * 1000 for r in good]
    itl = [(b - a) * 1000 for r in good for a, b in zip(r.chunk_times, r.chunk_times[1:])]
    goodput = None
    if (ttft_slo_ms is not None or tpot_slo_ms is not None) and wall_s > 0:
        met = 0
        for r, t, bad in zip(good, tpots, findings):
            if bad or r.first_token is None:
                continue
            if ttft_slo_ms is not None and ttft_s(r) * 1000 > ttft_slo_ms:
                continue
            if tpot_slo_ms is not None and (t or 0.0) * 1000 > tpot_slo_ms:  # one token: TPOT 0, as vllm
                continue
            met += 1
        goodput = met / wall_s
    per_s = (lambda x: x / wall_s) if wall_s > 0 else (lambda x: 0.0)
    stats = LevelStats(
        level=level, requests=len(results), errors=len(failed), invalid=len(invalid), duration_s=wall_s,
        request_throughput=per_s(len(good)), output_tok_s=per_s(out_toks), total_tok_s=per_s(in_toks + out_toks),
        ttft_ms=dist(ttft), tpot_ms=dist(tpot), itl_ms=dist(itl), e2e_ms=dist(e2e), goodput=goodput,
        completed=len(good), input_tokens=in_toks, output_tokens=out_toks, tokens_by=tokens_by,
        prompt_tokens_by=prompt_tokens_by,
        short_outputs=sum(1 for c in counts if ignore_eos and max_tokens and c is not None and c < max_tokens),
        first_error=failed[0].error if failed else None,
        lens=[output_tokens(r) if r.ok else None for r in results], repeats=repeats,
    )
    if not good:
        stats.valid = False
        stats.why_invalid = f"all {len(failed)} requests failed, e.g. {failed[0].error if failed else '-'}"
        stats.fault = "bench_errors"
    elif invalid:
        stats.valid = False
        stats.why_invalid = f"{len(invalid)}/{len(good)} responses failed detectors, e.g. {invalid[0][1][0]}"
        stats.fault = invalid[0][1][0].split(":")[0]
    elif failed:
        stats.valid = False  # never ranked: its throughput leaves the failures out
        share = len(failed) / len(results)
        stats.why_invalid = f"{len(failed)}/{len(results)} requests failed ({share:.0%}), e.g. {failed[0].error}"
        if share > max_error_share:
            stats.fault = "bench_errors"
            stats.why_invalid += f"; more than {max_error_share:.0%} of the level"
    elif tokens_by == "none":
        stats.valid = False
        stats.why_invalid = "server reported no usage token counts (stream_options.include_usage) and no logprobs"
    return stats


def check_against_baseline(level: dict, base_level: dict | None, *, early_stop_ratio: float = 0.5,
                           max_tokens: int | None = None, ignore_eos: bool = False) -> dict:
    """A level judged against the baseline's same level, request by request (same index, same
    prompt, greedy): a reply shorter than ``early_stop_ratio`` of the baseline's (or, under
    ``ignore_eos``, short of ``max_tokens`` where the baseline's was not) is an early stop, and
    repetition excused under ``ignore_eos`` must show on the baseline's same request too.
    Without a baseline level the ``repeats`` stay excused (the baseline is judged by the probes)."""
    if not base_level or level.get("fault"):
        return level
    lens, base_lens = level.get("lens") or [], base_level.get("lens") or []
    short = []
    for i, (n, b) in enumerate(zip(lens, base_lens)):
        if n is None or b is None or b < 8:
            continue
        forced_short = ignore_eos and max_tokens and n < max_tokens <= b
        if n < early_stop_ratio * b or forced_short:
            short.append((i, n, b))
    looped = [i for i in level.get("repeats") or [] if i not in set(base_level.get("repeats") or [])]
    if short:
        i, n, b = short[0]
        why = (f"early_stop: {len(short)}/{len(lens)} replies far shorter than the baseline's for the same request "
               f"(request {i}: {n} tokens vs {b}; limit {early_stop_ratio:.0%})")
        return {**level, "valid": False, "fault": "early_stop", "why_invalid": why}
    if looped:
        why = (f"degenerate_repetition: requests {looped[:5]} loop past EOS where the baseline's same requests do not")
        return {**level, "valid": False, "fault": "degenerate_repetition", "why_invalid": why}
    return level


# -- load -------------------------------------------------------------------------------------


def arrival_times(n: int, rate: float, seed: int) -> list[float]:
    """Poisson arrivals: the first at 0, then exponential gaps of mean 1/rate (fixed seed)."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for i in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


async def run_level(session, url: str, bodies: list[dict], *, concurrency: int | None = None,
                    rate: float | None = None, seed: int = 0, api: str = "chat") -> tuple[list[Result], float]:
    """Send ``bodies``; return their results (in order) and the level's duration in seconds.

    Closed loop: at most ``concurrency`` in flight. Open loop: request i is sent at
    ``arrival_times[i]`` after the start whatever is in flight; no wait after the last one.
    """
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    if rate is None:
        sem = asyncio.Semaphore(concurrency or 1)

        async def one(b: dict) -> Result:
            async with sem:
                return await stream_request(session, url, b, api=api)

        results = await asyncio.gather(*(one(b) for b in bodies))
    else:
        tasks = []
        for b, at in zip(bodies, arrival_times(len(bodies), rate, seed)):
            delay = t0 + at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(stream_request(session, url, b, api=api)))
        results = await asyncio.gather(*tasks)
    return list(results), loop.time() - t0


def levels_of(cfg: Bench) -> list[tuple[str, int | None, float | None]]:
    """(name, concurrency, rate) of each level: the Poisson rates when given, else the concurrencies."""
    rates = list(cfg.request_rates) or ([cfg.request_rate] if cfg.request_rate else [])
    if rates:
        return [(f"rate={r:g}", None, r) for r in rates]
    return [(f"c={c}", c, None) for c in cfg.concurrency]


def request_body(cfg: Bench, prompt: str, *, model: str | None, ignore_eos: bool, logprobs: bool = False) -> dict:
    """One benchmark request: greedy, streamed, usage asked for; with ``logprobs`` only the chosen
    token's logprob (no alternatives: the cheapest form), so NaN logits show under load too."""
    extra = {"ignore_eos": True, "min_tokens": cfg.output_tokens} if ignore_eos else {}
    if cfg.api == "chat":
        return chat_body([{"role": "user", "content": prompt}], max_tokens=cfg.output_tokens, top_logprobs=0 if logprobs else -1,
                         model=model, extra=extra)
    b = {"prompt": prompt, "max_tokens": cfg.output_tokens, "temperature": 0.0, "stream": True,
         "stream_options": {"include_usage": True}, **extra}
    if logprobs:
        b["logprobs"] = 1
    if model:
        b["model"] = model
    return b


def api_url(base_url: str, api: str) -> str:
    return base_url.rstrip("/") + ("/v1/chat/completions" if api == "chat" else "/v1/completions")


async def run_async(base_url: str, cfg: Bench, *, model: str | None = None, ignore_eos: bool = False,
                    timeout_s: float = 300, expect_logprobs: bool = True,
                    prompts: list[str] | None = None) -> list[LevelStats]:
    """Warm up, then run every level of ``cfg`` against ``base_url`` with bakeoff's own client.

    ``ignore_eos`` is the engine's support; ``cfg.ignore_eos`` (when set) overrides it.
    ``prompts`` replaces the synthetic ones (warm-up ones first), e.g. to share a workload.
    """
    eos = cfg.ignore_eos if cfg.ignore_eos is not None else ignore_eos
    url = api_url(base_url, cfg.api)
    levels = levels_of(cfg)
    out = []
    async with new_session(timeout_s=timeout_s) as session:
        n_total = cfg.warmup_requests + cfg.requests_per_level * len(levels)
        if prompts is None:
            prompts, by = await make_prompts(session, base_url, n_total, cfg.input_tokens, cfg.seed, cfg.tokenizer)
        else:
            by = "given"
        it = iter(prompts)
        warm = [request_body(cfg, next(it), model=model, ignore_eos=eos, logprobs=expect_logprobs) for _ in range(cfg.warmup_requests)]
        if warm:
            await run_level(session, url, warm, concurrency=len(warm), api=cfg.api)
        for i, (name, conc, rate) in enumerate(levels):
            bodies = [request_body(cfg, next(it), model=model, ignore_eos=eos, logprobs=expect_logprobs) for _ in range(cfg.requests_per_level)]
            results, wall = await run_level(session, url, bodies, concurrency=conc, rate=rate, seed=cfg.seed + i, api=cfg.api)
            out.append(summarize(name, results, wall, ttft_slo_ms=cfg.ttft_slo_ms, tpot_slo_ms=cfg.tpot_slo_ms,
                                 expect_logprobs=expect_logprobs, ignore_eos=eos, max_tokens=cfg.output_tokens,
                                 prompt_tokens_by=by, prompt_len=cfg.input_tokens, max_error_share=cfg.max_error_share))
    return out


def _run_loop(coro):
    try:
        import uvloop  # optional: a faster event loop, same results
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def headline(levels: list[dict]) -> dict:
    """The figures a trial is ranked by: tok/s at the highest valid level, TTFT p50 at the lowest."""
    valid = [lv for lv in levels if lv.get("valid")]
    if not valid:
        return {}
    top, low = valid[-1], valid[0]
    return {
        "output_tok_s": top["output_tok_s"],
        "ttft_p50_ms": (low.get("ttft_ms") or {}).get("p50"),
        "tpot_p50_ms": (top.get("tpot_ms") or {}).get("p50"),
        "level": top["level"],
    }
