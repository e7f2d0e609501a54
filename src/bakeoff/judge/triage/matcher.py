"""Rule loading and log classification (see the package docstring for the contract)."""

from __future__ import annotations

import bisect
import functools
import re
import signal as _signal
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bakeoff.judge.triage import structure
from bakeoff.judge.triage.schema import CauseFile, CommonFile, RulesError, merge_causes, merge_common, read_dir

RULES_DIR = Path(__file__).with_name("rules")
CAUSES = (
    "arch_unsupported", "oom_gpu", "oom_host", "import_error", "bad_args", "illegal_memory_access",
    "distributed_init", "jit_compile", "model_load", "port_in_use", "killed", "crash", "startup_timeout", "hang",
    "unknown",
)
# A cause's tier says how it ranks in a cascade: a root cause (the first one in the log wins) beats
# a symptom (a NCCL abort, a process killed after the real error), which beats a fallback (a
# generic "could not create the context" that only names a cause when nothing else does).
TIERS = {"root": 2, "symptom": 1, "fallback": 0}
_MAX_HIT_LINES = 10_000  # lines examined per pattern/shape: a pathological log cannot make us slow
_EVIDENCE_HITS = 3  # matched lines quoted per diagnosis
_TAIL_CHARS = 256 * 1024  # how far back from the end "last lines" evidence looks
# A big log is read at its head and its tail only: a startup failure is near the start or at the
# end, a death at the end, and the middle of a 20 MB log is serving lines. Known phrasings
# (`patterns`) read the first 2 MiB and the last 4 MiB, shapes the first 1 MiB and the last 2 MiB
# (all of a smaller log): this keeps a 20 MB log under a second or two.
_PATTERN_SPAN = (2 << 20, 4 << 20)
_SHAPE_SPAN = (1 << 20, 2 << 20)
_SHAPE_MAX_LINES = 20_000  # candidate lines examined by shapes per region
_LINE_CHARS = 400
_ERRORISH = re.compile(
    r"^\s*(?:\S+\s+)?[\w.]*(?:Error|Exception|Exit)\b|(?i:\b(?:error|fatal|failed|failure|abort(?:ed)?|"
    r"segmentation fault|core dumped|panic)\b)"
)
# a Python traceback frame ('File "x.py", line 3, in f'): paths name kernels and archs, never a cause
_FRAME = re.compile(r'File "[^"]*", line \d+')
_RAISE = re.compile(r"(?:^|\s)raise\s+[A-Za-z_]")


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


def _union(patterns: list[str] | tuple[str, ...]) -> re.Pattern[str] | None:
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.M) if patterns else None


@dataclass(frozen=True)
class Rule:
    """One way to recognise a cause: ``patterns`` (regexes over single lines) or a shape.

    A shape rule (``near`` set) matches a line on which every named token class occurs, each
    within ``window`` characters of the first one (the anchor: name the rarest class first), no
    ``unless`` class occurs, and (with ``context``) that class occurs on the line or the one before.
    """

    cause: str
    id: str
    patterns: tuple[str, ...]
    explanation: str
    hint: str
    hard: bool
    priority: int
    confidence: float
    tier: str = "root"
    engines: tuple[str, ...] = ("*",)
    not_patterns: tuple[str, ...] = ()
    exit_codes: tuple[int, ...] = ()
    signals: tuple[int, ...] = ()
    before: str | None = None  # an earlier line (within `within` lines) must match this too
    not_next: str | None = None  # the line right after must not match this
    not_after: tuple[str, ...] = ()  # classes none of the `within` lines before may hold
    not_before: tuple[str, ...] = ()  # classes the next non-blank line may not hold
    within: int = 6
    match_warnings: bool = False
    ignore_when_timed_out: bool = False
    ends_process: bool = False  # the process died on the matched line (see _consequences)
    death_report: bool = False  # a death without its reason: after the final exception, its consequence
    then_failed: bool = False  # the line counts only when an error line or a traceback follows it closely
    near: tuple[str, ...] = ()
    gate: tuple[str, ...] = ()  # lowercase words; () = the shared shape_gate
    window: int = 80
    unless: tuple[str, ...] = ()
    context: str | None = None

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
        return _union(self.not_patterns)

    @functools.cached_property
    def before_regex(self) -> re.Pattern[str] | None:
        return re.compile(self.before) if self.before else None

    @functools.cached_property
    def not_next_regex(self) -> re.Pattern[str] | None:
        return re.compile(self.not_next) if self.not_next else None

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
    error_level: re.Pattern[str]  # an error level after a warning/info prefix (a wrapped log): still evidence
    relayed: re.Pattern[str]  # a child's stream relayed after the wrapper's level: the child's line decides
    benign: re.Pattern[str] | None
    recovered: re.Pattern[str] | None  # a line saying the engine coped: not evidence
    retry: re.Pattern[str] | None  # a line saying it retries: neither it nor the few lines before are evidence
    retry_within: int
    gave_up: re.Pattern[str] | None  # a line saying the retries ran out: the retried error stands
    went_on: tuple  # (regex, literal prefix) of lines saying the engine went on (serving): earlier errors were not fatal
    classes: dict  # token class name -> compiled regex
    gate: tuple[str, ...]  # lowercase words one of which every line a shape can match contains
    phases: tuple = ()  # (phase name, regex of the lines that announce it), in file order
    frames: tuple = ()  # (cause, ((module regex | None, function | None), ...), exception-line regex | None)


