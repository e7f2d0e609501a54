"""Decide: the final verdict of every trial and the recommendation — made here, once.

A trial comes back from its run judged for correctness (``ok`` / ``wrong`` / ``crashed`` …,
kept in ``metrics["judged"]``). Here, against the baseline and from the stored figures:

* ``slow``: correct, and significantly slower than the baseline (the interval of the ratio lies
  below 1) by more than ``bench.slow_fraction``;
* every verdict carries a caution when the baseline itself did not pass: nothing known-good
  exists, so "ok" only means that absolute checks found nothing;
* the recommendation: the fastest correct configuration that is faster than the baseline
  *beyond the noise* (its interval excludes 1); when none is, the baseline (nothing beats it
  beyond the noise, by how much the noise is said); fallbacks in ranked order.

The result is stored (``save``): final verdicts on the trial rows and the recommendation's
sentences in the store's meta. Every output (Markdown, HTML, export, compare, status, the
CLI's last lines) prints those sentences as they are; none decides anything.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field

from bakeoff.decide.race import Race, final_alpha
from bakeoff.decide.stats import (MIN_LAUNCHES, POWER, LaunchNoise, Ratio, blocks_needed, launch_noise, mde,
                                  mean_interval, ratio_interval, ratio_vs_launches, relative_half_width, _logs)
from bakeoff.plan import Planned
from bakeoff.store import CORRECT, Store, TrialRecord, spec_table

LAUNCH_NOISE = 0.08  # bench.launch_noise's default (for stores older than the field): bench/README.md


def label(rec: TrialRecord) -> str:
    return Planned(rec.idx, rec.config, tuple(rec.changed)).label


def command_line(rec: TrialRecord) -> str:
    """The command to deploy this trial's configuration, ready to paste: the user's port, env as
    VAR=value, secrets masked; the same text `bakeoff plan` prints (``shell_line``)."""
    from bakeoff.run.hosts.base import shell_line

    return shell_line(rec.argv, rec.env)


def judged(rec: TrialRecord) -> str | None:
    """The verdict the trial's own run gave (before the speed judgement)."""
    return rec.judged


# -- the objective: what "fastest" means for this sweep ------------------------------------
@dataclass(frozen=True)
class Objective:
    name: str            # "output tok/s at c=4", "goodput: req/s meeting p99 TTFT ≤ 2000 ms, at the highest …"
    samples: list[float]  # one value per repetition
    higher_is_better: bool = True
    where: str | None = None  # the load level the figure was measured at, when it differs by trial (SLO search)
    level: str | None = None  # the load level of a per-level figure (output tok/s at c=N): compared only with the same level

    @property
    def value(self) -> float:
        return sum(self.samples) / len(self.samples)


def objective_of(rec: TrialRecord) -> Objective | None:
    """The figure a trial is ranked by: an explicit ``metrics["objective"]`` (e.g. SLO goodput),
    else output tok/s at the highest valid load level, one sample per repetition."""
    m = rec.metrics or {}
    obj = m.get("objective")
    if obj is not None:  # explicit (SLO goodput): no samples means no level met it, so no figure to rank
        samples = [float(x) for x in obj.get("samples") or [] if x is not None]
        return Objective(obj["name"], samples, obj.get("higher_is_better", True), obj.get("level")) if samples else None
    valid = [lv for lv in m.get("levels") or [] if lv.get("valid")]
    if not valid:
        return None
    return _level_objective(valid[-1])


def _level_objective(lv: dict) -> Objective | None:
    samples = (lv.get("samples") or {}).get("output_tok_s") or [lv.get("output_tok_s")]
    samples = [float(x) for x in samples if x]
    return Objective(f"output tok/s at {lv['level']}", samples, level=lv["level"]) if samples else None


def objective_at(rec: TrialRecord, base_obj: Objective | None) -> tuple[Objective | None, str | None]:
    """The trial's figure to compare with the baseline's ``base_obj``: at the baseline's own load
    level, never another one (a trial whose top valid level is lower or higher than the
    baseline's is compared where both were measured). Returns ``(objective, why_not)``: no
    objective, and why, when the trial could not hold the level the baseline held."""
    obj = objective_of(rec)
    if base_obj is None or base_obj.level is None or obj is None or obj.level == base_obj.level:
        return obj, None
    lv = next((x for x in (rec.metrics or {}).get("levels") or [] if x.get("level") == base_obj.level), None)
    if lv is None:
        return None, f"not measured at {base_obj.level}, the level the baseline is ranked at"
    if not lv.get("valid"):
        return None, (f"could not hold {base_obj.level}, the level the baseline held "
                      f"({lv.get('why_invalid') or 'invalid'}); not ranked against it")
    return _level_objective(lv), None


