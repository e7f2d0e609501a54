"""Rule loading and log classification (see the package docstring for the contract)."""

from __future__ import annotations

import functools
import re
import signal as _signal
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

RULES_DIR = Path(__file__).with_name("rules")
CAUSES = (
    "arch_unsupported", "oom_gpu", "oom_host", "import_error", "bad_args", "illegal_memory_access",
    "distributed_init", "jit_compile", "port_in_use", "killed", "startup_timeout", "hang", "unknown",
)
_MAX_HIT_LINES = 10_000  # matching lines examined per pattern: a pathological log cannot make us slow
_EVIDENCE_HITS = 3  # matched lines quoted per diagnosis
_TAIL_CHARS = 256 * 1024  # how far back from the end "last lines" evidence looks
_LINE_CHARS = 400
_ERRORISH = re.compile(
    r"^\s*(?:\S+\s+)?[\w.]*(?:Error|Exception|Exit)\b|(?i:\b(?:error|fatal|failed|failure|abort(?:ed)?|"
    r"segmentation fault|core dumped|panic)\b)"
)


def _literal_prefix(pattern: str) -> str:
    """The literal characters a regex starts with (conservative; '' when unsure)."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern) and not pattern[i + 1].isalnum():
            c, i = pattern[i + 1], i + 1
        elif c in ".^$*+?{}[]|()\\":
            break
        out.append(c)
        i += 1
    if i < len(pattern) and pattern[i] in "*?{":
        out = out[:-1]  # the last character is optional
    text = "".join(out)
    return text if len(text) >= 4 else ""


@dataclass(frozen=True)
class Rule:
    cause: str
    id: str
    patterns: tuple[str, ...]
    explanation: str
    hint: str
    hard: bool
    priority: int
    confidence: float
    engines: tuple[str, ...] = ("*",)
    not_patterns: tuple[str, ...] = ()
    exit_codes: tuple[int, ...] = ()
    signals: tuple[int, ...] = ()
    before: str | None = None  # an earlier line (within `within` lines) must match this too
    within: int = 6
    match_warnings: bool = False
    ignore_when_timed_out: bool = False

    @functools.cached_property
    def regexes(self) -> tuple[re.Pattern[str], ...]:
        # one regex per pattern: a literal-prefixed pattern is searched fast; an alternation is not
        return tuple(re.compile(p, re.M) for p in self.patterns)

    @functools.cached_property
    def prefixes(self) -> tuple[str, ...]:
        """Literal text each pattern must contain ('' = unknown): absent -> the regex is skipped."""
        return tuple(_literal_prefix(p) for p in self.patterns)

    @functools.cached_property
    def not_regex(self) -> re.Pattern[str] | None:
        return re.compile("|".join(f"(?:{p})" for p in self.not_patterns)) if self.not_patterns else None

    @functools.cached_property
    def before_regex(self) -> re.Pattern[str] | None:
        return re.compile(self.before) if self.before else None

    def applies_to(self, engine: str | None) -> bool:
        return engine is None or "*" in self.engines or engine in self.engines


@dataclass(frozen=True)
class Diagnosis:
    cause: str
    explanation: str
    hint: str
    evidence: list[str] = field(default_factory=list)
    confidence: float = 0.0
    hard: bool = False
    rule: str | None = None  # "<cause>/<rule id>" that decided, None for flag/fallback decisions
    line: int | None = None  # 1-based line of the first matched line

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class _Causes:
    rules: tuple[Rule, ...]
    info: dict  # cause -> (explanation, hint, hard, confidence)
    warning: re.Pattern[str]
    benign: re.Pattern[str] | None


def _norm_engine(engine: str | None) -> str | None:
    if engine is None:
        return None
    e = re.sub(r"[^a-z0-9]", "", engine.lower())
    if e.startswith("llama") or e == "ggml":
        return "llamacpp"
    if e in ("tensorrtllm", "trtllm", "trt"):
        return "trtllm"
    return e


@functools.lru_cache(maxsize=4)
def _load(rules_dir: str) -> _Causes:
    d = Path(rules_dir)
    common = tomllib.loads((d / "_common.toml").read_text()) if (d / "_common.toml").exists() else {}
    rules: list[Rule] = []
    info: dict = {}
    for path in sorted(d.glob("*.toml")):
        if path.name.startswith("_"):
            continue
        data = tomllib.loads(path.read_text())
        cause = data["cause"]
        if cause not in CAUSES:
            raise ValueError(f"{path.name}: unknown cause {cause!r}")
        base = {k: data[k] for k in ("explanation", "hint", "hard", "priority", "confidence") if k in data}
        info[cause] = (data["explanation"], data["hint"], bool(data.get("hard", False)), float(data.get("confidence", 0.5)))
        for i, raw in enumerate(data.get("rule", [])):
            spec = {**base, "ignore_when_timed_out": data.get("ignore_when_timed_out", False), **raw}
            for key in ("patterns", "not_patterns", "exit_codes", "signals"):
                spec[key] = tuple(spec.get(key, ()))
            spec["engines"] = tuple(_norm_engine(e) if e != "*" else "*" for e in spec.get("engines", ["*"]))
            spec.setdefault("id", str(i))
            rule = Rule(cause=cause, **spec)
            _ = rule.regexes, rule.prefixes, rule.not_regex, rule.before_regex  # bad regexes fail at load
            rules.append(rule)
    missing = set(CAUSES) - set(info)
    if missing:
        raise ValueError(f"rules in {d} lack causes: {sorted(missing)}")
    benign = common.get("benign", [])
    return _Causes(
        rules=tuple(rules),
        info=info,
        warning=re.compile(common.get("warning_line", r"(?!x)x")),
        benign=re.compile("|".join(f"(?:{p})" for p in benign)) if benign else None,
    )


def load_rules(rules_dir: str | Path | None = None) -> list[Rule]:
    """All rules, compiled once and cached (data lives in ``rules/*.toml``)."""
    return list(_load(str(rules_dir or RULES_DIR)).rules)


def explain(cause: str) -> tuple[str, str]:
    """(explanation, hint) for any cause id, including startup_timeout/hang/killed/unknown."""
    info = _load(str(RULES_DIR)).info
    if cause not in info:
        raise KeyError(f"unknown cause {cause!r}; known: {', '.join(CAUSES)}")
    return info[cause][0], info[cause][1]


def _signal_of(exit_code: int | None, sig: int | None) -> int | None:
    if sig is not None:
        return sig
    if exit_code is not None and exit_code < 0:
        return -exit_code
    return None


def _signal_name(sig: int) -> str:
    try:
        return _signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _clip(s: str) -> str:
    return s if len(s) <= _LINE_CHARS else s[:_LINE_CHARS] + "…"


class _Lines:
    """Cheap access to lines around offsets of one big string (no full split)."""

    def __init__(self, text: str):
        self.text = text
        self._pos, self._line = 0, 1  # memo for monotone line-number queries

    def bounds(self, pos: int) -> tuple[int, int]:
        start = self.text.rfind("\n", 0, pos) + 1
        end = self.text.find("\n", pos)
        return start, (len(self.text) if end < 0 else end)

    def number(self, start: int) -> int:
        if start < self._pos:
            self._pos, self._line = 0, 1
        self._line += self.text.count("\n", self._pos, start)
        self._pos = start
        return self._line

    def before(self, start: int, n: int) -> list[tuple[int, str]]:
        """Up to n (start, text) lines before the line starting at ``start``, nearest last."""
        out = []
        while n > 0 and start > 0:
            s = self.text.rfind("\n", 0, start - 1) + 1
            out.append((s, self.text[s:start - 1]))
            start, n = s, n - 1
        return out[::-1]

    def after(self, end: int, n: int) -> list[str]:
        out = []
        while n > 0 and end < len(self.text):
            e = self.text.find("\n", end + 1)
            e = len(self.text) if e < 0 else e
            out.append(self.text[end + 1:e])
            end, n = e, n - 1
        return out


def _context(lines: _Lines, starts: list[int]) -> list[str]:
    """'L<n>: text' for each matched line with one line before and one after, de-duplicated."""
    seen: dict[int, str] = {}
    for start in starts:
        _, end = lines.bounds(start)
        n = lines.number(start)
        for k, (_, t) in enumerate(lines.before(start, 1)):
            if t.strip():
                seen.setdefault(n - 1 + k, t)
        seen[n] = lines.text[start:end]
        for k, t in enumerate(lines.after(end, 2)):
            if t.strip():
                seen.setdefault(n + 1 + k, t)
                break
    return [f"L{n}: {_clip(seen[n])}" for n in sorted(seen)]


def _tail_evidence(text: str, n: int = 5, errors_first: bool = True) -> list[str]:
    """The last error-looking lines (the end of the last traceback), else the last non-empty lines."""
    if not text.strip():
        return []
    cut = max(0, len(text) - _TAIL_CHARS)
    base = text.count("\n", 0, cut) + 1
    tail = text[cut:].split("\n")
    numbered = [(base + i, t) for i, t in enumerate(tail) if t.strip()]
    if errors_first:
        tb = max((i for i, (_, t) in enumerate(numbered) if "Traceback (most recent call last)" in t), default=None)
        pool = numbered[tb:] if tb is not None else numbered
        err = [i for i, (_, t) in enumerate(pool) if _ERRORISH.search(t)]
        if err:
            last = err[-1]
            picked = pool[max(0, last - n + 1):last + 1]
            return [f"L{k}: {_clip(t)}" for k, t in picked]
    return [f"L{k}: {_clip(t)}" for k, t in numbered[-n:]]


def _scan(text: str, causes: _Causes, rules: list[Rule]) -> dict[Rule, list[int]]:
    """Map each rule to the start offsets of the first few lines it matches, in log order."""
    hits: dict[Rule, list[int]] = {}
    lines = _Lines(text)
    for rule in rules:
        got: set[int] = set()
        for rx, prefix in zip(rule.regexes, rule.prefixes):
            if prefix and prefix not in text:
                continue
            pos, examined, found = 0, 0, 0
            while found < _EVIDENCE_HITS and examined < _MAX_HIT_LINES:
                m = rx.search(text, pos)
                if not m:
                    break
                start, end = lines.bounds(m.start())
                pos, examined = end + 1, examined + 1
                line = text[start:end]
                if not rule.match_warnings and causes.warning.search(line):
                    continue
                if causes.benign is not None and causes.benign.search(line):
                    continue
                if rule.not_regex is not None and rule.not_regex.search(line):
                    continue
                if rule.before_regex is not None and not any(
                    rule.before_regex.search(t) for _, t in lines.before(start, rule.within)
                ):
                    continue
                got.add(start)
                found += 1
        if got:
            hits[rule] = sorted(got)[:_EVIDENCE_HITS]
    return hits


def find_cause(
    log_text: str,
    *,
    exit_code: int | None = None,
    signal: int | None = None,
    engine: str | None = None,
    timed_out: bool = False,
    hung: bool = False,
) -> Diagnosis | None:
    """The failure cause the rules can prove from the log/exit status, or None if nothing matched."""
    causes = _load(str(RULES_DIR))
    eng = _norm_engine(engine)
    rules = [
        r for r in causes.rules
        if r.applies_to(eng) and not ((timed_out or hung) and r.ignore_when_timed_out)
    ]
    text = log_text or ""
    hits = _scan(text, causes, rules)
    sig = _signal_of(exit_code, signal)
    by_status = [
        r for r in rules
        if (sig is not None and sig in r.signals) or (exit_code is not None and exit_code in r.exit_codes)
    ]
    if not hits and not by_status:
        return None
    lines = _Lines(text)
    first: dict[str, tuple[int, int, Rule]] = {}  # cause -> (priority, first offset, rule)
    for rule, starts in hits.items():
        cur = first.get(rule.cause)
        if cur is None or (rule.priority, -starts[0]) > (cur[0], -cur[1]):
            first[rule.cause] = (rule.priority, starts[0], rule)
    for rule in by_status:
        if rule.cause not in first:
            first[rule.cause] = (rule.priority, len(text) + 1, rule)
    cause, (prio, off, rule) = max(first.items(), key=lambda kv: (kv[1][0], -kv[1][1]))
    starts = sorted(s for r, ss in hits.items() if r.cause == cause for s in ss)[:_EVIDENCE_HITS]
    explanation = rule.explanation
    if sig is not None and rule in by_status:
        explanation = f"{explanation} (exit status: {_signal_name(sig)})"
    confidence = rule.confidence
    if starts and rule in by_status:
        confidence = min(0.99, confidence + 0.1)
    if len(starts) > 1:
        confidence = min(0.99, confidence + 0.03)
    evidence = _context(lines, starts) if starts else _tail_evidence(text)
    return Diagnosis(
        cause=cause,
        explanation=explanation,
        hint=rule.hint,
        evidence=evidence,
        confidence=round(confidence, 3),
        hard=rule.hard,
        rule=f"{cause}/{rule.id}",
        line=lines.number(lines.bounds(starts[0])[0]) if starts else None,
    )


def is_failure_evidence(log_text: str, *, engine: str | None = None) -> bool:
    """True when the log alone shows a known fatal error."""
    return find_cause(log_text, engine=engine) is not None


def classify(
    log_text: str,
    *,
    exit_code: int | None = None,
    signal: int | None = None,
    engine: str | None = None,
    timed_out: bool = False,
    hung: bool = False,
) -> Diagnosis:
    """Always a Diagnosis: a rule match, else hang/startup_timeout from the flags, else unknown."""
    found = find_cause(
        log_text, exit_code=exit_code, signal=signal, engine=engine, timed_out=timed_out, hung=hung
    )
    if found is not None:
        return found
    info = _load(str(RULES_DIR)).info
    text = log_text or ""
    if hung or timed_out:
        cause = "hang" if hung else "startup_timeout"
        expl, hint, hard, conf = info[cause]
        return Diagnosis(cause, expl, hint, _tail_evidence(text, errors_first=False), conf, hard)
    expl, hint, hard, conf = info["unknown"]
    sig = _signal_of(exit_code, signal)
    failed = sig is not None or (exit_code not in (None, 0))
    if sig is not None:
        expl = f"{expl} The process ended with {_signal_name(sig)}."
    elif exit_code not in (None, 0):
        expl = f"{expl} The process exited with code {exit_code}."
    evidence = _tail_evidence(text)
    if not failed and not any(_ERRORISH.search(e) for e in evidence):
        expl, conf = "No fatal error found in the log.", 0.05
    return Diagnosis("unknown", expl, hint, evidence, conf if failed or evidence else 0.05, hard)
