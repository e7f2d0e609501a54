"""The HTML report: one self-contained file (inline CSS and SVG, no network at view time).

Sections: the verdict matrix (two axes, colour by verdict, cause in the cell and on hover), the
single-change table with its evidence, throughput vs latency of the correct trials with the
Pareto front, each trial's startup phases as a timeline, and the recommendation with a copy
button. Every piece of text from the store is escaped: log lines may contain anything.
"""

from __future__ import annotations

import io
import time
from html import escape
from pathlib import Path

from bakeoff.errors import MissingExtra
from bakeoff import decide
from bakeoff.decide import CORRECT, label
from bakeoff.report import checks
from bakeoff.spec import render as render_value
from bakeoff.store import Store, TrialRecord

COLOURS = {"ok": "#b7e4c7", "slow": "#ffe8a3", "wrong": "#ffb3b3", "unstable": "#ffc9a8", "crashed": "#f08080", "skipped": "#dddddd",
           "interrupted": "#e0c3f0", "infra_error": "#cbbef0", "pending": "#ffffff", "running": "#cfe8ff"}
MAX_EVIDENCE = 12

CSS = """
:root { --fg:#1d232a; --muted:#5f6b76; --line:#d5dbe1; --bg:#ffffff; --panel:#f6f8fa; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg);
       margin: 0 auto; padding: 24px 32px 64px; max-width: 1280px; }
h1 { font-size: 26px; margin: 0 0 4px; } h2 { font-size: 19px; margin: 32px 0 10px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
.meta { color: var(--muted); margin: 0 0 6px; } .meta code { color: var(--fg); }
code, pre { font: 13px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.badges span { display: inline-block; padding: 2px 10px; border-radius: 12px; margin: 4px 6px 0 0; font-weight: 600; }
table { border-collapse: collapse; } th, td { border: 1px solid var(--line); padding: 6px 10px; vertical-align: top; text-align: left; }
th { background: var(--panel); font-weight: 600; }
table.matrix td.cell { width: 220px; height: 86px; text-align: center; vertical-align: middle; }
table.matrix td.cell .v { font-weight: 700; font-size: 16px; } table.matrix td.cell .c { font-size: 13px; }
table.matrix td.cell .n { font-size: 12px; color: #333; } table.matrix td.cell.none { color: #999;
  background: repeating-linear-gradient(45deg, #fff, #fff 6px, #f3f3f3 6px, #f3f3f3 12px); }
table.matrix td.cell.base { outline: 3px solid #2f6fde; outline-offset: -3px; }
table.matrix th { vertical-align: middle; }
table.matrix th.corner { font-weight: 400; color: var(--muted); font-size: 13px; }
.verdict { display: inline-block; padding: 1px 8px; border-radius: 10px; font-weight: 700; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
details summary { cursor: pointer; color: #2f5fae; } pre.ev { background: #1e2227; color: #e6e6e6; padding: 8px 10px;
  border-radius: 6px; overflow-x: auto; max-width: 640px; white-space: pre-wrap; word-break: break-all; }
.hint { color: var(--muted); font-size: 13px; } .note { color: var(--muted); }
.weaker { color: #8a4b00; font-size: 13px; }
.figure { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 8px; display: inline-block; }
.figure svg { display: block; max-width: 100%; height: auto; }
.rec { background: #eef8f1; border: 1px solid #9ccfad; border-radius: 8px; padding: 12px 16px; }
.cmd { position: relative; } .cmd pre { background: #1e2227; color: #e6e6e6; padding: 12px 14px; padding-right: 90px;
  border-radius: 6px; white-space: pre-wrap; word-break: break-all; margin: 8px 0; }
.cmd button { position: absolute; top: 8px; right: 8px; font: 600 13px system-ui, sans-serif; padding: 4px 12px;
  border-radius: 5px; border: 1px solid #888; background: #f4f4f4; cursor: pointer; }
ul.skips li { margin-bottom: 4px; }
"""

