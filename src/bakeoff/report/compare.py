"""Two sweeps side by side: the same configurations (by config key), what changed verdict or speed.

A speed change is the ratio B/A of each configuration's objective (decide.objective_of) with
the interval decide uses for one launch against another (``stats.ratio_interval`` with the
larger of the two sweeps' launch noise): "faster"/"slower" only when it excludes 1 (and, with
``threshold``, leaves 1 ± threshold too). Sweeps whose workloads differ (load levels, prompt and
output lengths: ``WORKLOAD``) measured different things: no speed is compared, every row says
"workload", and the differences are listed. The environments' differences (fingerprint hash,
engine package versions, hardware) are listed too, since they are usually why a verdict moved.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from bakeoff import decide
from bakeoff.decide import label
from bakeoff.decide.stats import ratio_interval

# the [bench] fields that make a figure: two sweeps differing in one measured different workloads
WORKLOAD = ("concurrency", "request_rate", "request_rates", "input_tokens", "output_tokens", "api", "ignore_eos",
            "slo", "slo_search", "tool")
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
    change: str  # verdict | faster | slower | same | only_a | only_b | workload (the sweeps measured different loads)
    interval: str | None = None  # B/A with its interval (Ratio.describe), when both sides have a figure


def _v(t: TrialRecord | None) -> str | None:
    return None if t is None else (t.verdict or t.state)


def compare(a: Store, b: Store, threshold: float = 0.0) -> dict:
    """Row by row, what changed from sweep A to sweep B (see the module docstring)."""
    sa_, sb_ = a.sweep() or {}, b.sweep() or {}
    da, db = decide.load(a), decide.load(b)
    workload = workload_diff((sa_.get("spec") or {}).get("bench") or {}, (sb_.get("spec") or {}).get("bench") or {})
    between = max(launch_noise_of(da), launch_noise_of(db))
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
        elif workload:
            change = "workload"
        else:
            change = _speed_change(x, y, ratio, threshold, between)
        r = _interval(x, y, between) if x and y and not workload else None
        rows.append(Row(k, label(x or y), _v(x), _v(y), x.cause if x else None, y.cause if y else None, sa, sb, ratio,
                        x.metrics.get("ttft_p50_ms") if x else None, y.metrics.get("ttft_p50_ms") if y else None, change,
                        r.describe() if r else None))
    return {"a": {**_side(a, sa_), "recommendation": da.summary_lines()},
            "b": {**_side(b, sb_), "recommendation": db.summary_lines()}, "environment": env_diff(sa_.get("fingerprint") or {}, sb_.get("fingerprint") or {}),
            "workload": workload, "launch_noise": between,
            "threshold": threshold, "rows": [asdict(r) for r in rows],
            "changed": sum(1 for r in rows if r.change not in ("same", "workload"))}


def workload_diff(a: dict, b: dict) -> list[str]:
    """'output_tokens 64 -> 128' for each ``WORKLOAD`` field the two sweeps' [bench] set differently."""
    return [f"{k} {a.get(k)} -> {b.get(k)}" for k in WORKLOAD if a.get(k) != b.get(k)]


def launch_noise_of(d: decide.Decision) -> float:
    """The launch noise a sweep's comparisons counted (measured or configured), else the default."""
    return float((d.launch_noise or {}).get("sd") or decide.LAUNCH_NOISE)


def _interval(x: TrialRecord, y: TrialRecord, between: float):
    """B/A of the two records' objectives, one launch against another (None without figures)."""
    oa, ob = decide.objective_of(x), decide.objective_of(y)
    if not (oa and ob) or oa.name != ob.name:
        return None
    return ratio_interval(ob.samples, oa.samples, higher_is_better=oa.higher_is_better, between=between)


def _speed_change(x: TrialRecord, y: TrialRecord, ratio: float | None, threshold: float, between: float) -> str:
    """faster / slower only beyond the noise: the interval of B/A (repetitions on both sides and
    the launch noise, as decide compares) must exclude 1, and the ratio leave 1 ± threshold; a
    side with one run has no interval, so no change is claimed; else "same"."""
    r = _interval(x, y, between)
    if ratio is None or r is None or r.lo is None or abs(r.ratio - 1) <= threshold:
        return "same"
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
