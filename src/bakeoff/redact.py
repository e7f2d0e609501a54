"""Secrets never reach logs, the store or reports: values of secret-looking env names are masked.

Two rules: a mapping key that looks secret (``*TOKEN*``, ``*KEY*``, ``*SECRET*``, ``*PASSWORD*``...)
has its value masked; and any secret value seen once (``remember``) is masked wherever it
appears later as text, e.g. when an engine echoes it in its log or it sits in an argv element.
"""

from __future__ import annotations

import os
import re
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


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (MASK if is_secret(k) and v else redact_text(v)) for k, v in env.items()}


def remember(env: dict[str, str], min_len: int = MIN_LEN) -> None:
    """Remember secret values so that any text that echoes them gets masked too."""
    global _pattern
    new = {v for k, v in env.items() if is_secret(str(k)) and isinstance(v, str) and len(v) >= min_len}
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


def redact_obj(obj: Any) -> Any:
    """Deep copy of a JSON-like value: remembered secret values masked in every string, and
    secret-named entries of any ``env`` mapping masked."""
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, dict):
        return {redact_text(k) if isinstance(k, str) else k: (redact_env(v) if k == "env" and _all_str(v) else redact_obj(v))
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v) for v in obj]
    return obj


# the caller's own environment: longer values only, so that e.g. FOO_KEY=true masks nothing
remember(dict(os.environ), min_len=8)