def _norm_engine(engine: str | None) -> str | None:
    if engine is None:
        return None
    e = re.sub(r"[^a-z0-9]", "", engine.lower())
    if e.startswith("llama") or e == "ggml":
        return "llamacpp"
    if e in ("tensorrtllm", "trtllm", "trt"):
        return "trtllm"
    return e


def _compile_classes(common: CommonFile) -> dict:
    """Token class name -> one compiled regex (the union of the class's patterns)."""
    return {name: _union(pats) for name, pats in common.classes.items()}


def _rules_of(path: Path, f: CauseFile, classes: dict) -> list[Rule]:
    """The compiled rules of one (merged) cause file; unknown token classes name the file."""
    base = {"hard": False, "priority": 50, "confidence": 0.5}  # what a new cause that says nothing gets
    base.update({k: v for k, v in f.model_dump(include={"explanation", "hint", "hard", "priority", "confidence", "tier"}).items()
                 if v is not None})
    out = []
    for raw in f.rule:
        spec = {**base, **{k: v for k, v in raw.model_dump().items() if v is not None}}
        spec.setdefault("ignore_when_timed_out", bool(f.ignore_when_timed_out))
        for key in ("patterns", "not_patterns", "exit_codes", "signals", "near", "unless", "not_after",
                    "not_before"):
            spec[key] = tuple(spec.get(key, ()))
        spec["gate"] = tuple(w.lower() for w in spec.get("gate", ()))
        spec["engines"] = tuple(_norm_engine(e) if e != "*" else "*" for e in spec.get("engines", ["*"]))
        rule = Rule(cause=f.cause, **spec)
        try:
            _ = rule.regexes, rule.prefixes, rule.not_regex, rule.before_regex, rule.not_next_regex  # bad regexes fail at load
        except re.error as err:
            raise RulesError(f"{path}: rule {rule.id}: the patterns do not compile together ({err})") from None
        unknown = [c for c in (*rule.near, *rule.unless, *rule.not_after, *rule.not_before, *([rule.context] if rule.context else []))
                   if c not in classes]
        if unknown:
            raise RulesError(f"{path}: rule {rule.id}: unknown token classes {unknown}; known: {sorted(classes)}")
        out.append(rule)
    return out


@functools.lru_cache(maxsize=8)
def _load(rules_dir: str, user_dir: str | None = None) -> _Causes:
    """The shipped rules of ``rules_dir``, with ``user_dir``'s merged over them (see schema)."""
    common, files = read_dir(Path(rules_dir))
    if user_dir is not None:
        user_common, user_files = read_dir(Path(user_dir), unnamed_prefix="user.")
        common = merge_common(common, user_common)
        files = merge_causes(files, user_files)
    else:
        files = merge_causes(files, [])
    try:
        classes = _compile_classes(common)
        filters = [_union(common.benign), _union(common.recovered), _union(common.retry),
                   _union(common.gave_up), tuple((re.compile(p, re.M), _literal_prefix(p)) for p in common.went_on)]
        phases = tuple((name, _union(pats)) for name, pats in common.phases.items())
        frames = tuple((cause, tuple(_frame_entry(e) for e in entries), _union(common.frames_message.get(cause, [])))
                       for cause, entries in common.frames.items())
    except re.error as err:
        where = f"{rules_dir}/_common.toml" + (f" or {user_dir}/_common.toml" if user_dir else "")
        raise RulesError(f"{where}: the patterns of a class, filter or phase do not compile together ({err})") from None
    rules: list[Rule] = []
    info: dict = {}
    for path, f in files:
        info[f.cause] = (f.explanation, f.hint, bool(f.hard), float(f.confidence or 0.5))
        rules.extend(_rules_of(path, f, classes))
    bad = [c for c, _, _ in frames if c not in info] + [c for c in common.frames_message if c not in common.frames]
    if bad:
        raise RulesError(f"{rules_dir}/_common.toml: frames: unknown causes {sorted(set(bad))}")
    missing = set(CAUSES) - set(info)
    if missing:
        raise RulesError(f"rules in {rules_dir} lack causes: {sorted(missing)}")
    return _Causes(
        rules=tuple(rules),
        info=info,
        warning=re.compile(common.warning_line or r"(?!x)x"),
        error_level=re.compile(common.error_level or r"(?!x)x"),
        relayed=re.compile(common.relayed or r"(?!x)x"),
        benign=filters[0],
        recovered=filters[1],
        retry=filters[2],
        retry_within=3 if common.retry_within is None else common.retry_within,
        gave_up=filters[3],
        went_on=filters[4],
        classes=classes,
        gate=tuple(w.lower() for w in common.shape_gate),
        phases=phases,
        frames=frames,
    )


