"""The ``bakeoff`` command. Thin: parse flags, call one function, print; errors -> one message."""

from __future__ import annotations

import json
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


def _fail(err: BakeoffError) -> None:
    console.print(f"error: {err}", style="red", highlight=False, markup=False)
    raise typer.Exit(err.exit_code)


class _LiveView:
    """Current trial, phase, elapsed vs its timeout, last log line, and a running results table
    (drawn by bakeoff.report.status.render, the same view `bakeoff status` shows from the store)."""

    def __init__(self, name: str, timeout_s: float) -> None:
        from bakeoff.report.status import Progress

        self.p = Progress(name=name, timeout_s=timeout_s, runner="this process")
        self.live = Live(get_renderable=self._render, console=console, refresh_per_second=2, transient=False)

    def _render(self):
        from bakeoff.report.status import render

        return render(self.p)

    def trial_start(self, p, n) -> None:
        self.p.total, self.p.current, self.p.phase = n, f"{p.idx + 1}/{n} ({p.label})", "launch"
        self.p.started, self.p.last_line = time.time(), ""

    def on_phase(self, phase: str, line: str) -> None:
        self.p.phase = phase
        if line:
            self.p.last_line = line

    def trial_end(self, rec) -> None:
        self.p.rows.append(rec)
        self.p.current = "-"
        self.p.total = max(self.p.total, len(self.p.rows))

    def note(self, msg: str) -> None:
        self.live.console.print(msg, markup=False, highlight=False, soft_wrap=True)


@app.command()
def run(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help="sweep spec (TOML)"),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="sweep directory (default: runs/<spec name>)"),
    executor: Optional[str] = typer.Option(None, "--executor", help="local or ray (overrides the spec)"),
    known_bad: list[Path] = typer.Option([], "--known-bad", help="compatibility-matrix JSON of configurations known broken"),
) -> None:
    """Run (or resume) a sweep; writes DIR/report.md and the store DIR/bakeoff.sqlite."""
    from bakeoff import spec as specmod
    from bakeoff.pipeline import Events, run_sweep

    try:
        spec = specmod.load(spec_path)
        if executor is not None:
            if executor not in ("local", "ray"):
                raise specmod.SpecError(f"--executor: {executor!r} is not valid; valid: local, ray")
            spec = spec.model_copy(update={"executor": executor})
        out_dir = out_dir or Path("runs") / spec.name
        bad = _load_known_bad(known_bad, spec)
        view = _LiveView(spec.name, spec.server.startup_timeout_s)
        events = Events(trial_start=view.trial_start, phase=view.on_phase, trial_end=view.trial_end, note=view.note)
        with view.live:
            report_path = run_sweep(spec, out_dir, events=events, known_bad=bad)
            view.p.done = True
    except BakeoffError as err:
        _fail(err)
    out.print(report_path.read_text(), markup=False, highlight=False, soft_wrap=True)
    console.print(f"report: {report_path}")
    for line in decision_lines(out_dir) + weaker_lines(out_dir):  # the last lines: the stored decision, word for word
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    _fail_on_host_errors(out_dir)


def decision_lines(sweep_dir: Path) -> list[str]:
    """The stored recommendation, cautions and fallbacks (bakeoff.decide), as every output prints them."""
    from bakeoff import decide
    from bakeoff.store import open_readonly

    try:
        with open_readonly(sweep_dir) as store:
            return decide.load(store).summary_lines()
    except BakeoffError:
        return []


def weaker_lines(sweep_dir: Path) -> list[str]:
    """Each recommended trial whose verdict lacked a check, and which (bakeoff.report.checks)."""
    from bakeoff import decide
    from bakeoff.report.checks import recommended_lines
    from bakeoff.store import open_readonly

    try:
        with open_readonly(sweep_dir) as store:
            d = decide.load(store)
            keys = [p.key for p in ([d.winner] if d.winner else []) + list(d.fallbacks)]
            return [f"Weaker check: {line}" for line in recommended_lines(store.current(), keys)]
    except BakeoffError:
        return []


