"""The Markdown report: one row per trial, the failures with their evidence, the recommendation."""

from __future__ import annotations

from pathlib import Path

from bakeoff import decide
from bakeoff.decide import CORRECT, command_line, label  # noqa: F401  (renderers import them from here)
from bakeoff.report import checks, curves
from bakeoff.report import latency, speed
from bakeoff.report.matrix import combination_note
from bakeoff.store import Store, TrialRecord

MODES = {"single": "single-request", "long": "long-prompt (near the context length)", "concurrent": "concurrent-requests",
         "lm_eval": "lm-evaluation-harness"}


def _fmt(x, spec: str = ".1f") -> str:
    return "—" if x is None else format(x, spec)


def render(store: Store, recommendation: bool = True) -> str:
    """The report; ``recommendation=False`` leaves its Recommendation section out (the end of
    `bakeoff run` prints the decision's lines last, once)."""
    sweep = store.sweep() or {"name": "?", "spec": {}, "fingerprint": {}}
    trials = store.current()
    stale = [t for t in store.trials() if t not in trials]
    decision = decide.load(store)
    spec = sweep["spec"]
    fp = sweep["fingerprint"]
    lines = [f"# bakeoff report: {sweep['name']}", ""]
    lines.append(f"Engine `{spec.get('engine')}`, model `{(spec.get('model') or {}).get('path')}`, "
                 f"strategy `{(spec.get('plan') or {}).get('strategy')}`, {len(trials)} trials.")
    gpus = fp.get("gpus") or []
    hw = ", ".join(f"{g.get('name')} (sm_{g.get('compute_capability', '?')})" for g in gpus) if gpus else (fp.get("cpu") or {}).get("model", "CPU")
    ver = f", {spec.get('engine')} {fp['engine_version']}" if fp.get("engine_version") else ""
    lines.append(f"Hardware: {hw}{ver}. Fingerprint `{fp.get('hash', '?')}`" + (f" ({fp['note']})." if fp.get("note") else "."))
    if recommendation:
        lines += ["", "## Recommendation", "", *_recommendation(decision), *_weaker_recommended(trials, decision)]
    slo = speed.has_slo(trials)
    lines += ["", "## Trials", "",
              "| # | single change vs baseline | verdict | cause | output tok/s (95 % CI) | TTFT p50 ms | "
              + ("goodput under the SLO (95 % CI), at the load found | " if slo else "") + "vs baseline (95 % CI) | evidence |",
              "|---|---|---|---|---|---|---|---|" + ("---|" if slo else "")]
    for t in trials:
        toks = t.metrics.get("output_tok_s")
        ratio = speed.versus(t)
        ev = (t.detail or "").replace("|", "\\|").replace("\n", " ")
        if len(ev) > 140:
            ev = ev[:137] + "..."
        verdict = t.verdict or t.state
        cause = f"{t.cause} ({t.metrics['failed_mode']})" if t.verdict == "wrong" and t.metrics.get("failed_mode") else t.cause or ""
        if checks.weaker_line(t):
            cause = (cause + " " if cause else "") + "weaker check (see Checks not run)"
        lines.append(f"| {t.idx} | {label(t)} | **{verdict}** | {cause} | {speed.throughput(t)} | "
                     f"{_fmt(t.metrics.get('ttft_p50_ms'))} | " + (f"{speed.goodput(t)} | " if slo else "") + f"{ratio} | {ev} |")
    lines += latency.markdown_lines(trials)
    lines += _lm_eval_lines(trials)
    lines += _not_run_lines(trials)
    energy = [t for t in trials if t.metrics.get("energy")]
    if energy:
        lines += ["", "## Energy (GPU, during the benchmark; NVML)", "",
                  "| # | change vs baseline | tok/s | tokens per joule | mean W | peak W | peak GPU MiB |", "|---|---|---|---|---|---|---|"]
        for t in energy:
            en = t.metrics["energy"]
            lines.append(f"| {t.idx} | {label(t)} | {_fmt(t.metrics.get('output_tok_s'))} | {_fmt(en.get('tok_per_j'), '.3f')} | "
                         f"{_fmt(en.get('power_w_mean'))} | {_fmt(en.get('power_w_peak'))} | {en.get('gpu_mem_peak_mib', '—')} |")
    failed = [t for t in trials if t.verdict in ("crashed", "wrong", "unstable", "infra_error")]
    if failed:
        lines += ["", "## Failures and their evidence", ""]
        for t in failed:
            lines.append(f"### Trial {t.idx}: {label(t)} — {t.verdict} ({t.cause})")
            lines.append("")
            lines.append(t.detail or "")
            if t.verdict == "wrong" and t.metrics.get("failed_mode"):
                mode = MODES.get(t.metrics["failed_mode"], t.metrics["failed_mode"])
                lines += ["", f"Detector `{t.cause}` fired in the {mode} run (mode `{t.metrics['failed_mode']}`)."]
                measured = t.metrics.get("probe") or {}
                if measured:
                    lines += ["", "Measured: " + ", ".join(f"{k}={v}" for k, v in measured.items() if k != "lm_eval")]
            if t.metrics.get("hint"):
                lines += ["", f"Hint: {t.metrics['hint']}"]
            combo = combination_note(t, spec, trials)
            if combo:
                lines += ["", combo]
            if t.evidence:
                lines += ["", "```", *[e for e in t.evidence][:12], "```"]
            if t.log_path:
                lines += ["", f"Log: `{t.log_path}`"]
            lines.append("")
    skipped = [t for t in trials if t.verdict == "skipped"]
    if skipped:
        lines += ["", "## Skipped", ""]
        lines += [f"- trial {t.idx} ({label(t)}): {t.detail}" for t in skipped if t.cause != "known_bad"]
        known = [t for t in skipped if t.cause == "known_bad"]
        if known:
            lines += ["", "Pruned by `--known-bad` compatibility matrices (found broken on a matching environment):", ""]
            lines += [f"- trial {t.idx} ({label(t)}): {t.detail}" for t in known]
    lines += ["", *curves.search_lines(spec, trials, store.meta("stop_reason")), *curves.markdown_table(spec, trials)]
    pending = [t for t in trials if not t.is_finished()]
    if pending:
        lines += ["", "## Not finished", ""]
        lines += [f"- trial {t.idx} ({label(t)}): {t.verdict or t.state}" for t in pending]
    if stale:
        lines += ["", "## Stale (from an earlier spec: not ranked, not recommended)", ""]
        lines += [f"- trial {t.idx} ({label(t)}): {t.verdict or t.state}" for t in stale]
    return "\n".join(lines) + "\n"


