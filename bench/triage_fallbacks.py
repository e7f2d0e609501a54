"""Two fallbacks for what the triage rules leave ``unknown``, measured; neither is shipped.

    PYTHONPATH=src python bench/triage_fallbacks.py        (needs scikit-learn: pip install scikit-learn)

1. A learned classifier of the decisive lines. For each held-out set heldoutK (K = 12..25) it takes the logs the
   rules called ``unknown`` when that set was scored (the misses its score file lists), trains on every log of the
   sets that existed before it (the earlier corpus, dev/scored/fresh/dev2/check, heldout2-6 and heldout7..K-1;
   ``unknown`` is a class of its own, healthy logs are left out) and counts, at each confidence threshold, how
   often its guess is right, wrong, or withheld. Models: logistic regression and complement naive Bayes on tf-idf
   of the final exception and the quoted tail, and the nearest training log by cosine similarity.
2. A structural veto for the crash class: a crash named only when neither the abort's line nor the 4 non-blank
   lines before it state an error in words. Counted on the development data with today's rules: how many right
   and how many wrong crash verdicts the veto would turn into ``unknown``.

The corpus README ("Two fallbacks measured and not built") reports its output.
"""

from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

try:
    import numpy as np
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics.pairwise import cosine_similarity
    from sklearn.naive_bayes import ComplementNB
except ImportError:
    sys.exit("bench/triage_fallbacks.py needs scikit-learn (pip install scikit-learn); bakeoff itself does not")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from triage_score import ENGINE_OF, read_log  # noqa: E402

from bakeoff.judge.triage import classify, structure  # noqa: E402
from bakeoff.judge.triage.matcher import _tail_evidence  # noqa: E402

DATA = ROOT / "tests" / "data"
CORPUS = DATA / "triage_corpus"
FIRST, LAST = 12, 25  # the score files from heldout12 on list every miss in one format
TOKEN = r"(?u)\b[a-zA-Z_][a-zA-Z0-9_]{1,}\b"
MISS = re.compile(r"\s*\[\S+\] (unknown|wrong): (\S+) expected (\S+), got (\S+)")
STATED = re.compile(r"(?i)\b(?:error|failed|failure|cannot|can ?not|could ?n[o']t|unable|not found|unsupported|"
                    r"not supported|not compatible|exceeds?|mismatch|invalid|no such|out of)\b")
CODE = re.compile(r"[<>=!]=|::|->|&&|\|\|")


def held_out_number(folder: str) -> int | None:
    m = re.match(r"heldout(\d+)", folder)
    return int(m.group(1)) if m else None


def corpus() -> list[dict]:
    """Every labelled failure log: its folder (set), label, body and exit status, and the text a fallback reads."""
    rows = []
    for path in sorted(DATA.rglob("*.log")):
        rel = path.relative_to(DATA).parts
        folder = rel[1] if rel[0] == "triage_corpus" else "earlier" if rel[0] == "logs" else None
        if folder is None:
            continue
        head, body = read_log(path)
        want = head.get("expected")
        if not want or want == "none":
            continue
        exc = structure.final_exception(body)
        lines = [re.sub(r"^L\d+: ", "", e) for e in _tail_evidence(body)]
        rows.append({"set": folder, "path": path, "label": want, "body": body,
                     "exit_code": int(head["exit_code"]) if "exit_code" in head else None,
                     "text": "\n".join(([exc[2]] if exc else []) + lines)})
    return rows


def unknown_when_scored() -> set[Path]:
    out = set()
    for k in range(FIRST, LAST + 1):
        for line in (CORPUS / f"heldout{k}-score.txt").read_text(encoding="utf-8").splitlines():
            m = MISS.match(line)
            if m and m.group(1) == "unknown":
                p = Path(m.group(2))
                out.add(p if p.is_absolute() else ROOT / p if p.parts[0] == "tests" else CORPUS / p)
    return out


def learned(rows: list[dict]) -> None:
    unknown = unknown_when_scored()
    thresholds = (0.0, 0.4, 0.5, 0.6, 0.7, 0.8)
    tallies: dict[str, dict[float, Counter]] = defaultdict(lambda: defaultdict(Counter))
    n = 0
    for k in range(FIRST, LAST + 1):
        train = [r for r in rows if (held_out_number(r["set"]) or 0) < k]
        # the set's halves (a, b); its logs kept apart (c, d) were scored apart
        test = [r for r in rows if held_out_number(r["set"]) == k and r["set"][-1] in "ab" and r["path"] in unknown]
        if not test:
            continue
        n += len(test)
        y = [r["label"] for r in train]
        vec = TfidfVectorizer(token_pattern=TOKEN, ngram_range=(1, 2), min_df=2, sublinear_tf=True)
        x = vec.fit_transform([r["text"] for r in train])
        xt = vec.transform([r["text"] for r in test])
        for name, model in (("logistic regression", LogisticRegression(C=5.0, max_iter=2000)),
                            ("naive Bayes", ComplementNB(alpha=0.3))):
            model.fit(x, y)
            for r, p in zip(test, model.predict_proba(xt)):
                i = int(np.argmax(p))
                for t in thresholds:
                    kind = "withheld" if p[i] < t else "right" if model.classes_[i] == r["label"] else "wrong"
                    tallies[name][t][kind] += 1
        near = TfidfVectorizer(token_pattern=TOKEN, ngram_range=(1, 2), sublinear_tf=True)
        sim = cosine_similarity(near.fit(r["text"] for r in train).transform([r["text"] for r in test]),
                                near.transform([r["text"] for r in train]))
        for r, s in zip(test, sim):
            j = int(np.argmax(s))
            for t in (0.0, 0.5, 0.6, 0.7, 0.8):
                kind = "withheld" if s[j] < t else "right" if train[j]["label"] == r["label"] else "wrong"
                tallies["nearest neighbour"][t][kind] += 1
    print(f"1. learned fallback on the {n} logs the rules called unknown when heldout{FIRST}-{LAST} were scored")
    for name, by_t in tallies.items():
        for t, c in sorted(by_t.items()):
            print(f"   {name:20s} >= {t:.1f}: right {c['right']:3d}  wrong {c['wrong']:3d}  withheld {c['withheld']:3d}")


def crash_veto(rows: list[dict]) -> None:
    counts = Counter()
    for r in rows:
        d = classify(r["body"], exit_code=r["exit_code"], engine=ENGINE_OF.get(r["path"].parent.name))
        if d.cause != "crash" or not d.line:
            continue
        lines = r["body"].split("\n")
        i = d.line - 1
        around = [ln for ln in lines[max(0, i - 8):i] if ln.strip()][-4:] + [lines[i] if i < len(lines) else ""]
        vetoed = any(STATED.search(ln) and not CODE.search(ln) for ln in around)
        counts[("right" if r["label"] == "crash" else "wrong", "vetoed" if vetoed else "kept")] += 1
    print("2. crash veto on the development data (today's rules):")
    for verdict in ("right", "wrong"):
        print(f"   {verdict} crash verdicts: {counts[(verdict, 'vetoed')]} vetoed to unknown, {counts[(verdict, 'kept')]} kept")


def main() -> None:
    rows = corpus()
    learned(rows)
    crash_veto(rows)


if __name__ == "__main__":
    main()