# -- the decision --------------------------------------------------------------------------
@dataclass
class Pick:
    key: str
    idx: int
    label: str
    command: str
    verdict: str
    value: float | None
    vs_baseline: dict | None  # Ratio.to_json()
    sentence: str


@dataclass
class Decision:
    objective: str = ""
    baseline_ok: bool = False
    noise: float | None = None          # the baseline's relative half-width: what "beyond the noise" means
    launch_noise: dict | None = None    # the launch noise the comparisons used: sd, source (measured/configured/default)
    winner: Pick | None = None
    fallbacks: list[Pick] = field(default_factory=list)
    headline: str = ""                  # the recommendation, one sentence
    cautions: list[str] = field(default_factory=list)
    stop_reason: str | None = None
    drift: dict | None = None           # the baseline measured again at the end vs first: Ratio.to_json() + describe
    verdicts: dict[str, dict] = field(default_factory=dict)  # key -> {verdict, detail, vs_baseline, caution}
    thinking: str = ""                  # how a reasoning model's thinking was asked for and judged (thinking_line)
    noise_line: str = ""                # the launch noise the comparisons counted, and the drift (noise_line)
    baseline_figure: str = ""           # the baseline's figure over its launches, when they were pooled
    resolution: dict = field(default_factory=dict)  # what the sweep could resolve (resolution): mde, launches, cost, race

    def summary_lines(self) -> list[str]:
        """The recommendation, its cautions and the fallbacks: every output prints these lines."""
        lines = [self.headline]
        if self.winner:
            lines.append(f"Command: {self.winner.command}")
        lines += [f"Caution: {c}" for c in self.cautions]
        for i, f in enumerate(self.fallbacks, 1):
            lines.append(f"Fallback {i}: {f.sentence}")
        if self.thinking:
            lines.append(self.thinking)
        if self.noise_line:
            lines.append(self.noise_line)
        return lines

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "Decision":
        d = dict(d)
        d["winner"] = Pick(**d["winner"]) if d.get("winner") else None
        d["fallbacks"] = [Pick(**f) for f in d.get("fallbacks") or []]
        return cls(**d)