LM_EVAL_HEAD = ("#", "change vs baseline", "task (filter)", "accuracy (95 % CI)", "baseline (95 % CI)", "lost / gained", "McNemar p")


def lm_eval_rows(trials: list[TrialRecord]) -> list[tuple[str, ...]]:
    """Each trial's lm-eval accuracy (95 % CI) beside the baseline's on the same documents, one
    row per (trial, task) under ``LM_EVAL_HEAD``: the Markdown and the HTML report print these."""
    out = []
    for t in trials:
        report = (t.metrics.get("probe") or {}).get("lm_eval") or {}
        for task, row in (report.get("tasks") or {}).items():
            base = f"{row['baseline']} ({_interval(row['ci95_baseline'])})" if "baseline" in row else "—"
            moved = f"{row['lost']} / {row['gained']}" if "lost" in row else "—"
            p = f"{report['p']:.2g}" if "p" in report else "—"
            out.append((str(t.idx), label(t), f"{task} ({row['filter']})", f"{row['accuracy']} ({_interval(row['ci95'])})",
                        base, moved, p))
    return out


def _lm_eval_lines(trials: list[TrialRecord]) -> list[str]:
    rows = lm_eval_rows(trials)
    if not rows:
        return []
    return (["", "## lm-evaluation-harness", "", "| " + " | ".join(LM_EVAL_HEAD) + " |", "|" + "---|" * len(LM_EVAL_HEAD)]
            + ["| " + " | ".join(r) + " |" for r in rows])


def _weaker_recommended(trials: list[TrialRecord], d: decide.Decision) -> list[str]:
    """Under the recommendation: each recommended trial whose verdict lacked a check, and which."""
    keys = [p.key for p in ([d.winner] if d.winner else []) + list(d.fallbacks)]
    return [line for x in checks.recommended_lines(trials, keys) for line in ("", f"**Weaker check:** {x}")]


def _not_run_lines(trials: list[TrialRecord]) -> list[str]:
    """The checks each trial's verdict was reached without (``bakeoff.report.checks``)."""
    rows = [(t, checks.not_run(t)) for t in trials]
    rows = [(t, lines) for t, lines in rows if lines]
    if not rows:
        return []
    out = ["", "## Checks not run", "", "A verdict below rests on weaker checks than a full judge run: these did not run.", ""]
    for t, lines in rows:
        out += [f"- trial {t.idx} ({label(t)}, {t.verdict or t.state}): " + "; ".join(lines)]
    return out


def _interval(ci: list[float]) -> str:
    return f"{ci[0]:.0%}–{ci[1]:.0%}"


def _recommendation(d: decide.Decision) -> list[str]:
    """The decision's sentences, as every other output prints them."""
    lines = [f"**{d.headline}**"]
    if d.objective:
        lines += ["", f"Objective: {d.objective}."]
    if d.thinking:
        lines += ["", d.thinking]
    if d.noise_line:
        lines += ["", d.noise_line]
    for c in d.cautions:
        lines += ["", f"**Caution:** {c}"]
    if d.winner:
        lines += ["", "```sh", d.winner.command, "```"]
    if d.fallbacks:
        lines += ["", "Fallbacks, in ranked order:", ""]
        lines += [f"{i}. {f.sentence}" for i, f in enumerate(d.fallbacks, 1)]
    return lines


def write(out_dir: Path, store: Store) -> Path:
    path = Path(out_dir) / "report.md"
    path.write_text(render(store), encoding="utf-8")
    return path
