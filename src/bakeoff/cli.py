"""The ``bakeoff`` command. Thin: parse flags, call one function, print; errors -> one message."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from bakeoff.errors import BakeoffError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Find the fastest inference configuration that is actually correct.")
console = Console(stderr=True)
out = Console()

VERDICT_STYLE = {"ok": "green", "slow": "yellow", "wrong": "red", "crashed": "red", "skipped": "dim", "interrupted": "magenta"}


def _fail(err: BakeoffError) -> None:
    console.print(f"error: {err}", style="red", highlight=False, markup=False)
    raise typer.Exit(err.exit_code)


class _LiveView:
    """Current trial, phase, elapsed vs timeout, last log line, and a running results table."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.rows: list[tuple] = []
        self.current = "-"
        self.phase = "-"
        self.line = ""
        self.t0 = time.monotonic()
        self.live = Live(self._render(), console=console, refresh_per_second=4, transient=False)

    def _render(self) -> Table:
        t = Table(title=f"trial {self.current} · {self.phase} · {time.monotonic() - self.t0:.0f}s / {self.timeout_s:.0f}s",
                  caption=self.line[-120:] if self.line else None)
        for col in ("#", "change", "verdict", "cause", "tok/s"):
            t.add_column(col)
        for r in self.rows:
            t.add_row(*r)
        return t

    def trial_start(self, p, n) -> None:
        self.current = f"{p.idx + 1}/{n} ({p.label})"
        self.t0 = time.monotonic()
        self.live.update(self._render())

    def on_phase(self, phase: str, line: str) -> None:
        self.phase = phase
        if line:
            self.line = line
        self.live.update(self._render())

    def trial_end(self, rec) -> None:
        from bakeoff.report import label

        toks = rec.metrics.get("output_tok_s")
        style = VERDICT_STYLE.get(rec.verdict or "", "")
        self.rows.append((str(rec.idx), label(rec), f"[{style}]{rec.verdict}[/{style}]", rec.cause or "",
                          f"{toks:.1f}" if toks else "—"))
        self.live.update(self._render())

    def note(self, msg: str) -> None:
        self.live.console.print(msg, markup=False)


@app.command()
def run(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help="sweep spec (TOML)"),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="sweep directory (default: runs/<spec name>)"),
    executor: Optional[str] = typer.Option(None, "--executor", help="local or ray (overrides the spec)"),
    known_bad: list[Path] = typer.Option([], "--known-bad", help="compatibility-matrix JSON of configurations known broken"),
) -> None:
    """Run (or resume) a sweep; writes DIR/report.md and the store DIR/bakeoff.sqlite."""
    from bakeoff import spec as specmod
    from bakeoff.sweep import Events, run_sweep

    try:
        spec = specmod.load(spec_path)
        if executor is not None:
            if executor not in ("local", "ray"):
                raise specmod.SpecError(f"--executor: {executor!r} is not valid; valid: local, ray")
            spec = spec.model_copy(update={"executor": executor})
        out_dir = out_dir or Path("runs") / spec.name
        bad = _load_known_bad(known_bad, spec)
        view = _LiveView(spec.server.startup_timeout_s)
        events = Events(trial_start=view.trial_start, phase=view.on_phase, trial_end=view.trial_end, note=view.note)
        with view.live:
            if spec.executor == "ray":
                from bakeoff.executors.ray import run_sweep_ray

                report_path = run_sweep_ray(spec, out_dir, events=events, known_bad=bad)
            else:
                report_path = run_sweep(spec, out_dir, events=events, known_bad=bad)
    except BakeoffError as err:
        _fail(err)
    out.print(report_path.read_text(), markup=False, highlight=False)
    console.print(f"report: {report_path}")


def _load_known_bad(paths: list[Path], spec) -> dict:
    if not paths:
        return {}
    from bakeoff.matrix import known_bad_pairs

    return known_bad_pairs(paths, spec)


@app.command()
def plan(spec_path: Path = typer.Argument(..., metavar="SPEC"),
         as_json: bool = typer.Option(False, "--json", help="one JSON list of trials")) -> None:
    """Print every trial's argv and env; launches nothing."""
    from bakeoff import spec as specmod
    from bakeoff.sweep import plan_json

    try:
        trials = plan_json(specmod.load(spec_path))
    except BakeoffError as err:
        _fail(err)
    if as_json:
        out.print_json(json.dumps(trials))
        return
    for t in trials:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in t["env"].items())
        out.print(f"# trial {t['idx']}: {t['label']}", markup=False, highlight=False)
        out.print((env + " " if env else "") + shlex.join(t["argv"]), markup=False, highlight=False, soft_wrap=True)


@app.command()
def report(sweep_dir: Path = typer.Argument(..., metavar="DIR"),
           html: bool = typer.Option(False, "--html", help="also write DIR/report.html")) -> None:
    """Rebuild DIR/report.md from the store (and report.html with --html)."""
    from bakeoff import report as rep
    from bakeoff.store import open_readonly

    try:
        with open_readonly(sweep_dir) as store:
            path = rep.write(sweep_dir, store)
            if html:
                from bakeoff.html import write_html

                console.print(f"html: {write_html(sweep_dir, store)}")
    except BakeoffError as err:
        _fail(err)
    out.print(path.read_text(), markup=False, highlight=False)


@app.command()
def triage(
    log: Path = typer.Argument(..., metavar="LOG"),
    exit_code: Optional[int] = typer.Option(None, "--exit-code", help="the process's exit status (negative = signal)"),
    engine: Optional[str] = typer.Option(None, "--engine", help="engine that wrote the log"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Name the cause of a failed launch from its log, with the lines that prove it."""
    from bakeoff.triage import classify

    if not log.is_file():
        console.print(f"error: LOG: {log} is not a file", style="red", markup=False)
        raise typer.Exit(2)
    d = classify(log.read_text(encoding="utf-8", errors="replace"), exit_code=exit_code, engine=engine)
    if as_json:
        j = d.to_json()
        out.print_json(json.dumps({k: j[k] for k in ("cause", "explanation", "hint", "evidence", "confidence")}))
        return
    out.print(f"cause: {d.cause}  (confidence {d.confidence:.2f})", markup=False, highlight=False)
    out.print(f"why:   {d.explanation}", markup=False, highlight=False)
    out.print(f"hint:  {d.hint}", markup=False, highlight=False)
    if d.evidence:
        out.print("evidence:", markup=False)
        for line in d.evidence:
            out.print(f"  {line}", markup=False, highlight=False)


def main() -> None:
    try:
        app()
    except BakeoffError as err:  # pragma: no cover - commands catch their own
        console.print(f"error: {err}", style="red", markup=False)
        sys.exit(err.exit_code)


if __name__ == "__main__":
    main()