def _frame_entry(entry: str) -> tuple[re.Pattern[str] | None, str | None]:
    """``"module:function"`` -> (regex of the dotted module part at component boundaries, function);
    ``*`` on either side matches any."""
    mod, _, func = entry.partition(":")
    mod_rx = None if mod == "*" else re.compile(r"(?:^|\.)" + re.escape(mod) + r"(?:\.|$)")
    return mod_rx, None if func == "*" else func


def _causes(rules_dir: str | Path | None) -> _Causes:
    """The shipped rules, with a user rules directory merged over them when one is given."""
    return _load(str(RULES_DIR), None if rules_dir is None else str(Path(rules_dir).resolve()))


def load_rules(rules_dir: str | Path | None = None) -> list[Rule]:
    """All rules (shipped, with ``rules_dir``'s merged over them), compiled once and cached."""
    return list(_causes(rules_dir).rules)


def explain(cause: str, rules_dir: str | Path | None = None) -> tuple[str, str]:
    """(explanation, hint) for any cause id, including startup_timeout/hang/killed/crash/unknown."""
    info = _causes(rules_dir).info
    if cause not in info:
        raise KeyError(f"unknown cause {cause!r}; known: {', '.join(sorted(info))}")
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
    """'L<n>: text' for each matched line with one line before and one after, de-duplicated.

    The first start is the root line (the first real error); the others are later lines that
    prove the same cause."""
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


_TRACEBACK = re.compile(r"Traceback \(most recent call last\)")
_CONSEQUENCE_LINES = 20  # a wrapper's summary of a crash follows it within this many lines
# Python's warnings module: "path.py:8: RuntimeWarning: message" (then the source line, indented); a message
# with a newline puts its next line between the two
_PY_WARNING = re.compile(r"^\S+\.py:\d+: [A-Z]\w*Warning: ")
_THEN_FAILED_WITHIN = 10  # a warned cause counts when the engine fails within this many lines after it
_GAVE_UP_WITHIN = 20  # lines after a retried error in which "the retries ran out" makes it stand
_EXC_HEAD = re.compile(r"\b[A-Z]\w*(?:Error|Exception): ")  # a Python exception's type, then its message
_PREFIX = re.compile(r"^.{0,120}?\]\s+(?=\S)")  # a log prefix ("(pid=1) ERROR 01-01 00:00:00 [x.py:4] ")


def _message(line: str) -> str:
    """A line's message without its log prefix and numbers: the same error logged again has the same one."""
    m = _PREFIX.match(line)
    return re.sub(r"\d+", "#", line[m.end():] if m else line).strip()[:160]


