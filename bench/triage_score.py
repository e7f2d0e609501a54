"""Score failure triage on real logs: right / unknown / wrong cause, per set, listing each miss.

    PYTHONPATH=src python bench/triage_score.py [--sets dev,scored,earlier] [--rules DIR]

Sets: ``dev`` and ``scored`` are the issue-27 corpus (tests/data/triage_corpus/, split by
``split.py`` before any rule was written; rules are written from ``dev`` only), ``fresh`` are logs
collected after the rules were frozen (tests/data/triage_corpus/fresh/), ``earlier`` is the
older corpus under tests/data/logs/ (all of it development data). A failure log is "right" when
``classify`` names its ``# expected:`` cause, "unknown" when it says unknown, "wrong" when it names
another cause; a log with ``expected: none`` is "right" when ``find_cause`` finds nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "data" / "triage_corpus"))
from split import HERE as CORPUS, split  # noqa: E402

from bakeoff.judge.triage import classify, find_cause  # noqa: E402

EARLIER = ROOT / "tests" / "data" / "logs"
# folder -> the engine name bakeoff would pass (None: a library or a tool, not an engine)
ENGINE_OF = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llamacpp", "trtllm": "trtllm", "pytorch": "transformers"}


def read_log(path: Path) -> tuple[dict, str]:
    """(header fields, body): the leading ``# key: value`` lines, and the log after them."""
    head, lines = {}, path.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines) and lines[i].startswith("# "):
        key, _, value = lines[i][2:].partition(":")
        head[key.strip()] = value.strip()
        i += 1
    return head, "\n".join(lines[i:])


def score(path: Path, rules_dir: str | None = None) -> tuple[str, str, str]:
    """(kind, expected, got) for one log; kind is right, unknown, wrong or false alarm."""
    head, body = read_log(path)
    want = head.get("expected", "none")
    engine = ENGINE_OF.get(path.parent.name)
    if want == "none":
        found = find_cause(body, engine=engine, rules_dir=rules_dir)
        return ("right" if found is None else "false alarm"), want, (found.cause if found else "none")
    code = int(head["exit_code"]) if "exit_code" in head else None
    got = classify(body, exit_code=code, engine=engine, rules_dir=rules_dir).cause
    return ("right" if got == want else "unknown" if got == "unknown" else "wrong"), want, got


def sets() -> dict[str, list[Path]]:
    dev, scored = split()
    earlier = sorted(p for p in EARLIER.glob("*/*.log"))
    fresh = sorted(CORPUS.glob("fresh/*/*.log"))
    return {"dev": [CORPUS / p for p in dev], "scored": [CORPUS / p for p in scored], "fresh": fresh,
            "earlier": earlier}


def report(name: str, paths: list[Path], rules_dir: str | None) -> str:
    """The set's summary line, after one line per miss."""
    kinds, out = Counter(), []
    for path in paths:
        kind, want, got = score(path, rules_dir)
        kinds[kind] += 1
        if kind != "right":
            out.append(f"  [{name}] {kind}: {path.relative_to(ROOT)} expected {want}, got {got}")
    n = sum(kinds.values())
    pct = 100 * kinds["right"] / n if n else 0.0
    out.append(f"{name}: {n} logs: right {kinds['right']} ({pct:.0f} %), unknown {kinds['unknown']}, "
               f"wrong cause {kinds['wrong']}, false alarm {kinds['false alarm']}")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", default="dev,scored,fresh,earlier", help="comma-separated: dev, scored, fresh, earlier")
    ap.add_argument("--rules", default=None, help="a user rules directory merged over the shipped rules")
    args = ap.parse_args()
    all_sets = sets()
    for name in args.sets.split(","):
        if name not in all_sets:
            sys.exit(f"--sets: unknown set {name!r}; known: {', '.join(all_sets)}")
        print(report(name, all_sets[name], args.rules))


if __name__ == "__main__":
    main()
