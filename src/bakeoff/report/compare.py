"""Two sweeps side by side: the same configurations (by config key), what changed verdict or speed.

A speed change is the ratio B/A of output tok/s at the top load level; it counts as a change
outside ``1 ± threshold``. The environments' differences (fingerprint hash, engine package
versions, hardware) are listed too, since they are usually why a verdict moved.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from bakeoff import decide
from bakeoff.decide import label
from bakeoff.decide.stats import ratio_interval
from bakeoff.store import Store, TrialRecord


@dataclass
class Row:
    key: str
    label: str
    verdict_a: str | None
    verdict_b: str | None
    cause_a: str | None
    cause_b: str | None
    tok_s_a: float | None
    tok_s_b: float | None
    ratio: float | None  # B / A output tok/s
    ttft_a: float | None
    ttft_b: float | None
    change: str  # verdict | faster | slower | same | only_a | only_b


def _v(t: TrialRecord | None) -> str | None:
    return None if t is None else (t.verdict or t.state)


def compare(a: Store, b: Store, threshold: float = 0.1) -> dict:
    ta = {t.key: t for t in a.current()}
    tb = {t.key: t for t in b.current()}
    keys = list(ta) + [k for k in tb if k not in ta]
    rows = []
    for k in keys:
        x, y = ta.get(k), tb.get(k)
        sa = x.metrics.get("output_tok_s") if x else None
        sb = y.metrics.get("output_tok_s") if y else None
        ratio = round(sb / sa, 3) if sa and sb else None
        if x is None:
            change = "only_b"
        elif y is None:
            change = "only_a"
        elif _v(x) != _v(y):
            change = "verdict"
        else:
            change = _speed_change(x, y, ratio, threshold)
        rows.append(Row(k, label(x or y), _v(x), _v(y), x.cause if x else None, y.cause if y else None, sa, sb, ratio,
                        x.metrics.get("ttft_p50_ms") if x else None, y.metrics.get("ttft_p50_ms") if y else None, change))
    sa_, sb_ = a.sweep() or {}, b.sweep() or {}
    return {"a": {**_side(a, sa_), "recommendation": decide.load(a).summary_lines()},
            "b": {**_side(b, sb_), "recommendation": decide.load(b).summary_lines()}, "environment": env_diff(sa_.get("fingerprint") or {}, sb_.get("fingerprint") or {}),
            "threshold": threshold, "rows": [asdict(r) for r in rows],
            "changed": sum(1 for r in rows if r.change != "same")}


def _speed_change(x: TrialRecord, y: TrialRecord, ratio: float | None, threshold: float) -> str:
    """faster / slower only beyond the noise: the interval of B/A (repetitions on both sides)
    must exclude 1 and the ratio must leave 1 ± threshold; else "same"."""
    oa, ob = decide.objective_of(x), decide.objective_of(y)
    r = ratio_interval(ob.samples, oa.samples) if oa and ob else None
    if ratio is None or r is None or abs(ratio - 1) <= threshold:
        return "same"
    if r.lo is None:  # one run a side: no interval, so only the threshold speaks
        return "faster" if ratio > 1 else "slower"
    return {"better": "faster", "worse": "slower"}.get(r.call, "same")


def _side(store: Store, sweep: dict) -> dict:
    return {"dir": str(store.dir), "name": sweep.get("name"), "fingerprint": (sweep.get("fingerprint") or {}).get("hash")}


def env_diff(fa: dict, fb: dict) -> list[str]:
    """Human lines for what differs between two environment fingerprints (empty when the same)."""
    out = []
    if fa.get("hash") == fb.get("hash"):
        return out
    out.append(f"fingerprint {fa.get('hash', '?')} -> {fb.get('hash', '?')}")
    pa, pb = fa.get("packages") or {}, fb.get("packages") or {}
    for name in sorted(set(pa) | set(pb)):
        if pa.get(name) != pb.get(name):
            out.append(f"{name} {pa.get(name) or '(absent)'} -> {pb.get(name) or '(absent)'}")
    ga = [(g.get("name"), g.get("compute_capability")) for g in fa.get("gpus") or []]
    gb = [(g.get("name"), g.get("compute_capability")) for g in fb.get("gpus") or []]
    if ga != gb:
        out.append(f"gpus {ga or 'none'} -> {gb or 'none'}")
    for k in ("driver_version", "cuda_version", "python", "os"):
        if fa.get(k) != fb.get(k):
            out.append(f"{k} {fa.get(k)} -> {fb.get(k)}")
    return out