def _fail_on_host_errors(out_dir: Path) -> None:
    """Exit 3 when trials are left undone because the host failed under them (a sweep that could
    not run is not a success for a script); `bakeoff run` again retries exactly those."""
    from bakeoff.errors import InfraError
    from bakeoff.store import open_readonly

    with open_readonly(out_dir) as store:
        lost = [t for t in store.trials() if t.verdict == "infra_error"]
    if lost:
        _fail(InfraError(f"{len(lost)} trial(s) not run: the host failed, not the configuration "
                         f"({lost[0].cause}: {lost[0].detail}); run again to retry them"))


def _load_known_bad(paths: list[Path], spec) -> dict:
    if not paths:
        return {}
    from bakeoff.report.matrix import load_known_bad

    kb = load_known_bad(paths, spec)
    for note in kb.notes:
        console.print(f"known-bad: {note}", markup=False, highlight=False)
    return kb.merged()


@app.command()
def plan(spec_path: Path = typer.Argument(..., metavar="SPEC"),
         as_json: bool = typer.Option(False, "--json", help="one JSON list of trials")) -> None:
    """Print every trial's launch command as it would be typed on the spec's host (over ssh for
    an SSH host: exports, setsid nohup, log file); secrets masked; launches nothing."""
    from bakeoff import spec as specmod
    from bakeoff.pipeline import plan_json

    try:
        spec = specmod.load(spec_path)
        trials = plan_json(spec)
    except BakeoffError as err:
        _fail(err)
    if as_json:
        out.print_json(json.dumps(trials))
        return
    if spec.is_remote:
        out.print(f"# the model path and the axis values are checked on {spec.host.get('address')} when `bakeoff run` starts",
                  markup=False, highlight=False, soft_wrap=True)
    for t in trials:
        out.print(f"# trial {t['idx']}: {t['label']}", markup=False, highlight=False)
        out.print(t["command"], markup=False, highlight=False, soft_wrap=True)
    from bakeoff.plan.base import make_strategy

    if make_strategy(spec).adaptive:
        out.print(f"# strategy {spec.plan.strategy!r} is adaptive: this is its first round; "
                  "later rounds depend on results", markup=False, highlight=False, soft_wrap=True)


@app.command()
def report(sweep_dir: Path = typer.Argument(..., metavar="DIR"),
           html: bool = typer.Option(False, "--html", help="also write DIR/report.html")) -> None:
    """Rebuild DIR/report.md from the store (and report.html with --html)."""
    from bakeoff.report import markdown as rep
    from bakeoff.store import open_readonly

    try:
        with open_readonly(sweep_dir) as store:
            path = rep.write(sweep_dir, store)
            if html:
                from bakeoff.report.html import write_html

                console.print(f"html: {write_html(sweep_dir, store)}")
    except BakeoffError as err:
        _fail(err)
    out.print(path.read_text(), markup=False, highlight=False, soft_wrap=True)


@app.command()
def status(sweep_dir: Path = typer.Argument(..., metavar="DIR"),
           watch: bool = typer.Option(False, "--watch", help="refresh until the sweep is done or its run is gone"),
           interval: float = typer.Option(1.0, "--interval", help="seconds between refreshes with --watch")) -> None:
    """Show a sweep's progress from its store (a run in another terminal): running trial, finished rows."""
    from bakeoff.report.status import from_store, render, runner_of
    from bakeoff.store import open_readonly

    try:
        with open_readonly(sweep_dir) as store:
            if not watch:
                out.print(render(from_store(store)))
                return
            with Live(render(from_store(store)), console=out, refresh_per_second=2) as live:
                while True:
                    p = from_store(store)
                    live.update(render(p))
                    if p.done or not runner_of(sweep_dir)[1]:
                        break
                    time.sleep(interval)
    except BakeoffError as err:
        _fail(err)


