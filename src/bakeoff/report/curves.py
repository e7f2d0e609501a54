"""Numeric axes as curves (figure vs value), and what a search left out — the data behind the
report's numeric-axis table (Markdown) and plot (``html.numeric_curve_plot``), and the
sentences saying why the search stopped and what it did not explore."""

from __future__ import annotations

from bakeoff.store import TrialRecord


def _spec(spec: dict):
    from bakeoff.spec import Spec

    try:
        return Spec.model_validate(spec)
    except Exception:  # noqa: BLE001 — an older or partial stored spec: no curves, no sentence
        return None


def curve_points(spec: dict, trials: list[TrialRecord]) -> dict[str, list[tuple[float, float | None, str, bool, TrialRecord]]]:
    """Per numeric axis: (value, figure or None, verdict, on_baseline, trial) for every finished
    trial that ran, sorted by value; ``on_baseline`` when every other axis is at the baseline."""
    from bakeoff.plan import space
    from bakeoff.spec import render

    s = _spec(spec)
    if s is None:
        return {}
    base = s.baseline_config()
    out = {}
    for a in s.axes:
        if not a.numeric:
            continue
        pts = []
        for t in trials:
            v = t.config.get(a.name)
            if not t.is_finished() or t.verdict == "skipped" or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            others = all(render(t.config.get(k)) == render(base[k]) for k in base if k != a.name)
            pts.append((float(v), space.figure(t) if space.passed(t) else None, t.verdict, others, t))
        out[a.name] = sorted(pts, key=lambda p: p[0])
    return out


def markdown_table(spec: dict, trials: list[TrialRecord]) -> list[str]:
    """A short table per numeric axis: its value against the figure, other axes at the baseline
    (plus the best figure seen at that value with any other settings)."""
    lines = []
    for axis, pts in curve_points(spec, trials).items():
        if not pts:
            continue
        lines += ["", f"### Numeric axis `{axis}`", "", "| value | other axes at baseline | best with any other axes | runs |",
                  "|---:|---|---:|---:|"]
        for v in sorted({p[0] for p in pts}):
            here = [p for p in pts if p[0] == v]
            on = [p for p in here if p[3]]
            on_txt = (f"{on[0][1]:.1f}" if on and on[0][1] is not None else (on[0][2] if on else "—"))
            figs = [p[1] for p in here if p[1] is not None]
            vtxt = f"{int(v)}" if v == int(v) else f"{v:g}"
            lines.append(f"| {vtxt} | {on_txt} | {max(figs):.1f} | {len(here)} |" if figs
                         else f"| {vtxt} | {on_txt} | {here[0][2]} | {len(here)} |")
    return lines


def search_lines(spec: dict, trials: list[TrialRecord], stop_reason: str | None) -> list[str]:
    """Why the search stopped and what it left unexplored, one sentence each."""
    from bakeoff.plan import space

    s = _spec(spec)
    lines = []
    if stop_reason:
        lines.append(f"Search stopped: {stop_reason}.".replace("..", "."))
    if s is not None and s.axes:
        lines.append("Explored: " + space.unexplored(s, [t for t in trials if t.is_finished()]))
    return lines
