"""Secrets never reach logs, the store or reports: values of secret-looking env names are masked."""

from __future__ import annotations

import os
import re

SECRET_NAME = re.compile(r"(TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
MASK = "***"


def is_secret(name: str) -> bool:
    return SECRET_NAME.search(name) is not None


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (MASK if is_secret(k) and v else v) for k, v in env.items()}


_known: set[str] = set()


def remember(env: dict[str, str]) -> None:
    """Remember secret values so that any text that echoes them gets masked too."""
    for k, v in env.items():
        if is_secret(k) and v and len(v) >= 4:
            _known.add(v)


def redact_text(text: str) -> str:
    for value in _known:
        if value in text:
            text = text.replace(value, MASK)
    return text


remember(dict(os.environ))
