"""Speed figures as the report shows them: each with its 95 % interval, the comparison with the
baseline as decide made it (``metrics["vs_baseline"]``), and the SLO goodput with the load found.
Formatting only; nothing here decides."""

from __future__ import annotations

from bakeoff.store import TrialRecord


def _top(t: TrialRecord) -> dict | None:
    valid = [lv for lv in t.metrics.get("levels") or [] if lv.get("valid")]
    return valid[-1] if valid else None


def with_interval(x: float | None, ci: dict | None, spec: str = ".1f") -> str:
    """'41.2 (39.8–42.6)', or the bare figure when it has no interval (one repetition)."""
    if x is None:
        return "—"
    if not ci or ci.get("lo") is None:
        return format(x, spec)
    return f"{format(x, spec)} ({format(ci['lo'], spec)}–{format(ci['hi'], spec)})"


def throughput(t: TrialRecord) -> str:
    """Output tok/s at the top valid level, with its interval over repetitions."""
    top = _top(t)
    toks = t.metrics.get("output_tok_s")
    return with_interval(toks, (top or {}).get("ci", {}).get("output_tok_s") if top else None)


def throughput_error(level: dict) -> tuple[float, float] | None:
    """(below, above) the level's output tok/s: its 95 % interval, for an error bar."""
    ci = (level.get("ci") or {}).get("output_tok_s")
    if not ci or ci.get("lo") is None:
        return None
    y = level["output_tok_s"]
    return max(0.0, y - ci["lo"]), max(0.0, ci["hi"] - y)


def versus(t: TrialRecord) -> str:
    """'1.12x (1.06–1.18) better' as decide judged it; a plain ratio only where decide has none."""
    vs = t.metrics.get("vs_baseline")
    if not vs:
        return "—"
    if vs.get("lo") is None:
        return f"{vs['ratio']:.2f}x (no interval)"
    word = {"better": "faster", "worse": "slower", "tie": "tie"}.get(vs.get("call"), "")
    return f"{vs['ratio']:.2f}x ({vs['lo']:.2f}–{vs['hi']:.2f}) {word}".rstrip()


def has_slo(trials: list[TrialRecord]) -> bool:
    return any(t.metrics.get("objective") for t in trials)


def goodput(t: TrialRecord) -> str:
    """'3.1 (2.9–3.3) req/s at c=4', or why there is none."""
    obj = t.metrics.get("objective")
    if not obj:
        return "—"
    xs = obj.get("samples") or []
    if not xs:
        return "none met the SLO"
    from bakeoff.decide.stats import mean_interval

    m, lo, hi = mean_interval(xs)
    return f"{with_interval(m, {'lo': lo, 'hi': hi}, '.2f')} req/s at {obj.get('level')}"
