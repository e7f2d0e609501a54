"""From preflight verdicts to pruned axis values (what the planner skips, and why).

``required_probes`` says which probes each (axis, value) needs: the spec's ``[preflight] map``
("axis=value" -> probe globs) plus the engine's defaults (defaults.toml, keyed by flag).
``bad_values`` turns results into ``{(axis, value): reason}`` for every value whose required
probe is unsupported, compile-failed or nan, except values listed in ``[preflight] force``
(or ``[plan] force``). ``run`` probes in a subprocess with the engine's interpreter, so a probe
that crashes the process cannot take the sweep with it; for a remote spec that subprocess runs
on the host of the trials (``run_on_host``: the probe modules travel with the command, the
remote needs only the engine's Python), since the controller's GPU (or none) says nothing.
"""

from __future__ import annotations

import base64
import fnmatch
import io
import json
import shlex
import tarfile
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from bakeoff.preflight import BLOCKING
from bakeoff.spec import Spec, render

DEFAULTS = Path(__file__).with_name("defaults.toml")


def engine_defaults(engine: str) -> dict[str, list[str]]:
    return tomllib.loads(DEFAULTS.read_text()).get(engine, {})


def required_probes(spec: Spec) -> dict[tuple[str, str], list[str]]:
    """(axis, value) -> probe globs it needs, for values the spec actually sweeps."""
    out: dict[tuple[str, str], list[str]] = {}
    defaults = engine_defaults(spec.engine) if spec.preflight.use_defaults else {}
    for axis in spec.axes:
        for value in axis.values:
            v = render(value)
            globs = list(defaults.get(f"{axis.flag}={v}", [])) if axis.flag else []
            mine = spec.preflight.map.get(f"{axis.name}={v}")
            if mine is not None:
                globs = [mine] if isinstance(mine, str) else list(mine)
            if globs:
                out[(axis.name, v)] = globs
    return out


def bad_values(spec: Spec, results: dict) -> dict[tuple[str, str], str]:
    """``{(axis, value): reason}`` for every value a blocking verdict rules out (unless forced)."""
    by_name = {r["name"]: r for r in results.get("results", [])}
    forced = set(spec.preflight.force) | set(spec.plan.force)
    out: dict[tuple[str, str], str] = {}
    for (axis, value), globs in required_probes(spec).items():
        if f"{axis}={value}" in forced:
            continue
        for g in globs:
            hits = [by_name[n] for n in sorted(by_name) if fnmatch.fnmatchcase(n, g)]
            if not hits:
                # the library behind it did not import, so its probes never registered
                out[(axis, value)] = f"preflight: no probe matching {g!r} ran (its library is not importable here)"
                break
            blocking = [r for r in hits if r["verdict"] in BLOCKING]
            if blocking:
                r = blocking[0]
                out[(axis, value)] = f"preflight: probe {r['name']} is {r['verdict']}: {r['reason'] or '-'}"
                break
    return out


def run(spec: Spec, patterns: list[str] | None = None, timeout_s: float = 600, host=None) -> dict:
    """Probe in a subprocess with the engine's python; a dead process is one 'unsupported' result.
    With a remote ``host`` (one that has ``run_script``) the subprocess runs there."""
    if host is not None and host.is_remote:
        return run_on_host(spec, host, patterns, timeout_s)
    python = spec.preflight.python or spec.engine_options.get("python") or sys.executable
    src = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    argv = [python, "-m", "bakeoff.preflight", "--reps", str(spec.preflight.reps)]
    if patterns:
        argv += ["--only", *patterns]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)
    except (OSError, subprocess.TimeoutExpired) as err:
        return _died(patterns, f"preflight process failed: {err}")
    if proc.returncode != 0:
        tail = (proc.stderr or "").strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        return _died(patterns, f"preflight process exited {proc.returncode}: {tail[0][:300]}")
    return json.loads(proc.stdout)


PACKAGE = Path(__file__).resolve().parent  # bakeoff/preflight: imports nothing else of bakeoff


def _bundle() -> str:
    """bakeoff/__init__.py, the registry (and the errors it raises) and the preflight package (not
    this planner), as base64 of a tar.gz."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for f in ("__init__.py", "registry.py", "errors.py"):
            tar.add(PACKAGE.parent / f, f"bakeoff/{f}")
        for f in sorted(PACKAGE.glob("*.py")):
            if f.name not in ("plan.py", "cli.py"):
                tar.add(f, f"bakeoff/preflight/{f.name}")
    return base64.b64encode(buf.getvalue()).decode()


def run_on_host(spec: Spec, host, patterns: list[str] | None = None, timeout_s: float = 600) -> dict:
    """``python -m bakeoff.preflight`` on the SSH host with its engine's interpreter; the probe
    modules are unpacked into a temporary directory there and removed afterwards."""
    python = spec.preflight.python or spec.engine_options.get("python") or "python3"
    argv = [python, "-m", "bakeoff.preflight", "--reps", str(spec.preflight.reps), *(["--only", *patterns] if patterns else [])]
    script = (f'd=$(mktemp -d) || exit 1\nprintf %s {_bundle()} | base64 -d | tar -xzf - -C "$d" || exit 1\n'
              f'PYTHONPATH="$d" {" ".join(shlex.quote(a) for a in argv)} > "$d/out" 2> "$d/err" < /dev/null\n'
              'echo "rc=$?"; tail -n 1 "$d/err"; echo "---bakeoff-json---"; cat "$d/out"; rm -rf "$d"\n')
    try:
        out = host.run_script(script, timeout_s)
    except Exception as err:  # noqa: BLE001  the host failing is the preflight failing, not the sweep
        return _died(patterns, f"preflight on {host.describe} failed: {err}")
    head, _, body = out.partition("---bakeoff-json---\n")
    lines = head.strip().splitlines()
    rc = lines[0].removeprefix("rc=") if lines else "?"
    if rc != "0":
        tail = lines[1] if len(lines) > 1 else f"exit code {rc}"
        return _died(patterns, f"preflight process on {host.describe} exited {rc}: {tail[:300]}")
    results = json.loads(body)
    results["ran_on"] = host.describe
    return results


def _died(patterns: list[str] | None, why: str) -> dict:
    return {"schema": 1, "device": {}, "error": why,
            "results": [{"name": p, "library": "?", "verdict": "unsupported", "reason": why} for p in patterns or []]}


def for_sweep(spec: Spec, out_dir: Path, note=lambda msg: None, host=None) -> dict[tuple[str, str], str]:
    """What the sweep prunes: recorded results (``[preflight] results``) or a fresh run of the
    probes the spec needs, on ``host`` when the spec's servers run remotely; the results are
    written to OUT/preflight.json."""
    if not spec.preflight.enabled:
        return {}
    need = required_probes(spec)
    if not need:
        return {}
    if spec.preflight.results:
        results = json.loads(Path(spec.preflight.results).expanduser().read_text())
    else:
        results = run(spec, sorted({g for globs in need.values() for g in globs}), host=host if spec.is_remote else None)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / "preflight.json").write_text(json.dumps(results, indent=1))
    bad = bad_values(spec, results)
    for (axis, value), why in bad.items():
        note(f"{axis}={value} pruned: {why}")
    return bad