class _Filter:
    """Is a line evidence at all? Warnings, benign lines, lines saying the engine coped, the lines
    of a retried operation (unless the retries ran out), and errors the engine went on after are not.

    What the engine did next is structure, not vocabulary: an error followed by a retry (or the
    same message repeated after a retried one) is a probe until a line says the retries ran out
    (``gave_up``); an error followed later by the engine going on (``went_on``: weights loaded,
    server listening, requests served) did not stop it, so it is not the failure's cause."""

    def __init__(self, causes: _Causes, lines: _Lines):
        self.c, self.lines = causes, lines
        self._retry_cache: dict[int, bool] = {}
        self._retried_messages: set[str] = set()
        self._any_retry: bool | None = None  # read on the first line that needs it: most logs never retry
        self._went_on: int | None | bool = False  # False: not read yet; None: the engine never went on
        self._gave_up_at: list[int] | None = None  # starts of the gave_up lines, read once when needed
        self._failures: list[int] | None = None  # starts of the error lines / tracebacks, read once when needed

    def failed_after(self, start: int) -> bool:
        """An error-level line or a traceback follows the line starting at ``start`` within
        ``_THEN_FAILED_WITHIN`` lines: the engine failed right after what the line warned of."""
        text = self.lines.text
        if self._failures is None:
            level = re.compile(self.c.error_level.pattern, re.M)  # "^ERROR" at any line's start
            self._failures = sorted(m.start() for r0, r1 in _regions(text, _PATTERN_SPAN)
                                    for rx in (level, _TRACEBACK) for m in rx.finditer(text, r0, r1))
        _, end = self.lines.bounds(start)
        i = bisect.bisect_left(self._failures, end)  # a match may start at the newline before its line
        return i < len(self._failures) and text.count("\n", end, self._failures[i]) <= _THEN_FAILED_WITHIN

    def _went_on_line(self) -> int | None:
        """Start of the line of the last ``went_on`` match (head and tail of a big log), or None."""
        if self._went_on is False:
            text, last = self.lines.text, None
            for r0, r1 in _regions(text, _PATTERN_SPAN):
                part = text[r0:r1] if (r0, r1) != (0, len(text)) else text
                for rx, prefix in self.c.went_on:
                    if prefix and prefix not in part:
                        continue
                    for m in rx.finditer(text, r0, r1):
                        last = m.start() if last is None else max(last, m.start())
            self._went_on = None if last is None else self.lines.bounds(last)[0]
        return self._went_on

    def excluded(self, start: int, line: str, at: int = 0, *, match_warnings: bool = False) -> bool:
        """The line starting at ``start`` is no evidence: logged at a non-error level (unless
        ``match_warnings``), speculation, recovered, before the engine went on, or retried. ``at``:
        where on the line the match ends. A benign phrase ("potential root causes") makes what follows
        it speculation; a finding wholly before it on the same line still counts."""
        c = self.c
        # a warning is a failure's message when the operation it reports was retried and the retries ran
        # out (torch's TCPStore: "[W ...] TCP client failed to connect ... - retrying", then the exception)
        if not match_warnings and self._warning(line) and not (
                self._any_retries() and self._retried_here(start, line) and self._gave_up_after(start)):
            return True
        if not match_warnings and self._continues_a_warning(start, line):
            return True
        if c.benign is not None:
            b = c.benign.search(line)
            if b is not None and b.start() < at:
                return True
        if c.recovered is not None and c.recovered.search(line):
            return True
        went_on = self._went_on_line()
        if went_on is not None and start < went_on:
            return True
        return self._retried(start, line)

    def _continues_a_warning(self, start: int, line: str) -> bool:
        """The line is the second line of a Python warning's message ("vllm/connections.py:8: RuntimeWarning:
        Failed to read commit hash:" then "No module named 'vllm._version'"): no level of its own, between the
        warning's first line and its source line (indented). Without the source line after it, it may be the
        next thing the program printed (an exception), and it is read as such."""
        if not line or line[0].isspace() or self.c.error_level.search(line):
            return False
        prev = self.lines.before(start, 1)
        if not prev or _PY_WARNING.search(prev[0][1]) is None:
            return False
        nxt = self.lines.after(self.lines.bounds(start)[1], 1)
        return bool(nxt) and nxt[0][:1].isspace() and nxt[0].strip() != ""

    def _warning(self, line: str) -> bool:
        """Logged at a non-error level: a warning/info prefix not followed by an error level (a wrapper
        that logs an engine's lines at INFO, ``- INFO - ERROR 08-13 ... engine.py:400] ...``, is not).
        A wrapper that relays a child's stream after its own level (LocalAI's ``DBG GRPC(...): stderr
        <line>``) logs the child's line: that line's own level decides."""
        m = self.c.warning.search(line)
        if m is None or self.c.error_level.search(line, m.end()) is not None:
            return False
        # an exception's message that goes on to say "WARNING: ..." is the exception's line, not a warning
        if _EXC_HEAD.search(line, 0, m.start()):
            return False
        r = self.c.relayed.search(line, m.end())
        return r is None or self._warning(line[r.end():])

    def _retried_here(self, start: int, line: str) -> bool:
        """The line or one of the few after it says the operation is retried."""
        hit = self._retry_cache.get(start)
        if hit is None:
            _, end = self.lines.bounds(start)
            around = [line, *self.lines.after(end, self.c.retry_within)]
            hit = any(self.c.retry.search(t) for t in around)
            self._retry_cache[start] = hit
        return hit

    def _any_retries(self) -> bool:
        """Any retry line in the log (read once: most logs never retry)."""
        if self._any_retry is None:
            text = self.lines.text
            self._any_retry = self.c.retry is not None and any(
                self.c.retry.search(text, r0, r1) is not None for r0, r1 in _regions(text, _PATTERN_SPAN))
        return self._any_retry

    def _retried(self, start: int, line: str) -> bool:
        if not self._any_retries():
            return False
        msg = _message(line)
        hit = self._retried_here(start, line)
        if hit:
            self._retried_messages.add(msg)
        else:
            # the last attempt of a retried operation logs the same message without "retrying"
            hit = len(msg) >= 20 and msg in self._retried_messages
        if hit and self._gave_up_after(start):
            return False
        return hit

    def _gave_up_after(self, start: int) -> bool:
        """A ``gave_up`` line within ``_GAVE_UP_WITHIN`` lines after the line at ``start``."""
        if self.c.gave_up is None:
            return False
        text = self.lines.text
        if self._gave_up_at is None:
            self._gave_up_at = [m.start() for r0, r1 in _regions(text, _PATTERN_SPAN)
                                for m in self.c.gave_up.finditer(text, r0, r1)]
        _, end = self.lines.bounds(start)
        i = bisect.bisect_right(self._gave_up_at, end)
        return i < len(self._gave_up_at) and text.count("\n", end, self._gave_up_at[i]) < _GAVE_UP_WITHIN


def _shape_ok(rule: Rule, classes: dict, line: str, anchor: tuple[int, int], prev: str) -> bool:
    """The other classes of ``rule.near`` occur within ``rule.window`` of the anchor match."""
    a0, a1 = anchor
    # the window is searched in place (pos/endpos), not cut out: a cut would make a token of a word's
    # tail ("TensorRT-LLM" cut after "T" reads as the flag "-LLM"); a lookbehind still sees the line
    lo, hi = max(0, a0 - rule.window), min(len(line), a1 + rule.window)
    if any(classes[name].search(line, lo, hi) is None for name in rule.near[1:]):
        return False
    if any(classes[name].search(line) for name in rule.unless):
        return False
    if rule.context is not None:
        ctx = classes[rule.context]
        if ctx.search(line) is None and ctx.search(prev) is None:
            return False
    return True


