"""Reproduce the held-out split recorded in HOLDOUT.md: hash of the path relative to tests/data."""

import hashlib
import re
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent


def is_held_out(rel: str) -> bool:
    return int(hashlib.sha256(rel.encode()).hexdigest()[:8], 16) % 3 == 0


def split() -> tuple[list[str], list[str]]:
    """(held-out, write-rules-from) among the files HOLDOUT.md lists as new in issue 15."""
    listed = re.findall(r"^- (\S+\.log)$", (DATA / "logs" / "HOLDOUT.md").read_text(), re.M)
    return [p for p in listed if is_held_out(p)], [p for p in listed if not is_held_out(p)]


if __name__ == "__main__":
    held, train = split()
    print("held out:", *held, sep="\n  ")
    print("write rules from:", *train, sep="\n  ")
