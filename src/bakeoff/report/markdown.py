"""The Markdown report: one row per trial, the failures with their evidence, the recommendation."""

from __future__ import annotations

import shlex
from pathlib import Path

from bakeoff.plan import Planned
from bakeoff.report import speed
from bakeoff.store import Store, TrialRecord

CORRECT = ("ok", "slow")
MODES = {"single": "single-request", "long": "long-prompt (near the context length)", "concurrent": "concurrent-requests"}


def label(rec: TrialRecord) -> str:
    return Planned(rec.idx, rec.config, tuple(rec.changed)).label


def command_line(rec: TrialRecord) -> str:
    """The exact launch command, ready to paste (env shown as VAR=value; secrets masked)."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in rec.env.items())
    cmd = shlex.join(rec.argv)
    return f"{env} {cmd}" if env else cmd


def ranking(trials: list[TrialRecord]) -> list[TrialRecord]:
    """Correct trials, fastest first (output tok/s at the top load level)."""
    correct = [t for t in trials if t.verdict in CORRECT and t.metrics.get("output_tok_s")]
    return sorted(correct, key=lambda t: -t.metrics["output_tok_s"])


def _fmt(x, spec: str = ".1f") -> str:
    return "—" if x is None else format(x, spec)


def render(store: Store) -> str:
    sweep = store.sweep() or {"name": "?", "spec": {}, "fingerprint": {}}
    trials = store.trials()
    spec = sweep["spec"]
    base = next((t for t in trials if t.is_baseline), None)
    fp = sweep["fingerprint"]
    lines = [f"# bakeoff report: {sweep['name']}", ""]
    lines.append(f"Engine `{spec.get('engine')}`, model `{(spec.get('model') or {}).get('path')}`, "
                 f"strategy `{(spec.get('plan') or {}).get('strategy')}`, {len(trials)} trials.")
    gpus = fp.get("gpus") or []
    hw = ", ".join(f"{g.get('name')} (sm_{g.get('compute_capability', '?')})" for g in gpus) if gpus else (fp.get("cpu") or {}).get("model", "CPU")
    ver = f", {spec.get('engine')} {fp['engine_version']}" if fp.get("engine_version") else ""
    lines.append(f"Hardware: {hw}{ver}. Fingerprint `{fp.get('hash', '?')}`" + (f" ({fp['note']})." if fp.get("note") else "."))
    slo = speed.has_slo(trials)
    lines += ["", "## Trials", "",
              "| # | single change vs baseline | verdict | cause | output tok/s (95 % CI) | TTFT p50 ms | "
              + ("goodput under the SLO (95 % CI), at the load found | " if slo else "") + "vs baseline (95 % CI) | evidence |",
              "|---|---|---|---|---|---|---|---|" + ("---|" if slo else "")]
    btoks = base.metrics.get("output_tok_s") if base else None
    for t in trials:
        toks = t.metrics.get("output_tok_s")
        ratio = speed.versus(t)
        ev = (t.detail or "").replace("|", "\\|").replace("\n", " ")
        if len(ev) > 140:
            ev = ev[:137] + "..."
        verdict = t.verdict or t.state
        cause = f"{t.cause} ({t.metrics['failed_mode']})" if t.verdict == "wrong" and t.metrics.get("failed_mode") else t.cause or ""
        lines.append(f"| {t.idx} | {label(t)} | **{verdict}** | {cause} | {speed.throughput(t)} | "
                     f"{_fmt(t.metrics.get('ttft_p50_ms'))} | " + (f"{speed.goodput(t)} | " if slo else "") + f"{ratio} | {ev} |")
    failed = [t for t in trials if t.verdict in ("crashed", "wrong", "infra_error")]
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
                    lines += ["", "Measured: " + ", ".join(f"{k}={v}" for k, v in measured.items())]
            if t.metrics.get("hint"):
                lines += ["", f"Hint: {t.metrics['hint']}"]
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
    pending = [t for t in trials if not t.is_finished()]
    if pending:
        lines += ["", "## Not finished", ""]
        lines += [f"- trial {t.idx} ({label(t)}): {t.verdict or t.state}" for t in pending]
    lines += ["", "## Recommendation", ""]
    ranked = ranking(trials)
    if not ranked:
        lines.append("No configuration passed correctness: nothing to recommend.")
    else:
        win = ranked[0]
        lines.append(f"**{label(win)}**: {win.metrics['output_tok_s']:.1f} output tok/s"
                     + (f" ({win.metrics['output_tok_s'] / btoks:.2f}x the baseline)" if btoks else "")
                     + ", passed correctness.")
        if win.metrics.get("unverified"):
            lines += ["", f"**Caution:** the baseline is {base.verdict if base else 'missing'}, so this trial was not compared "
                      "with known-good answers: it passed the absolute detectors (no NaN, garbage, or concurrency drift), "
                      "which is weaker than matching a baseline. Fix the baseline and run again before trusting it."]
        lines += ["", "```sh", command_line(win), "```"]
        if len(ranked) > 1:
            lines += ["", "Fallbacks, fastest first:", ""]
            for i, t in enumerate(ranked[1:], 1):
                lines.append(f"{i}. {label(t)} — {t.metrics['output_tok_s']:.1f} tok/s ({t.verdict}): `{command_line(t)}`")
    return "\n".join(lines) + "\n"


def write(out_dir: Path, store: Store) -> Path:
    path = Path(out_dir) / "report.md"
    path.write_text(render(store), encoding="utf-8")
    return path
