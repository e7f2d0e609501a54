"""Async streaming load generator and its metrics.

Per concurrency level (closed loop) or request rate (Poisson arrivals, fixed seed): warm-up
requests first (not counted), then N measured requests. Token counts come from the server's
``usage`` (stream_options.include_usage), not from counting chunks. Every response goes through
the cheap absolute detectors: a level whose responses are garbage is marked invalid rather
than reported fast.
"""

from __future__ import annotations

import asyncio
import random
import statistics
from dataclasses import asdict, dataclass, field

from bakeoff.client import Result, chat_body, new_session, stream_request, tokenize
from bakeoff.probes import detect
from bakeoff.spec import Bench

WORDS = (
    "time person year way day thing man world life hand part child eye woman place work week case point "
    "government company number group problem fact water river mountain music garden window story history"
).split()


def synthetic_prompt(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


async def make_prompts(session, base_url: str, n: int, input_tokens: int, seed: int) -> list[str]:
    """Prompts of about ``input_tokens`` tokens by the server's own tokenizer where it has one."""
    rng = random.Random(seed)
    probe = synthetic_prompt(random.Random(seed), 200)
    counted = await tokenize(session, base_url, probe)
    per_word = (counted / 200) if counted else 1.3
    n_words = max(1, round(input_tokens / per_word))
    return [synthetic_prompt(rng, n_words) for _ in range(n)]


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

    def to_json(self) -> dict:
        return asdict(self)


def _dist(xs: list[float]) -> dict:
    if not xs:
        return {}
    s = sorted(xs)

    def pct(p: float) -> float:
        # linear interpolation between closest ranks (numpy's default)
        k = (len(s) - 1) * p / 100
        lo, hi = int(k), min(int(k) + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (k - lo)

    return {"mean": statistics.fmean(s), "p50": pct(50), "p90": pct(90), "p99": pct(99)}


def summarize(level: str, results: list[Result], wall_s: float, *, ttft_slo_ms: float | None = None,
              expect_logprobs: bool = True) -> LevelStats:
    """Metrics of one level from its measured requests (warm-up already excluded)."""
    good = [r for r in results if r.ok]
    errors = len(results) - len(good)
    findings = [(r, detect(r, expect_logprobs=expect_logprobs)) for r in good]
    invalid = [(r, f) for r, f in findings if f]
    out_toks = sum(r.completion_tokens or 0 for r in good)
    in_toks = sum(r.prompt_tokens or 0 for r in good)
    ttft = [(r.first_token - r.start) * 1000 for r in good if r.first_token is not None]
    e2e = [(r.end - r.start) * 1000 for r in good]
    tpot = [
        (r.end - r.first_token) * 1000 / (r.completion_tokens - 1)
        for r in good if r.first_token is not None and (r.completion_tokens or 0) > 1
    ]
    itl = [(b - a) * 1000 for r in good for a, b in zip(r.chunk_times, r.chunk_times[1:])]
    goodput = None
    if ttft_slo_ms is not None and wall_s > 0:
        met = sum(1 for r in good if r.first_token is not None and (r.first_token - r.start) * 1000 <= ttft_slo_ms)
        goodput = met / wall_s
    stats = LevelStats(
        level=level, requests=len(results), errors=errors, invalid=len(invalid), duration_s=wall_s,
        request_throughput=len(good) / wall_s if wall_s else 0.0,
        output_tok_s=out_toks / wall_s if wall_s else 0.0,
        total_tok_s=(in_toks + out_toks) / wall_s if wall_s else 0.0,
        ttft_ms=_dist(ttft), tpot_ms=_dist(tpot), itl_ms=_dist(itl), e2e_ms=_dist(e2e), goodput=goodput,
    )
    if invalid:
        stats.valid = False
        stats.why_invalid = f"{len(invalid)}/{len(good)} responses failed detectors, e.g. {invalid[0][1][0]}"
    elif good and not any(r.completion_tokens for r in good):
        stats.valid = False
        stats.why_invalid = "server reported no usage token counts"
    elif not good:
        stats.valid = False
        stats.why_invalid = f"all {errors} requests failed, e.g. {results[0].error if results else '-'}"
    return stats


async def _run_level(session, url: str, bodies: list[dict], concurrency: int | None, rate: float | None,
                     seed: int, api: str) -> tuple[list[Result], float]:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    if rate is None:
        sem = asyncio.Semaphore(concurrency or 1)

        async def one(b: dict) -> Result:
            async with sem:
                return await stream_request(session, url, b, api=api)

        results = await asyncio.gather(*(one(b) for b in bodies))
    else:
        rng = random.Random(seed)
        tasks = []
        for b in bodies:
            tasks.append(asyncio.ensure_future(stream_request(session, url, b, api=api)))
            await asyncio.sleep(rng.expovariate(rate))
        results = await asyncio.gather(*tasks)
    return list(results), loop.time() - t0


async def run_async(base_url: str, cfg: Bench, *, model: str | None = None, ignore_eos: bool = False,
                    timeout_s: float = 300, expect_logprobs: bool = True) -> list[LevelStats]:
    api = cfg.api
    url = base_url + ("/v1/chat/completions" if api == "chat" else "/v1/completions")
    levels: list[tuple[str, int | None, float | None]] = (
        [(f"rate={cfg.request_rate}", None, cfg.request_rate)] if cfg.request_rate
        else [(f"c={c}", c, None) for c in cfg.concurrency]
    )
    out = []
    async with new_session(timeout_s=timeout_s) as session:
        n_total = cfg.warmup_requests + cfg.requests_per_level * len(levels)
        prompts = await make_prompts(session, base_url, n_total, cfg.input_tokens, cfg.seed)
        extra = {"ignore_eos": True, "min_tokens": cfg.output_tokens} if ignore_eos else {}

        def body(p: str) -> dict:
            if api == "chat":
                return chat_body([{"role": "user", "content": p}], max_tokens=cfg.output_tokens, top_logprobs=0,
                                 model=model, extra=extra)
            b = {"prompt": p, "max_tokens": cfg.output_tokens, "temperature": 0.0, "stream": True, "logprobs": 1,
                 "stream_options": {"include_usage": True}, **extra}
            if model:
                b["model"] = model
            return b

        it = iter(prompts)
        warm = [body(next(it)) for _ in range(cfg.warmup_requests)]
        if warm:
            await _run_level(session, url, warm, len(warm), None, cfg.seed, api)
        for name, conc, rate in levels:
            bodies = [body(next(it)) for _ in range(cfg.requests_per_level)]
            results, wall = await _run_level(session, url, bodies, conc, rate, cfg.seed, api)
            out.append(summarize(name, results, wall, ttft_slo_ms=cfg.ttft_slo_ms, expect_logprobs=expect_logprobs))
    return out


def run(base_url: str, cfg: Bench, **kw) -> list[LevelStats]:
    return asyncio.run(run_async(base_url, cfg, **kw))


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