def _beside_a_named_error(rule: Rule, classes: dict, lines: _Lines, start: int, end: int) -> bool:
    """The matched line (``start``..``end``) is another error's report: one of the ``rule.within`` lines before
    it holds a word of a ``rule.not_after`` class, or the next non-blank line one of a ``rule.not_before`` class
    (a wrapper's death report, then on the next lines the runner's last error that it quotes)."""
    if rule.not_after and any(classes[name].search(text) for name in rule.not_after
                              for _, text in lines.before(start, rule.within)):
        return True
    if not rule.not_before:
        return False
    nxt = next((t for t in lines.after(end, 3) if t.strip()), "")
    return any(classes[name].search(nxt) for name in rule.not_before)


def _regions(text: str, span: tuple[int, int]) -> list[tuple[int, int]]:
    """[start, end) spans of ``text`` to read: all of it, or its head and tail (whole lines)."""
    head, tail = span
    if len(text) <= head + tail:
        return [(0, len(text))]
    h = text.rfind("\n", 0, head) + 1 or head
    t = text.find("\n", len(text) - tail) + 1 or len(text) - tail
    return [(0, h), (t, len(text))]


def _gate_ok(words: tuple[str, ...], low: str) -> bool:
    """The lowercased line holds one of the gate words (a pre-filter: a substring test per word)."""
    return any(w in low for w in words)


def _candidate_lines(text: str, gate: tuple[str, ...]) -> list[int]:
    """Start offsets of the lines (in the head and tail of the log) that contain a gate word:
    the only lines a shape can match. ``str.find`` per word is far faster than any regex here."""
    regions = _regions(text, _SHAPE_SPAN)
    starts: set[int] = set()
    for r0, r1 in regions:
        low = text[r0:r1].lower()
        found = 0
        for word in gate:
            i = low.find(word)
            while i >= 0 and found < _SHAPE_MAX_LINES:
                starts.add(r0 + low.rfind("\n", 0, i) + 1)
                found += 1
                nl = low.find("\n", i)
                if nl < 0:
                    break
                i = low.find(word, nl + 1)
    return sorted(starts)


def _scan(text: str, causes: _Causes, rules: list[Rule]) -> tuple[dict[Rule, list[int]], dict]:
    """Map each rule to the start offsets of the first few lines it matches, in log order; and
    (rule, line start) -> the column where the rule matched on that line."""
    hits: dict[Rule, list[int]] = {}
    cols: dict[tuple[Rule, int], int] = {}
    lines = _Lines(text)
    filt = _Filter(causes, lines)
    shapes = [r for r in rules if r.near]
    if shapes:
        words = tuple(dict.fromkeys([*causes.gate, *(w for r in shapes for w in r.gate)]))
        # per shape: its hits so far, its own gate words, the regex of its anchor class (read once)
        plan = [([], r, r.gate, causes.classes[r.near[0]]) for r in shapes]
        for start in _candidate_lines(text, words):
            _, end = lines.bounds(start)
            line = text[start:end]
            if _FRAME.search(line):
                continue
            # nor the source line a Python frame quotes under it ("return self._raise_for_unsupported(
            # architectures)"): code names no cause; the exception line below the frames does. A raise
            # statement's message is the exception's own words (an excerpt may lack the exception line)
            above = lines.before(start, 1)
            if above and _FRAME.search(above[0][1]) and not _RAISE.search(line):
                continue
            # an assertion's expression is code: its words name no cause (the anchor is read on the line
            # with them blanked); the other classes qualify the cause and may come from it ("cudaSuccess")
            masked = structure.mask_assertions(line)
            prev = None
            low = line.lower()
            shared: bool | None = None  # does the line hold a shared gate word (read once, when needed)
            for at, rule, gate, anchor in plan:
                if len(at) >= _EVIDENCE_HITS:
                    continue
                if gate:
                    if not any(w in low for w in gate):
                        continue
                else:
                    if shared is None:
                        shared = _gate_ok(causes.gate, low)
                    if not shared:
                        continue
                if rule.not_regex is not None and rule.not_regex.search(line):
                    continue
                for m in anchor.finditer(masked):
                    if prev is None:
                        before = lines.before(start, 1)
                        prev = before[0][1] if before else ""
                    if _shape_ok(rule, causes.classes, line, (m.start(), m.end()), prev):
                        if not filt.excluded(start, line, m.end(), match_warnings=rule.match_warnings) and (
                                not rule.then_failed or filt.failed_after(start)) and not _beside_a_named_error(
                                rule, causes.classes, lines, start, end):
                            at.append(start)
                            cols[(rule, start)] = m.start()
                        break
        hits = {rule: at for at, rule, _, _ in plan if at}
    regions = [(r0, r1, text[r0:r1] if (r0, r1) != (0, len(text)) else text)
               for r0, r1 in _regions(text, _PATTERN_SPAN)]
    for rule in rules:
        if rule.near:
            continue
        got: set[int] = set()
        for (rx, prefix), (r0, r1, part) in ((p, r) for p in zip(rule.regexes, rule.prefixes) for r in regions):
            if prefix and prefix not in part:
                continue
            pos, examined, found = r0, 0, 0
            while found < _EVIDENCE_HITS and examined < _MAX_HIT_LINES:
                m = rx.search(text, pos, r1)
                if not m:
                    break
                examined += 1
                start, end = lines.bounds(m.start())
                pos = end + 1
                line = text[start:end]
                if start in got or filt.excluded(start, line, m.end() - start, match_warnings=rule.match_warnings):
                    continue
                if rule.not_regex is not None and rule.not_regex.search(line):
                    continue
                if rule.then_failed and not filt.failed_after(start):
                    continue
                if rule.before_regex is not None and not any(
                    rule.before_regex.search(t) for _, t in lines.before(start, rule.within)
                ):
                    continue
                if rule.not_next_regex is not None and any(rule.not_next_regex.search(t) for t in lines.after(end, 1)):
                    continue
                if _beside_a_named_error(rule, causes.classes, lines, start, end):
                    continue
                got.add(start)
                cols[(rule, start)] = m.start() - start
                found += 1
        if got:
            hits[rule] = sorted(got)[:_EVIDENCE_HITS]
    return hits, cols


