"""The rule files' format, validated at the edge: one pydantic model per file kind.

A rules directory holds ``_common.toml`` (shared filters, token classes, phases) and one file per
cause. A user directory has the same format and is merged over the shipped one (``merge``): a cause
file for a new cause adds it (it must then say ``explanation`` and ``hint``); for a shipped cause
its ``explanation``/``hint``/... override the shipped ones, a rule with the ``id`` of a shipped rule
of that cause replaces it, other rules are added. In a user ``_common.toml`` a token class or phase
of a shipped name replaces it, list settings are appended, single values replace.

Every problem is one ``RulesError`` naming the file and the field (``rules/x.toml: rule.2.near: ...``).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from bakeoff.errors import SpecError

TIER = Literal["root", "symptom", "fallback"]


class RulesError(SpecError):
    """A rule file is unreadable or invalid; the message names the file and the field."""


def _regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as err:
        raise ValueError(f"not a valid regex ({err}): {value!r}") from None
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RuleSpec(_Strict):
    """One ``[[rule]]``: known phrasings (``patterns``), a shape (``near``), or an exit status."""

    id: str | None = None
    patterns: list[str] = []
    not_patterns: list[str] = []
    exit_codes: list[int] = []
    signals: list[int] = []
    engines: list[str] = ["*"]
    before: str | None = None
    within: int = Field(default=6, ge=1)
    # the match does not count when the line right after it matches this (a C++ exception's what() that
    # states its error in words: the error named a cause; the abort that followed is not the cause)
    not_next: str | None = None
    # the match does not count when one of the ``within`` lines before it holds a word of one of these
    # classes (_common.toml): a GPU runtime's error printed just above an abort named the failure; the
    # abort is how it ended
    not_after: list[str] = []
    # the match does not count when the next non-blank line (of the 3 after it) holds a word of one of these
    # classes (Rust's panic whose message, on the next line, quotes a GPU runtime's error; a wrapper's report of
    # its runner's exit status, then the runner's last error it quotes: that error named the failure)
    not_before: list[str] = []
    match_warnings: bool = False
    # the process died on this line (an assertion, an abort, a fail-fast exit): a root-cause line after
    # it, or one that quotes it (the root cause's words wholly before the crash on the line: a wrapper's
    # summary), is its consequence and not evidence
    ends_process: bool = False
    # the line reports a death without its reason (the shell's "Killed"): within 20 lines after the log's
    # final exception it is how that exception ended the process (vLLM V1 kills its own process tree on
    # a worker's fatal error), not evidence; nor is then an exit status of the same cause
    death_report: bool = False
    # the line counts only when the engine failed right after it (an error-level line or a traceback within
    # 10 lines):
    # for warnings that name a cause only when something then failed
    then_failed: bool = False
    near: list[str] = []
    # words (any case) one of which a line must contain for this shape to be tried on it; without
    # them, the shared ``shape_gate`` of _common.toml. A pre-filter only: it must never hide a match
    gate: list[str] = []
    window: int = Field(default=80, ge=1)
    unless: list[str] = []
    context: str | None = None
    # per-rule overrides of the cause's settings
    explanation: str | None = None
    hint: str | None = None
    hard: bool | None = None
    priority: int | None = None
    confidence: float | None = Field(default=None, gt=0, le=1)
    tier: TIER | None = None
    ignore_when_timed_out: bool | None = None

    @field_validator("patterns", "not_patterns")
    @classmethod
    def _regexes(cls, v: list[str]) -> list[str]:
        return [_regex(p) for p in v]

    @field_validator("before")
    @classmethod
    def _before(cls, v: str | None) -> str | None:
        return None if v is None else _regex(v)


class CauseFile(_Strict):
    """A cause file: the cause's id, what it means, and its rules."""

    cause: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    explanation: str | None = None
    hint: str | None = None
    hard: bool | None = None
    tier: TIER | None = None
    priority: int | None = None
    confidence: float | None = Field(default=None, gt=0, le=1)
    ignore_when_timed_out: bool | None = None
    rule: list[RuleSpec] = []


