"""Where a sweep stands: the trial running now, its phase and last log line, and the results so far.

One ``Progress`` value is drawn by one ``render`` function, whether it is filled live from the
sweep's events (``bakeoff run``) or read back from the store by another process
(``bakeoff status DIR``, which opens the store read-only and never takes the run's lock).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Group
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from bakeoff.decide import Decision
from bakeoff.store import Store, TrialRecord, spec_table

VERDICT_STYLE = {"ok": "green", "slow": "yellow", "wrong": "red", "unstable": "red", "crashed": "red", "skipped": "dim",
                 "interrupted": "magenta", "infra_error": "magenta"}
TAIL_BYTES = 64 * 1024


@dataclass
class Progress:
    name: str = ""
    total: int = 0
    current: str = "-"  # "2/3 (flash_attn=on)"
    phase: str = "-"
    started: float | None = None  # time.time() the current trial launched
    timeout_s: float = 0.0  # startup timeout of the current trial
    last_line: str = ""
    rows: list[TrialRecord] = field(default_factory=list)  # finished trials, in order
    recommendation: list[str] = field(default_factory=list)  # the stored decision's lines (bakeoff.decide)
    runner: str = ""  # who runs the sweep ('this process', 'pid 123', 'no run active')
    done: bool = False


def label(rec: TrialRecord) -> str:
    from bakeoff.decide import label as _label

    return _label(rec)


def result_row(rec: TrialRecord) -> tuple[str, ...]:
    from bakeoff.report.speed import versus

    toks = rec.metrics.get("output_tok_s")
    ttft = rec.metrics.get("ttft_p50_ms")
    ratio = versus(rec)
    verdict = rec.verdict or rec.state
    style = VERDICT_STYLE.get(verdict, "")
    ready = (rec.phases or {}).get("ready")
    return (str(rec.idx), label(rec), Text(verdict, style=style), rec.cause or "", f"{toks:.1f}" if toks else "—",
            f"{ttft:.0f}" if ttft else "—", ratio, f"{ready:.1f}s" if ready else "—")


def render(p: Progress, now: float | None = None) -> Group:
    now = time.time() if now is None else now
    head = Table.grid(padding=(0, 1))
    head.add_column(style="bold")
    head.add_column()
    finished = len(p.rows)
    head.add_row("sweep", Text(f"{p.name}  ({finished}/{p.total} finished{', done' if p.done else ''})"))
    if p.runner:
        head.add_row("runner", Text(p.runner))
    if not p.done and p.current != "-":
        head.add_row("trial", Text(p.current))
        head.add_row("phase", Text(p.phase))
        if p.started is not None:
            elapsed = max(0.0, now - p.started)
            bar = Table.grid(padding=(0, 1))
            if p.phase.startswith(("launch", "starting")) and p.timeout_s:
                frac = elapsed / p.timeout_s
                style = "green" if frac < 0.5 else "yellow" if frac < 0.8 else "red"
                bar.add_row(ProgressBar(total=p.timeout_s, completed=min(elapsed, p.timeout_s), width=30,
                                        complete_style=style, finished_style="red"),
                            Text(f"{elapsed:.0f}s / {p.timeout_s:.0f}s startup timeout"))
            else:
                bar.add_row(Text(f"{elapsed:.0f}s since launch"))
            head.add_row("elapsed", bar)
        if p.last_line:
            head.add_row("log", Text(p.last_line[-160:], style="dim", overflow="ellipsis", no_wrap=True))
    table = Table(title="results", title_justify="left", expand=False,
                  caption=None if p.rows else "no trial finished yet", caption_justify="left")
    for col, just in (("#", "right"), ("change", "left"), ("verdict", "left"), ("cause", "left"), ("tok/s", "right"),
                      ("TTFT p50 ms", "right"), ("vs base", "right"), ("ready", "right")):
        table.add_column(col, justify=just)
    for rec in p.rows:
        table.add_row(*result_row(rec))
    if not p.recommendation:
        return Group(head, table)
    return Group(head, table, Text("\n".join(p.recommendation)))


# -- reading a sweep another process is running ------------------------------------------------
def tail_line(path: str | None) -> str:
    """The last non-empty line of a log file (reads only its end)."""
    if not path:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - TAIL_BYTES))
            data = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [ln for ln in data.splitlines() if ln.strip()]
    return lines[-1][-200:] if lines else ""


def _log_phase(path: str | None, engine_kind: str | None) -> str | None:
    if not path or not engine_kind:
        return None
    try:
        from bakeoff.run.engines.base import get_engine

        engine = get_engine(engine_kind)
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except Exception:  # an unknown engine or unreadable log only costs the phase name
        return None
    phase = None
    for line in text.splitlines():
        phase = engine.phase_of(line) or phase
    return phase


def runner_of(sweep_dir: Path) -> tuple[int | None, bool]:
    """(pid written in the sweep's lock file, whether that process is alive). Takes no lock."""
    try:
        pid = int((Path(sweep_dir) / ".lock").read_text().strip() or 0) or None
    except (OSError, ValueError):
        return None, False
    if pid is None:
        return None, False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return pid, False
    except PermissionError:
        return pid, True
    return pid, True


def from_store(store: Store) -> Progress:
    sweep = store.sweep() or {"name": "?", "spec": {}}
    spec = sweep["spec"] or {}
    trials = store.current()
    pid, alive = runner_of(store.dir)
    decision = store.meta("decision")
    p = Progress(name=sweep["name"], total=len(trials), rows=[t for t in trials if t.is_finished()],
                 recommendation=Decision.from_json(decision).summary_lines() if decision else [],
                 timeout_s=float(spec_table(spec, "server")["startup_timeout_s"]))
    p.runner = f"pid {pid}" + ("" if alive else " (not running)") if pid else "no run has held this directory"
    running = [t for t in trials if t.state == "running" and t.verdict is None]
    if running and alive:
        rec = running[0]
        p.current = f"{rec.idx + 1}/{len(trials)} ({label(rec)})"
        p.started = rec.started
        p.last_line = tail_line(rec.log_path)
        mirrored = store.progress() if hasattr(store, "progress") else None  # what the run wrote last
        phase = (mirrored or {}).get("phase") if (mirrored or {}).get("trial") == rec.key else None
        logged = _log_phase(rec.log_path, spec.get("engine"))
        if phase is None:  # an older run that does not mirror its phase: infer it
            phase = ("bench" if store.artifact(rec.key, "probes") is not None
                     else "probe" if logged in ("listening", "ready") else "starting")
        p.phase = f"{phase} ({logged})" if phase == "starting" and logged else phase
    elif running:
        p.current = f"{running[0].idx + 1}/{len(trials)} ({label(running[0])})"
        p.phase = "left running by a bakeoff that is gone; `bakeoff run` resumes it"
    p.done = bool(trials) and all(t.is_finished() for t in trials)
    return p