JS = """
function copyText(text, done) {
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(done, function () { fallbackCopy(text, done); });
  } else { fallbackCopy(text, done); }
}
function fallbackCopy(text, done) {
  var ta = document.createElement('textarea'); ta.value = text; document.body.appendChild(ta); ta.select();
  try { document.execCommand('copy'); done(); } catch (e) {} ta.remove();
}
document.querySelectorAll('button[data-copy]').forEach(function (b) {
  b.addEventListener('click', function () {
    copyText(document.getElementById(b.dataset.copy).textContent, function () {
      b.textContent = 'Copied'; setTimeout(function () { b.textContent = 'Copy'; }, 1500);
    });
  });
});
"""

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"


def e(x: object) -> str:
    return escape("" if x is None else str(x), quote=True)


def _badge(verdict: str | None) -> str:
    v = verdict or "pending"
    return f'<span class="verdict" style="background:{COLOURS.get(v, "#fff")}">{e(v)}</span>'


def _fmt(x, spec: str = ".1f") -> str:
    return "—" if x is None else format(x, spec)


# -- the verdict matrix ----------------------------------------------------------------------
def matrix_axes(axes: list[dict]) -> tuple[dict | None, dict | None, list[dict]]:
    """The two axes with the most values (spec order breaks ties) and the rest."""
    ranked = sorted(range(len(axes)), key=lambda i: (-len(axes[i]["values"]), i))
    pick = sorted(ranked[:2])
    row = axes[pick[0]] if pick else None
    col = axes[pick[1]] if len(pick) > 1 else None
    return row, col, [a for i, a in enumerate(axes) if i not in pick]


def _find(trials: list[TrialRecord], want: dict[str, str]) -> TrialRecord | None:
    for t in trials:
        if all(render_value(t.config.get(k)) == v for k, v in want.items()):
            return t
    return None


def _cell(t: TrialRecord | None, is_base: bool) -> str:
    if t is None:
        return '<td class="cell none" title="not in the plan">not in plan</td>'
    v = t.verdict or t.state
    hover = f"trial {t.idx}: {label(t)} — {v}" + (f" ({t.cause})" if t.cause else "")
    if t.detail:
        hover += "\n" + t.detail
    if t.evidence:
        hover += "\n" + t.evidence[0]
    toks = t.metrics.get("output_tok_s")
    return (f'<td class="cell{" base" if is_base else ""}" data-verdict="{e(v)}" style="background:{COLOURS.get(v, "#fff")}" '
            f'title="{e(hover)}"><div class="v">{e(v)}</div><div class="c">{e(t.cause or "")}</div>'
            f'<div class="n">{"baseline · " if is_base else ""}{e(_fmt(toks) + " tok/s") if toks else "trial " + str(t.idx)}</div></td>')


def verdict_matrix(spec: dict, trials: list[TrialRecord]) -> str:
    axes = spec.get("axes") or []
    base = next((t for t in trials if t.is_baseline), None)
    basecfg = {k: render_value(v) for k, v in (base.config if base else {}).items()}
    row, col, rest = matrix_axes(axes)
    fixed = {a["name"]: basecfg.get(a["name"]) for a in rest if a["name"] in basecfg}
    out = ['<table class="matrix" id="verdict-matrix">']
    if row is None:
        out.append(f"<tr><th>baseline</th>{_cell(base, True)}</tr>")
    elif col is None:
        out.append(f'<tr><th class="corner">{e(row["name"])}</th>'
                   + "".join(f"<th>{e(render_value(v))}</th>" for v in row["values"]) + "</tr><tr><th></th>")
        for v in row["values"]:
            want = {**fixed, row["name"]: render_value(v)}
            out.append(_cell(_find(trials, want), render_value(v) == basecfg.get(row["name"])))
        out.append("</tr>")
    else:
        out.append(f'<tr><th class="corner">{e(row["name"])} ↓ · {e(col["name"])} →</th>'
                   + "".join(f"<th>{e(render_value(v))}</th>" for v in col["values"]) + "</tr>")
        for rv in row["values"]:
            out.append(f"<tr><th>{e(render_value(rv))}</th>")
            for cv in col["values"]:
                want = {**fixed, row["name"]: render_value(rv), col["name"]: render_value(cv)}
                is_base = want == {k: basecfg.get(k) for k in want}
                out.append(_cell(_find(trials, want), is_base))
            out.append("</tr>")
    out.append("</table>")
    if rest:
        held = ", ".join(f"<code>{e(a['name'])}</code>={e(fixed.get(a['name']))} (of {e(', '.join(render_value(v) for v in a['values']))})"
                         for a in rest)
        out.append(f'<p class="note">Other axes, held at the baseline in this matrix: {held}. '
                   "Their single-change results are in the table below.</p>")
    out.append('<p class="note">Hover a cell for the cause and the first line of evidence. Blue outline: the baseline.</p>')
    return "\n".join(out)


