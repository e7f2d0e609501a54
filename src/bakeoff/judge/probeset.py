"""The probe set: its prompts (built-in sets and TOML files, ``include``/``only`` variants, the
long document's needles), the generated task-gate items, and how an answer is scored (a task's
regex or JSON object, a needle found, a reply cut while thinking left unscored)."""

from __future__ import annotations

import json
import random
import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from bakeoff.measure.client import Result


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


def task_score(prompts: list[Prompt], results: dict[str, Result]) -> tuple[int, int]:
    """(right, total) over the prompts that are tasks (a checkable answer or a JSON reply) and
    were answered: a reply cut by ``max_tokens`` while still thinking is not scored (``unanswered``)."""
    tasks = scored_tasks(prompts, results)
    return sum(task_right(p, results) for p in tasks), len(tasks)


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


def task_right(p: Prompt, results: dict[str, Result]) -> bool:
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


def prompt_texts(prompts: list[Prompt]) -> dict[str, str]:
    return {p.id: p.text for p in prompts}
