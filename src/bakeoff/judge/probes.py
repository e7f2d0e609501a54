"""Correctness probes: collecting the replies in every mode (and the teacher-forced
continuations after near-ties), then ``judge``: the checks of ``bakeoff.judge.checks`` (one
module per correctness notion — detectors, content, floors, differential, tasks, gate,
concurrent, sampled, lm_eval — behind the ``Check`` contract) run in order on one ``Evidence``.
The probe set itself (prompts, gate items, answer scoring) is ``bakeoff.judge.probeset``.

The probe set runs in several modes, because garbage often appears only under one of them:
``single`` (one request at a time), ``long`` (one request per needle in a document that fills
most of the served context), ``concurrent`` (N copies of the set at once), ``bench c=N`` (the
benchmark's largest concurrency and prompt length, the shape the winner is ranked under) and
``gate`` (a generated set of arithmetic and retrieval items, scored with an interval and
compared with the baseline by a paired significance test). The outcome names the mode that
failed, the detector that fired and the measured values; ``checks_not_run`` lists the checks the
engine could not support (e.g. no logprobs).

Nothing passes without evidence of being right: ``absolute_floors`` applies to every trial, the
baseline included (a baseline below them is ``baseline_below_floor``: nothing known-good exists).

Exact text equality is not correctness: a healthy backend may change a greedy continuation where
two tokens are near-tied. So at a divergence the differential asks whether each side's token is
in the other's top-k within a small logprob gap, and then *keeps comparing*: it re-anchors the
trial on the baseline's tokens up to and including the divergence (teacher forcing, one request
per divergence) and judges the continuation the same way, so a reply that flips at a near-tie
and then degrades fails. A reply that stops early (EOS where the baseline's own token was far
more likely than any alternative) or is truncated is not "a prefix": it is an ``early_stop``.

Reasoning models (``[server] thinking``): a reply's answer is its content. A reply with no
content (a parser that never saw the thought end) is ``answer_in_reasoning`` (clients read
``content`` and got "") unless the spec says the deployment thinks (``thinking = "on"``); then
it is judged on its ``reasoning_content``. The
detectors read the thought too and the differential compares every generated token, thought
included. A reply cut by ``max_tokens`` while still thinking is *unanswered* (``unanswered``),
not wrong: its task is not scored, and a set with nothing answered is ``thinking_cut``.

Thresholds (measured on the real engine, docs/notes/judge-thresholds.md; SmolLM2-135M Q4_1 on
llama.cpp, CPU, healthy changes vs the baseline: A/A, flash attention, threads, batch sizes, KV
q8_0 + flash attention; threads and batch sizes not finished in time):
  * ``max_tie_gap`` 2.5 nats: the largest healthy gap at a divergence was 0.20 on CPU (flash attention), 1.60 under CUDA batching (H200);
    broken models diverge at inf (token outside the top-k) or stop ≥ 2 nats from EOS.
  * ``min_agreement`` 0.6 (whole answers, teacher-forced): healthy means 0.87–1.00.
  * ``gate_alpha`` 0.01 (one-sided exact McNemar): healthy runs lost ≤ 2 of 80 items (p ≥ 0.5) on
    CPU; on an H200 (CUDA, ``--parallel 8``) identical launches differed in 19–36 of 80 and one
    lost 7, gained 0 (p = 0.0078): the test pairs only items the baseline answers alike on each
    of its launches (``unstable_items``), and a gate-only failure is confirmed on a relaunch
    (``bakeoff.judge.confirm``) before it is called wrong.
  * ``GREEDY_SLACK`` 0.05 nats: every healthy greedy choice was its own top entry.
  * floors: tasks 60 % (SmolLM2: 100 %), gate 15 % (SmolLM2: 46–49 %), needles 1 (SmolLM2: 1–3 of 4).
  * ``sampled_margin`` 0.05 nats (``judge.checks.sampled``): healthy shifts of the chosen tokens'
    mean logprob at temperature 0.7 within ±0.07, sampler faults 0.27–0.55.
  * ``max_drift`` 0.15 nats (``judge.checks.drift``): healthy mean |logprob difference| on the
    tokens both sides chose ≤ 0.042 per mode on CPU, ≤ 0.110 on an H200 (A/A 0);
    ``max_drift_long`` 0.045 for the long probe (healthy ≤ 0.015 on CPU, ≤ 0.027 on the H200).
    A lossy axis (a KV-cache or weight dtype, a quantization) drifts by design: reported, not failed.
"""

from __future__ import annotations

import asyncio
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field

