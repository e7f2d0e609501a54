"""Latency where people look: TTFT, TPOT, ITL and E2E at p50 / p90 / p99, per trial and load level.

The store holds each level's distributions (``metrics["levels"][i]["ttft_ms"] = {p50, p90, p99,
mean}``); ``rows`` flattens them to one row per trial and level, and every output (the Markdown
and HTML reports, ``bakeoff export --metrics`` as CSV or JSON) prints those rows.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from bakeoff.decide import label
from bakeoff.store import TrialRecord

METRICS = ("ttft", "tpot", "itl", "e2e")
PERCENTILES = ("p50", "p90", "p99")
COLUMNS = ("trial", "change", "verdict", "level", "valid", "errors", "output_tok_s",
           *(f"{m}_{p}_ms" for m in METRICS for p in PERCENTILES))


def rows(trials: list[TrialRecord]) -> list[dict]:
    """One row per trial and load level it was benchmarked at, in ``COLUMNS`` order (None where
    the level has no figure)."""
    out = []
    for t in trials:
        for lv in (t.metrics or {}).get("levels") or []:
            row = {"trial": t.idx, "change": label(t), "verdict": t.verdict or t.state, "level": lv.get("level"),
                   "valid": lv.get("valid"), "errors": lv.get("errors"), "output_tok_s": lv.get("output_tok_s")}
            for m in METRICS:
                dist = lv.get(f"{m}_ms") or {}
                for p in PERCENTILES:
                    row[f"{m}_{p}_ms"] = dist.get(p)
            out.append(row)
    return out


def _ms(x) -> str:
    return "—" if x is None else f"{x:.1f}"


def cells(row: dict) -> list[str]:
    """A row's latency as four cells, ``p50 / p90 / p99`` in ms each (TTFT, TPOT, ITL, E2E)."""
    return [" / ".join(_ms(row[f"{m}_{p}_ms"]) for p in PERCENTILES) for m in METRICS]


HEAD = ("#", "change vs baseline", "level", "output tok/s", "TTFT ms", "TPOT ms", "ITL ms", "E2E ms")


def markdown_lines(trials: list[TrialRecord]) -> list[str]:
    """The report's latency section (p50 / p90 / p99 per level), or nothing when nothing was benchmarked."""
    rs = rows(trials)
    if not rs:
        return []
    lines = ["", "## Latency per load level (p50 / p90 / p99)", "",
             "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    for r in rs:
        lines.append(f"| {r['trial']} | {r['change']} | {r['level']} | {_ms(r['output_tok_s'])} | " + " | ".join(cells(r)) + " |")
    return lines


def html_table(trials: list[TrialRecord]) -> str:
    from html import escape

    rs = rows(trials)
    if not rs:
        return ""
    num = ' class="num"'
    head = "".join(f"<th{num if i > 2 else ''}>{escape(h)}</th>" for i, h in enumerate(HEAD))
    body = "".join("<tr>" + "".join(f"<td{num if i > 2 else ''}>{escape(str(c))}</td>" for i, c in
                                    enumerate([r["trial"], r["change"], r["level"], _ms(r["output_tok_s"]), *cells(r)]))
                   + "</tr>" for r in rs)
    return (f'<h2>Latency per load level</h2><p class="note">p50 / p90 / p99, milliseconds.</p>'
            f'<table id="latency"><tr>{head}</tr>{body}</table>')


def to_csv(rs: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(COLUMNS), lineterminator="\n")
    w.writeheader()
    for r in rs:
        w.writerow({k: "" if r[k] is None else r[k] for k in COLUMNS})
    return buf.getvalue()


def write_metrics(trials: list[TrialRecord], path: str | Path) -> Path:
    """``bakeoff export --metrics``: one row per trial and level, as JSON (``.json``) or CSV."""
    p = Path(path)
    rs = rows(trials)
    p.write_text(json.dumps(rs, indent=2) + "\n" if p.suffix == ".json" else to_csv(rs), encoding="utf-8")
    return p