def _consequences(text: str, hits: dict[Rule, list[int]], cols: dict) -> dict[Rule, list[int]]:
    """``hits`` without the root-cause lines that are consequences of a crash: within
    ``_CONSEQUENCE_LINES`` lines after the first line where the process died (an ``ends_process``
    rule's match: an assertion, an abort, a fail-fast exit), or on that line with the root cause's
    match before the crash's (a wrapper's summary that quotes it: "error loading llama server: ...
    GGML_ASSERT(...) failed"). A root cause named inside or after the crash on its line (``Check
    failed: ... no kernel image``) is the crash's reason; a traceback that starts after the crash line
    is a report of its own (a wrapper dumping the dead child's stderr after naming its signal), so the
    root causes in and after it stay."""
    ends = [(s, cols[(r, s)]) for r, ss in hits.items() if r.ends_process for s in ss]
    if not ends:
        return hits
    crash_at, crash_col = min(ends)
    tb = _TRACEBACK.search(text, crash_at)
    # root causes from here on are no summary of the crash: the next traceback, or too far after it
    limit = text.find("\n", crash_at)
    for _ in range(_CONSEQUENCE_LINES):
        if limit < 0:
            break
        limit = text.find("\n", limit + 1)
    stop = min(x for x in (tb.start() if tb else -1, limit, len(text)) if x >= 0)
    # a crash line that ends with a colon announces its message on the next line (Rust's "thread 'main'
    # panicked at src/main.rs:406:19:" then the payload): that line is the crash's reason, like a cause
    # named after the crash on its own line
    end = text.find("\n", crash_at)
    payload = end + 1 if end >= 0 and text[crash_at:end].rstrip().endswith(":") else -1
    out = {}
    for rule, starts in hits.items():
        if rule.tier == "root":
            starts = [s for s in starts
                      if s < crash_at or s >= stop or s == payload
                      or (s == crash_at and cols[(rule, s)] >= crash_col)]
        if starts:
            out[rule] = starts
    return out


def _deaths_of_exception(text: str, hits: dict[Rule, list[int]]) -> tuple[dict[Rule, list[int]], set[str]]:
    """``hits`` without the ``death_report`` lines (a bare "Killed") that come within
    ``_CONSEQUENCE_LINES`` lines after the log's final exception: the process died of that exception
    (an engine that kills its own process tree on a fatal error, a wrapper that SIGKILLs what raised),
    so the exception decides, or nothing does. Also the causes whose every report was dropped so:
    the exit status of those causes is the same death."""
    reports = [s for r, ss in hits.items() if r.death_report for s in ss]
    if not reports:
        return hits, set()
    exc = structure.final_exception(text)
    if exc is None:
        return hits, set()
    exc_line, lines = exc[0], _Lines(text)

    def after_exception(start: int) -> bool:
        return exc_line < lines.number(start) <= exc_line + _CONSEQUENCE_LINES

    out, dropped, kept = {}, set(), set()
    for rule, starts in hits.items():
        if rule.death_report:
            gone = [s for s in starts if after_exception(s)]
            starts = [s for s in starts if s not in gone]
            if gone:
                dropped.add(rule.cause)
        if starts:
            out[rule] = starts
            kept.add(rule.cause)
    return out, dropped - kept


