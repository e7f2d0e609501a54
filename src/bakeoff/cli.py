"""The ``bakeoff`` command. Thin: parse flags, call one function, print; errors -> one message."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from bakeoff.errors import BakeoffError

# help names each argument by its metavar (SPEC, DIR), never by a Python type ("<path>")
typer.core.TyperArgument.display_type_rich = lambda self, ctx: None
app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="Find the fastest inference configuration that is actually correct.")
# soft_wrap: a message is one line whatever the output (a terminal, a pipe, CI): never cut at 80 columns
console = Console(stderr=True, soft_wrap=True)
out = Console(soft_wrap=True)


def _one_line(text: str) -> str:
    """An error message as one line: its lines joined with "; " (a spec with two bad fields)."""
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip())


def _fail(err: BakeoffError) -> None:
    console.print(f"error: {_one_line(err)}", style="red", highlight=False, markup=False)
    raise typer.Exit(err.exit_code)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("bakeoff")
        except PackageNotFoundError:  # pragma: no cover - run from a source tree without install
            v = "unknown"
        out.print(f"bakeoff {v}", markup=False, highlight=False)
        raise typer.Exit(0)


@app.callback()
def _main(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                       help="print bakeoff's version and exit")) -> None:
    """Find the fastest inference configuration that is actually correct."""


class _LiveView:
    """Current trial, phase, elapsed vs its timeout, last log line, and a running results table
    (drawn by bakeoff.report.status.render, the same view `bakeoff status` shows from the store)."""

    def __init__(self, name: str, timeout_s: float) -> None:
        from bakeoff.report.status import Progress

        self.p = Progress(name=name, timeout_s=timeout_s, runner="this process")
        self.live = Live(get_renderable=self._render, console=console, refresh_per_second=2, transient=False)
        self.plain = not console.is_terminal  # CI, a pipe: a line per trial instead of a redrawn view
        self.t0 = time.time()

    def _render(self):
        from bakeoff.report.status import render

        return render(self.p)

    def trial_start(self, p, n) -> None:
        self.p.total, self.p.current, self.p.phase = n, f"{p.idx + 1}/{n} ({p.label})", "launch"
        self.p.started, self.p.last_line = time.time(), ""
        if self.plain:
            self.note(f"trial {p.idx + 1}/{n} ({p.label}): launching")

    def on_phase(self, phase: str, line: str) -> None:
        self.p.phase = phase
        if line:
            self.p.last_line = line
            if self.plain and phase in ("probe", "bench"):  # where a long phase is (bakeoff.progress), not log lines
                self.note(f"  {self.p.current} {phase}: {line}")

    def trial_end(self, rec) -> None:
        self.p.rows.append(rec)
        self.p.current = "-"
        self.p.total = max(self.p.total, len(self.p.rows))
        if self.plain:
            self.note(progress_line(rec, len(self.p.rows), self.p.total, time.time() - self.t0))

    def note(self, msg: str) -> None:
        self.live.console.print(msg, markup=False, highlight=False, soft_wrap=True)


def progress_line(rec, done: int, total: int, elapsed_s: float) -> str:
    """One finished trial, for output that is not a terminal: its verdict, how many are done and
    about how long the rest takes at the pace so far (an adaptive strategy may add trials)."""
    from bakeoff.decide import label

    why = f" ({rec.cause})" if rec.cause else ""
    left = max(total - done, 0)
    eta = f", about {_minutes(elapsed_s / done * left)} left" if done and left else ""
    return f"trial {rec.idx + 1}/{total} ({label(rec)}): {rec.verdict or rec.state}{why}; {done}/{total} done in {_minutes(elapsed_s)}{eta}"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


@app.command()
def run(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help="sweep spec (TOML)"),
    out_dir: Optional[Path] = typer.Option(None, "--out", metavar="DIR", help="sweep directory (default: runs/<spec name>)"),
    executor: Optional[str] = typer.Option(None, "--executor", metavar="local|ray", help="where trials run (overrides the spec)"),
    known_bad: list[Path] = typer.Option([], "--known-bad", metavar="FILE", help="compatibility-matrix JSON of configurations known broken"),
    unchecked: bool = typer.Option(False, "--unchecked", help="start although some values cannot be checked here "
                                   "(the engine's --help cannot be read on this machine)"),
) -> None:
    """Run (or resume) a sweep; writes DIR/report.md and the store DIR/bakeoff.sqlite."""
    from bakeoff import spec as specmod
    from bakeoff.pipeline import Events, run_sweep

    try:
        spec = specmod.load(spec_path)
        if spec.unchecked and not unchecked:
            raise specmod.SpecError(f"{spec_path}: not checked here: {'; '.join(spec.unchecked)}; install the engine here, "
                                    "give engine_options.help_text (its --help saved to a file), or run with --unchecked")
        if executor is not None:
            if executor not in ("local", "ray"):
                raise specmod.SpecError(f"--executor: {executor!r} is not valid; valid: local, ray")
            spec = spec.model_copy(update={"executor": executor})
        out_dir = out_dir or Path("runs") / spec.name
        _check_out_dir(out_dir)
        bad = _load_known_bad(known_bad, spec)
        view = _LiveView(spec.name, spec.server.startup_timeout_s)
        events = Events(trial_start=view.trial_start, phase=view.on_phase, trial_end=view.trial_end, note=view.note)
        with view.live:
            report_path = run_sweep(spec, out_dir, events=events, known_bad=bad)
            view.p.done = True
    except BakeoffError as err:
        _fail(err)
    _print_result(out_dir, report_path)
    _fail_on_host_errors(out_dir)


def _print_result(out_dir: Path, report_path: Path) -> None:
    """The end of `bakeoff run`, each thing once: the report's trials and failures, then the
    stored decision word for word as the last lines (the report file holds both)."""
    from bakeoff.report.markdown import render
    from bakeoff.store import open_readonly

    with open_readonly(out_dir) as store:
        body = render(store, recommendation=False)
    out.print(body, markup=False, highlight=False, soft_wrap=True)
    out.print("## Recommendation\n", markup=False, highlight=False)
    for line in decision_lines(out_dir) + weaker_lines(out_dir):
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    console.print(f"report: {report_path}", markup=False, highlight=False)


def _check_out_dir(out_dir: Path) -> None:
    """``--out`` is a directory bakeoff may create or resume (not a file, not under a file)."""
    from bakeoff.spec import SpecError

    for p in (out_dir, *out_dir.parents):
        if p.exists():
            if not p.is_dir():
                what = "is a file" if p == out_dir else f"is under {p}, which is a file"
                raise SpecError(f"--out: {out_dir} {what}; give a directory (new, or a sweep to resume)")
            if not os.access(p, os.W_OK | os.X_OK):
                raise SpecError(f"--out: {p} is not writable; give a directory you can write to")
            return


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
        lost = [t for t in store.current() if t.verdict == "infra_error"]
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
        spec = specmod.load(spec_path, here_only=True)
        trials = plan_json(spec)
    except BakeoffError as err:
        _fail(err)
    for line in spec.unchecked:  # checks this machine cannot make: `bakeoff run` makes them where it runs
        (console if as_json else out).print(f"# not checked here: {line}", markup=False, highlight=False)
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
           interval: float = typer.Option(1.0, "--interval", metavar="SECONDS", help="seconds between refreshes with --watch")) -> None:
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
           output: Optional[Path] = typer.Option(None, "-o", "--output", metavar="FILE",
                                                 help="file to write (default DIR/compat-matrix.json; with --metrics "
                                                      "DIR/metrics.csv and DIR/metrics.json, or FILE.csv / FILE.json)"),
           metrics: bool = typer.Option(False, "--metrics", help="latency and throughput per trial and load level "
                                        "(TTFT, TPOT, ITL, E2E at p50/p90/p99) instead of the matrix")) -> None:
    """Write the sweep's compatibility matrix (environment, per-value and per-config verdicts) as
    JSON, or with --metrics one row per trial and load level as CSV and JSON."""
    from bakeoff.report.latency import write_metrics
    from bakeoff.report.matrix import write_matrix
    from bakeoff.store import open_readonly

    try:
        if metrics and output is not None and output.suffix not in (".csv", ".json"):
            _bad_flag(f"--output: {output} must end in .csv or .json with --metrics")
        with open_readonly(sweep_dir) as store:
            if metrics:
                targets = [output] if output else [Path(sweep_dir) / "metrics.csv", Path(sweep_dir) / "metrics.json"]
                for target in targets:
                    console.print(f"metrics: {write_metrics(store.current(), target)}", markup=False, highlight=False)
                return
            path = write_matrix(store, output or Path(sweep_dir) / "compat-matrix.json")
    except BakeoffError as err:
        _fail(err)
    console.print(f"matrix: {path}", markup=False, highlight=False)


def _bad_flag(message: str):
    """A bad flag value: one line naming it, exit 2."""
    from bakeoff.errors import SpecError

    raise SpecError(message)


@app.command()
def compare(dir_a: Path = typer.Argument(..., metavar="DIR_A"), dir_b: Path = typer.Argument(..., metavar="DIR_B"),
            as_json: bool = typer.Option(False, "--json"),
            threshold: float = typer.Option(0.0, "--threshold", metavar="FRACTION", help="also require the speed ratio outside 1±this "
                                            "(0: the interval alone, as decide judges; a workload difference refuses any call)")) -> None:
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
    for line in res["workload"]:
        out.print(f"workload differs: {line} (no speed compared)", markup=False, highlight=False)
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
    exit_code: Optional[int] = typer.Option(None, "--exit-code", metavar="N", help="the process's exit status (negative = signal)"),
    engine: Optional[str] = typer.Option(None, "--engine", metavar="NAME", help="engine that wrote the log"),
    rules: Optional[Path] = typer.Option(None, "--rules", metavar="DIR",
                                         help="a directory of *.toml rules merged over the shipped ones (same format)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Name the cause of a failed launch from its log, with the lines that prove it."""
    from bakeoff.judge.triage import classify
    from bakeoff.judge.triage.schema import RulesError

    if not log.is_file():
        console.print(f"error: LOG: {log} is not a file", style="red", markup=False)
        raise typer.Exit(2)
    if rules is not None and not rules.is_dir():
        console.print(f"error: --rules: {rules} is not a directory (a folder of *.toml triage rule files)",
                      style="red", markup=False)
        raise typer.Exit(2)
    try:
        d = classify(log.read_text(encoding="utf-8", errors="replace"), exit_code=exit_code, engine=engine,
                     rules_dir=rules)
    except RulesError as err:
        _fail(err)
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
def preflight(spec_path: Optional[Path] = typer.Argument(None, metavar="SPEC", help="probe what this spec's axis values need"),
              as_json: bool = typer.Option(False, "--json", help="print the results as JSON"),
              out_file: Optional[Path] = typer.Option(None, "--out", metavar="FILE", help="also write the results JSON here"),
              only: list[str] = typer.Option([], "--only", metavar="GLOB", help="probe name glob (repeatable; default: all)")) -> None:
    """Probe each backend directly (seconds): unsupported, compile-failed, nan, mismatch or ok."""
    from bakeoff.preflight.cli import run_preflight

    try:
        text = run_preflight(spec_path, as_json=as_json, out_file=out_file, only=only)
    except BakeoffError as err:
        _fail(err)
    out.print(text, markup=False, highlight=False, soft_wrap=True)


