"""Score failure triage on real logs: right / unknown / wrong cause, per set, listing each miss.

    PYTHONPATH=src python bench/triage_score.py [--sets dev,scored,fresh,dev2,check,earlier] [--rules DIR] [DIR ...]

Sets: ``dev`` and ``scored`` are the issue-27 corpus (tests/data/triage_corpus/, split by
``split.py`` before any rule was written; rules are written from ``dev`` only), ``fresh`` are logs
collected after the rules were frozen (tests/data/triage_corpus/fresh/), ``dev2`` are logs collected
for the failure classes the rules were thin on (tests/data/triage_corpus/dev2/, development data),
``check`` are logs collected after dev2's rules and scored once before any rule was written from them
(tests/data/triage_corpus/check/; development data since),
``earlier`` is the older corpus under tests/data/logs/ (all of it development data). A directory
given as an argument is scored as one more set (several directories also get one line for all of them
together: a set collected in halves): every ``*.log`` under it, the engine taken from the
log's folder name (``vllm/``, ``sglang/``, ``llamacpp/``, ``trtllm/``, ``pytorch/``; others: none). A failure log is "right" when
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
    dev2 = sorted(CORPUS.glob("dev2/*/*.log"))
    check = sorted(CORPUS.glob("check/*/*.log"))
    return {"dev": [CORPUS / p for p in dev], "scored": [CORPUS / p for p in scored], "fresh": fresh,
            "dev2": dev2, "check": check, "earlier": earlier}


def summary(name: str, kinds: Counter) -> str:
    """One set's counts in one line."""
    n = sum(kinds.values())
    pct = 100 * kinds["right"] / n if n else 0.0
    return (f"{name}: {n} logs: right {kinds['right']} ({pct:.0f} %), unknown {kinds['unknown']}, "
            f"wrong cause {kinds['wrong']}, false alarm {kinds['false alarm']}")


def report(name: str, paths: list[Path], rules_dir: str | None) -> tuple[str, Counter]:
    """The set's summary line, after one line per miss; and its counts."""
    kinds, out = Counter(), []
    for path in paths:
        kind, want, got = score(path, rules_dir)
        kinds[kind] += 1
        if kind != "right":
            shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            out.append(f"  [{name}] {kind}: {shown} expected {want}, got {got}")
    out.append(summary(name, kinds))
    return "\n".join(out), kinds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="*", type=Path,
                    help="directories of logs to score as sets of their own (then --sets defaults to none)")
    ap.add_argument("--sets", default=None,
                    help="comma-separated: dev, scored, fresh, dev2, check, earlier (default: all of them)")
    ap.add_argument("--rules", default=None, help="a user rules directory merged over the shipped rules")
    args = ap.parse_args()
    all_sets = sets()
    names = args.sets.split(",") if args.sets else ([] if args.dirs else list(all_sets))
    for name in names:
        if name not in all_sets:
            ap.error(f"--sets: unknown set {name!r}; known: {', '.join(all_sets)}")
    for d in args.dirs:
        if not d.is_dir():
            ap.error(f"dirs: {d} is not a directory")
    for name in names:
        print(report(name, all_sets[name], args.rules)[0])
    together = Counter()
    for d in args.dirs:
        paths = sorted(d.rglob("*.log"))
        if not paths:
            ap.error(f"dirs: {d} holds no *.log files")
        text, kinds = report(str(d), paths, args.rules)
        print(text)
        together += kinds
    if len(args.dirs) > 1:  # a set collected in halves (heldout7a + heldout7b) is scored as one
        print(summary(" + ".join(d.name for d in args.dirs), together))


if __name__ == "__main__":
    main()
