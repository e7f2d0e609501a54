"""The fixed split of the issue-27 corpus: a log is scored unless sha256(path)[:8] % 4 == 0 (dev).

The path is relative to this folder (``engine/name.log``). The split was computed and committed
before any rule was written from these logs; rules may be written from the dev logs only.
"""

import hashlib
from pathlib import Path

HERE = Path(__file__).resolve().parent


def is_dev(rel: str) -> bool:
    """True for the development quarter, False for the scored three quarters."""
    return int(hashlib.sha256(rel.encode()).hexdigest()[:8], 16) % 4 == 0


def split() -> tuple[list[str], list[str]]:
    """(dev, scored): every ``*.log`` under this folder, by the hash rule above."""
    logs = sorted(p.relative_to(HERE).as_posix() for p in HERE.glob("*/*.log"))
    return [p for p in logs if is_dev(p)], [p for p in logs if not is_dev(p)]


if __name__ == "__main__":
    dev, scored = split()
    print(f"dev ({len(dev)}):", *dev, sep="\n  ")
    print(f"scored ({len(scored)}):", *scored, sep="\n  ")
