"""Compatibility matrix: what a sweep found broken, as a JSON file others can prune with.

``export_matrix(store)`` writes the environment fingerprint, the engine, each axis value's
verdict (from the trial that changed only that axis, or the baseline) and every full
configuration's verdict. ``known_bad_pairs(paths, spec)`` reads such files and returns the
``(axis, value)`` pairs that failed anywhere (a hard launch incompatibility, or wrong output),
and the keys of this spec's configurations that equal one found bad (wrong, or a launch failure
the same configuration repeats, such as a flag combination the engine rejects), from files of a
matching environment: the same fingerprint hash, or the same GPUs (name + compute capability)
and the same engine version. Files from other environments are ignored, and
``load_known_bad`` says why.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from bakeoff.errors import SpecError
from bakeoff.spec import Spec, render
from bakeoff import decide
from bakeoff.report import checks
from bakeoff.store import FAILED, Store, TrialRecord

FORMAT = "bakeoff-compat-matrix"
VERSION = 2  # 2: a value that failed only in combination has verdict null and ``combination`` (1 still reads)
BAD_VERDICTS = FAILED


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ValueResult(_Strict):
    verdict: str | None
    cause: str | None = None
    detail: str | None = None
    hard: bool = False
    trial: int
    output_tok_s: float | None = None
    # the failure is known only in this configuration (the other axes' values): the value itself
    # is not known bad; the configuration is, in ``configs``
    combination: dict[str, str] | None = None
    checks_not_run: list[str] = []  # the checks the verdict was reached without (bakeoff.report.checks)


class AxisEntry(_Strict):
    flag: str | None = None
    env: str | None = None
    baseline: str | None = None
    values: dict[str, ValueResult]


class ConfigEntry(_Strict):
    key: str
    config: dict[str, str]
    changed: list[str]
    verdict: str | None
    cause: str | None = None
    detail: str | None = None
    hard: bool = False
    output_tok_s: float | None = None
    checks_not_run: list[str] = []


class MatrixFile(_Strict):
    format: str
    version: int
    sweep: str
    engine: str
    engine_version: str | None = None
    model: str | None = None
    fingerprint: dict[str, Any]
    axes: dict[str, AxisEntry]
    configs: list[ConfigEntry]
    recommendation: list[str] = []  # the sweep's decision, as its report states it


# launch failures that the same configuration repeats on the same environment (not a busy
# port, a slow start, a killed process or a host out of memory)
REPRODUCIBLE_CAUSES = ("arch_unsupported", "bad_args", "import_error", "illegal_memory_access", "oom_gpu", "jit_compile")


def _is_bad(verdict: str | None, hard: bool) -> bool:
    """An axis value is known bad anywhere: a hard launch incompatibility, or wrong output."""
    return verdict == "wrong" or (verdict == "crashed" and hard)


def _config_is_bad(c: "ConfigEntry") -> bool:
    """This exact configuration is known bad: wrong output, or a launch failure it repeats."""
    return c.verdict == "wrong" or (c.verdict == "crashed" and (c.hard or c.cause in REPRODUCIBLE_CAUSES))


def export_matrix(store: Store) -> dict:
    sweep = store.sweep() or {}
    spec = sweep.get("spec") or {}
    fp = sweep.get("fingerprint") or {}
    trials = store.current()
    base = next((t for t in trials if t.is_baseline), None)
    axes: dict[str, dict] = {}
    for a in spec.get("axes") or []:
        name = a["name"]
        entry = {"flag": a.get("flag"), "env": a.get("env"),
                 "baseline": render(base.config[name]) if base and name in base.config else None, "values": {}}
        for t in trials:
            if name not in t.config or t.verdict is None or t.changed not in ([], [name]):
                continue
            entry["values"].setdefault(render(t.config[name]), _value_result(t, name, trials))
        axes[name] = entry
    configs = [{"key": t.key, "config": {k: render(v) for k, v in t.config.items()}, "changed": list(t.changed),
                "verdict": t.verdict, "cause": t.cause, "detail": t.detail, "hard": bool(t.metrics.get("hard")),
                "output_tok_s": t.metrics.get("output_tok_s"), "checks_not_run": checks.not_run(t)} for t in trials]
    model = spec.get("model") or {}
    return {"format": FORMAT, "version": VERSION, "sweep": sweep.get("name", "?"), "engine": spec.get("engine", "?"),
            "engine_version": fp.get("engine_version"), "model": model.get("name") or model.get("path"),
            "fingerprint": fp, "axes": axes, "configs": configs,
            "recommendation": decide.load(store).summary_lines()}


def only_in_combination(t: TrialRecord, name: str, trials: list[TrialRecord]) -> dict[str, str] | None:
    """The other axes' values of ``t`` when its failure belongs to that combination, not to its
    value of ``name`` alone: a launch failure the engine repeats but did not call a bad value
    (not ``hard``: e.g. llama.cpp's quantized V cache with flash attention off), or a value that
    passed in another configuration. None when the value itself is what failed (or nothing did)."""
    if t.verdict not in BAD_VERDICTS or len(t.config) < 2:
        return None
    value = render(t.config[name])
    passed_elsewhere = any(o.verdict in decide.CORRECT and render(o.config.get(name)) == value for o in trials if o is not t)
    config_failure = t.verdict == "crashed" and not t.metrics.get("hard") and t.cause in REPRODUCIBLE_CAUSES
    if not (passed_elsewhere or config_failure):
        return None
    return {k: render(v) for k, v in t.config.items() if k != name}


def combination_note(t: TrialRecord, spec: dict, trials: list[TrialRecord]) -> str | None:
    """For a trial whose single change failed only in combination with the baseline's other
    values: which combination, and the other values that might work with the change (or the
    bisect strategy, which names the smallest incompatible set)."""
    if len(t.changed) != 1:
        return None
    name = t.changed[0]
    combo = only_in_combination(t, name, trials)
    if combo is None:
        return None
    axes = {a["name"]: [render(v) for v in a.get("values") or []] for a in spec.get("axes") or []}
    others = [f"{k}={v}" for k, held in combo.items() for v in axes.get(k, []) if v != held]
    change = f"{name}={render(t.config[name])}"
    held = ", ".join(f"{k}={v}" for k, v in combo.items())
    tip = f"try {change} with {' or '.join(others)}" if others else "try it with other values of those axes"
    return (f"Only this combination is known broken, not {change} itself: it ran with {held}; {tip}, "
            f"or plan.strategy = \"bisect\" to name the incompatible set.")


def _value_result(t: TrialRecord, name: str, trials: list[TrialRecord]) -> dict:
    """A value's entry: its trial's result, or, when only a combination failed, no verdict for
    the value and the combination it failed in."""
    res = _result(t)
    combo = only_in_combination(t, name, trials)
    if combo is not None:
        res.update(verdict=None, combination=combo)
    return res


def _result(t: TrialRecord) -> dict:
    return {"verdict": t.verdict, "cause": t.cause, "detail": t.detail, "hard": bool(t.metrics.get("hard")),
            "trial": t.idx, "output_tok_s": t.metrics.get("output_tok_s"), "checks_not_run": checks.not_run(t)}


def write_matrix(store: Store, path: str | os.PathLike) -> Path:
    p = Path(path)
    p.write_text(json.dumps(export_matrix(store), indent=2) + "\n", encoding="utf-8")
    return p


def read_matrix(path: str | os.PathLike) -> MatrixFile:
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"--known-bad: {p}: file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise SpecError(f"--known-bad: {p}: not JSON ({err})") from None
    try:
        m = MatrixFile.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(x) for x in first["loc"]) or "(top level)"
        raise SpecError(f"--known-bad: {p}: not a bakeoff compatibility matrix ({loc}: {first['msg']})") from None
    if m.format != FORMAT:
        raise SpecError(f"--known-bad: {p}: format is {m.format!r}, expected {FORMAT!r}")
    if m.version > VERSION:
        raise SpecError(f"--known-bad: {p}: matrix version {m.version} is newer than this bakeoff reads ({VERSION}); upgrade bakeoff")
    return m


def _hardware(fp: dict) -> list:
    gpus = fp.get("gpus") or []
    if gpus:
        return sorted((g.get("name"), g.get("compute_capability")) for g in gpus)
    return [("cpu", (fp.get("cpu") or {}).get("model"))]


def describe_hardware(fp: dict) -> str:
    return ", ".join(f"{n} (sm_{c})" if n != "cpu" else f"CPU {c}" for n, c in _hardware(fp))


def environment_match(theirs: MatrixFile, engine: str, ours: dict) -> str | None:
    """How the file's environment matches ours ('fingerprint hash', 'hardware + engine version'), or None."""
    if theirs.engine != engine:
        return None
    if theirs.fingerprint.get("hash") and theirs.fingerprint.get("hash") == ours.get("hash"):
        return "fingerprint hash"
    same_hw = _hardware(theirs.fingerprint) == _hardware(ours)
    ver = theirs.engine_version or theirs.fingerprint.get("engine_version")
    if same_hw and ver is not None and ver == ours.get("engine_version"):
        return "hardware + engine version"
    return None


@dataclass
class KnownBad:
    pairs: dict[tuple[str, str], str] = field(default_factory=dict)  # (axis, value) bad in any configuration
    configs: dict[frozenset, str] = field(default_factory=dict)  # {(axis, value), ...} of a whole bad configuration -> reason
    notes: list[str] = field(default_factory=list)

    def merged(self) -> dict[frozenset, str]:
        """What ``run_sweep(known_bad=...)`` takes: each known-bad combination of (axis, value)
        pairs (one pair for a bad value, every axis for a bad whole configuration) -> reason."""
        return {**{frozenset([pair]): why for pair, why in self.pairs.items()}, **self.configs}


def load_known_bad(paths: list[str | os.PathLike], spec: Spec, fingerprint: dict | None = None) -> KnownBad:
    """The (axis, value) pairs of ``spec`` that matching files found broken, each with its reason."""
    if fingerprint is None:
        from bakeoff.run.fingerprint import for_spec

        fingerprint = for_spec(spec)
    out = KnownBad()
    for path in paths:
        m = read_matrix(path)
        how = environment_match(m, spec.engine, fingerprint)
        if how is None:
            out.notes.append(
                f"{path}: ignored, its environment differs (engine {m.engine} {m.engine_version or '?'} on "
                f"{describe_hardware(m.fingerprint)}, fingerprint {m.fingerprint.get('hash', '?')}; here: {spec.engine} "
                f"{fingerprint.get('engine_version') or '?'} on {describe_hardware(fingerprint)}, fingerprint {fingerprint.get('hash', '?')})")
            continue
        n = 0
        for their_axis, entry in m.axes.items():
            axis = _our_axis(spec, their_axis, entry)
            if axis is None:
                continue
            ours = {render(v) for v in axis.values}
            for value, res in entry.values.items():
                if value not in ours or value == entry.baseline or not _is_bad(res.verdict, res.hard):
                    continue
                reason = (f"known bad: {axis.name}={value} was {res.verdict} ({res.cause}) in trial {res.trial} of sweep "
                          f"{m.sweep!r} (matched on {how}), from {path}")
                if (axis.name, value) not in out.pairs:
                    out.pairs[(axis.name, value)] = reason
                    n += 1
        k = _bad_configs(m, spec, how, str(path), out)
        out.notes.append(f"{path}: matches this environment on {how}; {n} known-bad axis value(s) and "
                         f"{k} known-bad configuration(s) apply")
    return out


def _bad_configs(m: MatrixFile, spec: Spec, how: str, path: str, out: KnownBad) -> int:
    """Whole configurations the file found bad, on axes this spec has (mapped to our names) and
    with values this spec sweeps: a configuration of ours that contains one is skipped."""
    names: dict[str, str] = {}  # their axis name -> ours
    ours: dict[str, set[str]] = {}
    for their, entry in m.axes.items():
        axis = _our_axis(spec, their, entry)
        if axis is not None:
            names[their] = axis.name
            ours[axis.name] = {render(v) for v in axis.values}
    base = {a: render(v) for a, v in spec.baseline_config().items()}
    n = 0
    for c in m.configs:
        if not _config_is_bad(c) or not set(c.config) <= set(names):
            continue
        pairs = frozenset((names[a], v) for a, v in c.config.items())
        if any(v not in ours[a] for a, v in pairs) or all(base.get(a) == v for a, v in pairs) or pairs in out.configs:
            continue  # a value we do not sweep, or our baseline itself: without it nothing can be judged
        what = ", ".join(f"{a}={v}" for a, v in sorted(pairs) if base.get(a) != v)
        out.configs[pairs] = (f"known bad: this configuration ({what}) was {c.verdict} ({c.cause}) in sweep {m.sweep!r} "
                              f"(matched on {how}), from {path}")
        n += 1
    return n


def _our_axis(spec: Spec, name: str, entry: AxisEntry):
    """The spec's axis for the file's axis: same flag / env variable first, else the same name."""
    for a in spec.axes:
        if (entry.flag and a.flag == entry.flag) or (entry.env and a.env == entry.env):
            return a
    for a in spec.axes:
        if a.name == name and not (entry.flag or entry.env):
            return a
    return None


def known_bad_pairs(paths: list[str | os.PathLike], spec: Spec) -> dict:
    """{(axis, value): reason} for values bad anywhere, plus {config key: reason} for exact
    configurations found bad (e.g. a flag combination the engine rejects)."""
    return load_known_bad(paths, spec).merged()