def decide(spec: dict, trials: list[TrialRecord], stop_reason: str | None = None,
           baseline_runs: list[dict] | None = None, race: dict | None = None) -> tuple[Decision, list[TrialRecord]]:
    """The decision over this spec's trials, and the trials with their final verdicts.

    ``baseline_runs``: the baseline's metrics from its later launches in the sweep
    (``relaunch.remeasure``), oldest first. With ``bench.launch_noise = "auto"`` and at least
    three launches in all, every comparison is made against the baseline's mean over its
    launches, with the launch noise they show (``stats.ratio_vs_launches``); otherwise against
    its first launch with the configured launch noise. The last run against the first is the
    drift reported. ``race``: the stored race (``bench.resolve``, bakeoff.decide.race); a
    contender that raced is compared by its paired blocks instead of its screening launch."""
    base = next((t for t in trials if t.is_baseline), None)
    base_ok = base is not None and judged(base) in CORRECT
    base_obj = objective_of(base) if base_ok else None
    bench = spec_table(spec, "bench")
    slow_fraction = bench["slow_fraction"]
    runs = [r for r in baseline_runs or [] if r and not r.get("failed")]
    d = Decision(baseline_ok=base_ok, stop_reason=stop_reason, thinking=thinking_line(spec, trials))
    _drift(d, base_obj, runs[-1] if runs else None)
    configured = bench["launch_noise"]
    noise, n_base = None, 0
    if base_obj and configured == "auto":
        launches = [base_obj.samples, *(o.samples for r in runs if (o := objective_of(_Metrics(r))) and o.name == base_obj.name)]
        noise, n_base = launch_noise(launches), sum(map(len, launches))
    # without a measured launch noise: the configured figure (or the default's), or the drift when larger
    floor = LAUNCH_NOISE if configured == "auto" else configured
    between = max(floor, (d.drift or {}).get("between", 0.0))
    if base_obj:
        d.objective = base_obj.name
        d.noise, d.launch_noise = _noise(base_obj, noise, between, floor, configured == "auto")
    if noise is not None:  # the figure every ratio is against: the geometric mean over the launches
        mid, lo, hi = noise.figure()
        d.baseline_figure = f"{_num(mid)} {base_obj.name} (95 % CI {_num(lo)}–{_num(hi)}, {noise.launches} launches, {n_base} runs)"
    final = []
    raced = Race.from_json(race) if race and base_obj else None
    paired = {k: raced.paired(k).ratio() for k in raced.keys()} if raced else {}
    paired = {k: r for k, r in paired.items() if r.lo is not None}  # fewer than two blocks: the screening's figure
    for t in trials:
        rec, info = _final(t, base, base_obj, base_ok, slow_fraction, between, noise, n_base, paired.get(t.key))
        d.verdicts[t.key] = info
        final.append(rec)
    if any(t.metrics.get("vs_baseline") for t in final if t.changed):
        d.resolution = resolution(spec, final, noise, between, raced, runs)
    _recommend(d, final, base, base_obj)
    if d.resolution:
        d.noise_line = noise_line(d)
    if d.drift and d.drift["call"] != "tie":
        d.cautions.append(d.drift["caution"])
    for k in (raced.keys() if raced else []):
        if why := raced.failed(k):
            d.cautions.append(f"FLAKY: {_label_of(trials, k)} failed when launched again in the race ({why}): "
                              "a configuration that passes once and fails on a relaunch is not known-good.")
    if raced and (why := raced.failed(raced.base_key)):
        d.cautions.append(f"FLAKY BASELINE: launched again in the race it failed ({why}); the race stopped there.")
    from bakeoff.judge.confirm import caution as unstable_caution

    d.cautions += [unstable_caution(label(t), t) for t in final if t.verdict == "unstable"]
    for r in baseline_runs or []:
        if r and r.get("failed"):
            d.cautions.append(f"FLAKY BASELINE: launched again (launch {r.get('launch', '?')} of the sweep) it failed: "
                              f"{r['failed']}; a configuration that passes once and fails on a relaunch is not known-good.")
    return d, final


def _noise(base_obj: Objective, noise: LaunchNoise | None, between: float, floor: float,
           auto: bool) -> tuple[float | None, dict]:
    """What a tie could hide here (the half-width of the baseline against itself, as a fraction)
    and where the launch noise came from."""
    if noise is not None:
        half = noise.tie_half_width()
        return (math.exp(half) - math.exp(-half)) / 2, {
            **noise.to_json(), "source": "measured",
            "describe": f"launch noise {noise.sd * 100:.1f} % measured from the baseline's {noise.launches} launches"}
    out = relative_half_width(base_obj.samples)
    if len(base_obj.samples) > 1:
        r0 = ratio_interval(base_obj.samples, base_obj.samples, between=between)
        out = max(out or 0.0, (r0.hi - r0.lo) / 2) if r0 and r0.lo is not None else out
    source = "drift" if between > floor else "default" if auto else "configured"
    why = {"configured": "bench.launch_noise",
           "default": f"the default: fewer than {MIN_LAUNCHES} launches of the baseline measured it",
           "drift": f"the baseline's drift between its first and last launches, above the {floor * 100:.0f} % otherwise used"}[source]
    return out, {"sd": between, "source": source, "why": why, "describe": f"launch noise {between * 100:.0f} % ({why})"}


def noise_line(d: Decision) -> str:
    """One sentence on the uncertainty every ratio carries: the launch noise and where it came
    from, and the drift when the baseline was launched again."""
    ln = d.launch_noise or {}
    if ln.get("source") == "measured":
        line = (f"Launch noise: {ln['sd'] * 100:.1f} %, measured from the baseline's {ln['launches']} launches (a launch's "
                f"mean moved {ln['var_launch'] ** 0.5 * 100:.1f} %, of which its repetitions explain {ln['within'] ** 0.5 * 100:.1f} %); "
                "every ratio is against the baseline's mean over them")
    else:
        line = f"Launch noise: {ln.get('sd', 0) * 100:.0f} % ({ln.get('why', 'none')}), added to every comparison"
    if d.drift:
        line += f"; the baseline's last launch was {d.drift['describe']} its first"
    res = d.resolution or {}
    return " ".join([line + ".", *res.get("race_sentences", []), res["sentence"]] if res.get("sentence") else [line + "."])