class CommonFile(_Strict):
    """``_common.toml``: line filters, the shape gate, token classes and engine phases."""

    warning_line: str | None = None
    error_level: str | None = None
    # a wrapper relaying a child's stream ("DBG GRPC(...): stderr <the child's line>"): the wrapper's
    # level is its own; the relayed line's own level decides (see matcher._Filter._warning)
    relayed: str | None = None
    benign: list[str] = []
    recovered: list[str] = []
    retry: list[str] = []
    retry_within: int | None = Field(default=None, ge=0)
    gave_up: list[str] = []
    went_on: list[str] = []
    shape_gate: list[str] = []
    classes: dict[str, list[str]] = {}
    phases: dict[str, list[str]] = {}
    # the final exception's frames -> a cause, below every rule (see matcher._by_frames): per cause,
    # "module:function" entries (a dotted module part matched at component boundaries, a function's
    # exact name; either side may be "*"), and per cause regexes one of which the exception line must
    # match for its frames to count (an allocation frame is memory only with a memory word)
    frames: dict[str, list[str]] = {}
    frames_message: dict[str, list[str]] = {}

    @field_validator("frames")
    @classmethod
    def _frames(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for name, entries in v.items():
            for e in entries:
                mod, sep, func = e.partition(":")
                if not sep or not mod or not func or (mod == "*" and func == "*"):
                    raise ValueError(f"{name}: not a 'module:function' entry: {e!r}")
        return v

    @field_validator("warning_line", "error_level", "relayed")
    @classmethod
    def _warning(cls, v: str | None) -> str | None:
        return None if v is None else _regex(v)

    @field_validator("benign", "recovered", "retry", "gave_up", "went_on")
    @classmethod
    def _lists(cls, v: list[str]) -> list[str]:
        return [_regex(p) for p in v]

    @field_validator("classes", "phases", "frames_message")
    @classmethod
    def _named(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for name, pats in v.items():
            for p in pats:
                try:
                    re.compile(p)
                except re.error as err:
                    raise ValueError(f"{name}: not a valid regex ({err}): {p!r}") from None
        return v


def _where(path: Path, err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(x) for x in first["loc"]) or "(file)"
    return f"{path}: {loc}: {first['msg']}"


def read(path: Path, model: type[BaseModel]) -> BaseModel:
    """Parse and validate one rule file, or raise RulesError naming the file and the field."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise RulesError(f"{path}: cannot read: {err}") from None
    except tomllib.TOMLDecodeError as err:
        raise RulesError(f"{path}: not valid TOML: {err}") from None
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise RulesError(_where(path, err)) from None


def _named_rules(f: CauseFile, prefix: str) -> CauseFile:
    """Every rule with an id: an unnamed one gets ``prefix`` + its index in the file."""
    rules = [r if r.id is not None else r.model_copy(update={"id": f"{prefix}{i}"}) for i, r in enumerate(f.rule)]
    return f.model_copy(update={"rule": rules})


def read_dir(d: Path, unnamed_prefix: str = "") -> tuple[CommonFile, list[tuple[Path, CauseFile]]]:
    """A directory's ``_common.toml`` (empty when absent) and its cause files, by name."""
    if not d.is_dir():
        raise RulesError(f"{d}: not a rules directory (expected a folder of *.toml rule files)")
    common_path = d / "_common.toml"
    common = read(common_path, CommonFile) if common_path.exists() else CommonFile()
    files = [(p, _named_rules(read(p, CauseFile), unnamed_prefix))
             for p in sorted(d.glob("*.toml")) if not p.name.startswith("_")]
    return common, files


def merge_common(base: CommonFile, user: CommonFile) -> CommonFile:
    """The user's common settings over the shipped ones (see the module docstring)."""
    return CommonFile(
        warning_line=user.warning_line or base.warning_line,
        error_level=user.error_level or base.error_level,
        relayed=user.relayed or base.relayed,
        benign=[*base.benign, *user.benign],
        recovered=[*base.recovered, *user.recovered],
        retry=[*base.retry, *user.retry],
        retry_within=base.retry_within if user.retry_within is None else user.retry_within,
        gave_up=[*base.gave_up, *user.gave_up],
        went_on=[*base.went_on, *user.went_on],
        shape_gate=[*base.shape_gate, *user.shape_gate],
        classes={**base.classes, **user.classes},
        phases={**base.phases, **user.phases},
        frames={**base.frames, **user.frames},
        frames_message={**base.frames_message, **user.frames_message},
    )


def merge_causes(base: list[tuple[Path, CauseFile]], user: list[tuple[Path, CauseFile]]
                 ) -> list[tuple[Path, CauseFile]]:
    """Per cause one merged file: the user's settings over the shipped ones, rules by id."""
    by_cause: dict[str, tuple[Path, CauseFile]] = {}
    for path, f in [*base, *user]:
        if f.cause not in by_cause:
            by_cause[f.cause] = (path, f)
            continue
        _, old = by_cause[f.cause]
        ids = {r.id for r in f.rule if r.id is not None}
        rules = [r for r in old.rule if r.id is None or r.id not in ids] + list(f.rule)
        settings = {k: v for k, v in f.model_dump(exclude={"cause", "rule"}).items() if v is not None}
        by_cause[f.cause] = (path, old.model_copy(update={**settings, "rule": rules}))
    for path, f in by_cause.values():
        for field in ("explanation", "hint"):
            if getattr(f, field) is None:
                raise RulesError(f"{path}: {field}: required for the new cause {f.cause!r}")
    return list(by_cause.values())