from bakeoff import progress
from bakeoff.judge.checks import Evidence
from bakeoff.judge.checks import concurrent, content, detectors, differential, drift, floors, gate, tasks
from bakeoff.judge.checks import lm_eval as lm_eval_gate
from bakeoff.judge.checks import sampled as sampled_path
from bakeoff.judge.checks.detectors import _name, detect
from bakeoff.judge.checks.differential import DIFF_MODES, Diff, _tail, compare, whole_diffs
from bakeoff.judge.probeset import Prompt, gate_items, load_prompt_set, messages
from bakeoff.measure.client import THINKING_FIELDS, Result, chat_body, new_session, stream_request, tokenize
from bakeoff.spec import Bench, Probes

# Names other modules and the tests import from here (the judge's public face), defined in the
# check modules and the probe set since the Check contract (issue 23, item 9).
from bakeoff.judge.checks.detectors import MODEL_BEHAVIOUR, repetition  # noqa: F401,E402
from bakeoff.judge.checks.differential import _spread, _toks, compare_whole  # noqa: F401,E402
from bakeoff.judge.checks.floors import absolute_floors  # noqa: F401,E402
from bakeoff.judge.checks.gate import launch_answers  # noqa: F401,E402
from bakeoff.judge.probeset import (  # noqa: F401,E402
    ProbeSetError, check_long, check_prompt, needle_found, scored_tasks, task_score, unanswered)
from bakeoff.judge.probeset import task_right as _task_right  # noqa: F401,E402 - the old name
from bakeoff.judge.stats import mcnemar_worse, unstable_items, wilson  # noqa: F401,E402

# -- the outcome --------------------------------------------------------------------------


@dataclass
class ProbeOutcome:
    passed: bool
    failed_mode: str | None = None   # single | long | concurrent | bench c=N | gate
    detector: str | None = None
    detail: str = ""
    values: dict = field(default_factory=dict)
    evidence: list[str] = field(default_factory=list)  # lines that show the failure
    checks_not_run: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


# -- running the probes -------------------------------------------------------------------

def _unexcusable(results: dict[str, Result], expect_logprobs: bool) -> bool:
    """A finding no baseline can excuse (NaN, errors, missing logprobs): no need to probe on."""
    return any(_name(f) not in MODEL_BEHAVIOUR for r in results.values() for f in detect(r, expect_logprobs=expect_logprobs))


def bench_mode(bench: Bench | None) -> str | None:
    """The probe mode shaped like the benchmark's heaviest level: ``bench c=N``."""
    return f"bench c={max(bench.concurrency)}" if bench is not None else None