def resolution(spec: dict, trials: list[TrialRecord], noise: LaunchNoise | None, between: float,
               race: Race | None, runs: list[dict]) -> dict:
    """What this sweep could resolve, stated in every output: the smallest difference from the
    baseline its screening round detects with 90 % power (``stats.mde``: a one-launch trial against
    the baseline's launches, as compared), the launches and requests spent, what resolving
    ``bench.resolve`` (else 5 %) would cost in paired launches, and one sentence per contender
    that raced (``race_sentences``)."""
    bench = spec_table(spec, "bench")
    target = bench["resolve"] or 0.05
    launched = [t for t in trials if t.is_finished() and (t.metrics or {}).get("levels")]
    per_level = bench["requests_per_level"]
    launches = len(launched) + len(runs) + (race.launches() if race else 0)
    requests = (sum(requests_measured(t.metrics, per_level) for t in launched) + sum(requests_measured(r, per_level) for r in runs)
                + (sum(r.get("requests", 0) for b in race.blocks for r in b["runs"].values()) if race else 0))
    if noise is not None:  # a trial that repeats like the baseline's launches, against their mean
        var_launch, se, df = noise.var_launch, math.sqrt(noise.sd ** 2 + noise.within + noise.pooled_var), noise.df
    else:
        base = next((objective_of(t) for t in trials if t.is_baseline and objective_of(t)), None)
        within = (statistics.variance(_logs(base.samples)) / len(base.samples)
                  if base and len(_logs(base.samples)) > 1 else 0.0)
        var_launch, se, df = between ** 2 + within, math.sqrt(2 * (between ** 2 + within)), math.inf
    screening = math.expm1(mde(se, df))
    budget = bench["max_extra_launches"]
    sd_block = math.sqrt(2 * var_launch)
    blocks = blocks_needed(sd_block, target, final_alpha(budget // 2)) if sd_block > 0 else 2
    if blocks > budget // 2:  # a larger race spends its α over other looks: its last one's α differs
        blocks = blocks_needed(sd_block, target, final_alpha(blocks))
    out = {"screening_mde": screening, "power": POWER, "launches": launches, "requests": requests,
           "target": race.resolve if race is not None else target, "blocks_to_resolve": blocks}
    cost = (f"resolving {_pct(target)} would take about {2 * blocks} more launches per contender "
            f"(bench.resolve = {target:g}{'' if 2 * blocks <= budget else f', bench.max_extra_launches = {2 * blocks}'}: "
            "the contender and the baseline in paired blocks)")
    if race is not None:
        states = race.status()
        out["race"] = {k: {"state": st, **race.paired(k).ratio().to_json(),
                           "resolvable": race.paired(k).resolvable()} for k, st in states.items()}
        out["race_sentences"] = [_race_sentence(_label_of(trials, k), st, race, k) for k, st in states.items()]
        cost = f"the race (bench.resolve = {race.resolve:g}) spent {race.launches()} of its {race.max_launches} launches"
    out["sentence"] = (f"Resolution: a configuration launched once differs detectably (90 % power) from the baseline "
                       f"from {_pct(screening)}; this sweep spent {launches} launches and {requests} measured requests; {cost}.")
    return out


RACE_SHORT = {"equivalent": "equivalent", "behind": "behind", "better": "faster", "resolved": "tied, resolved",
              "unresolved": "not resolved", "failed": "failed on a relaunch", "racing": "still racing"}


def _race_sentence(name: str, state: str | None, race: Race, key: str) -> str:
    """One contender's outcome of the race, as the reader acts on it."""
    p = race.paired(key)
    r = p.ratio()
    if state == "failed":
        return f"{name}: failed when launched again in the race ({race.failed(key)}): not known to run reliably."
    if r.lo is None:
        return f"{name}: raced {p.blocks} block(s), too few for an interval; `bakeoff run` again resumes the race."
    half = math.sqrt(r.hi / r.lo) - 1
    what = f"{r.describe()} the baseline"
    if state == "equivalent":
        return f"{name}: equivalent within ±{_pct(race.resolve)} of the baseline ({what}): keep the default."
    if state == "behind":
        return f"{name}: clearly behind ({what}): dropped from the race."
    if state == "better":
        return f"{name}: faster, resolved ({what})."
    if state == "resolved":
        return f"{name}: resolved to ±{_pct(half)} ({what}): no difference of {_pct(race.resolve)} either way is hidden in it."
    need = p.blocks_to_resolve() or p.blocks
    more = (f"its {p.blocks} blocks detect {_pct(p.resolvable())} with 90 % power; "
            f"about {2 * max(need - p.blocks, 1)} more launches would resolve {_pct(race.resolve)}")
    if state is None:
        return f"{name}: still racing, ±{_pct(half)} so far ({what}); `bakeoff run` again resumes the race; {more}."
    return f"{name}: not resolved: ±{_pct(half)} ({what}); {more}."


def _pct(x: float) -> str:
    """0.05 -> '5 %' (the house style)."""
    return f"{x * 100:.0f} %"


def requests_measured(metrics: dict, per_level: int) -> int:
    """The measured requests of one launch: repetitions × requests per level, over its levels."""
    n = 0
    for lv in (metrics or {}).get("levels") or []:
        reps = ((lv.get("samples") or {}).get("output_tok_s")) or [None]
        n += len(reps) * per_level
    return n


def _label_of(trials: list[TrialRecord], key: str) -> str:
    return next((label(t) for t in trials if t.key == key), key)


def thinking_line(spec: dict, trials: list[TrialRecord]) -> str:
    """One sentence on a reasoning model's thinking: what every request asked for
    (``[server] thinking``), the room the probes gave it, and what the answers were judged on
    (``metrics["probe"]["thinking"]``, bakeoff.judge.probes.thinking_values). "" when thinking
    was left to the server and no reply thought."""
    server = spec_table(spec, "server")
    mode = server["thinking"]
    seen = [s for t in trials if (s := ((t.metrics or {}).get("probe") or {}).get("thinking"))]
    if mode == "auto" and not seen:
        return ""
    asked = {"off": "off: every probe and benchmark request sent chat_template_kwargs.enable_thinking = false",
             "on": "on: every probe and benchmark request sent chat_template_kwargs.enable_thinking = true",
             "auto": "auto: the server's default (no thinking field sent)"}[mode]
    n, k, j, cut = (sum(s[f] for s in seen) for f in ("replies", "with_reasoning", "judged_on_reasoning", "cut_while_thinking"))
    room = seen[0]["room"] if seen else server["thinking_tokens"] or 0
    line = f"Thinking {asked}" + (f"; probe replies had {room} tokens more for the thought" if room else "")
    if not k:
        return line + "; no probe reply carried reasoning_content (answers judged on content)."
    line += (f"; {k} of the sweep's {n} probe replies carried reasoning_content: {k - j} judged on their content (the answer after the "
             f"thought), {j} on their reasoning_content (no content)")
    if cut:
        line += f"; {cut} cut by max_tokens while thinking, not scored as tasks (raise server.thinking_tokens)"
    return line + "."


def _drift(d: Decision, base_obj: Objective | None, again: dict | None) -> None:
    """The baseline first vs again at the end: a change beyond the noise means the machine's speed
    moved during the sweep, and every ratio above carries that much more uncertainty."""
    if base_obj is None or not again:
        return
    later = objective_of(_Metrics(again))
    if later is None or later.name != base_obj.name:
        return
    r = ratio_interval(later.samples, base_obj.samples, higher_is_better=base_obj.higher_is_better)
    if r is None:
        return
    d.drift = {**r.to_json(), "describe": r.describe(), "between": abs(math.log(r.ratio)) / math.sqrt(2)}
    if r.call != "tie":
        d.drift["caution"] = (f"DRIFT: the baseline measured again at the end of the sweep is {r.describe()} its first "
                          f"measurement ({base_obj.name}): the machine's speed changed during the sweep beyond the "
                          "noise, so ratios between trials run at different times are uncertain by about that much; "
                          "run again on a quieter machine before trusting a small difference.")


@dataclass(frozen=True)
class _Metrics:
    """A record-like view of bare metrics (what objective_of reads)."""

    metrics: dict


def _final(t: TrialRecord, base: TrialRecord | None, base_obj: Objective | None, base_ok: bool,
           slow_fraction: float, between: float = 0.0, noise: LaunchNoise | None = None,
           n_base: int = 0, paired: Ratio | None = None) -> tuple[TrialRecord, dict]:
    verdict, detail = judged(t), t.metrics.get("judged_detail", t.detail)
    metrics = {k: v for k, v in t.metrics.items() if k not in ("vs_baseline", "unverified", "ratio_vs_baseline")}
    if not t.is_finished():
        return t, {"verdict": t.verdict, "detail": t.detail}
    metrics["judged"], metrics["judged_detail"] = verdict, detail
    info: dict = {}
    if verdict in CORRECT and t.changed:
        if not base_ok:
            metrics["unverified"] = True
            info["caution"] = (f"absolute checks only: the baseline is {judged(base) if base else 'missing'}, "
                               "so nothing known-good was there to compare with")
            detail = f"{info['caution']}; {detail or ''}".rstrip("; ")
        elif _without_baseline(t):
            metrics["unverified"] = True
            info["caution"] = ("not compared with the baseline: it ran while the baseline had not passed, and its "
                               "answers were not judged against the baseline's since; `bakeoff run` again re-judges it")
            detail = f"{info['caution']}; {detail or ''}".rstrip("; ")
        obj, why_not = objective_at(t, base_obj)
        if why_not:
            info["caution"] = f"{info['caution']}; {why_not}" if info.get("caution") else why_not
            detail = f"{detail or ''}; {why_not}".lstrip("; ")
        if not (obj and base_obj):
            r = None
        elif paired is not None:  # it raced: its paired blocks, side by side with the baseline's launches
            r = paired
        elif noise is not None:
            r = ratio_vs_launches(obj.samples, noise, n_base=n_base, higher_is_better=obj.higher_is_better)
        else:
            r = ratio_interval(obj.samples, base_obj.samples, higher_is_better=obj.higher_is_better, between=between)
        if r is not None:
            metrics["vs_baseline"] = r.to_json()
            metrics["ratio_vs_baseline"] = round(r.ratio, 3)
            info["vs_baseline"] = r.to_json()
            if r.call == "worse" and (r.ratio if r.higher_is_better else 1 / r.ratio) < slow_fraction:
                verdict = "slow"
                detail = (f"correct, but {r.describe()} the baseline's {obj.name}: significantly slower, "
                          f"and below the slow threshold {slow_fraction}")
            else:
                verdict = "ok"
    info.update(verdict=verdict, detail=detail)
    return t.with_(verdict=verdict, detail=detail, metrics=metrics), info


def _without_baseline(t: TrialRecord) -> bool:
    """Judged while the baseline had not passed and not re-judged since (``judge.rejudge``)."""
    from bakeoff.judge.rejudge import judged_without_baseline

    return judged_without_baseline(t)


def _recommend(d: Decision, trials: list[TrialRecord], base: TrialRecord | None, base_obj: Objective | None) -> None:
    correct = [t for t in trials if t.verdict in CORRECT and objective_of(t)]
    if d.baseline_ok and (unjudged := [t for t in correct if t.changed and _without_baseline(t)]):
        d.cautions.append(f"NOT COMPARED WITH THE BASELINE: {', '.join(label(t) for t in unjudged)} ran while the baseline "
                          "had not passed and were judged by the absolute checks only: never recommended; "
                          "`bakeoff run` again re-judges them against the baseline")
        correct = [t for t in correct if t not in unjudged]
    at = {t.key: objective_at(t, base_obj)[0] for t in correct}  # figures at the baseline's level only
    if not correct:
        d.headline = "No configuration passed correctness: nothing to recommend."
        if base is not None and not d.baseline_ok:
            d.cautions.append(_no_known_good(base))
        return

    def ratio(t: TrialRecord) -> Ratio | None:
        v = t.metrics.get("vs_baseline")
        return Ratio.from_json(v) if v else None

    def rank_key(t: TrialRecord):
        """At the baseline's level first; a trial that could not hold it after every one that did."""
        o = at[t.key]
        if o is None:
            o = objective_of(t)
            return (1, -(o.value if o.higher_is_better else -o.value))
        return (0, -(o.value if o.higher_is_better else -o.value))

    ranked = sorted(correct, key=rank_key)
    faster = [t for t in ranked if t.changed and t.verdict == "ok" and (r := ratio(t)) is not None and r.call == "better"]
    if not d.baseline_ok:
        win = ranked[0]
        d.cautions.append(_no_known_good(base))
        d.headline = (f"Recommended, unverified: {label(win)} — {_value(win)}; it passed the absolute checks only "
                      "(no NaN, garbage, repetition or concurrency drift), not a comparison with known-good answers.")
    elif faster:
        win = faster[0]
        d.headline = (f"Recommended: {label(win)} — {ratio(win).describe()} the baseline's {_where(d.objective, win, base)}; "
                      f"faster beyond the noise{_energy(win, base)}.")
    else:
        win = base
        ln = f"; {d.launch_noise['describe']}" if d.launch_noise else ""
        noise = f" (±{d.noise * 100:.0f} % here{ln})" if d.noise is not None else ""
        if (d.resolution or {}).get("race"):  # the race measured further: its outcome is the noise that counts
            within = f" within ±{_pct(d.resolution['target'])}"
            noise = " (the race in paired launches: " + "; ".join(
                f"{_label_of(trials, k)} {RACE_SHORT[v['state'] or 'racing']}" + (within if v["state"] == "equivalent" else "")
                for k, v in d.resolution["race"].items()) + ")"
        tied = [t for t in ranked if t.changed and (r := ratio(t)) is not None and r.call == "tie"]
        waiting = sum(1 for t in trials if t.changed and not t.is_finished())
        if not any(t.changed for t in ranked) and waiting:  # mid-sweep (status, a cut sweep): nothing decided yet
            d.headline = (f"So far the baseline (figure: {_where(d.objective, base, None)}){_energy(base, None)}; "
                          f"{waiting} other configuration{'s' if waiting > 1 else ''} still to run.")
        elif not any(t.changed for t in ranked):
            d.headline = ("Recommended: the baseline — no other configuration passed correctness "
                          f"(figure: {_where(d.objective, base, None)}){_energy(base, None)}.")
        else:
            d.headline = (f"Recommended: the baseline — {d.baseline_figure or _value(base, interval=True)}; no configuration is faster than the baseline beyond the noise{noise}"
                          + (f"; {len(tied)} tied with it" if tied else "") + f" (ranked by {_where(d.objective, base, None)})"
                          + f"{_energy(base, None)}.")
        rs = [r for t in ranked if t.changed and (r := ratio(t)) is not None]
        if rs and all(r.lo is None for r in rs):
            d.cautions.append("the speed figures have no interval (fewer than two repetitions): set bench.repetitions "
                              "to 2 or more before calling any configuration faster")
    d.objective = d.objective or (objective_of(win).name if objective_of(win) else "")
    d.winner = _pick(win, d.baseline_figure)
    d.fallbacks = [_pick(t, d.baseline_figure) for t in ranked if t.key != win.key]
    d.cautions += [_lossy_caution(t) for t in [win, *(t for t in ranked if t.key != win.key)] if _lossy(t)]


def _lossy(t: TrialRecord) -> dict | None:
    """The drift a lossy axis was excused (``judge.checks.drift``: beyond the limits, not failed)."""
    return ((t.metrics or {}).get("probe") or {}).get("logprob_drift_lossy")


def _lossy_caution(t: TrialRecord) -> str:
    x = _lossy(t)
    return (f"LOSSY: {label(t)} changes numeric precision (axis {', '.join(x['axes'])}): its logprobs drift "
            f"{x['mean_abs_d']:.3f} nats per token from the baseline's in {x['mode']} mode (bounds {x['ci'][0]:.3f} to "
            f"{x['ci'][1]:.3f}), beyond the {x['limit']} a kernel change stays within; its answers passed the differential, "
            "the task gate and the detectors. Set `lossy = false` on the axis to fail such drift instead.")


def _no_known_good(base: TrialRecord | None) -> str:
    if base is None:
        return "NOTHING KNOWN-GOOD: the baseline did not run, so no trial was compared with known-good answers."
    return (f"NOTHING KNOWN-GOOD: the baseline is {judged(base)} ({base.cause or base.detail or '?'}), so no trial was "
            "compared with known-good answers; fix the baseline and run again before deploying any of these.")


def _num(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _value(t: TrialRecord, interval: bool = False) -> str:
    """'1308 output tok/s at c=8', with ``interval`` '… (95 % CI 1184–1432, 5 runs)'."""
    o = objective_of(t)
    if not o:
        why = ((t.metrics or {}).get("objective") or {}).get("why")
        return f"no figure ({why})" if why else "no figure"
    ci = ""
    if interval:
        _, lo, hi = mean_interval(o.samples)
        ci = f" (95 % CI {_num(lo)}–{_num(hi)}, {len(o.samples)} runs)" if lo is not None else f" ({len(o.samples)} run)"
    return f"{_num(o.value)} {o.name}{ci}" + (f" (found: {o.where})" if o.where else "")


def _energy(t: TrialRecord, base: TrialRecord | None) -> str:
    """'; 4.18 tokens per joule (the baseline 3.90)' when the GPU's energy was measured during the bench
    (NVML, measure/power.py), else ''. Reported beside the ranking, never ranked by."""
    def tpj(r: TrialRecord | None) -> float | None:
        return ((r.metrics or {}).get("energy") or {}).get("tok_per_j") if r is not None else None
    x, b = tpj(t), tpj(base)
    if x is None:
        return ""
    return f"; {x:.3g} tokens per joule" + (f" (the baseline {b:.3g})" if b is not None and base is not t else "")


def _where(name: str, t: TrialRecord | None, base: TrialRecord | None) -> str:
    """The objective's name, with the load each side was found at when it differs by trial."""
    o, b = (objective_of(t) if t else None), (objective_of(base) if base else None)
    if o is None or o.where is None:
        return name
    return f"{name} ({o.where}" + (f" vs the baseline's {b.where})" if b is not None and b is not o and base is not t else ")")


def _pick(t: TrialRecord, baseline_figure: str = "") -> Pick:
    """``baseline_figure``: the baseline's figure over its launches, when ratios are against it."""
    vs = t.metrics.get("vs_baseline")
    rel = "" if not t.changed else (f", {Ratio.from_json(vs).describe()} the baseline"
                                    if vs else "")
    figure = baseline_figure if t.is_baseline and baseline_figure else _value(t)
    sentence = f"{label(t)} — {figure}{rel}{_energy(t, None)} ({t.verdict}{', lossy' if _lossy(t) else ''}): {command_line(t)}"
    o = objective_of(t)
    return Pick(t.key, t.idx, label(t), command_line(t), t.verdict, o.value if o else None, vs, sentence)


# -- stored once, read by every output ------------------------------------------------------
def save(store: Store) -> Decision:
    """Decide over the store's current trials; write final verdicts and the decision back."""
    sweep = store.sweep() or {"spec": {}}
    trials = store.current()
    d, final = decide(sweep["spec"], trials, store.meta("stop_reason"), baseline_runs(store), race_of(store))
    for old, new in zip(trials, final):
        if new != old:
            store.save(new)
    store.set_meta("decision", d.to_json())
    return d


def load(store: Store) -> Decision:
    """The stored decision (made by ``save``); an older store without one is decided now."""
    data = store.meta("decision")
    return Decision.from_json(data) if data else decide((store.sweep() or {}).get("spec") or {}, store.current(),
                                                        baseline_runs=baseline_runs(store), race=race_of(store))[0]


def baseline_launches_wanted(spec: dict, trials: list[TrialRecord]) -> int:
    """How many launches of the baseline this sweep wants in all, from what is finished so far.

    One when no other configuration was benchmarked. With ``bench.launch_noise = "auto"``,
    ``bench.baseline_launches`` as soon as a speed claim hangs on the launch noise: some correct
    configuration whose repetitions alone set it apart from the baseline (its interval without
    launch noise excludes 1) — a claim that a second launch of the same configuration might not
    repeat. Otherwise two (the drift guard) once ``bench.remeasure_after`` configurations were
    benchmarked, else one: extra launches that could change no verdict are not made."""
    bench = spec_table(spec, "bench")
    base = next((t for t in trials if t.is_baseline), None)
    base_obj = objective_of(base) if base is not None and judged(base) in CORRECT else None
    done = [t for t in trials if t.changed and t.is_finished() and judged(t) in CORRECT and objective_of(t)]
    if base_obj is None or not done:
        return 1
    if bench["launch_noise"] == "auto":
        for t in done:
            o = objective_of(t)
            r = ratio_interval(o.samples, base_obj.samples, higher_is_better=o.higher_is_better)
            if r is not None and r.call != "tie":
                return max(1, bench["baseline_launches"])
    after = bench["remeasure_after"]
    return 2 if after and len(done) >= after else 1


def baseline_runs(store: Store) -> list[dict]:
    """The baseline's later launches for this spec (``relaunch.remeasure``), oldest first: the
    meta ``baseline_runs`` of the store's current identity (an edited spec's runs are not its
    own), or an older store's single ``baseline_again``."""
    identity = store.meta("identity")
    runs = [r for r in store.meta("baseline_runs") or [] if r.get("identity", identity) == identity]
    legacy = store.meta("baseline_again")
    return runs or ([legacy] if legacy else [])


def race_of(store: Store) -> dict | None:
    """The stored race (``bench.resolve``) of the store's current identity, or None (an edited
    spec's race is not its own)."""
    race = store.meta("race")
    return race if race and race.get("identity", "") == (store.meta("identity") or "") else None
