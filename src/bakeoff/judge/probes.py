"""Correctness probes: absolute detectors, absolute floors, the differential comparison against
the baseline over the whole answer, and a task gate with statistics.

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
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import tomllib
import unicodedata
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

from bakeoff import progress
from bakeoff.measure.client import THINKING_FIELDS, Result, chat_body, new_session, stream_request, tokenize
from bakeoff.spec import Bench, Probes
from bakeoff.judge.checks import Evidence, Finding
from bakeoff.judge.checks import differential
from bakeoff.judge.checks import lm_eval as lm_eval_gate
from bakeoff.judge.checks.differential import DIFF_MODES, Diff, _tail, _toks, compare, whole_diffs
from bakeoff.judge.checks.differential import _spread, compare_whole  # noqa: F401 - still importable from probes
from bakeoff.judge.checks import sampled as sampled_path
from bakeoff.judge.stats import finite as _finite
from bakeoff.judge.stats import mcnemar_worse, unstable_items, wilson  # noqa: F401 - probes.wilson etc. stay importable

# -- the prompt set ---------------------------------------------------------------------


@dataclass(frozen=True)
class Prompt:
    """One probe. ``text`` is the last user message; ``system`` and ``turns`` (earlier user and
    assistant messages, alternating, the user first) make it a multi-turn chat with a system
    prompt — where some faults show only (vLLM #38652: an FP8 KV cache garbled exactly those)."""

    id: str
    text: str
    answer: str | None = None
    json: bool = False
    system: str | None = None
    turns: tuple[str, ...] = ()

    @property
    def chat(self) -> bool:
        return bool(self.system or self.turns)


def messages(p: Prompt, text: str | None = None) -> list[dict]:
    """The chat messages of ``p``: its system prompt, its earlier turns, then ``text`` (its own
    text by default; the benchmark-shaped mode puts padding before it) as the last user message."""
    out = [{"role": "system", "content": p.system}] if p.system else []
    out += [{"role": ("user", "assistant")[i % 2], "content": t} for i, t in enumerate(p.turns)]
    return [*out, {"role": "user", "content": p.text if text is None else text}]


class ProbeSetError(ValueError):
    """A probe set that cannot be used: missing file, unknown ids in ``only``, no prompts."""


def load_prompt_set(name: str, _seen: tuple[str, ...] = ()) -> tuple[list[Prompt], dict]:
    """A built-in set by name, or a TOML file. A set may ``include`` another and keep ``only``
    some of its prompt ids; its own ``[[prompt]]`` entries and ``[long]`` are added on top.
    Raises ProbeSetError for a missing file, an include cycle, unknown ``only`` ids, a set
    without prompts, a prompt whose ``answer`` is not a regex, or a ``[long]`` table that the
    long probe could not use (``check_long``)."""
    if name in _seen:
        raise ProbeSetError(f"probe set {name!r}: `include` cycle ({' -> '.join([*_seen, name])})")
    if name.endswith(".toml"):
        path = Path(name)
        if not path.is_file():
            raise ProbeSetError(f"probe set file {name!r} does not exist")
        text = path.read_text()
    else:
        res = resources.files("bakeoff.data.probes").joinpath(f"{name}.toml")
        if not res.is_file():
            known = sorted(p.name[:-5] for p in resources.files("bakeoff.data.probes").iterdir() if p.name.endswith(".toml"))
            raise ProbeSetError(f"no built-in probe set {name!r} (known: {', '.join(known)}; or a path ending in .toml)")
        text = res.read_text()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ProbeSetError(f"probe set {name!r} is not valid TOML: {err}") from None
    prompts: list[Prompt] = []
    long_cfg: dict = {}
    if "include" in data:
        if not isinstance(data["include"], str):
            raise ProbeSetError(f"probe set {name!r}: `include` must be one set name or .toml path, got {data['include']!r}")
        prompts, long_cfg = load_prompt_set(data["include"], (*_seen, name))
        if "only" in data:
            unknown = [i for i in data["only"] if i not in {p.id for p in prompts}]
            if unknown:
                raise ProbeSetError(f"probe set {name!r}: `only` names unknown prompt ids {unknown} "
                                    f"(known in {data['include']!r}: {', '.join(p.id for p in prompts)})")
            prompts = [p for p in prompts if p.id in data["only"]]
    elif "only" in data:
        raise ProbeSetError(f"probe set {name!r}: `only` needs `include` (the set it picks from)")
    try:
        prompts = prompts + [Prompt(**{**p, "turns": tuple(p.get("turns", ()))}) for p in data.get("prompt", [])]
    except TypeError as err:
        raise ProbeSetError(f"probe set {name!r}: a [[prompt]] entry is malformed: {err}") from None
    for p in prompts:
        if len(p.turns) % 2 or not all(isinstance(t, str) and t for t in p.turns):
            raise ProbeSetError(f"probe set {name!r}: prompt {p.id!r}: `turns` must be pairs of non-empty strings "
                                f"(user, assistant, ...) before `text`; got {len(p.turns)} entries")
    if not prompts:
        raise ProbeSetError(f"probe set {name!r} resolves to no prompts")
    for p in prompts:
        check_prompt(name, p)
    long_cfg = data.get("long", long_cfg)
    check_long(name, long_cfg)
    return prompts, _long_config(long_cfg)


def check_prompt(name: str, p: Prompt) -> None:
    """A prompt the judge can use: string ``id`` and ``text``, ``answer`` a regex that compiles."""
    where = f"probe set {name!r}: prompt {p.id!r}"
    if not isinstance(p.id, str) or not isinstance(p.text, str) or not p.text:
        raise ProbeSetError(f"{where}: `id` and `text` must be non-empty strings")
    if not isinstance(p.json, bool):
        raise ProbeSetError(f"{where}: `json` must be true or false, got {p.json!r}")
    if p.answer is None:
        return
    if not isinstance(p.answer, str):
        raise ProbeSetError(f"{where}: `answer` must be a regex string, e.g. answer = '{p.answer}', got {p.answer!r}")
    try:
        re.compile(p.answer, re.IGNORECASE)
    except re.error as err:
        raise ProbeSetError(f"{where}: `answer` {p.answer!r} is not a valid regex ({err})") from None


LONG_STRINGS = ("filler", "intro", "needle", "question", "fact", "answer")


def check_long(name: str, long_cfg: object) -> None:
    """A ``[long]`` table the long probe can use: ``filler``, ``needle`` and ``question`` strings
    and ``needles`` (each with a string ``key`` and ``word``, ``depth`` in [0, 1]; the templates'
    ``{key}``/``{word}`` fields only), or the old one-fact form (``filler``, ``fact``, ``question``)."""
    where = f"probe set {name!r}: [long]"
    if not long_cfg:
        return
    if not isinstance(long_cfg, dict):
        raise ProbeSetError(f"{where} must be a table")
    needles = "needles" in long_cfg
    need = ("filler", "needle", "question") if needles else ("filler", "fact", "question")
    missing = [k for k in need if not long_cfg.get(k)]
    if missing:
        raise ProbeSetError(f"{where} lacks {', '.join(repr(k) for k in missing)}; it needs {', '.join(need)}"
                            + (", needles" if needles else " (or needle, question and needles = [{key, word, depth}])"))
    for k in LONG_STRINGS:
        if k in long_cfg and not isinstance(long_cfg[k], str):
            raise ProbeSetError(f"{where}: {k} must be a string, got {long_cfg[k]!r}")
    if not needles:
        try:
            re.compile(long_cfg.get("answer", ""))
        except re.error as err:
            raise ProbeSetError(f"{where}: answer {long_cfg['answer']!r} is not a valid regex ({err})") from None
        return
    if not isinstance(long_cfg["needles"], list) or not long_cfg["needles"]:
        raise ProbeSetError(f"{where}: needles must be a non-empty list of {{ key, word, depth }}")
    keys = set()
    for i, n in enumerate(long_cfg["needles"]):
        if not isinstance(n, dict) or not all(isinstance(n.get(f), str) and n.get(f) for f in ("key", "word")):
            raise ProbeSetError(f"{where}: needles[{i}] needs a string `key` and `word`, got {n!r}")
        depth = n.get("depth", 0.5)
        if isinstance(depth, bool) or not isinstance(depth, (int, float)) or not 0 <= depth <= 1:
            raise ProbeSetError(f"{where}: needles[{i}].depth must be a number in [0, 1], got {depth!r}")
        if n["key"] in keys:
            raise ProbeSetError(f"{where}: needles[{i}]: key {n['key']!r} is listed twice")
        keys.add(n["key"])
        if long_cfg.get("regex"):
            try:
                re.compile(n["word"])
            except re.error as err:
                raise ProbeSetError(f"{where}: needles[{i}].word {n['word']!r} is not a valid regex ({err})") from None
        for k in ("intro", "needle", "question"):
            try:
                str(long_cfg.get(k, "")).format(**n)
            except (KeyError, IndexError, ValueError) as err:
                raise ProbeSetError(f"{where}: {k} {long_cfg.get(k)!r} cannot be filled from needles[{i}] "
                                    f"(fields: {{key}}, {{word}}; {err!r})") from None


def _long_config(long_cfg: dict) -> dict:
    """The long probe's needles; the old one-fact form (fact/question/answer) is one needle."""
    if not long_cfg or "needles" in long_cfg:
        return long_cfg
    return {"filler": long_cfg["filler"], "intro": "", "needle": long_cfg["fact"].replace("{", "{{").replace("}", "}}"),
            "question": long_cfg["question"].replace("{", "{{").replace("}", "}}"),
            "needles": [{"key": "fact", "word": long_cfg.get("answer", ""), "depth": 0.5}], "regex": True}


# -- the task gate: generated items with checkable answers ------------------------------------

_ANIMALS = "cat dog horse cow sheep lion tiger bear wolf fox owl crow".split()
_DOORS = ["front", "back", "garage", "cellar", "garden", "kitchen"]


def gate_items(n: int, seed: int = 0) -> list[Prompt]:
    """``n`` deterministic items, half two-number additions, half retrieval with a distractor
    (two passwords, one asked for). SmolLM2-135M solves about a third of each (measured: 13/40
    additions, 6/16 retrievals), so the gate has room to fall and to rise."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if i % 2 == 0:
            a, b = rng.randint(2, 30), rng.randint(2, 30)
            out.append(Prompt(f"gate:add{i}", f"What is {a} + {b}? Answer with just the number.", rf"(?<!\d){a + b}(?!\d)"))
        else:
            x, y = (f"{rng.choice(_ANIMALS)}{rng.randint(10, 99)}" for _ in range(2))
            d1, d2 = rng.sample(_DOORS, 2)
            out.append(Prompt(f"gate:pw{i}", f"The password for the {d1} door is {x}. The password for the {d2} door is {y}. "
                                             f"What is the password for the {d1} door?", re.escape(x)))
    return out


# -- absolute detectors -----------------------------------------------------------------


def detect(res: Result, *, expect_logprobs: bool = True, ignore_eos: bool = False) -> list[str]:
    """Cheap absolute checks on one response; each finding is 'detector: evidence'.
    ``ignore_eos``: the request forbade ending, so an end-of-generation token that the server
    lists as likelier than the chosen one was suppressed on purpose, not mis-sampled."""
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
        if not bad and (skip := _not_greedy(res, ignore_eos=ignore_eos)):
            found.append(skip)
    if not text.strip():
        found.append("empty: the reply has no text")
    written = res.generated  # garbage in the thinking is garbage too
    if written:
        repl = written.count("\ufffd")
        ctrl = sum(1 for ch in written if unicodedata.category(ch) == "Cc" and ch not in "\n\r\t")
        if repl + ctrl >= max(3, len(written) // 20):
            found.append(f"bad_characters: {repl} replacement and {ctrl} control characters in {len(written)}")
    toks = [t.get("token") for t in res.tokens] if res.tokens else written.split()
    if len(toks) >= 8 and len(set(toks)) == 1:
        found.append(f"all_same_token: {len(toks)} x {toks[0]!r}")
    elif (rep := repetition(toks)) is not None:
        found.append(f"degenerate_repetition: {rep}")
    return found


GREEDY_SLACK = 0.05  # nats; the chosen token's own logprob may sit this far below its best alternative


_END_TOKEN = re.compile(r"^\s*$|^<[|/]?[\w.\-|]*[|]?>$")  # '' (an EOG token's text) or a special like <|im_end|>, </s>


def _not_greedy(res: Result, *, ignore_eos: bool = False) -> str | None:
    """Every request bakeoff judges is greedy (temperature 0): each chosen token must be the top
    of the server's own reported distribution. A token chosen below its best alternative means
    something between the model and the sampler changed the choice (a logit bias, a broken
    sampler, an EOS forced early): ``early_stop`` when that token ended the reply, else ``not_greedy``."""
    for i, t in enumerate(res.tokens):
        cands = [x for x in (t.get("top_logprobs") or []) if _finite(x.get("logprob"))
                 and not (ignore_eos and _END_TOKEN.match(x.get("token") or ""))]
        lp = t.get("logprob")
        if not cands or not _finite(lp) or lp >= max(x["logprob"] for x in cands) - GREEDY_SLACK:
            continue
        best = max(cands, key=lambda x: x["logprob"])
        gap = best["logprob"] - lp
        if i == len(res.tokens) - 1 and res.finish_reason == "stop" and not (t.get("token") or "").strip():
            return (f"early_stop: the reply ended at token {i} with EOS (logprob {lp:.2f}) though the model's own top choice "
                    f"there was {best.get('token')!r} ({best['logprob']:.2f}, {gap:.2f} nats more likely)")
        return (f"not_greedy: token {i} {t.get('token')!r} (logprob {lp:.2f}) was chosen over {best.get('token')!r} "
                f"({best['logprob']:.2f}) in a greedy request")
    return None


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


def task_score(prompts: list[Prompt], results: dict[str, Result]) -> tuple[int, int]:
    """(right, total) over the prompts that are tasks (a checkable answer or a JSON reply) and
    were answered: a reply cut by ``max_tokens`` while still thinking is not scored (``unanswered``)."""
    tasks = scored_tasks(prompts, results)
    return sum(_task_right(p, results) for p in tasks), len(tasks)


def scored_tasks(prompts: list[Prompt], results: dict[str, Result]) -> list[Prompt]:
    """The task prompts whose reply is evidence: not cut while thinking (``unanswered``), not a
    JSON object cut by ``max_tokens`` (``_json_cut``)."""
    cut = unanswered(results)
    return [p for p in prompts if (p.answer is not None or p.json) and p.id not in cut
            and not (p.json and _json_cut(results.get(p.id)))]


def _json_cut(res: "Result | None") -> bool:
    """A JSON reply ended by ``max_tokens`` inside its object (``Here is the JSON: {"name":``):
    truncation, no evidence either way. Garbage cut at the limit is not a JSON prefix."""
    if res is None or res.finish_reason != "length" or "{" not in res.text:
        return False
    return _json_prefix(res.text[res.text.index("{"):])


def _json_prefix(text: str) -> bool:
    """Whether ``text`` (from its first ``{``) is the beginning of a JSON object: closing its
    open string and brackets (after a value where one is due) makes it parse."""
    stack, in_str, esc = [], False, False
    for c in text:
        if in_str:
            esc, in_str = (not esc and c == "\\"), in_str and (esc or c != '"')
        elif c == '"':
            in_str = True
        elif c in "{[":
            stack.append("}" if c == "{" else "]")
        elif c in "}]":
            if not stack or stack.pop() != c:
                return False
            if not stack:
                return False  # a whole object: not a cut one (``_is_json_object`` scores it)
    head = text + ('"' if in_str else "")
    for fill in ("", "null", '"":null', ":null"):
        try:
            json.loads(re.sub(r",\s*$", "", head + fill) + "".join(reversed(stack)))
            return True
        except ValueError:
            continue
    return False


def unanswered(results: dict[str, Result]) -> set[str]:
    """Replies that are all thinking and were ended by ``max_tokens``: the answer never came, so
    there is nothing to score (truncation, not a wrong answer). The differential still compares
    their tokens with the baseline's, and ``thinking_cut`` fails a set where nothing was answered."""
    return {k for k, r in results.items() if r.cut_while_thinking}


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


def needle_found(long_cfg: dict, key: str, text: str) -> bool:
    word = next(n["word"] for n in long_cfg["needles"] if n["key"] == key)
    pattern = word if long_cfg.get("regex") else re.escape(word)
    return re.search(pattern, text, re.IGNORECASE) is not None


# -- absolute floors: evidence of being right, for every trial (the baseline included) ---------


def absolute_floors(collected: dict, cfg: Probes) -> list[str]:
    """Findings 'floor_name: evidence' where this server's own answers fall below what any
    healthy model of the family must reach, whatever the baseline did:

    * ``task_floor``: the probe set's checkable tasks right < ``min_task_accuracy``;
    * ``json_floor``: a JSON prompt answered with no JSON object;
    * ``gate_floor``: the task gate's accuracy < ``min_gate_accuracy`` (with its Wilson interval);
    * ``long_floor``: fewer than ``min_needles`` of the long document's needles found;
    * ``thinking_cut``: the set's tasks (or the gate's items) were asked and none was answered,
      every reply cut by ``max_tokens`` while thinking: no evidence of being right.
    """
    res = collected["results"]
    prompts: list[Prompt] = collected["prompts"]
    found = []
    single = res.get("single", {})
    right, total = task_score(prompts, single)
    asked = [p for p in prompts if (p.answer or p.json) and p.id in single]
    if asked and not total:
        found.append(f"thinking_cut: the probe set: all {len(asked)} checkable tasks were cut by max_tokens while thinking "
                     f"(no answer to judge); raise server.thinking_tokens")
    if total and right / total < cfg.min_task_accuracy:
        missed = [p.id for p in scored_tasks(prompts, single) if not _task_right(p, single)]
        found.append(f"task_floor: {right}/{total} checkable tasks right (floor {cfg.min_task_accuracy:.0%}); missed {missed}")
    for p in scored_tasks(prompts, single):  # a JSON object (or a thought) cut at max_tokens is no evidence either way
        if p.json and p.id in single and not _task_right(p, single):
            found.append(f"json_floor: prompt {p.id} asked for a JSON object, got {res['single'][p.id].text[:80]!r}")
    gate = res.get("gate") or {}
    if gate:
        items = [p for p in gate_items(cfg.gate_items, cfg.gate_seed) if p.id not in unanswered(gate)]
        k = sum(_task_right(p, gate) for p in items)
        lo, hi = wilson(k, len(items))
        if not items:
            found.append(f"thinking_cut: the task gate: all {len(gate)} items were cut by max_tokens while thinking "
                         f"(no answer to judge); raise server.thinking_tokens")
        elif k / len(items) < cfg.min_gate_accuracy:
            found.append(f"gate_floor: task gate {k}/{len(items)} right ({k / len(items):.0%}, 95% CI {lo:.0%}–{hi:.0%}), "
                         f"floor {cfg.min_gate_accuracy:.0%}")
    long_cfg = collected.get("long") or {}
    if res.get("long") and long_cfg.get("needles") and set(res["long"]) - unanswered(res["long"]):
        keys = [key for key in res["long"] if key not in unanswered(res["long"])]
        hits = sum(needle_found(long_cfg, k, res["long"][k].text) for k in keys)
        need = min(cfg.min_needles, len(keys))
        if hits < need:
            found.append(f"long_floor: {hits}/{len(keys)} needles found in the long document (floor {need}); "
                         f"e.g. {keys[0]}: {res['long'][keys[0]].text[:80]!r}")
    return found


# -- running the probes -------------------------------------------------------------------

# Detectors that can be the model's own behaviour on a prompt (SmolLM2 loops on some): in a
# trial they count only where the baseline did not show the same thing on the same prompt.
MODEL_BEHAVIOUR = ("degenerate_repetition", "all_same_token", "empty", "bad_characters")


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
    async with new_session(timeout_s=timeout_s) as session:
        progress.note(f"single requests: {len(prompts)} prompts")
        for p in prompts:
            out["single"][p.id] = await stream_request(session, url, body(messages(p)))
        if _unexcusable(out["single"], expect_logprobs):
            return collected  # e.g. NaN: judged already
        if long_cfg:
            progress.note("the long document (near the served context)")
            texts["long"] = await _long_prompts(session, base_url, long_cfg, cfg, ctx_size, info)
            for key, text in texts["long"].items():
                out["long"][key] = await stream_request(session, url, body(text, cfg.long_max_tokens))
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
            collected["anchored"] = await _teacher_force(session, base_url, model, cfg, collected, baseline, info, recipe)
    return collected


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
          role: str = "trial") -> ProbeOutcome:
    """Turn collected results (and the baseline's, if any) into a pass/fail with evidence.

    ``role`` is ``baseline`` for the reference configuration itself: its floors failing is
    ``baseline_below_floor`` (nothing known-good exists). The checks, in order; the first
    failure decides and ``values`` holds everything measured up to there:
      1. absolute detectors in every mode, zero tolerance (a model behaviour such as looping is
         excused only where the baseline shows it on the same prompt); then ``answer_in_reasoning``
         (``_check_content``): a finished reply whose content is empty and whose answer is only in
         ``reasoning_content``, unless the spec says the deployment thinks (``thinking = "on"``);
      2. absolute floors (``absolute_floors``), for every trial;
      3. the whole-answer differential vs the baseline in single, long and bench modes;
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
                  diffs=whole_diffs(collected, baseline, cfg) if baseline is not None else {})
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


def _texts(prompts: list[Prompt]) -> dict[str, str]:
    return {p.id: p.text for p in prompts}


def _check_detectors(ev: Evidence) -> Finding | None:
    collected, baseline, expect_logprobs = ev.collected, ev.baseline, ev.expect_logprobs
    texts = _texts(collected["prompts"])
    base_res = baseline["results"] if baseline else None
    for mode, items in collected["results"].items():
        for pid, r in items.items():
            found = detect(r, expect_logprobs=expect_logprobs)
            if base_res is not None and found:
                shown = _baseline_detectors(base_res, mode, pid, expect_logprobs)
                found = [f for f in found if not (_name(f) in MODEL_BEHAVIOUR and _name(f) in shown)]
            if found:
                evidence = [f"{mode} / prompt {pid}: {found[0]}",
                            f"prompt: {texts.get(pid.split('#')[0], '(generated prompt)')[:100]!r}",
                            f"reply: {r.text[:200]!r}"]
                if r.tokens:
                    evidence.append("first tokens: " + ", ".join(f"{t.get('token')!r} {t.get('logprob')}" for t in r.tokens[:4]))
                evidence += [f"also: {f}" for f in found[1:]]
                return Finding(mode, _name(found[0]), f"{mode} / prompt {pid}: {found[0]}; text {r.text[:120]!r}", evidence)
    return None


def _check_content(ev: Evidence) -> Finding | None:
    """``answer_in_reasoning``: a reply that ended on its own (not cut by ``max_tokens``) with an
    empty ``content`` and its answer only in ``reasoning_content``. Every OpenAI client reads
    ``content``, so it got "" — whatever the thought says. Accepted only where the spec says the
    deployment is meant to think (``[server] thinking = "on"``: the caller reads the reasoning
    field); for the baseline too (no baseline can excuse what clients do not see)."""
    collected, values = ev.collected, ev.values
    mode_asked = ((collected.get("info") or {}).get("thinking") or {}).get("mode", "auto")
    if mode_asked == "on":
        return None
    texts = _texts(collected["prompts"])
    hidden = [(mode, pid, r) for mode, items in collected["results"].items() for pid, r in items.items()
              if r.ok and r.from_reasoning and not r.cut_while_thinking]
    if not hidden:
        return None
    mode, pid, r = hidden[0]
    values["answers_only_in_reasoning"] = len(hidden)
    evidence = [f"{m} / prompt {p}: content {''!r}, reasoning_content {x.reasoning[:100]!r} (finish_reason {x.finish_reason})"
                for m, p, x in hidden[:4]]
    evidence.append(f"prompt: {texts.get(pid.split('#')[0], '(generated prompt)')[:100]!r}")
    return Finding(mode, "answer_in_reasoning",
            f"{len(hidden)} replies ended with an empty content and their answer only in reasoning_content "
            f"(e.g. {mode} / prompt {pid}: {r.reasoning[:80]!r}); a client reading content gets \"\". "
            f"server.thinking = {mode_asked!r}: set it to 'on' if the deployment is meant to answer in its reasoning, "
            "else fix the reasoning parser / chat template", evidence)


def _check_floors(ev: Evidence) -> Finding | None:
    collected, cfg, values, role = ev.collected, ev.cfg, ev.values, ev.role
    _gate_values(collected, cfg, values)
    floors = absolute_floors(collected, cfg)
    if not floors:
        return None
    mode = {"task": "single", "json": "single", "gate": "gate", "long": "long",
            "thinking": "gate" if "the task gate" in floors[0] else "single"}[_name(floors[0]).split("_")[0]]
    if role == "baseline":
        return Finding(mode, "baseline_below_floor",
                f"the baseline itself is below the absolute floors, so nothing known-good exists: {floors[0]}", floors)
    return Finding(mode, _name(floors[0]), f"below the absolute floor: {floors[0]}", floors)


def _gate_values(collected, cfg, values) -> None:
    gate = collected["results"].get("gate") or {}
    if gate:
        items = [p for p in gate_items(cfg.gate_items, cfg.gate_seed) if p.id not in unanswered(gate)]
        k = sum(_task_right(p, gate) for p in items)
        values["gate_accuracy"] = f"{k}/{len(items)}"
        values["gate_ci95"] = list(wilson(k, len(items)))


def _check_tasks(ev: Evidence) -> Finding | None:
    """A task (or needle) the baseline got right and the trial lost fails unless the trial's
    whole answer there stayed a chain of near-ties (then the loss is the tie's, not the engine's)."""
    collected, cfg, baseline, values, expect_logprobs = ev.collected, ev.cfg, ev.baseline, ev.values, ev.expect_logprobs
    prompts, res = collected["prompts"], collected["results"]
    right, total = task_score(prompts, res.get("single", {}))
    values["task_accuracy"] = f"{right}/{total}"
    long_cfg = collected.get("long") or {}
    if res.get("long") and long_cfg.get("needles"):
        values["needles_found"] = f"{sum(needle_found(long_cfg, k, r.text) for k, r in res['long'].items())}/{len(res['long'])}"
    if baseline is None:
        return None
    base_res = baseline["results"]
    bright, _ = task_score(prompts, base_res.get("single", {}))
    values["task_accuracy_baseline"] = f"{bright}/{total}"
    diffs = ev.diffs
    def excused(mode: str, pid: str) -> bool:  # a near-tie chain shown to the end of the answer
        d = diffs.get((mode, pid))
        return (d is not None and d.consistent and expect_logprobs
                and (d.reanchored > 0 or d.diverge_at is None or d.diverge_at >= len(_toks(base_res[mode][pid])) - 1))

    cut = unanswered(res.get("single", {})) | unanswered(base_res.get("single", {}))
    lost = [p.id for p in prompts if (p.answer or p.json) and p.id not in cut and _task_right(p, base_res.get("single", {}))
            and not _task_right(p, res.get("single", {})) and not excused("single", p.id)]
    if lost and len(lost) / max(total, 1) > cfg.max_task_drop:
        return Finding("single", "task_accuracy", f"tasks right {right}/{total} vs baseline {bright}/{total}; lost {lost} "
                                           f"by divergences that are not near-ties",
                [f"{pid}: baseline {base_res['single'][pid].text[:80]!r}, trial {res['single'][pid].text[:80]!r}" for pid in lost])
    if res.get("long") and base_res.get("long") and long_cfg.get("needles"):
        values["needles_found_baseline"] = (f"{sum(needle_found(long_cfg, k, r.text) for k, r in base_res['long'].items())}"
                                            f"/{len(base_res['long'])}")
        cut = unanswered(res["long"]) | unanswered(base_res["long"])
        lost = [k for k, r in res["long"].items() if k in base_res["long"] and k not in cut
                and needle_found(long_cfg, k, base_res["long"][k].text) and not needle_found(long_cfg, k, r.text) and not excused("long", k)]
        if lost:
            k = lost[0]
            return Finding("long", "long_context_task", f"the baseline found needle {k!r} in the long document "
                                                 f"({res['long'][k].prompt_tokens} tokens), this trial answered {res['long'][k].text[:80]!r}",
                    [f"baseline: {base_res['long'][k].text[:120]!r}", f"trial: {res['long'][k].text[:120]!r}"])
    return None


def launch_answers(collected: dict, cfg: Probes) -> dict:
    """What one launch answered right: per task-gate item (answered ones) and per lm-eval
    document. The baseline's relaunches store it, so that the paired tests use only what the
    baseline answers the same way on every launch (``stable_only``)."""
    gate = collected["results"].get("gate") or {}
    out: dict = {"gate": {p.id: _task_right(p, gate) for p in gate_items(cfg.gate_items, cfg.gate_seed)
                          if p.id in gate and p.id not in unanswered(gate)}}
    if collected.get("lm_eval"):
        out["lm_eval"] = {task: {d: bool(v[0]) for d, v in got["docs"].items()} for task, got in collected["lm_eval"]["tasks"].items()}
    return out


def _check_gate(ev: Evidence) -> Finding | None:
    """The paired exact McNemar test of the task gate against the baseline, over the items both
    answered and that the baseline answered the same way on each of its launches (its relaunches'
    ``launch_answers``, when any were made before this judgement): an item the baseline itself
    gets right on one launch and wrong on another is launch noise, not a reference."""
    collected, cfg, baseline, values = ev.collected, ev.cfg, ev.baseline, ev.values
    gate, base_gate = collected["results"].get("gate") or {}, (baseline or {}).get("results", {}).get("gate") or {}
    if not gate or not base_gate:
        return None
    cut = unanswered(gate) | unanswered(base_gate)  # paired items both sides answered
    items = [p for p in gate_items(cfg.gate_items, cfg.gate_seed) if p.id in gate and p.id in base_gate and p.id not in cut]
    runs = [a.get("gate") or {} for a in (baseline or {}).get("launch_answers") or []]
    if runs:
        shaky = unstable_items({p.id: _task_right(p, base_gate) for p in items}, runs)
        items = [p for p in items if p.id not in shaky]
        values.update(gate_baseline_launches=1 + len(runs), gate_unstable_on_baseline=len(shaky))
    b = [_task_right(p, base_gate) for p in items]
    t = [_task_right(p, gate) for p in items]
    lost, gained, p = mcnemar_worse(b, t)
    values.update(gate_accuracy_baseline=f"{sum(b)}/{len(items)}", gate_ci95_baseline=list(wilson(sum(b), len(items))),
                  gate_lost=lost, gate_gained=gained, gate_p=round(p, 4))
    if p < cfg.gate_alpha:
        ev = [f"{q.id}: baseline {base_gate[q.id].text[:60]!r}, trial {gate[q.id].text[:60]!r}"
              for q, bb, tt in zip(items, b, t) if bb and not tt][:6]
        return Finding("gate", "task_gate", f"task gate {sum(t)}/{len(items)} {values['gate_ci95']} vs baseline "
                                     f"{sum(b)}/{len(items)} {values['gate_ci95_baseline']}: lost {lost}, gained {gained}, "
                                     f"exact McNemar p={p:.2g} < {cfg.gate_alpha}", ev)
    return None


def _check_concurrent(ev: Evidence) -> Finding | None:
    """Concurrent copies vs the same server's single answers: every copy must be identical or
    diverge at a near-tie (no early stop), and keep a task the single answer got right."""
    collected, cfg, values = ev.collected, ev.cfg, ev.values
    res, prompts = collected["results"], {p.id: p for p in collected["prompts"]}
    top_k = cfg.top_logprobs or 5
    diffs = {}
    for pid, r in res.get("concurrent", {}).items():
        single = res["single"].get(pid.split("#")[0])
        if single is not None and single.ok:
            diffs[pid] = compare(single, r, top_k=top_k, tie_gap=cfg.max_tie_gap, text_min_agreement=cfg.text_min_agreement)
    if not diffs:
        return None
    cons = sum(d.consistent for d in diffs.values()) / len(diffs)
    values["concurrent_consistency"] = round(cons, 3)
    why = {pid: d.detail for pid, d in diffs.items() if not d.consistent}
    for pid in diffs:
        p = prompts.get(pid.split("#")[0])
        if (p and (p.answer or p.json) and not res["concurrent"][pid].cut_while_thinking and _task_right(p, res["single"])
                and not _task_right(p, {p.id: res["concurrent"][pid]})):
            why.setdefault(pid, f"the single answer is right, this copy is not: {res['concurrent'][pid].text[:80]!r}")
    bad = [f"{pid}: {w}" for pid, w in why.items()]
    if bad:
        return Finding("concurrent", "concurrency_divergence",
                f"{len(bad)} of {len(diffs)} concurrent copies differ from the single answers beyond a near-tie; {bad[0]}", bad[:6])
    return None


# The judge's checks, in order (``judge``): the first finding decides.
CHECKS = (_check_detectors, _check_content, _check_floors, differential.check, _check_tasks, _check_gate, _check_concurrent,
          sampled_path.check, lm_eval_gate.check)


def _name(finding: str) -> str:
    return finding.split(":")[0]


def _baseline_detectors(base_res: dict, mode: str, pid: str, expect_logprobs: bool) -> set[str]:
    """Detectors that fire on the baseline's own reply to the same prompt (any copy of it)."""
    root = pid.split("#")[0]
    same = [base_res.get(mode, {}).get(pid), base_res.get("single", {}).get(root)]
    return {_name(f) for r in same if r is not None for f in detect(r, expect_logprobs=expect_logprobs)}


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
