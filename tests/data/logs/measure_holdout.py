"""Score the triage rules on the held-out and write-rules-from sets of HOLDOUT.md.

    PYTHONPATH=src python tests/data/logs/measure_holdout.py

A failure log is "right" when classify() names its expected cause, "unknown" when it says unknown
(expected something else), "wrong" when it names another specific cause. A healthy log (logs_ok/ or
`expected: none`) is "right" when find_cause() finds nothing and "false alarm" otherwise.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from holdout import DATA, split  # noqa: E402

from bakeoff.judge.triage import classify, find_cause  # noqa: E402

ENGINE_OF = {"flashinfer": None, "pytorch": "transformers", "rocm": None, "misc": None}


def header(path: Path) -> dict:
    out = {}
    for line in path.read_text(encoding="utf-8").split("\n"):
        if not line.startswith("# "):
            break
        k, _, v = line[2:].partition(":")
        out[k.strip()] = v.strip()
    return out


def score(rel: str) -> tuple[str, str, str]:
    path = DATA / rel
    text = path.read_text(encoding="utf-8")
    h = header(path)
    body = "\n".join(l for l in text.split("\n") if not l.startswith("# ")) if h else text
    healthy = rel.startswith("logs_ok/") or h.get("expected") == "none"
    folder = path.parent.name
    engine = None if healthy and folder == "logs_ok" else ENGINE_OF.get(folder, folder)
    if healthy:
        found = find_cause(body, engine=engine)
        return ("right" if found is None else "false alarm"), "none", (found.cause if found else "none")
    code = int(h["exit_code"]) if "exit_code" in h else None
    got = classify(body, exit_code=code, engine=engine).cause
    want = h["expected"]
    kind = "right" if got == want else "unknown" if got == "unknown" else "wrong"
    return kind, want, got


def main() -> None:
    held, train = split()
    for name, files in (("held-out", held), ("write-rules-from", train)):
        fail, healthy = Counter(), Counter()
        for rel in files:
            kind, want, got = score(rel)
            (healthy if want == "none" else fail)[kind] += 1
            if kind != "right":
                print(f"  [{name}] {kind}: {rel} expected {want}, got {got}")
        print(f"{name}: failure logs {sum(fail.values())}: named right {fail['right']}, unknown {fail['unknown']}, "
              f"wrong cause {fail['wrong']}; healthy logs {sum(healthy.values())}: quiet {healthy['right']}, "
              f"false alarm {healthy['false alarm']}")


if __name__ == "__main__":
    main()