def find_cause(
    log_text: str,
    *,
    exit_code: int | None = None,
    signal: int | None = None,
    engine: str | None = None,
    timed_out: bool = False,
    hung: bool = False,
    rules_dir: str | Path | None = None,
) -> Diagnosis | None:
    """The failure cause the rules can prove from the log/exit status, or None if nothing matched.

    ``rules_dir``: a user rules directory merged over the shipped rules (same format). A log listed
    newest first is read in the order it was written; its evidence keeps the given line numbers."""
    return _in_written_order(_find_cause, log_text, exit_code=exit_code, signal=signal, engine=engine,
                             timed_out=timed_out, hung=hung, rules_dir=rules_dir)


def _in_written_order(read, log_text: str, **kw):
    """``read(log_text, **kw)`` (a Diagnosis or None), on the log in the order it was written: a log listed
    newest first is read reversed, and the verdict's line numbers are put back to the log as given."""
    ordered = structure.oldest_first(log_text or "")
    if not ordered:
        return read(log_text, **kw)
    d = read(ordered[0], **kw)
    return _as_given(d, ordered[1]) if d is not None else None


def _as_given(d: Diagnosis, n: int) -> Diagnosis:
    """``d``, read from a log whose ``n`` lines were reversed, with the line numbers of the log as given."""
    def renumber(e: str) -> str:
        m = _EVIDENCE_LINE.match(e)
        return f"L{n + 1 - int(m.group(1))}: {e[m.end():]}" if m else e
    evidence = [renumber(e) for e in d.evidence]
    evidence.sort(key=lambda e: int(m.group(1)) if (m := _EVIDENCE_LINE.match(e)) else n + 1)
    explanation = f"{d.explanation} (The log lists its newest line first; it was read oldest first.)"
    return Diagnosis(d.cause, explanation, d.hint, evidence, d.confidence, d.hard, d.rule,
                     n + 1 - d.line if d.line is not None else None)


def _find_cause(
    log_text: str,
    *,
    exit_code: int | None,
    signal: int | None,
    engine: str | None,
    timed_out: bool,
    hung: bool,
    rules_dir: str | Path | None,
) -> Diagnosis | None:
    causes = _causes(rules_dir)
    eng = _norm_engine(engine)
    rules = [
        r for r in causes.rules
        if r.applies_to(eng) and not ((timed_out or hung) and r.ignore_when_timed_out)
    ]
    text = log_text or ""
    hits, cols = _scan(text, causes, rules)
    hits = _consequences(text, hits, cols)
    hits, died_of_exception = _deaths_of_exception(text, hits)
    sig = _signal_of(exit_code, signal)
    by_status = [
        r for r in rules
        if ((sig is not None and sig in r.signals) or (exit_code is not None and exit_code in r.exit_codes))
        and r.cause not in died_of_exception
    ]
    if not hits and not by_status:
        return _by_frames(text, causes)
    lines = _Lines(text)
    # per cause, its best (first) hit: tier first, then the earliest line, then the priority
    best: dict[str, tuple[tuple[int, int, int], Rule]] = {}
    for rule, starts in hits.items():
        key = (TIERS[rule.tier], -starts[0], rule.priority)
        if rule.cause not in best or key > best[rule.cause][0]:
            best[rule.cause] = (key, rule)
    for rule in by_status:
        key = (TIERS[rule.tier], -(len(text) + 1), rule.priority)
        if rule.cause not in best:
            best[rule.cause] = (key, rule)
    cause, (_, rule) = max(best.items(), key=lambda kv: kv[1][0])
    starts = sorted(s for r, ss in hits.items() if r.cause == cause for s in ss)[:_EVIDENCE_HITS]
    explanation = rule.explanation
    if sig is not None and any(r.cause == cause for r in by_status):
        explanation = f"{explanation} (exit status: {_signal_name(sig)})"
    elif exit_code is not None and exit_code > 128 and any(r.cause == cause and exit_code in r.exit_codes for r in by_status):
        # a container's 128+N is signal N
        explanation = f"{explanation} (exit status {exit_code}: {_signal_name(exit_code - 128)})"
    confidence = rule.confidence
    if starts and any(r.cause == cause for r in by_status):
        confidence = min(0.99, confidence + 0.1)
    if len(starts) > 1:
        confidence = min(0.99, confidence + 0.03)
    evidence = _context(lines, starts) if starts else _tail_evidence(text)
    if cause == "crash":
        evidence = _with_line(evidence, structure.crash_frame(text))
    doing = structure.phase(text, lines.bounds(starts[0])[1] if starts else len(text), causes.phases)
    if doing:
        explanation = f"{explanation} While {doing}."
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


_EVIDENCE_LINE = re.compile(r"L(\d+): ")


def _line_start(text: str, number: int) -> int:
    pos = 0
    for _ in range(number - 1):
        pos = text.find("\n", pos) + 1
        if pos == 0:
            return len(text)
    return pos


_CODE_ERRORS = frozenset({"AttributeError", "NameError", "UnboundLocalError", "SyntaxError", "IndentationError"})