async def _collect(base_url: str, cfg: Probes, model: str | None, ctx_size: int | None, timeout_s: float,
                   expect_logprobs: bool = True, bench: Bench | None = None, baseline: dict | None = None,
                   thinking: str = "auto", thinking_room: int = 0, recipe: str | None = None,
                   sampled: bool = False) -> dict:
    """Single requests, the long document, N concurrent copies, the benchmark-shaped batch,
    the task gate and (``sampled``) the replies drawn at temperature > 0; then, against the baseline, the teacher-forced continuations (``recipe``: how
    the engine gives its templated prompt, ``_teacher_force``). A mode that
    shows a finding no baseline can excuse ends the collection there. Every request asks for
    ``thinking`` (``[server] thinking``) and gets ``thinking_room`` tokens more for the thought."""
    prompts, long_cfg = load_prompt_set(cfg.set)
    url = base_url + "/v1/chat/completions"
    top = cfg.top_logprobs if expect_logprobs else -1

    def body(text: "str | list[dict]", max_tokens: int | None = None) -> dict:
        msgs = text if isinstance(text, list) else [{"role": "user", "content": text}]
        return chat_body(msgs, max_tokens=(max_tokens or cfg.max_tokens) + thinking_room,
                         top_logprobs=top, model=model, thinking=thinking)

    out: dict[str, dict[str, Result]] = {"single": {}, "long": {}, "concurrent": {}}
    info: dict = {"thinking": {"mode": thinking, "room": thinking_room}}
    # a multi-turn chat's prompt is its messages (``chats``), teacher-forced like the others
    texts: dict[str, dict[str, str]] = {"single": {p.id: p.text for p in prompts if not p.chat}}
    chats: dict[str, dict[str, list[dict]]] = {"single": {p.id: messages(p) for p in prompts if p.chat}}
    collected = {"prompts": prompts, "long": long_cfg, "results": out, "info": info, "texts": texts, "chats": chats}
    long_s = timeout_s  # the long document's budget (``long_timeout``), once the single replies have shown the pace

    def patient(session):
        """``session``, or a new one that waits ``long_s`` where that is longer."""
        return new_session(timeout_s=long_s) if long_s > timeout_s else nullcontext(session)

    async with new_session(timeout_s=timeout_s) as session:
        progress.note(f"single requests: {len(prompts)} prompts")
        for p in prompts:
            out["single"][p.id] = await stream_request(session, url, body(messages(p)))
        if _unexcusable(out["single"], expect_logprobs):
            return collected  # e.g. NaN: judged already
        if long_cfg:
            progress.note("the long document (near the served context)")
            texts["long"] = await _long_prompts(session, base_url, long_cfg, cfg, ctx_size, info)
            long_s = long_timeout(out["single"], (info.get("long_context") or {}).get("prompt_tokens")
                                  or max(len(t) for t in texts["long"].values()) // 3, cfg.long_max_tokens, timeout_s)
            info["long_context"]["timeout_s"] = round(long_s)
            async with patient(session) as long_session:
                for key, text in texts["long"].items():
                    r = await stream_request(long_session, url, body(text, cfg.long_max_tokens))
                    if r.error and "Timeout" in r.error.split(":")[0]:
                        r.error += (f" (no reply within {long_s:.0f} s: {LONG_SLACK:g}x what this server's own single "
                                    "replies took per token, at least server.request_timeout_s)")
                    out["long"][key] = r
            if _unexcusable(out["long"], expect_logprobs):
                return collected
        if cfg.concurrency:
            jobs = [(f"{p.id}#{i}", messages(p)) for i in range(cfg.concurrency) for p in prompts]
            progress.note(f"concurrent copies: {len(jobs)} requests at once")
            results = await asyncio.gather(*(stream_request(session, url, body(t)) for _, t in jobs))
            out["concurrent"] = dict(zip((j for j, _ in jobs), results))
            if _unexcusable(out["concurrent"], expect_logprobs):
                return collected
        mode = bench_mode(bench) if cfg.load_probe else None
        if mode:
            progress.note(f"the benchmark's shape ({mode})")
            pad = await _pad_text(session, base_url, bench.input_tokens)
            jobs = [(f"{p.id}#{i}", p) for i, p in zip(range(max(bench.concurrency)), _cycle(prompts))]
            results = await asyncio.gather(*(stream_request(session, url, body(messages(p, pad + p.text))) for _, p in jobs))
            out[mode] = dict(zip((j for j, _ in jobs), results))
            texts[mode] = {j: pad + p.text for j, p in jobs if not p.chat}
            chats[mode] = {j: messages(p, pad + p.text) for j, p in jobs if p.chat}
            info["bench_prompt"] = {"concurrency": len(jobs), "padding_tokens": bench.input_tokens}
            if _unexcusable(out[mode], expect_logprobs):
                return collected
        if cfg.gate_items:
            sem = asyncio.Semaphore(max(1, cfg.concurrency))

            async def one(p: Prompt) -> Result:
                async with sem:
                    return await stream_request(session, url, body(p.text, cfg.gate_max_tokens))

            items = gate_items(cfg.gate_items, cfg.gate_seed)
            progress.note(f"task gate: {len(items)} items")
            out["gate"] = dict(zip((p.id for p in items), await asyncio.gather(*(one(p) for p in items))))
        if sampled and expect_logprobs:
            progress.note(f"the sampled path: {len(prompts)} prompts x {cfg.sampled_seeds} seeds at temperature "
                          f"{cfg.sampled_temperature}")
            collected["sampled"] = await sampled_path.collect(session, url, prompts, cfg, lambda p: body(messages(p)))
        elif sampled:
            info.setdefault("checks_not_run", []).append(sampled_path.NO_LOGPROBS)
        if baseline is not None and expect_logprobs and cfg.max_reanchors:
            progress.note("teacher forcing the near-tie divergences")
            async with patient(session) as tf_session:  # long prompts are forced too
                collected["anchored"] = await _teacher_force(tf_session, base_url, model, cfg, collected, baseline, info, recipe)
    return collected


LONG_SLACK = 4.0  # the long request's time budget over what the server's own single replies predict
LONG_CAP_S = 3600.0


def long_timeout(single: dict[str, Result], prompt_tokens: int, max_tokens: int, floor_s: float) -> float:
    """The time a long-document request may take: ``LONG_SLACK`` times what this server's own
    single replies predict for its prompt and answer (each side at the slowest rate seen: a
    short prompt's time to first token is mostly overhead, so the prefill rate is underestimated
    and the budget generous), never below ``floor_s`` (``server.request_timeout_s``) nor above
    an hour. A server that stays this far behind its own pace is hung; one that is merely slow
    on a loaded machine is not called wrong for the probe's own clock."""
    prefill, decode = [], []
    for r in single.values():
        if not r.ok or r.first_token is None:
            continue
        ttft = max(r.first_token - r.start, 1e-3)
        prefill.append((r.prompt_tokens or max(1, len(r.text) // 4)) / ttft)
        n = r.completion_tokens or len(r.chunk_times)
        if r.last_token is not None and n > 1 and r.last_token > r.first_token:
            decode.append((n - 1) / (r.last_token - r.first_token))
    if not prefill:
        return floor_s
    need = prompt_tokens / min(prefill) + (max_tokens / min(decode) if decode else 0.0)
    return max(floor_s, min(LONG_CAP_S, LONG_SLACK * need))


def _cycle(prompts: list[Prompt]):
    while True:
        yield from prompts


async def _pad_text(session, base_url: str, tokens: int) -> str:
    """Neutral text of about ``tokens`` tokens put before each benchmark-shaped probe prompt."""
    unit = "The weather was mild and the streets were quiet that day. "
    per = await tokenize(session, base_url, unit) or 13
    return unit * max(0, tokens // per) + "\n\n"


async def served_context(session, base_url: str) -> int | None:
    """The per-request context the server reports (llama.cpp meta.n_ctx, vLLM max_model_len)."""
    try:
        async with session.get(base_url + "/v1/models") as resp:
            data = await resp.json(content_type=None)
        first = (data.get("data") or [{}])[0]
        return (first.get("meta") or {}).get("n_ctx") or first.get("max_model_len")
    except Exception:  # noqa: BLE001 - any odd answer just means "unknown"
        return None


async def _long_prompts(session, base_url: str, long_cfg: dict, cfg: Probes, ctx_size: int | None, info: dict) -> dict[str, str]:
    """One prompt per needle: the same document (filler with every needle at its depth) between
    the intro and the question, sized so that prompt + answer fill ``long_fill`` of the served
    context, measured in the server's tokens (chat template included where it can apply it)."""
    ctx = await served_context(session, base_url) or ctx_size
    room = (info.get("thinking") or {}).get("room", 0)
    budget = cfg.long_prompt_tokens or (int(ctx * cfg.long_fill) - cfg.long_max_tokens - room if ctx else 1024)
    filler = long_cfg["filler"]
    per = await tokenize(session, base_url, filler) or max(1, len(filler) // 4)
    needles = long_cfg["needles"]

    def build(reps: int) -> dict[str, str]:
        at: dict[int, list[str]] = {}
        for n in needles:
            at.setdefault(min(reps - 1, int(float(n.get("depth", 0.5)) * reps)), []).append(long_cfg["needle"].format(**n) + " ")
        doc = "".join("".join(at.get(i, [])) + filler for i in range(reps))
        return {n["key"]: (long_cfg.get("intro", "").format(**n) + "\n\n" + doc + "\n\n" + long_cfg["question"].format(**n)).strip()
                for n in needles}

    async def size(prompts: dict[str, str]) -> int | None:
        text = max(prompts.values(), key=len)
        templated = await _template(session, base_url, text, (info.get("thinking") or {}).get("mode", "auto"))
        n = await tokenize(session, base_url, templated or text)
        return None if n is None else n + (0 if templated else 48)  # unknown template: a margin

    reps = max(1, budget // per)
    prompts = build(reps)
    measured = await size(prompts)
    while measured is not None and measured > budget and reps > 1:  # the needles and template take room too
        reps = max(1, reps - max(1, (measured - budget) // per))
        prompts = build(reps)
        measured = await size(prompts)
    info["long_context"] = {"served_context": ctx, "target_tokens": budget, "prompt_tokens": measured, "filler_repeats": reps}
    return prompts


# -- teacher forcing: how each engine gives the chat-templated prompt ----------------------
#
# A recipe takes (session, base_url, model, messages, thinking) and returns the prompt the
# chat API would have run: its text (llama.cpp) or its token ids (vLLM, SGLang), or None where
# the server will not say. Engines name theirs in ``Engine.templated_prompt``; an engine with
# none is re-anchored through the chat API instead (``_chat_continue``).


async def _post_json(session, url: str, body: dict):
    """POST ``body``; the JSON answer, or None on any failure (unsupported, refused, down).
    A pooled keep-alive connection the server dropped is retried on a fresh one."""
    import aiohttp

    for attempt in range(2):
        try:
            if attempt == 0:
                async with session.post(url, json=body) as resp:
                    return await resp.json(content_type=None) if resp.status == 200 else None
            async with new_session(timeout_s=session.timeout.total, fresh=True) as fresh, fresh.post(url, json=body) as resp:
                return await resp.json(content_type=None) if resp.status == 200 else None
        except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
            continue
        except Exception:  # noqa: BLE001 - anything else: unsupported
            return None
    return None


def _ids(value) -> list[int] | None:
    return value if isinstance(value, list) and value and all(isinstance(i, int) for i in value) else None


async def _template_llamacpp(session, base_url: str, model: str | None, messages: list[dict], thinking: str) -> str | None:
    """llama.cpp ``POST /apply-template``: ``{"prompt": text}``."""
    data = await _post_json(session, base_url + "/apply-template", {"messages": messages, **THINKING_FIELDS[thinking]})
    return data.get("prompt") if isinstance(data, dict) and isinstance(data.get("prompt"), str) else None


async def _template_vllm(session, base_url: str, model: str | None, messages: list[dict], thinking: str) -> list[int] | None:
    """vLLM ``POST /tokenize`` with ``messages`` (TokenizeChatRequest: the chat template applied
    with ``add_generation_prompt``, ``chat_template_kwargs`` passed to it): ``{"tokens": ids}``."""
    body = {"messages": messages, "add_generation_prompt": True, "add_special_tokens": False, **THINKING_FIELDS[thinking]}
    if model:
        body["model"] = model
    data = await _post_json(session, base_url + "/tokenize", body)
    return _ids(data.get("tokens")) if isinstance(data, dict) else None


async def _template_sglang(session, base_url: str, model: str | None, messages: list[dict], thinking: str) -> list[int] | None:
    """SGLang: a one-token chat request with ``return_prompt_token_ids`` (ChatCompletionRequest of
    srt/entrypoints/openai/protocol.py; the choice then carries ``prompt_token_ids``, the ids
    its chat template produced). Older SGLang ignores the field: None."""
    body = chat_body(messages, max_tokens=1, stream=False, model=model, thinking=thinking, top_logprobs=-1,
                     extra={"return_prompt_token_ids": True})
    data = await _post_json(session, base_url + "/v1/chat/completions", body)
    choice = ((data or {}).get("choices") or [{}])[0] if isinstance(data, dict) else {}
    return _ids(choice.get("prompt_token_ids")) if isinstance(choice, dict) else None


PROMPT_RECIPES = {"apply-template": _template_llamacpp, "tokenize-messages": _template_vllm,
                  "chat-prompt-ids": _template_sglang}


async def _template(session, base_url: str, text: str, thinking: str = "auto") -> str | None:
    """The chat-templated prompt text (llama.cpp ``/apply-template``), asked with the same
    ``thinking`` fields as the chat requests (a thinking template's generation prompt differs:
    Qwen3-style "<think>" opened vs an empty, closed thought), or None where the server has none."""
    return await _template_llamacpp(session, base_url, None, [{"role": "user", "content": text}], thinking)


async def _text_ids(session, base_url: str, text: str) -> list[int] | None:
    """``text`` in the server's tokens, no special tokens added (vLLM and SGLang ``/tokenize``)."""
    data = await _post_json(session, base_url + "/tokenize", {"prompt": text, "add_special_tokens": False})
    return _ids(data.get("tokens")) if isinstance(data, dict) else None


async def _forced_prompt(session, base_url: str, prefix, forced: list[dict]):
    """The completions prompt: the templated prefix, then the baseline's tokens. llama.cpp takes
    text and ids mixed; an ids prefix needs the forced tokens as ids too (the baseline's own ids
    where its logprobs carry them, else its text re-tokenized by the server)."""
    text = "".join(t.get("token") or "" for t in forced)
    own = [t.get("id") for t in forced]
    if isinstance(prefix, str):
        return [prefix, *own] if all(isinstance(i, int) for i in own) else prefix + text
    ids = own if all(isinstance(i, int) for i in own) else await _text_ids(session, base_url, text)
    return None if ids is None else [*prefix, *ids]


async def _complete_forced(session, base_url: str, model: str | None, prefix, forced: list[dict], max_tokens: int,
                           top_k: int) -> Result:
    """The trial's greedy continuation after ``prefix`` + ``forced`` (``/v1/completions``)."""
    prompt = await _forced_prompt(session, base_url, prefix, forced)
    if prompt is None:
        return Result(text="", error="the server gave no token ids for the forced text (/tokenize)")
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "seed": 0, "stream": True,
            "logprobs": top_k, "stream_options": {"include_usage": True}}
    if model:
        body["model"] = model
    return await stream_request(session, base_url + "/v1/completions", body, api="completions")


async def _chat_continue(session, base_url: str, model: str | None, request: list[dict], forced: list[dict], max_tokens: int,
                         top_k: int, thinking: str) -> Result:
    """The fallback where the engine gives no templated prompt: the chat API itself, the forced
    tokens as the assistant's unfinished reply (``continue_final_message``, no generation prompt:
    vLLM's and SGLang's chat extension; llama.cpp continues a final assistant message as well)."""
    forced_text = "".join(t.get("token") or "" for t in forced)
    messages = [*request, {"role": "assistant", "content": forced_text}]
    body = chat_body(messages, max_tokens=max_tokens, top_logprobs=top_k, model=model, thinking=thinking,
                     extra={"continue_final_message": True, "add_generation_prompt": False})
    return await stream_request(session, base_url + "/v1/chat/completions", body)


async def _chat_continue_holds(session, base_url: str, model: str | None, request: list[dict], own: list[dict], diverge_at: int,
                               top_k: int, thinking: str) -> bool:
    """Whether the chat fallback really continues a reply on this server: re-anchored on the
    trial's *own* first ``j`` tokens (inside the prefix it shares with the baseline where it has
    one of two tokens or more, else just past its divergence), it must give back its own token
    ``j``. A server that ignores ``continue_final_message`` starts a new turn instead, and its
    continuation would be judged against the wrong text (a false alarm): then the check is said
    not run."""
    j = diverge_at - 1 if diverge_at >= 2 else diverge_at + 1
    if j < 1 or j >= len(own):
        return False
    cont = await _chat_continue(session, base_url, model, request, own[:j], 1, top_k, thinking)
    return bool(cont.ok and cont.tokens) and cont.tokens[0].get("token") == own[j].get("token")


def _should_force(b: Result | None, r: Result, top_k: int, tie_gap: float) -> Diff | None:
    """The diff of a reply worth teacher forcing: both sides with logprobs, a near-tie divergence
    before either reply's end."""
    if b is None or not b.ok or not r.ok or not b.tokens or not r.tokens:
        return None
    d = compare(b, r, top_k=top_k, tie_gap=tie_gap)
    if not d.consistent or d.diverge_at is None or d.early_stop or d.diverge_at >= min(len(b.tokens), len(r.tokens)):
        return None
    return d


async def _teacher_force(session, base_url: str, model: str | None, cfg: Probes, collected: dict, baseline: dict,
                         info: dict, recipe: str | None = "apply-template") -> dict:
    """For each reply that diverges from the baseline's at a near-tie, re-anchor the trial on the
    baseline's tokens up to and including the divergence and collect its continuation; repeat
    at the next near-tie, up to ``max_reanchors`` times. Returns {mode: {pid: [(k, Result)]}}.

    ``recipe`` (``Engine.templated_prompt``, a key of ``PROMPT_RECIPES``) gets the templated
    prompt, continued by ``/v1/completions``; with none, or where it answers nothing, the chat
    API continues the reply (``_chat_continue``) once the server has shown it honours that. How
    each reply was forced is in ``info["teacher_forcing"]``; a reply not forced is a
    ``checks_not_run`` line."""
    top_k = cfg.top_logprobs or 5
    thinking = (info.get("thinking") or {}).get("mode", "auto")
    texts = _request_texts(collected)
    anchored: dict = {}
    how: dict[str, int] = {}
    fallback_holds = False  # shown once per trial, on the first reply that can show it
    for mode, items in collected["results"].items():
        if mode not in DIFF_MODES and not mode.startswith("bench "):
            continue
        for pid, r in items.items():
            d = _should_force(baseline["results"].get(mode, {}).get(pid), r, top_k, cfg.max_tie_gap)
            messages = _request_messages(collected, mode, pid)
            if d is None or messages is None:
                continue
            b = baseline["results"][mode][pid]
            prefix = await PROMPT_RECIPES[recipe](session, base_url, model, messages, thinking) if recipe else None
            if prefix is None and not fallback_holds:
                fallback_holds = await _chat_continue_holds(session, base_url, model, messages, r.tokens, d.diverge_at,
                                                            top_k, thinking)
            if prefix is None and not fallback_holds:
                why = (f"{recipe} gave no templated prompt" if recipe else "the engine gives no templated prompt") + \
                      "; the chat API did not continue a final assistant message (continue_final_message)"
                info.setdefault("checks_not_run", []).append(f"teacher-forced continuation of {mode}/{pid} ({why})")
                continue
            via = recipe if prefix is not None else "chat continue_final_message"
            k = d.diverge_at + 1
            for _ in range(cfg.max_reanchors):
                if k >= len(b.tokens):
                    break
                room = len(b.tokens) - k + 4
                cont = (await _complete_forced(session, base_url, model, prefix, b.tokens[:k], room, top_k) if prefix is not None
                        else await _chat_continue(session, base_url, model, messages, b.tokens[:k], room, top_k, thinking))
                if cont.error or not cont.tokens:
                    info.setdefault("checks_not_run", []).append(f"teacher-forced continuation of {mode}/{pid} "
                                                                 f"({cont.error or 'no logprobs'})")
                    break
                how[via] = how.get(via, 0) + 1
                anchored.setdefault(mode, {}).setdefault(pid, []).append((k, cont))
                sub = compare(_tail(b, k), cont, top_k=top_k, tie_gap=cfg.max_tie_gap)
                if not sub.consistent or sub.diverge_at is None or sub.diverge_at >= min(len(b.tokens) - k, len(cont.tokens)):
                    break
                k += sub.diverge_at + 1
    if how:
        info["teacher_forcing"] = how
    return anchored


def _request_texts(collected: dict) -> dict[str, dict[str, str]]:
    return collected.get("texts", {})


def _request_messages(collected: dict, mode: str, pid: str) -> list[dict] | None:
    """The chat messages a reply was asked with: a multi-turn chat's own (``collected["chats"]``),
    else its one user text; None when the request is not known."""
    chat = (collected.get("chats") or {}).get(mode, {}).get(pid)
    if chat is not None:
        return chat
    text = _request_texts(collected).get(mode, {}).get(pid)
    return None if text is None else [{"role": "user", "content": text}]


def run_probes(base_url: str, cfg: Probes, *, model: str | None = None, ctx_size: int | None = None,
               timeout_s: float = 120, expect_logprobs: bool = True, bench: Bench | None = None,
               baseline: dict | None = None, thinking: str = "auto", thinking_room: int = 0,
               templated_prompt: str | None = None, sampled: bool = False) -> dict:
    """Run the probe set in every mode against a ready server; return raw results per mode.
    ``thinking``/``thinking_room``: ``[server] thinking`` and ``Server.thinking_room``;
    ``templated_prompt``: ``Engine.templated_prompt`` (teacher forcing); ``sampled``: also draw
    the sampled-path replies (``bakeoff.judge.checks.sampled.wanted``)."""
    return asyncio.run(_collect(base_url, cfg, model, ctx_size, timeout_s, expect_logprobs, bench, baseline,
                                thinking, thinking_room, templated_prompt, sampled))


# Without logprobs no divergence can be shown to be a near-tie, and a healthy change (a dtype)
# flips greedy words early (transformers serve, bfloat16 vs float32: diverged at word 1 of 13):
# text agreement then says nothing either way. Such a trial is judged by what does not hang on
# one greedy path: the detectors, early stops, the tasks and needles (any lost one fails), the
# task gate's paired test and the concurrent copies.
NO_LOGPROBS_DIFF = ("logprob near-tie test and teacher forcing (the engine gives no logprobs): a reply that diverges "
                    "from the baseline's text is judged by the detectors, the tasks, the needles and the task gate only")


def judge(collected: dict, cfg: Probes, baseline: dict | None, *, expect_logprobs: bool = True,
          role: str = "trial", lossy: tuple = ()) -> ProbeOutcome:
    """Turn collected results (and the baseline's, if any) into a pass/fail with evidence.

    ``role`` is ``baseline`` for the reference configuration itself: its floors failing is
    ``baseline_below_floor`` (nothing known-good exists). ``lossy``: the trial's changed axes
    that change numeric precision (``drift.lossy_axes``): a drift beyond the limits is then
    reported, not failed. The checks, in order; the first failure decides and ``values`` holds
    everything measured up to there:
      1. absolute detectors in every mode, zero tolerance (a model behaviour such as looping is
         excused only where the baseline shows it on the same prompt); then ``answer_in_reasoning``
         (``_check_content``): a finished reply whose content is empty and whose answer is only in
         ``reasoning_content``, unless the spec says the deployment thinks (``thinking = "on"``);
      2. absolute floors (``absolute_floors``), for every trial;
      3. the whole-answer differential vs the baseline in single, long and bench modes; then the
         logprob drift of the tokens both sides chose (``bakeoff.judge.checks.drift``), per mode;
      4. tasks and needles the baseline got right, lost by a divergence that is not a near-tie;
      5. the task gate: paired exact McNemar test vs the baseline, over the items the baseline
         answered alike on each of its launches (``launch_answers``);
      6. concurrent copies vs this server's single answers, zero tolerance;
      7. the sampled path, when it was collected (``bakeoff.judge.checks.sampled``): replies at
         temperature > 0 whose chosen tokens' likelihood moved from the baseline's;
      8. the lm-evaluation-harness gate, when it ran (``bakeoff.judge.lmeval``): the same test
         on the documents of its tasks.
    """
    prompts: list[Prompt] = collected["prompts"]
    res = collected["results"]
    base_res = baseline["results"] if baseline else None
    values: dict = {"requests": {mode: len(items) for mode, items in res.items() if items}}
    info = collected.get("info") or {}
    if info.get("long_context"):
        values["long_context"] = info["long_context"]
    if info.get("teacher_forcing"):  # how many continuations each way was used for (_teacher_force)
        values["teacher_forcing"] = info["teacher_forcing"]
    not_run = list(dict.fromkeys(info.get("checks_not_run", [])))
    if thought := thinking_values(collected):
        values["thinking"] = thought
        if thought["cut_while_thinking"]:
            not_run.append(f"task check of {thought['cut_while_thinking']} replies cut by max_tokens while thinking "
                           "(truncated, not wrong: raise server.thinking_tokens)")
    if not expect_logprobs:
        not_run += [NO_LOGPROBS_DIFF, "nonfinite logprobs", "teacher-forced continuation"]
    if base_res is None:
        not_run.append("differential vs a baseline (none healthy to compare with)" if role != "baseline" else
                       "differential (this is the baseline: judged by the detectors and the absolute floors)")
    elif collected.get("sampled") and not baseline.get("sampled"):
        not_run.append("sampled-path comparison (the baseline drew no sampled replies: it was judged with probes.sampled "
                       "off or by an older bakeoff)")

    def fail(mode: str, detector: str, detail: str, evidence: list[str]) -> ProbeOutcome:
        return ProbeOutcome(False, mode, detector, detail, values, evidence=evidence, checks_not_run=not_run)

    ev = Evidence(collected, baseline, cfg, values, expect_logprobs, role,
                  diffs=whole_diffs(collected, baseline, cfg) if baseline is not None else {}, not_run=not_run,
                  lossy=tuple(lossy))
    for check in CHECKS:
        found = check(ev)
        if found:
            return fail(*found)
    if not_run:
        values["checks_not_run"] = not_run
    return ProbeOutcome(True, values=values, detail=_summary(values), checks_not_run=not_run)


def thinking_values(collected: dict) -> dict | None:
    """How the replies thought, for the report: ``[server] thinking`` (mode, room) and how many
    replies carried reasoning, were judged on it (no content) or were cut while thinking. None
    when thinking was left to the server and no reply carried any (a model that does not think)."""
    rs = [r for items in collected["results"].values() for r in items.values() if r.ok]
    asked = (collected.get("info") or {}).get("thinking") or {"mode": "auto", "room": 0}
    thought = sum(bool(r.reasoning) for r in rs)
    if asked["mode"] == "auto" and not thought:
        return None
    return {**asked, "replies": len(rs), "with_reasoning": thought, "judged_on_reasoning": sum(r.from_reasoning for r in rs),
            "cut_while_thinking": sum(r.cut_while_thinking for r in rs)}


# The judge's checks, in order (``judge``): the first finding decides.
CHECKS = (detectors.check, content.check, floors.check, differential.check, drift.check, tasks.check, gate.check,
          concurrent.check, sampled_path.check, lm_eval_gate.check)


def _summary(values: dict) -> str:
    text = ", ".join(f"{k}={v}" for k, v in values.items() if k not in ("requests", "long_context", "checks_not_run", "lm_eval", "thinking"))
    if values.get("lm_eval"):
        from bakeoff.judge import lmeval

        text = ", ".join(x for x in (text, lmeval.summary(values["lm_eval"])) if x)
    return text


def results_to_json(collected: dict, bench_levels: list[dict] | None = None) -> dict:
    """What the store keeps of a probe run (and, for the baseline's reference, its benchmark's
    per-request reply lengths and replies: ``bench`` = [{level, lens, repeats, replies}])."""
    out = {
        "results": {m: {k: asdict(r) for k, r in items.items()} for m, items in collected["results"].items()},
        "texts": {m: items for m, items in (collected.get("texts") or {}).items() if m != "single"},
        "long": collected.get("long", {}),
        "info": collected.get("info", {}),
        "anchored": {m: {p: [[k, asdict(r)] for k, r in conts] for p, conts in items.items()}
                     for m, items in (collected.get("anchored") or {}).items()},
    }
    if collected.get("lm_eval"):
        out["lm_eval"] = collected["lm_eval"]
    if collected.get("sampled"):
        out["sampled"] = {k: asdict(r) for k, r in collected["sampled"].items()}
    if bench_levels is not None:
        out["bench"] = [{**{k: lv.get(k) for k in ("level", "lens", "repeats")},
                         **({"replies": lv["replies"]} if lv.get("replies") else {})} for lv in bench_levels]
    return out


def results_from_json(data: dict, prompt_set: str) -> dict:
    prompts, _ = load_prompt_set(prompt_set)
    return {
        "prompts": prompts,
        "long": data.get("long", {}),
        "info": data.get("info", {}),
        "bench": data.get("bench"),
        "lm_eval": data.get("lm_eval"),
        "launch_answers": data.get("launch_answers") or [],
        "texts": data.get("texts") or {},
        "anchored": {m: {p: [(k, Result(**r)) for k, r in conts] for p, conts in items.items()}
                     for m, items in (data.get("anchored") or {}).items()},
        "results": {m: {k: Result(**r) for k, r in items.items()} for m, items in data["results"].items()},
        "sampled": {k: Result(**r) for k, r in (data.get("sampled") or {}).items()},
    }