@app.command()
def export(sweep_dir: Path = typer.Argument(..., metavar="DIR"),
           output: Optional[Path] = typer.Option(None, "-o", "--output", help="file to write (default DIR/compat-matrix.json)")) -> None:
    """Write the sweep's compatibility matrix (environment, per-value and per-config verdicts) as JSON."""
    from bakeoff.report.matrix import write_matrix
    from bakeoff.store import open_readonly

    try:
        with open_readonly(sweep_dir) as store:
            path = write_matrix(store, output or Path(sweep_dir) / "compat-matrix.json")
    except BakeoffError as err:
        _fail(err)
    console.print(f"matrix: {path}")


@app.command()
def compare(dir_a: Path = typer.Argument(..., metavar="DIR_A"), dir_b: Path = typer.Argument(..., metavar="DIR_B"),
            as_json: bool = typer.Option(False, "--json"),
            threshold: float = typer.Option(0.1, "--threshold", help="speed ratio outside 1±this counts as a change")) -> None:
    """Same configurations across two sweeps: what changed verdict or speed (B/A)."""
    from rich.markup import escape

    from bakeoff.report.compare import compare as cmp
    from bakeoff.report.status import VERDICT_STYLE
    from bakeoff.store import open_readonly

    try:
        with open_readonly(dir_a) as a, open_readonly(dir_b) as b:
            res = cmp(a, b, threshold)
    except BakeoffError as err:
        _fail(err)
    if as_json:
        out.print_json(json.dumps(res))
        return
    for line in res["environment"]:
        out.print(f"environment: {line}", markup=False, highlight=False)
    t = Table(title=f"A={res['a']['name']} ({dir_a})  B={res['b']['name']} ({dir_b})", title_justify="left")
    for col in ("config", "A", "B", "A tok/s", "B tok/s", "B/A", "change"):
        t.add_column(col, justify="right" if "tok" in col or col == "B/A" else "left")
    for r in res["rows"]:
        def v(verdict, cause):
            return f"[{VERDICT_STYLE.get(verdict or '', 'default')}]{verdict or '—'}[/]" + (f" ({escape(cause)})" if cause else "")
        t.add_row(escape(r["label"]), v(r["verdict_a"], r["cause_a"]), v(r["verdict_b"], r["cause_b"]),
                  f"{r['tok_s_a']:.1f}" if r["tok_s_a"] else "—", f"{r['tok_s_b']:.1f}" if r["tok_s_b"] else "—",
                  f"{r['ratio']:.2f}x" if r["ratio"] else "—", "[bold]" + r["change"] + "[/]" if r["change"] != "same" else "same")
    out.print(t)
    out.print(f"{res['changed']} of {len(res['rows'])} configurations changed", highlight=False)


@app.command()
def triage(
    log: Path = typer.Argument(..., metavar="LOG"),
    exit_code: Optional[int] = typer.Option(None, "--exit-code", help="the process's exit status (negative = signal)"),
    engine: Optional[str] = typer.Option(None, "--engine", help="engine that wrote the log"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Name the cause of a failed launch from its log, with the lines that prove it."""
    from bakeoff.judge.triage import classify

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


@app.command()
def preflight(spec_path: Optional[Path] = typer.Argument(None, metavar="[SPEC]", help="probe what this spec's axis values need"),
              as_json: bool = typer.Option(False, "--json", help="print the results as JSON"),
              out_file: Optional[Path] = typer.Option(None, "--out", help="also write the results JSON here"),
              only: list[str] = typer.Option([], "--only", help="probe name glob (repeatable; default: all)")) -> None:
    """Probe each backend directly (seconds): unsupported, compile-failed, nan, mismatch or ok."""
    from bakeoff.preflight.cli import run_preflight

    try:
        text = run_preflight(spec_path, as_json=as_json, out_file=out_file, only=only)
    except BakeoffError as err:
        _fail(err)
    out.print(text, markup=False, highlight=False, soft_wrap=True)


def main() -> None:
    try:
        app()
    except BakeoffError as err:  # pragma: no cover - commands catch their own
        console.print(f"error: {err}", style="red", markup=False)
        sys.exit(err.exit_code)


if __name__ == "__main__":
    main()
