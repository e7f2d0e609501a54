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
  * output tokens: counted from the stream itself — one logprobs entry per token (the requests
    ask for each token's logprob and its runner-up) — and checked against the server's ``usage``: a ``usage``
    above the count by more than ``USAGE_SLACK`` (an end token the stream does not show) is a
    ``usage_mismatch`` fault (a speculative decoder counting drafted tokens, say). Without logprobs
    (an engine that gives none) ``usage`` counts, checked against the text chunks: one chunk may
    carry several tokens, but no token makes two chunks, so fewer tokens than chunks is a fault too.
    Never the number of chunks as the count
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
    send the same requests; each level keeps its replies' lengths by index (``lens``) and the
    replies themselves (``replies``: text, tokens with logprob and runner-up, by request key). A reply
    far shorter than the baseline's for the same request (< ``early_stop_ratio``) is an
    ``early_stop`` fault: garbage that ends early never ranks as fast;
  * every reply is compared with the baseline's reply to the same request
    (``bakeoff.judge.bench_replies``): leaving it where a near-tie cannot explain is a
    ``bench_mismatch`` fault, with the request key, level and text as evidence;
  * a small model may loop (past its EOS under ``ignore_eos``, or after a near-tie flip): a loop
    the baseline's same request does not show is new; at most ``LOOP_SHARE`` of the level may be
    new loops (measured healthy variation), and the baseline itself is judged by the probes.
"""

from __future__ import annotations

import asyncio
import random
import statistics
from dataclasses import asdict, dataclass, field

from bakeoff import progress
from bakeoff.measure.client import Result, chat_body, detokenize, new_session, stream_request, tokenize_ids
from bakeoff.judge.bench_replies import compact, compare_level, judge_level
from bakeoff.judge.checks.detectors import detect
from bakeoff.spec import Bench

WORDS = (
    "time person year way day thing man world life hand part child eye woman place work week case point "
    "government company number group problem fact water river mountain music garden window story history"
).split()
TOKENS_PER_WORD_ESTIMATE = 1.3
# a small model may loop legitimately (past EOS under ignore_eos, or after a near-tie flip): judged
# against the baseline's same request, not as a fault of the engine by themselves
LOOP_FINDINGS = ("degenerate_repetition",)
# ``usage`` may differ from the stream's logprobs entries by this many tokens (an end token counted
# on one side only), plus USAGE_SLACK_SHARE of the reply. Measured: llama-server's usage was within it on
# all 192 real replies of bench/bench_replies.py, EOS-stopped ones included
USAGE_SLACK, USAGE_SLACK_SHARE = 2, 0.02
# alternatives asked per bench token: the chosen one is the first under greedy, the second is the
# runner-up a healthy near-tie flip picks (a few dozen bytes per token more than the chosen one alone)
BENCH_TOP_LOGPROBS = 2


def synthetic_prompt(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


# -- prompts ----------------------------------------------------------------------------------


def prompt_for(seed: int, key: str | int, input_tokens: int) -> str:
    """The raw (uncut) prompt of request ``key``: a function of (seed, key) alone, so every trial
    sends the same prompt for the same request whatever ran before it (keys: ``request_key``)."""
    n_words = int(input_tokens / TOKENS_PER_WORD_ESTIMATE * 1.5) + 8  # surely long enough, then cut
    return synthetic_prompt(random.Random(f"{seed}|{key}"), n_words)


def request_key(level: str, repetition: int, j: int) -> str:
    """The stable name of a measured request: level, repetition, position ("c=4/r2/7");
    warm-up requests are "warmup/j"."""
    return f"{level}/r{repetition}/{j}"


async def make_prompts(session, base_url: str, n: int | list, input_tokens: int, seed: int,
                       tokenizer: str | None = None) -> tuple[list[str], str]:
    """Prompts of ``input_tokens`` tokens each for ``n`` request keys (an int: keys 0..n-1), and
    how they were counted. Each prompt depends only on (seed, key): see ``prompt_for``.

    Returns ``(prompts, by)`` with ``by`` one of ``server``, ``local:<tokenizer>``, ``estimate``.
    """
    keys = list(range(n)) if isinstance(n, int) else list(n)
    raw = [prompt_for(seed, k, input_tokens) for k in keys]
    if not raw:
        return [], "estimate"
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
    replies: list = field(default_factory=list)   # {key, text, toks} by request index (None: failed); not kept in metrics
    repeats: list = field(default_factory=list)   # indices whose repetition was excused under ignore_eos
    repetitions: int = 1              # independent passes pooled here (latency percentiles over all)
    samples: dict = field(default_factory=dict)   # metric -> one value per repetition
    ci: dict = field(default_factory=dict)        # metric -> {mean, lo, hi, rel_half_width} (95 %, Student t)
    stopped: str | None = None        # why repetitions stopped: ci (narrow enough) | cap | invalid
    slo: dict | None = None           # SLO search: {met, load, found, limits, ...}

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
    """The tokens the stream itself showed: one logprobs entry per token; without logprobs the
    server's ``usage`` (checked by ``usage_mismatch``). Never chunks."""
    if r.tokens:
        return len(r.tokens)
    if r.completion_tokens is not None:
        return r.completion_tokens
    return None


def usage_mismatch(r: Result) -> str | None:
    """``usage`` against what the stream carried: more (or fewer) tokens than logprobs entries
    beyond ``USAGE_SLACK``; without logprobs, fewer tokens than text chunks."""
    u = r.completion_tokens
    if u is None:
        return None
    if r.tokens:
        n = len(r.tokens)
        if abs(u - n) > USAGE_SLACK + USAGE_SLACK_SHARE * n:
            return (f"usage_mismatch: usage says {u} completion tokens, the stream carried {n} (one logprobs entry "
                    f"per token; {u / max(n, 1):.2f}x)")
        return None
    chunks = len(r.chunk_times)
    if u < chunks:
        return f"usage_mismatch: usage says {u} completion tokens, the stream carried {chunks} text chunks"
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
              prompt_len: int | None = None, max_error_share: float = 0.02, loop_share: float = 0.05,
              keys: list[str] | None = None) -> LevelStats:
    """Metrics of one level from its measured requests (warm-up already excluded), and its
    judgement: ``valid`` (may it be ranked) and ``fault`` (is the trial not ok)."""
    good = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    findings, repeats = [], []
    for i, r in enumerate(results):
        if not r.ok:
            continue
        found = detect(r, expect_logprobs=expect_logprobs, ignore_eos=ignore_eos)
        if (miscount := usage_mismatch(r)) is not None:
            found.append(miscount)
        if any(f.startswith(LOOP_FINDINGS) for f in found) and len(found) == 1:
            # a loop alone (finite, greedy tokens: no numeric detector fired) is the model's own
            # behaviour, past EOS or after a near-tie flip: judged against the baseline's same
            # request (check_against_baseline); with any other finding it stays a fault here
            repeats.append(i)
            found = []
        findings.append(found)
    if not ignore_eos and len(repeats) > int(loop_share * len(results)):  # more loops than a near-tie flip explains
        at = {i: k for k, i in enumerate(i for i, r in enumerate(results) if r.ok)}  # request -> its place in findings
        for i in repeats:
            findings[at[i]] = [f"degenerate_repetition: request {i} loops"]
    invalid = [(r, f) for r, f in zip(good, findings) if f]
    counts = [output_tokens(r) for r in good]
    tokens_by = ("logprobs" if good and all(r.tokens for r in good)
                 else "usage" if all(r.completion_tokens is not None for r in good)
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
        replies=[{"key": (keys[i] if keys and i < len(keys) else str(i)), **compact(r)} if r.ok else None
                 for i, r in enumerate(results)],
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


# The share of a level's replies that may loop where the baseline's same request does not: measured
# healthy variation on the H200 (docs/notes/judge-thresholds.md, SmolLM2 under ignore_eos, 36-60
# replies per level): new loops per level of flash attention off, graphs off, fusion off, K q8_0
# were 3, 1, 0, 0, 2, 0, 1, 2; the most, 3 of 36 (8 %), under 10 %. Rounded down: none in a level
# of fewer than 10 replies.
LOOP_SHARE = 0.10


def loop_pairs(level: dict, base_level: dict) -> tuple[list[int], list[int]]:
    """Requests that loop in this level but not on the baseline's same request, and the reverse.
    A request past the baseline's count (more repetitions here) has no partner: a loop there counts
    as new."""
    n = len(base_level.get("lens") or [])
    base = {i for i in base_level.get("repeats") or [] if i < n}
    mine = set(level.get("repeats") or [])
    return sorted(mine - base), sorted(i for i in base - mine if i < len(level.get("lens") or []))


def new_loops_allowed(n_replies: int) -> int:
    """How many of a level's replies may loop where the baseline's same request does not: a share
    of the level (``LOOP_SHARE``), whatever the loops the baseline lost (a loop gone elsewhere
    excuses nothing on this request)."""
    return int(LOOP_SHARE * n_replies)


def check_against_baseline(level: dict, base_level: dict | None, *, early_stop_ratio: float = 0.5,
                           max_tokens: int | None = None, ignore_eos: bool = False,
                           early_stop_share: float = 0.05) -> dict:
    """A level judged against the baseline's same level, request by request (same index, same
    prompt, greedy): a reply shorter than ``early_stop_ratio`` of the baseline's (or, under
    ``ignore_eos``, short of ``max_tokens`` where the baseline's was not) is an early stop, and
    repetition excused under ``ignore_eos`` must show on the baseline's same request too.
    Without a baseline level the ``repeats`` stay excused (the baseline is judged by the probes).

    Under ``ignore_eos`` every early stop is a fault (the request forbade it). Without it, a
    healthy change that flips a near-tie can reach the end token sooner on one reply (measured:
    1 of 40 replies, 18 tokens vs 64, KV q8_0 + flash attention, docs/notes/judge-thresholds.md):
    up to ``early_stop_share`` of the level's replies (rounded down: none in a level of fewer than
    20) may end early, and are listed; more is a fault. Loops the baseline's same requests do not
    show may make up ``LOOP_SHARE`` of the level, with or without ``ignore_eos`` (measured: flash
    attention on sent 1 of 40 replies into "' Day' repeated 48 times"; off, 3 of 36 under
    ignore_eos); a loop with any numeric finding (NaN, a non-greedy token) is a fault in
    ``summarize`` already. Then every reply against the baseline's same request
    (``judge_replies``)."""
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
    looped, lost = loop_pairs(level, base_level)
    share = int(early_stop_share * len(lens))  # rounded down: none in a level of fewer than 20 replies
    allowed = 0 if ignore_eos else share
    if looped and len(looped) <= new_loops_allowed(len(lens)):
        level = {**level, "loops_tolerated": [f"request {i}" for i in looped]}
        looped = []
    if short and len(short) <= allowed:
        level = {**level, "short_tolerated": [f"request {i}: {n} tokens vs {b}" for i, n, b in short]}
    elif short:
        i, n, b = short[0]
        why = (f"early_stop: {len(short)}/{len(lens)} replies far shorter than the baseline's for the same request "
               f"(request {i}: {n} tokens vs {b}; limit {early_stop_ratio:.0%})")
        return {**level, "valid": False, "fault": "early_stop", "why_invalid": why}
    if looped:
        why = (f"degenerate_repetition: requests {looped[:5]} loop where the baseline's same requests do not "
               f"({len(looped)}/{len(lens)} new loops, {len(lost)} of the baseline's gone; at most "
               f"{new_loops_allowed(len(lens))} may, {LOOP_SHARE:.0%} of the level)")
        return {**level, "valid": False, "fault": "degenerate_repetition", "why_invalid": why}
    return judge_replies(level, base_level)


def judge_replies(level: dict, base_level: dict) -> dict:
    """Every reply of ``level`` against the baseline's reply to the same request
    (``bench_replies.compare_level``); a finding makes the level a ``bench_mismatch`` fault."""
    mine, theirs = level.get("replies") or [], base_level.get("replies") or []
    if not mine or not theirs:
        return level
    keys = [r.get("key") if r else None for r in mine]
    diffs = compare_level(mine, theirs, [k or str(i) for i, k in enumerate(keys)])
    found = judge_level(level.get("level", "?"), diffs, len(mine))
    flips = [d.key for d in diffs if d.kind in ("near_tie", "diverged")]
    if flips:
        level = {**level, "near_tie_flips": len(flips)}
    unmatched = sum(1 for i, r in enumerate(mine) if r is not None and (i >= len(theirs) or theirs[i] is None))
    if unmatched:  # more repetitions than the baseline ran: those prompts have no known-good reply (detectors only)
        level = {**level, "unmatched_replies": unmatched}
    if found is None:
        return level
    fault, why = found
    return {**level, "valid": False, "fault": fault, "why_invalid": why}


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


def request_body(cfg: Bench, prompt: str, *, model: str | None, ignore_eos: bool, logprobs: bool = False,
                 thinking: str = "auto") -> dict:
    """One benchmark request: greedy, streamed, usage asked for; with ``logprobs`` the chosen
    token's logprob and its runner-up (``BENCH_TOP_LOGPROBS``), so NaN logits show under load too
    and each reply can be compared with the baseline's like the probes' (a divergence to the
    baseline's runner-up within the near-tie limit is a flip; ``judge.bench_replies``).
    ``thinking``: ``[server] thinking`` (chat requests only; the completions API has no template)."""
    extra = {"ignore_eos": True, "min_tokens": cfg.output_tokens} if ignore_eos else {}
    if cfg.api == "chat":
        return chat_body([{"role": "user", "content": prompt}], max_tokens=cfg.output_tokens,
                         top_logprobs=BENCH_TOP_LOGPROBS if logprobs else -1,
                         model=model, extra=extra, thinking=thinking)
    b = {"prompt": prompt, "max_tokens": cfg.output_tokens, "temperature": 0.0, "stream": True,
         "stream_options": {"include_usage": True}, **extra}
    if logprobs:
        b["logprobs"] = BENCH_TOP_LOGPROBS
    if model:
        b["model"] = model
    return b


def api_url(base_url: str, api: str) -> str:
    return base_url.rstrip("/") + ("/v1/chat/completions" if api == "chat" else "/v1/completions")


# -- repetitions ------------------------------------------------------------------------------

# metric -> its value in one repetition's LevelStats (None when that repetition has none)
SAMPLED = {
    "output_tok_s": lambda s: s.output_tok_s,
    "request_throughput": lambda s: s.request_throughput,
    "total_tok_s": lambda s: s.total_tok_s,
    "goodput": lambda s: s.goodput,
    "ttft_p50_ms": lambda s: s.ttft_ms.get("p50"),
    "ttft_p99_ms": lambda s: s.ttft_ms.get("p99"),
    "tpot_p50_ms": lambda s: s.tpot_ms.get("p50"),
    "tpot_p99_ms": lambda s: s.tpot_ms.get("p99"),
    "itl_p50_ms": lambda s: s.itl_ms.get("p50"),
    "e2e_p50_ms": lambda s: s.e2e_ms.get("p50"),
}
RATES = ("output_tok_s", "request_throughput", "total_tok_s", "goodput")


@dataclass
class Repetition:
    """One full pass of a level: its results (in request order), duration and statistics."""

    results: list[Result]
    wall_s: float
    stats: LevelStats
    keys: list[str] = field(default_factory=list)  # the request key of each result


async def repeat_until(measure_once, *, minimum: int, cap: int, target: float,
                       figure=lambda s: s.output_tok_s, first: list | None = None) -> tuple[list, str]:
    """Repetitions of one level: ``await measure_once(r)`` for r = len(first), ... until

    * a repetition is invalid or had failed requests (``"invalid"``: more would not help),
    * ``cap`` repetitions ran (``"cap"``),
    * at least ``minimum`` ran and the 95 % interval of ``figure`` over them is within
      ``target`` of its mean (``"ci"``; ``target`` 0 never stops early).

    Returns the repetitions and why it stopped. ``first`` are repetitions already run (the SLO
    search's pass at the level it found)."""
    from bakeoff.decide.stats import relative_half_width

    reps = list(first or [])
    while True:
        if reps and (not reps[-1].stats.valid or reps[-1].stats.errors):
            return reps, "invalid"
        if len(reps) >= cap:
            return reps, "cap"
        if len(reps) >= minimum and target > 0:
            hw = relative_half_width([figure(r.stats) for r in reps])
            if hw is not None and hw <= target:
                return reps, "ci"
        reps.append(await measure_once(len(reps)))


def pool(name: str, reps: list[Repetition], stopped: str | None, **summary_kw) -> LevelStats:
    """One level from its repetitions: latencies pooled over every request; the rates are the
    mean over repetitions, with ``samples`` (one value per repetition) and their 95 % ``ci``."""
    out = summarize(name, [r for rep in reps for r in rep.results], sum(rep.wall_s for rep in reps),
                    keys=[k for rep in reps for k in (rep.keys or [f"{name}/?/{j}" for j in range(len(rep.results))])],
                    **summary_kw)
    return with_samples(out, [rep.stats for rep in reps], stopped)


def with_samples(out: LevelStats, per: list[LevelStats], stopped: str | None) -> LevelStats:
    """``out`` with the per-repetition ``samples`` of ``per``, their intervals, and the rates as
    their mean (so that a figure and its interval agree)."""
    from bakeoff.decide.stats import mean_interval

    out.repetitions = len(per)
    out.stopped = stopped
    out.samples = {m: [f(s) for s in per] for m, f in SAMPLED.items() if per and all(f(s) is not None for s in per)}
    for m in RATES:
        if m in out.samples:
            setattr(out, m, statistics.fmean(out.samples[m]))
    for m, xs in out.samples.items():
        mean, lo, hi = mean_interval(xs)
        out.ci[m] = {"mean": mean, "lo": lo, "hi": hi,
                     "rel_half_width": None if lo is None or not mean else (hi - lo) / 2 / abs(mean)}
    return out


class Load:
    """bakeoff's load generator bound to one server: one repetition of a level (``once``), a
    level in repetitions (``level``). Request ``j`` of repetition ``r`` of level ``name`` always
    sends the same prompt (``request_key``), whatever the trial."""

    def __init__(self, session, base_url: str, cfg: Bench, *, model: str | None, ignore_eos: bool,
                 expect_logprobs: bool, prompts: list[str] | None = None, thinking: str = "auto") -> None:
        self.session, self.base_url, self.cfg = session, base_url, cfg
        self.url = api_url(base_url, cfg.api)
        self.model, self.eos, self.expect_logprobs = model, ignore_eos, expect_logprobs
        self.given = prompts
        self.thinking = thinking
        self.by: str | None = "given" if prompts is not None else None
        self._given_next = cfg.warmup_requests
        self.ttft_slo_ms = cfg.slo.per_request("ttft") if cfg.slo else cfg.ttft_slo_ms
        self.tpot_slo_ms = cfg.slo.per_request("tpot") if cfg.slo else cfg.tpot_slo_ms

    async def prompts(self, keys: list[str]) -> list[str]:
        if self.given is not None:
            rest = self.given[self.cfg.warmup_requests:] or self.given
            out = []
            for _ in keys:  # measured requests take the given prompts in order, round and round
                i = self._given_next - self.cfg.warmup_requests
                out.append(rest[i % len(rest)] if i >= 0 else self.given[self._given_next])
                self._given_next += 1
            return out
        texts, by = await make_prompts(self.session, self.base_url, keys, self.cfg.input_tokens, self.cfg.seed,
                                       self.cfg.tokenizer)
        self.by = self.by or by
        return texts

    async def warm_up(self) -> None:
        n = self.cfg.warmup_requests
        if not n:
            return
        if self.given is not None:
            texts = self.given[:n]
        else:
            texts = await self.prompts([f"warmup/{j}" for j in range(n)])
        await run_level(self.session, self.url, [self._body(t) for t in texts], concurrency=n, api=self.cfg.api)

    def _body(self, text: str) -> dict:
        return request_body(self.cfg, text, model=self.model, ignore_eos=self.eos, logprobs=self.expect_logprobs,
                            thinking=self.thinking)

    def summary_kw(self) -> dict:
        return dict(ttft_slo_ms=self.ttft_slo_ms, tpot_slo_ms=self.tpot_slo_ms, expect_logprobs=self.expect_logprobs,
                    ignore_eos=self.eos, max_tokens=self.cfg.output_tokens, prompt_tokens_by=self.by,
                    prompt_len=self.cfg.input_tokens, max_error_share=self.cfg.max_error_share,
                    loop_share=self.cfg.early_stop_share)

    async def once(self, name: str, conc: int | None, rate: float | None, rep: int, n: int, seed: int) -> Repetition:
        progress.note(f"{name}: repetition {rep + 1} (at least {self.cfg.repetitions}, at most "
                      f"{self.cfg.repetition_cap}), {n} requests")
        keys = [request_key(name, rep, j) for j in range(n)]
        texts = await self.prompts(keys)
        results, wall = await run_level(self.session, self.url, [self._body(t) for t in texts], concurrency=conc,
                                        rate=rate, seed=seed + 1000 * rep, api=self.cfg.api)
        return Repetition(results, wall, summarize(name, results, wall, keys=keys, **self.summary_kw()), keys)

    async def level(self, name: str, conc: int | None, rate: float | None, *, n: int, seed: int,
                    first: list[Repetition] | None = None) -> LevelStats:
        cfg = self.cfg
        reps, stopped = await repeat_until(lambda r: self.once(name, conc, rate, r, n, seed), minimum=cfg.repetitions,
                                           cap=cfg.repetition_cap, target=cfg.target_ci, first=first)
        return pool(name, reps, stopped, **self.summary_kw())


async def run_async(base_url: str, cfg: Bench, *, model: str | None = None, ignore_eos: bool = False,
                    timeout_s: float = 300, expect_logprobs: bool = True,
                    prompts: list[str] | None = None, thinking: str = "auto") -> list[LevelStats]:
    """Warm up, then run every level of ``cfg`` against ``base_url`` with bakeoff's own client,
    each in repetitions (``Bench``); with ``cfg.slo``, the SLO search's levels instead.

    ``ignore_eos`` is the engine's support; ``cfg.ignore_eos`` (when set) overrides it.
    ``prompts`` replaces the synthetic ones (warm-up ones first), e.g. to share a workload.
    ``thinking``: ``[server] thinking``, sent with every chat request.
    """
    eos = cfg.sends_ignore_eos(ignore_eos)
    async with new_session(timeout_s=timeout_s) as session:
        load = Load(session, base_url, cfg, model=model, ignore_eos=eos, expect_logprobs=expect_logprobs, prompts=prompts,
                    thinking=thinking)
        await load.warm_up()
        if cfg.slo is not None:
            return await slo_search(load)
        return [await load.level(name, conc, rate, n=cfg.requests_per_level, seed=cfg.seed + i)
                for i, (name, conc, rate) in enumerate(levels_of(cfg))]


# -- SLO goodput ------------------------------------------------------------------------------


def slo_verdict(s: LevelStats, slo) -> tuple[bool, str]:
    """Does level ``s`` meet every limit of ``slo`` (percentiles over its requests)? And why not."""
    if s.errors or not s.valid:
        return False, f"{s.errors} failed request(s)" if s.errors else (s.why_invalid or "invalid")
    dists = {"ttft": s.ttft_ms, "tpot": s.tpot_ms, "itl": s.itl_ms, "e2e": s.e2e_ms}
    for metric, pct, limit in slo.limits():
        v = dists[metric].get(pct)
        if v is None:
            return False, f"no {metric.upper()} measured"
        if v > limit:
            return False, f"{pct} {metric.upper()} {v:.0f} ms > {limit:g} ms"
    return True, "met"


def slo_objective_name(cfg: Bench) -> str:
    what = "concurrency" if cfg.slo_search == "concurrency" else "request rate"
    return f"goodput: req/s meeting {cfg.slo.describe()}, at the highest {what} meeting it"


async def slo_search(load: Load) -> list[LevelStats]:
    """The highest load (concurrency, or Poisson rate) whose level meets ``cfg.slo``: doubling
    from ``slo_min_load`` until a level fails (or ``slo_max_load``), then bisection between the
    last level met and the first failed; at most ``slo_max_levels`` levels, one repetition each.
    The level found is then measured in repetitions (its search pass counts as the first).
    Returns every level tried, by load; each carries ``slo`` = {met, why, load, found}."""
    cfg = load.cfg
    integer = cfg.slo_search == "concurrency"
    lo = max(1, round(cfg.slo_min_load)) if integer else cfg.slo_min_load
    hi = max(lo, int(cfg.slo_max_load)) if integer else cfg.slo_max_load
    tried: dict[float, tuple[Repetition, bool, str]] = {}

    def where(x: float) -> tuple[str, int | None, float | None, int]:
        if integer:
            return f"c={int(x)}", int(x), None, max(cfg.requests_per_level, 2 * int(x))
        return f"rate={x:.3g}", None, x, cfg.requests_per_level

    async def meets(x: float) -> bool:
        name, conc, rate, n = where(x)
        rep = await load.once(name, conc, rate, 0, n, cfg.seed)
        ok, why = slo_verdict(rep.stats, cfg.slo)
        tried[x] = (rep, ok, why)
        return ok

    best = fail = None
    x = lo
    while len(tried) < cfg.slo_max_levels:
        if not await meets(x):
            fail = x
            break
        best = x
        if x >= hi:
            break
        x = min(hi, x * 2)
    while best is not None and fail is not None and len(tried) < cfg.slo_max_levels:
        if integer and fail - best <= 1 or not integer and fail / best <= 1.1:
            break
        mid = (best + fail) // 2 if integer else round((best * fail) ** 0.5, 3)
        if await meets(mid):
            best = mid
        else:
            fail = mid
    out = []
    for x in sorted(tried):
        rep, ok, why = tried[x]
        name, conc, rate, n = where(x)
        if x == best:
            lv = await load.level(name, conc, rate, n=n, seed=cfg.seed, first=[rep])
            ok, why = slo_verdict(lv, cfg.slo)
        else:
            lv = pool(name, [rep], "search", **load.summary_kw())
        if lv.goodput is None and "goodput" not in lv.samples:  # no TTFT/TPOT limit: every answered request counts
            lv.goodput, lv.samples["goodput"] = lv.request_throughput, list(lv.samples.get("request_throughput", []))
        lv.slo = {"load": x, "met": ok, "why": why, "found": x == best, "limits": cfg.slo.describe(),
                  "search": cfg.slo_search, "levels_tried": len(tried), "first_failed": fail}
        out.append(lv)
    return out


def objective(levels: list[dict]) -> dict | None:
    """With an SLO search among ``levels``: the figure decide ranks by — goodput per repetition at
    the load found (``samples`` empty when no level met the SLO: then nothing to rank)."""
    searched = [lv for lv in levels if lv.get("slo")]
    if not searched:
        return None
    found = next((lv for lv in searched if lv["slo"].get("found")), None)
    what = "concurrency" if searched[0]["slo"].get("search") == "concurrency" else "request rate"
    name = f"goodput: req/s meeting {searched[0]['slo']['limits']}, at the highest {what} meeting it"
    if found is None:
        first = searched[0]
        return {"name": name, "samples": [], "higher_is_better": True, "level": None, "load": None,
                "why": f"no level met the SLO: at {first['level']}, {first['slo']['why']}"}
    samples = (found.get("samples") or {}).get("goodput") or []
    return {"name": name, "samples": samples, "higher_is_better": True, "level": found["level"],
            "load": found["slo"]["load"], "met_on_repeat": found["slo"]["met"],
            "why": found["slo"]["why"], "first_failed": found["slo"].get("first_failed")}


def _run_loop(coro):
    try:
        import uvloop  # optional: a faster event loop, same results
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def headline(levels: list[dict]) -> dict:
    """The figures a trial is ranked by: tok/s at the highest valid level, TTFT p50 at the lowest;
    with an SLO search, ``objective`` (goodput at the load found; bakeoff.decide ranks by it)."""
    valid = [lv for lv in levels if lv.get("valid")]
    if not valid:
        return {}
    top, low = valid[-1], valid[0]
    out = {
        "output_tok_s": top["output_tok_s"],
        "ttft_p50_ms": (low.get("ttft_ms") or {}).get("p50"),
        "tpot_p50_ms": (top.get("tpot_ms") or {}).get("p50"),
        "level": top["level"],
    }
    obj = objective(levels)
    if obj is not None:
        out["objective"] = obj
    return out