def _by_frames(text: str, causes: _Causes) -> Diagnosis | None:
    """The cause the final exception's frames name, where no rule names the log: a tier below every
    rule's line. Only for a failure (an uncaught exception with a traceback, not logged as a warning,
    not retried, and no ``went_on`` line after it: the engine did not go on), and only when the frames
    name one cause (the ``[frames]`` vocabulary of ``_common.toml``; a cause with ``frames_message``
    counts only when the exception line matches it). The deciding frame is the innermost one of that
    cause; the verdict quotes it and the exception."""
    if not causes.frames:
        return None
    found = structure.exception_frames(text)
    if found is None:
        return None
    (exc_no, exc_type, exc_line), frames = found
    # a code error (an attribute or name the running code does not have, code that does not parse) says what
    # went wrong itself: two versions that do not match, a bug. The frames say only where it happened
    if exc_type.rsplit(".", 1)[-1] in _CODE_ERRORS:
        return None
    start = _line_start(text, exc_no)
    if _Filter(causes, _Lines(text)).excluded(start, exc_line):  # a warning, recovered, went on, retried
        return None
    # another phase announced after the exception (it was loading; now it captures graphs, serves): the
    # engine went on. The same phase again is output interleaved from another stream (a progress bar). Frames
    # listed below the exception (pybind11's "At:") are the exception's own, not what came after it
    end = text.find("\n", _line_start(text, max(exc_no, *(fr[0] for fr in frames))))
    doing = structure.phase(text, start, causes.phases)
    later = structure.phase(text[end:], len(text) - end, causes.phases) if end >= 0 else None
    if later is not None and later != doing:
        return None
    named: dict[str, tuple[int, str, str, str]] = {}
    for cause, entries, message in causes.frames:
        if message is not None and not message.search(exc_line):
            continue
        for fr in frames:
            _, module, func, _ = fr
            if any((mod is None or mod.search(module)) and (fn is None or fn == func) for mod, fn in entries):
                named[cause] = fr  # frames are outermost first: the last one kept is the innermost
    if len(named) != 1:
        return None
    (cause, (fr_no, module, func, fr_line)), = named.items()
    expl, hint, hard, conf = causes.info[cause]
    explanation = (f"{expl} (No rule names the error; the traceback of the final exception, {exc_type}, "
                   f"runs through {func} of {module}.)")
    if doing:
        explanation = f"{explanation} While {doing}."
    evidence = _with_line(_with_line([], (exc_no, exc_line)), (fr_no, fr_line))
    return Diagnosis(cause=cause, explanation=explanation, hint=hint, evidence=evidence,
                     confidence=round(min(conf, 0.5), 3), hard=hard, rule=f"{cause}/frames", line=exc_no)


def _with_line(evidence: list[str], found: tuple[int, str] | None) -> list[str]:
    """``evidence`` with the line ``found`` (line number, text) added in line order, once."""
    if found is None or any(e.startswith(f"L{found[0]}: ") for e in evidence):
        return evidence
    return sorted([*evidence, f"L{found[0]}: {_clip(found[1])}"], key=lambda e: int(e[1:e.index(":")]))


def is_failure_evidence(log_text: str, *, engine: str | None = None, rules_dir: str | Path | None = None) -> bool:
    """True when the log alone shows a known fatal error."""
    return find_cause(log_text, engine=engine, rules_dir=rules_dir) is not None


def classify(
    log_text: str,
    *,
    exit_code: int | None = None,
    signal: int | None = None,
    engine: str | None = None,
    timed_out: bool = False,
    hung: bool = False,
    server_said: str | None = None,
    rules_dir: str | Path | None = None,
) -> Diagnosis:
    """Always a Diagnosis: a rule match, else hang/startup_timeout from the flags, else unknown.

    ``server_said`` is what the server itself answered while it never became ready (e.g. the last
    non-200 health answer, ``"GET /health -> 503 Loading model"``); it is appended to the evidence
    as ``"server said: ..."``. ``rules_dir``: a user rules directory merged over the shipped rules."""
    d = _in_written_order(_classify, log_text, exit_code=exit_code, signal=signal, engine=engine,
                          timed_out=timed_out, hung=hung, rules_dir=rules_dir)
    if server_said:
        d = Diagnosis(d.cause, d.explanation, d.hint, [*d.evidence, f"server said: {_clip(server_said)}"],
                      d.confidence, d.hard, d.rule, d.line)
    return d


def _classify(log_text: str, *, exit_code: int | None, signal: int | None, engine: str | None,
              timed_out: bool, hung: bool, rules_dir: str | Path | None) -> Diagnosis:
    found = _find_cause(
        log_text, exit_code=exit_code, signal=signal, engine=engine, timed_out=timed_out, hung=hung,
        rules_dir=rules_dir,
    )
    if found is not None:
        return found
    causes = _causes(rules_dir)
    info = causes.info
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
    else:
        # the decisive line (the final exception) is quoted even when no rule names its cause
        exc = structure.final_exception(text)
        evidence = _with_line(evidence, exc and (exc[0], exc[2]))
        doing = structure.phase(text, len(text), causes.phases)
        if doing:
            expl = f"{expl} While {doing}."
    return Diagnosis("unknown", expl, hint, evidence, conf if failed or evidence else 0.05, hard)
