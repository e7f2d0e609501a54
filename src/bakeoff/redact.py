"""Secrets never reach logs, the store or reports: values of secret-looking env names and flags are masked.

Three rules: a mapping key that looks secret (``*TOKEN*``, ``*KEY*``, ``*SECRET*``, ``*PASSWORD*``...)
has its value masked; an argv flag whose name has such a word (``--api-key``, ``--hf-token``,
``--db_password``; not ``--max-tokens`` or ``--tokenizer``) has its value masked, as
``--flag value`` and ``--flag=value`` (``mask_argv``); and any secret value seen once
(``remember``) is masked wherever it appears later as text, e.g. when an engine echoes it in its log.

A masked value is ``***`` in the store; a command shown to be run (``run.hosts.base.shell_line``) reads it
from the user's environment instead, so that it stays exactly what to run:
``HF_TOKEN="${HF_TOKEN:?}"``, ``--api-key "${BAKEOFF_SECRET_API_KEY:?}"`` (the shell stops with
"parameter null or not set" when the variable is missing, rather than start with a wrong secret).
"""

from __future__ import annotations

import os
import re
import shlex
import threading
from typing import Any

SECRET_NAME = re.compile(r"(TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
MASK = "***"
MIN_LEN = 4  # shorter values are too common to mask everywhere

_known: set[str] = set()
_pattern: re.Pattern[str] | None = None
_lock = threading.Lock()


def is_secret(name: str) -> bool:
    return SECRET_NAME.search(name) is not None


SECRET_FLAG_WORDS = frozenset({"token", "key", "apikey", "secret", "password", "passwd", "credential", "credentials"})


def is_secret_flag(flag: str) -> bool:
    """``--api-key``, ``--hf-token``, ``--hf_token``, ``--secret``: a flag one of whose words (split
    at ``-``/``_``) is a secret word; ``--max-tokens``, ``--tokenizer``, ``--ssl-keyfile`` are not."""
    if not flag.startswith("-"):
        return False
    words = re.split(r"[-_.]+", flag.lstrip("-").split("=", 1)[0].lower())
    return any(w in SECRET_FLAG_WORDS for w in words)


def argv_secrets(argv: list[str]) -> dict[str, str]:
    """flag -> value of every secret flag in ``argv`` (``--flag value`` and ``--flag=value``)."""
    out: dict[str, str] = {}
    for i, a in enumerate(argv):
        if not isinstance(a, str) or not is_secret_flag(a):
            continue
        if "=" in a:
            flag, _, value = a.partition("=")
            out[flag] = value
        elif i + 1 < len(argv) and isinstance(argv[i + 1], str) and not argv[i + 1].startswith("-"):
            out[a] = argv[i + 1]
    return out


def mask_argv(argv: list[str]) -> list[str]:
    """``argv`` with every secret flag's value ``***`` (and remembered secrets masked in the rest)."""
    out = []
    after_secret = False
    for a in argv:
        if not isinstance(a, str):
            out.append(a)
            after_secret = False
            continue
        if after_secret and not a.startswith("-"):
            out.append(MASK if a else a)
        elif is_secret_flag(a) and "=" in a:
            flag, _, value = a.partition("=")
            out.append(f"{flag}={MASK}" if value else a)
        else:
            out.append(redact_text(a))
        after_secret = is_secret_flag(a) and "=" not in a
    return out


def secret_ref(flag: str) -> str:
    """The variable a shown command reads a masked flag's value from: ``--api-key`` ->
    ``BAKEOFF_SECRET_API_KEY``."""
    return "BAKEOFF_SECRET_" + re.sub(r"[^A-Za-z0-9]+", "_", flag.lstrip("-")).upper().strip("_")


def env_word(name: str, value: str) -> str:
    """One env value as a shell word: a secret as a reference to the user's variable."""
    return '"${%s:?}"' % name if is_secret(name) and value else shlex.quote(redact_text(value))


def argv_words(argv: list[str]) -> list[str]:
    """``argv`` as shell words, a secret flag's value as a reference to the user's variable
    (``--api-key "${BAKEOFF_SECRET_API_KEY:?}"``)."""
    words: list[str] = []
    prev = ""
    for a in mask_argv(list(argv)):
        if a == MASK and is_secret_flag(prev) and "=" not in prev:
            words.append('"${%s:?}"' % secret_ref(prev))
        elif is_secret_flag(a) and a.endswith("=" + MASK):
            flag = a.partition("=")[0]
            words.append(shlex.quote(flag + "=") + '"${%s:?}"' % secret_ref(flag))
        else:
            words.append(shlex.quote(redact_text(a)))
        prev = a
    return words


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (MASK if is_secret(k) and v else redact_text(v)) for k, v in env.items()}


def remember(env: dict[str, str], min_len: int = MIN_LEN) -> None:
    """Remember secret values so that any text that echoes them gets masked too."""
    remember_values([v for k, v in env.items() if is_secret(str(k))], min_len)


def remember_argv(argv: list[str]) -> None:
    """Remember the values of ``argv``'s secret flags (``--api-key sk-...``)."""
    remember_values(list(argv_secrets(argv).values()))


def remember_values(values: list, min_len: int = MIN_LEN) -> None:
    """Remember these values as secrets, whatever their name."""
    global _pattern
    new = {v for v in values if isinstance(v, str) and len(v) >= min_len and v != MASK}
    if new - _known:
        with _lock:
            _known.update(new)
            # longest first, so that a secret containing another is masked whole
            _pattern = re.compile("|".join(re.escape(v) for v in sorted(_known, key=len, reverse=True)))


def redact_text(text: str) -> str:
    pat = _pattern
    return pat.sub(MASK, text) if pat is not None and text else text


def _all_str(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(x, str) for x in v.values())


ARGV_KEYS = ("argv", "args", "command", "tool_args", "tool_command")  # argv lists wherever they are stored


def _str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def redact_obj(obj: Any) -> Any:
    """Deep copy of a JSON-like value: remembered secret values masked in every string,
    secret-named entries of any ``env`` mapping masked, and secret flags' values in any argv
    list (``argv``, ``args``, ``command``...) masked."""
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, dict):
        return {redact_text(k) if isinstance(k, str) else k: (redact_env(v) if k == "env" and _all_str(v)
                                                               else mask_argv(v) if k in ARGV_KEYS and _str_list(v)
                                                               else redact_obj(v))
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v) for v in obj]
    return obj


# the caller's own environment: longer values only, so that e.g. FOO_KEY=true masks nothing
remember(dict(os.environ), min_len=8)