# -- the single-change table -----------------------------------------------------------------
def change_table(trials: list[TrialRecord], spec: dict | None = None) -> str:
    from bakeoff.report import speed
    from bakeoff.report.matrix import combination_note

    slo = speed.has_slo(trials)
    out = ['<table id="single-change"><tr><th>#</th><th>single change</th><th>result</th><th class="num">output tok/s (95 % CI)</th>'
           '<th class="num">TTFT p50 ms</th>' + ('<th class="num">goodput under the SLO, at the load found</th>' if slo else "")
           + '<th class="num">vs baseline (95 % CI)</th><th>evidence</th></tr>']
    for t in trials:
        toks = t.metrics.get("output_tok_s")
        ratio = speed.versus(t)
        ev = [f"<div>{e(t.detail)}</div>"] if t.detail else []
        if t.metrics.get("hint"):
            ev.append(f'<div class="hint">hint: {e(t.metrics["hint"])}</div>')
        combo = combination_note(t, spec or {}, trials)
        if combo:
            ev.append(f'<div class="hint">{e(combo)}</div>')
        if t.evidence and t.verdict not in CORRECT:
            lines = t.evidence[:MAX_EVIDENCE]
            ev.append(f"<details><summary>log evidence ({len(t.evidence)} line{'s' if len(t.evidence) != 1 else ''})</summary>"
                      f'<pre class="ev">{e(chr(10).join(lines))}</pre></details>')
        if t.log_path and t.verdict not in CORRECT:
            ev.append(f'<div class="hint">log: <code>{e(t.log_path)}</code></div>')
        weaker = checks.weaker_line(t)
        if weaker:
            ev.append(f'<div class="weaker">{e(weaker)}</div>')
        mark = ' <span class="weaker">weaker check</span>' if weaker else ""
        out.append(f"<tr><td class=\"num\">{t.idx}</td><td>{e(label(t))}</td><td>{_badge(t.verdict or t.state)} "
                   f"{e(t.cause or '')}{mark}</td><td class=\"num\">{e(speed.throughput(t))}</td><td class=\"num\">{_fmt(t.metrics.get('ttft_p50_ms'), '.0f')}</td>"
                   + (f"<td class=\"num\">{e(speed.goodput(t))}</td>" if slo else "")
                   + f"<td class=\"num\">{e(ratio)}</td><td>{''.join(ev)}</td></tr>")
    out.append("</table>")
    return "\n".join(out)


def latency_table(trials: list[TrialRecord]) -> str:
    from bakeoff.report.latency import html_table

    return html_table(trials)


# -- plots -----------------------------------------------------------------------------------
def _plt():
    try:
        import matplotlib
    except ImportError:
        raise MissingExtra("report --html", "html", "matplotlib") from None
    matplotlib.use("Agg", force=True)
    matplotlib.rcParams.update({"svg.fonttype": "none", "font.size": 10, "axes.spines.top": False,
                                "axes.spines.right": False})
    import matplotlib.pyplot as plt

    return plt


def _svg(fig, salt: str) -> str:
    import matplotlib

    matplotlib.rcParams["svg.hashsalt"] = salt  # stable, per-figure ids: two inline SVGs never share one
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    fig.clear()
    import matplotlib.pyplot as plt

    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def perf_points(trials: list[TrialRecord]) -> list[tuple[TrialRecord, str, float, float]]:
    """(trial, level, TTFT p50 ms, output tok/s) of each valid load level of each correct trial."""
    pts = []
    for t in trials:
        if t.verdict not in CORRECT:
            continue
        levels = [lv for lv in t.metrics.get("levels") or [] if lv.get("valid")]
        for lv in levels:
            ttft = (lv.get("ttft_ms") or {}).get("p50")
            if ttft is not None and lv.get("output_tok_s"):
                pts.append((t, str(lv.get("level")), float(ttft), float(lv["output_tok_s"])))
        if not levels and t.metrics.get("output_tok_s") and t.metrics.get("ttft_p50_ms") is not None:
            pts.append((t, str(t.metrics.get("level", "")), float(t.metrics["ttft_p50_ms"]), float(t.metrics["output_tok_s"])))
    return pts