@app.command()
def init(command: str = typer.Argument(..., metavar="COMMAND", help="the launch command you run today, quoted as one "
                                       "argument (local, or ssh HOST '... &'), or - to read it from stdin"),
         name: Optional[str] = typer.Option(None, "--name", metavar="NAME", help="the sweep's name (default: from the command)"),
         output: Optional[Path] = typer.Option(None, "-o", "--output", metavar="FILE", help="write the spec here (default: stdout)")) -> None:
    """Write a spec whose baseline is the command you run today; add axes to sweep."""
    from bakeoff.initspec import spec_from_command, to_toml
    from bakeoff.spec import parse

    try:
        text = sys.stdin.read() if command == "-" else command
        data = spec_from_command(text.replace("\\\n", " ").strip(), name)
        parse(data, "init", here_only=True)  # what init writes is a valid spec
        if output is not None and output.exists():
            _bad_flag(f"--output: {output} exists; give another file")
    except BakeoffError as err:
        _fail(err)
    toml = to_toml(data)
    if output is None:
        out.print(toml, markup=False, highlight=False, end="")
        return
    output.write_text(toml, encoding="utf-8")
    console.print(f"spec: {output} (bakeoff plan {output} prints the command back)", markup=False, highlight=False)


@app.command()
def schema(as_markdown: bool = typer.Option(False, "--markdown", help="every table and key as Markdown (docs/spec.md)")) -> None:
    """Print the sweep spec's JSON schema (from the model bakeoff validates with)."""
    from bakeoff import specdoc

    out.print(specdoc.markdown() if as_markdown else specdoc.json_schema(), markup=False, highlight=False, end="")


def main(argv: list[str] | None = None) -> None:
    """The `bakeoff` process: a usage error (unknown flag, missing argument, bad value) is one
    line naming it and exit 2, like a bad spec; nothing prints a traceback on purpose."""
    try:
        rc = app(args=argv, standalone_mode=False)
    except typer.Abort:
        sys.exit(130)
    except typer.TyperException as err:  # click's usage errors (typer vendors click): exit 2
        ctx = getattr(err, "ctx", None)
        if type(err).__name__ == "NoArgsIsHelpError" and ctx is not None:
            out.print(ctx.get_help(), markup=False, highlight=False)
            sys.exit(2)
        where = f"{ctx.command_path}: " if ctx is not None else ""
        message = err.format_message() if hasattr(err, "format_message") else str(err)
        console.print(f"error: {where}{_one_line(message)} (see -h)", style="red", markup=False, highlight=False)
        sys.exit(getattr(err, "exit_code", 2))
    except BakeoffError as err:  # pragma: no cover - commands catch their own
        console.print(f"error: {_one_line(err)}", style="red", markup=False)
        sys.exit(err.exit_code)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