def pareto(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats (lower-or-equal latency and higher-or-equal
    throughput, strictly better in one), sorted by latency."""
    front = []
    for i, (x, y) in enumerate(points):
        if not any((x2 <= x and y2 >= y) and (x2 < x or y2 > y) for j, (x2, y2) in enumerate(points) if j != i):
            front.append(i)
    return sorted(front, key=lambda i: points[i])


def perf_plot(trials: list[TrialRecord]) -> str:
    pts = perf_points(trials)
    if not pts:
        return '<p class="note" id="perf-plot">No correct trial has load-level measurements: nothing to plot.</p>'
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10.5, 5.2), dpi=100)
    cmap = plt.get_cmap("tab10")
    order = []
    for t, *_ in pts:
        if t.key not in [o.key for o in order]:
            order.append(t)
    for i, t in enumerate(order):
        mine = [(x, y, lv) for tt, lv, x, y in pts if tt.key == t.key]
        xs, ys = [m[0] for m in mine], [m[1] for m in mine]
        ax.plot(xs, ys, "-o", color=cmap(i % 10), label=f"#{t.idx} {label(t)}", ms=7, lw=1.5, alpha=0.9)
        from bakeoff.report.speed import throughput_error  # error bars: the 95 % interval over repetitions

        bars = {str(lv.get("level")): throughput_error(lv) for lv in t.metrics.get("levels") or [] if lv.get("valid")}
        err = [(x, y, bars.get(lv)) for x, y, lv in mine if bars.get(lv)]
        if err:
            ax.errorbar([x for x, _, _ in err], [y for _, y, _ in err], yerr=[[b[0] for *_, b in err], [b[1] for *_, b in err]],
                        fmt="none", ecolor=cmap(i % 10), elinewidth=1.2, capsize=4, alpha=0.9)
        for x, y, lv in mine:
            ax.annotate(lv, (x, y), textcoords="offset points", xytext=(6, -12), fontsize=8, color="#555")
    xy = [(x, y) for _, _, x, y in pts]
    front = pareto(xy)
    fx, fy = [xy[i][0] for i in front], [xy[i][1] for i in front]
    ax.step(fx, fy, where="post", color="#222", ls="--", lw=1, label="Pareto front")
    ax.scatter(fx, fy, s=170, facecolors="none", edgecolors="#222", linewidths=1.6, zorder=5)
    ax.set_xlabel("TTFT p50 (ms)  ← lower is better")
    ax.set_ylabel("output tok/s  ↑ higher is better (bars: 95 % CI over repetitions)")
    ax.set_title("Throughput vs latency, correct trials (one point per load level)")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=9, frameon=False)
    return f'<div class="figure" id="perf-plot">{_svg(fig, "perf")}</div>'


def numeric_curve_plot(spec: dict, trials: list[TrialRecord]) -> str:
    """Figure vs value for each numeric axis (report.curves.curve_points): a line through the
    trials whose other axes are at the baseline, grey dots for every other correct trial, red
    crosses at the bottom for values that failed. Empty when the spec has no numeric axis."""
    from bakeoff.report.curves import curve_points

    curves = {a: p for a, p in curve_points(spec, trials).items() if p}
    if not curves:
        return ""
    plt = _plt()
    fig, axes = plt.subplots(1, len(curves), figsize=(5.2 * len(curves), 3.6), dpi=100, squeeze=False)
    for ax, (axis, pts) in zip(axes[0], curves.items()):
        others = [(v, f) for v, f, _, on, _ in pts if f is not None and not on]
        line = sorted((v, f) for v, f, _, on, _ in pts if f is not None and on)
        bad = [v for v, f, _, _, _ in pts if f is None]
        if others:
            ax.scatter(*zip(*others), color="#999", s=18, label="other axes changed")
        if line:
            ax.plot(*zip(*line), "-o", color="#1f77b4", label="other axes at baseline")
        if bad:
            ax.scatter(bad, [0] * len(bad), marker="x", color="#d62728", label="wrong / crashed")
        ax.set_xlabel(axis)
        ax.set_ylabel("figure (higher is better)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, frameon=False)
    return f'<div class="figure" id="numeric-curves">{_svg(fig, "numeric")}</div>'


def timeline_plot(trials: list[TrialRecord]) -> str:
    rows = [t for t in trials if t.phases or (t.started and t.finished and t.verdict == "crashed")]
    if not rows:
        return '<p class="note" id="timeline-plot">No trial recorded startup phases.</p>'
    plt = _plt()
    cmap = plt.get_cmap("Set2")
    names: list[str] = []
    for t in rows:
        for n, _ in sorted(t.phases.items(), key=lambda kv: kv[1]):
            if n != "ready" and n not in names:
                names.append(n)
    colour = {n: cmap(i % 8) for i, n in enumerate(["spawn", *names])}
    fig, ax = plt.subplots(figsize=(10.5, 0.55 * len(rows) + 1.6), dpi=100)
    used = set()
    for y, t in enumerate(reversed(rows)):
        marks = sorted(((n, s) for n, s in t.phases.items() if n != "ready"), key=lambda kv: kv[1])
        ready = t.phases.get("ready")
        end = ready if ready is not None else ((t.finished - t.started) if t.finished and t.started else (marks[-1][1] if marks else 0))
        segs = [("spawn", 0.0)] + marks
        for i, (n, s) in enumerate(segs):
            stop = segs[i + 1][1] if i + 1 < len(segs) else end
            if stop <= s:
                continue
            ax.barh(y, stop - s, left=s, height=0.6, color=colour[n], edgecolor="white",
                    label=n if n not in used else None)
            used.add(n)
        if ready is not None:
            ax.plot([ready], [y], marker="|", ms=18, mew=2.5, color="#1b7f3b")
            ax.annotate(f"ready {ready:.1f}s", (ready, y), textcoords="offset points", xytext=(6, -4), fontsize=8)
        elif t.verdict == "crashed":
            ax.plot([end], [y], marker="x", ms=10, mew=2.5, color="#c0392b")
            ax.annotate(f"{t.cause or 'crashed'} at ~{end:.1f}s", (end, y), textcoords="offset points", xytext=(8, -4),
                        fontsize=8, color="#c0392b")
    ax.set_yticks(range(len(rows)), [f"#{t.idx} {label(t)}" for t in reversed(rows)])
    ax.set_xlabel("seconds since launch")
    ax.set_title("Startup phases per trial (from the engine's log)")
    ax.grid(axis="x", alpha=0.3)
    ax.margins(x=0.18)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False, title="phase", title_fontsize=8)
    return f'<div class="figure" id="timeline-plot">{_svg(fig, "timeline")}</div>'


# -- recommendation and the rest -------------------------------------------------------------
def _command(cmd_id: str, text: str) -> str:
    return (f'<div class="cmd"><button type="button" data-copy="{cmd_id}" title="copy to clipboard">Copy</button>'
            f'<pre id="{cmd_id}">{e(text)}</pre></div>')


def recommendation(d: decide.Decision) -> str:
    """The stored decision's sentences (the same words as the Markdown report and the CLI)."""
    out = [f'<div class="rec" id="recommendation"><p><b>{e(d.headline)}</b></p>']
    if d.objective:
        out.append(f"<p>Objective: {e(d.objective)}.</p>")
    if d.thinking:
        out.append(f'<p id="thinking">{e(d.thinking)}</p>')
    if d.noise_line:
        out.append(f'<p id="noise">{e(d.noise_line)}</p>')
    out += [f'<p class="caution"><b>Caution:</b> {e(c)}</p>' for c in d.cautions]
    if d.winner:
        out.append(_command("cmd-0", d.winner.command))
    if d.fallbacks:
        out.append("<p>Fallbacks, in ranked order:</p><ol>")
        for i, f in enumerate(d.fallbacks, 1):
            out.append(f"<li>{e(f.sentence)}" + _command(f"cmd-{i}", f.command) + "</li>")
        out.append("</ol>")
    out.append("</div>")
    return "\n".join(out)


def weaker_recommended(trials: list[TrialRecord], d: decide.Decision) -> str:
    """Each recommended trial whose verdict lacked a check, and which (``bakeoff.report.checks``)."""
    keys = [p.key for p in ([d.winner] if d.winner else []) + list(d.fallbacks)]
    return "\n".join(f'<p class="weaker caution"><b>Weaker check:</b> {e(x)}</p>' for x in checks.recommended_lines(trials, keys))


def skipped_notes(trials: list[TrialRecord]) -> str:
    skipped = [t for t in trials if t.verdict == "skipped"]
    if not skipped:
        return ""
    items = "".join(f"<li>trial {t.idx} ({e(label(t))}): <b>{e(t.cause or 'skipped')}</b> — {e(t.detail)}</li>" for t in skipped)
    return f'<h2>Skipped</h2><ul class="skips" id="skipped">{items}</ul>'


def lm_eval_table(trials: list[TrialRecord]) -> str:
    """The lm-evaluation-harness gate: accuracy with its interval beside the baseline's."""
    from bakeoff.report.markdown import LM_EVAL_HEAD, lm_eval_rows

    rows = lm_eval_rows(trials)
    if not rows:
        return ""
    head = "".join(f"<th>{e(h)}</th>" for h in LM_EVAL_HEAD)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f'<h2>lm-evaluation-harness</h2><table id="lm-eval"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def render_html(store: Store) -> str:
    sweep = store.sweep() or {"name": "?", "spec": {}, "fingerprint": {}, "created": None}
    spec, fp, trials = sweep["spec"] or {}, sweep["fingerprint"] or {}, store.current()
    gpus = fp.get("gpus") or []
    hw = (", ".join(f"{g.get('name')} (sm_{g.get('compute_capability', '?')})" for g in gpus) if gpus
          else f"CPU: {(fp.get('cpu') or {}).get('model', '?')} ({(fp.get('cpu') or {}).get('cores', '?')} cores)")
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.verdict or t.state] = counts.get(t.verdict or t.state, 0) + 1
    created = time.strftime("%Y-%m-%d %H:%M", time.localtime(sweep["created"])) if sweep.get("created") else "?"
    model = spec.get("model") or {}
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>bakeoff report: {e(sweep['name'])}</title><style>{CSS}</style></head><body>",
        f"<h1>bakeoff report: {e(sweep['name'])}</h1>",
        f'<p class="meta">Engine <code>{e(spec.get("engine"))}</code> {e(fp.get("engine_version") or "")}, model '
        f'<code>{e(model.get("name") or model.get("path"))}</code>, strategy <code>{e((spec.get("plan") or {}).get("strategy"))}</code>, '
        f"{len(trials)} trials, started {e(created)}.</p>",
        f'<p class="meta">Hardware: {e(hw)}. Fingerprint <code>{e(fp.get("hash", "?"))}</code>{e(" (" + fp["note"] + ")") if fp.get("note") else ""}.</p>',
        '<div class="badges">' + "".join(f'<span style="background:{COLOURS.get(v, "#fff")}">{e(v)}: {n}</span>'
                                         for v, n in counts.items()) + "</div>",
        "<h2>Recommendation</h2>", recommendation(decision := decide.load(store)), weaker_recommended(trials, decision),
        "<h2>Verdict matrix</h2>", verdict_matrix(spec, trials),
        "<h2>Single changes vs the baseline</h2>", change_table(trials, spec),
        latency_table(trials),
        "<h2>Throughput vs latency</h2>", perf_plot(trials),
        "<h2>Startup timelines</h2>", timeline_plot(trials),
        (c := numeric_curve_plot(spec, trials)) and "<h2>Numeric axes</h2>" + c,
        lm_eval_table(trials),
        skipped_notes(trials),
        f"<script>{JS}</script></body></html>",
    ]
    return "\n".join(p for p in parts if p) + "\n"


def write_html(sweep_dir: str | Path, store: Store) -> Path:
    path = Path(sweep_dir) / "report.html"
    path.write_text(render_html(store), encoding="utf-8")
    return path
