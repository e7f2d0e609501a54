"""Compatibility matrix: export from a real sweep, import it, prune a real sweep with it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bakeoff.plan import make_plan
from bakeoff.plan.prune import Gate
from bakeoff.spec import render
from test_html import ROOT, bakeoff, example_sweep, write_spec

from bakeoff import spec as specmod
from bakeoff.errors import SpecError
from bakeoff.run.fingerprint import environment_fingerprint
from bakeoff.report.matrix import FORMAT, load_known_bad, read_matrix
from bakeoff.report.status import from_store
from bakeoff.store import Store


def exported(tmp_path_factory) -> Path:
    sweep, _ = example_sweep(tmp_path_factory)
    path = tmp_path_factory.getbasetemp() / "compat-matrix.json"
    r = bakeoff("export", str(sweep), "-o", str(path))
    assert r.returncode == 0, r.stderr[-2000:]
    return path


def pruned_sweep(tmp_path_factory) -> tuple[Path, Path]:
    """(sweep dir, matrix file): the example's baseline config and its q8_0 change, run with
    --known-bad from the example's export; idempotent like ``example_sweep``."""
    matrix = exported(tmp_path_factory)
    base = tmp_path_factory.getbasetemp()
    spec = write_spec(base, "smollm2-pruned", '["off"]')
    out = base / "pruned-sweep"
    if not (base / "pruned-observed.json").exists():
        (base / "pruned-observed.json").write_text(json.dumps(_run_and_watch(spec, out, matrix)))
    r = bakeoff("run", str(spec), "--out", str(out), "--known-bad", str(matrix))  # resumes: starts nothing
    assert r.returncode == 0, r.stderr[-3000:]
    return out, matrix


def _run_and_watch(spec: Path, out: Path, matrix: Path) -> dict:
    """Run the sweep in the background, watching it the way `bakeoff status` does from another terminal."""
    proc = subprocess.Popen([sys.executable, "-m", "bakeoff.cli", "run", str(spec), "--out", str(out), "--known-bad", str(matrix)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    seen, cli = [], ""
    try:
        while proc.poll() is None:
            if (out / "bakeoff.sqlite").exists():
                with Store(out) as store:
                    p = from_store(store)
                if p.current != "-" and p.started:
                    seen.append({"current": p.current, "phase": p.phase, "last_line": p.last_line, "runner": p.runner})
                    if not cli:
                        cli = bakeoff("status", str(out)).stdout
            time.sleep(0.5)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    return {"seen": seen, "cli": cli, "stderr": stderr[-20000:]}


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    return example_sweep(tmp_path_factory)


@pytest.fixture(scope="module")
def matrix_file(tmp_path_factory) -> Path:
    return exported(tmp_path_factory)


@pytest.mark.engine
def test_export_has_fingerprint_engine_and_verdicts(example, matrix_file):
    sweep, _ = example
    data = json.loads(matrix_file.read_text())
    assert data["format"] == FORMAT and data["engine"] == "llamacpp"
    with Store(sweep) as store:
        fp = store.sweep()["fingerprint"]
        trials = store.trials()
    assert data["fingerprint"]["hash"] == fp["hash"] and data["engine_version"] == fp["engine_version"]
    v = data["axes"]["cache_type_v"]["values"]
    assert data["axes"]["cache_type_v"]["flag"] == "--cache-type-v"
    # q8_0 failed only with flash attention off: the value has no verdict of its own; the
    # configuration is the broken one
    assert v["q8_0"]["verdict"] is None and v["q8_0"]["cause"] == trials[2].cause
    assert v["q8_0"]["combination"] == {"flash_attn": "off"}
    assert next(c for c in data["configs"] if c["key"] == trials[2].key)["verdict"] == "crashed"
    assert v["f16"]["verdict"] == trials[0].verdict  # the baseline value
    assert data["axes"]["flash_attn"]["values"]["on"]["verdict"] == trials[1].verdict
    assert [c["key"] for c in data["configs"]] == [t.key for t in trials]


@pytest.mark.engine
def test_round_trip_gives_the_failing_combination(example, matrix_file):
    _, spec_path = example
    spec = specmod.load(spec_path)
    with Store(example[0]) as store:
        crashed = store.trials()[2]
    kb = load_known_bad([matrix_file], spec)
    # q8_0 V cache is not bad on its own (it needs flash attention): the value stays, the combination goes
    combo = frozenset((a, render(v)) for a, v in crashed.config.items())
    assert kb.pairs == {} and list(kb.configs) == [combo]
    reason = kb.configs[combo]
    assert str(matrix_file) in reason and "fingerprint hash" in reason and crashed.cause in reason
    assert read_matrix(matrix_file).sweep == "smollm2-small"


@pytest.mark.engine
def test_matching_falls_back_to_hardware_and_engine_version(example, matrix_file, tmp_path):
    _, spec_path = example
    spec = specmod.load(spec_path)
    data = json.loads(matrix_file.read_text())
    data["fingerprint"]["hash"] = "000000000000"
    other_hash = tmp_path / "other-hash.json"
    other_hash.write_text(json.dumps(data))
    kb = load_known_bad([other_hash], spec)
    assert len(kb.configs) == 1 and "hardware + engine version" in next(iter(kb.configs.values()))
    data["engine_version"] = data["fingerprint"]["engine_version"] = "0.0.1"
    other_version = tmp_path / "other-version.json"
    other_version.write_text(json.dumps(data))
    kb = load_known_bad([other_version], spec)
    assert kb.merged() == {} and "ignored, its environment differs" in kb.notes[0]


@pytest.mark.engine
def test_real_sweep_skips_known_bad_and_says_why(tmp_path_factory):
    sweep, matrix = pruned_sweep(tmp_path_factory)
    with Store(sweep) as store:
        trials = store.trials()
    assert [t.changed for t in trials] == [[], ["cache_type_v"]]
    assert trials[0].verdict in ("ok", "slow")  # the baseline ran for real
    skipped = trials[1]
    assert (skipped.verdict, skipped.cause) == ("skipped", "known_bad")
    assert str(matrix) in skipped.detail and "crashed" in skipped.detail
    assert skipped.log_path is None and not list((sweep / "logs").glob("001-*"))  # never launched
    md = (sweep / "report.md").read_text()
    assert "Pruned by `--known-bad`" in md and str(matrix) in md


@pytest.mark.engine
def test_status_from_another_process_while_running(tmp_path_factory):
    sweep, _ = pruned_sweep(tmp_path_factory)
    obs = json.loads((tmp_path_factory.getbasetemp() / "pruned-observed.json").read_text())
    assert obs["seen"], "never saw the running trial"
    first = obs["seen"][0]
    assert first["current"] == "1/2 (baseline)" and first["runner"].startswith("pid ")
    phases = {s["phase"].split(" ")[0] for s in obs["seen"]}
    assert phases & {"starting", "probe", "bench"}
    assert any(s["last_line"] for s in obs["seen"])  # the log's last line, read from log_path
    assert "1/2 (baseline)" in obs["cli"] and "elapsed" in obs["cli"]
    r = bakeoff("status", str(sweep))
    assert r.returncode == 0 and "2/2 finished, done" in r.stdout and "known_bad" in r.stdout
    assert "results" in obs["stderr"] and "known_bad" in obs["stderr"]  # the live view's table


# -- matching rules without a server ---------------------------------------------------------
def _spec(tmp_path: Path, axis_name: str = "cache_type_v") -> specmod.Spec:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    return specmod.parse({"name": "t", "engine": "llamacpp",
                          "model": {"path": str(model)},
                          "axes": [{"name": axis_name, "flag": "--cache-type-v", "values": ["f16", "q8_0", "q4_0"]}]})


def _matrix(fp: dict, verdict="crashed", hard=True, flag="--cache-type-v") -> dict:
    return {"format": FORMAT, "version": 1, "sweep": "theirs", "engine": "llamacpp", "engine_version": fp.get("engine_version"),
            "model": "m", "fingerprint": fp, "configs": [],
            "axes": {"ctv": {"flag": flag, "baseline": "f16", "values": {
                "f16": {"verdict": "ok", "trial": 0},
                "q8_0": {"verdict": verdict, "cause": "bad_args", "hard": hard, "trial": 1},
                "q4_0": {"verdict": "crashed", "cause": "timeout", "hard": False, "trial": 2}}}}}


def test_axis_matched_by_flag_and_only_reproducible_failures_count(tmp_path):
    spec = _spec(tmp_path, axis_name="vcache")
    fp = environment_fingerprint("llamacpp")
    p = tmp_path / "m.json"
    p.write_text(json.dumps(_matrix(fp)))
    kb = load_known_bad([p], spec, fp)
    assert list(kb.pairs) == [("vcache", "q8_0")]  # renamed axis, same flag; the soft timeout is not pruned
    p.write_text(json.dumps(_matrix(fp, verdict="wrong", hard=False)))
    assert list(load_known_bad([p], spec, fp).pairs) == [("vcache", "q8_0")]
    p.write_text(json.dumps(_matrix(fp, flag="--cache-type-k")))
    assert load_known_bad([p], spec, fp).pairs == {}


def test_a_failing_combination_prunes_only_that_combination(tmp_path):
    from bakeoff.plan import config_key

    fp = environment_fingerprint("llamacpp")
    theirs = _matrix(fp)
    theirs["axes"] = {"fa": {"flag": "--flash-attn", "baseline": "off", "values": {"off": {"verdict": "ok", "trial": 0}}},
                      "v": {"flag": "--cache-type-v", "baseline": "f16", "values": {
                          "q8_0": {"verdict": "crashed", "cause": "bad_args", "hard": False, "trial": 1}}}}
    theirs["configs"] = [{"key": "k", "config": {"fa": "off", "v": "q8_0"}, "changed": ["v"], "verdict": "crashed",
                          "cause": "bad_args", "hard": False},
                         {"key": "k2", "config": {"fa": "on", "v": "f16"}, "changed": ["fa"], "verdict": "crashed",
                          "cause": "startup_timeout", "hard": False}]
    p = tmp_path / "m.json"
    p.write_text(json.dumps(theirs))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")

    def spec(base_fa: str) -> specmod.Spec:
        return specmod.parse({"name": "t", "engine": "llamacpp", "model": {"path": str(model)},
                              "axes": [{"name": "flash_attn", "flag": "--flash-attn", "values": ["off", "on"]},
                                       {"name": "cache_type_v", "flag": "--cache-type-v", "values": ["f16", "q8_0"]}],
                              "baseline": {"flash_attn": base_fa, "cache_type_v": "f16"}})

    kb = load_known_bad([p], spec("off"), fp)
    assert kb.pairs == {} and list(kb.configs) == [frozenset({("flash_attn", "off"), ("cache_type_v", "q8_0")})]
    # with flash attention on at the baseline, q8_0 is another configuration: it runs; a timeout proves nothing
    on = spec("on")
    gate = Gate.for_spec(on)
    for combo, why in load_known_bad([p], on, fp).merged().items():
        gate.add(combo, why, "known_bad")
    assert [q.label for q in make_plan(on) if gate.skip(q)] == []


def test_bad_files_fail_clearly(tmp_path):
    spec = _spec(tmp_path)
    with pytest.raises(SpecError, match="file not found"):
        load_known_bad([tmp_path / "missing.json"], spec, {"hash": "x"})
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SpecError, match="not JSON"):
        load_known_bad([bad], spec, {"hash": "x"})
    bad.write_text(json.dumps({"format": FORMAT, "surprise": 1}))
    with pytest.raises(SpecError, match="not a bakeoff compatibility matrix"):
        load_known_bad([bad], spec, {"hash": "x"})
    newer = _matrix({"hash": "x"})
    newer["version"] = 99
    bad.write_text(json.dumps(newer))
    with pytest.raises(SpecError, match="newer"):
        load_known_bad([bad], spec, {"hash": "x"})


def test_other_engine_is_ignored(tmp_path):
    spec = _spec(tmp_path)
    fp = environment_fingerprint("llamacpp")
    m = _matrix(fp)
    m["engine"] = "vllm"
    p = tmp_path / "m.json"
    p.write_text(json.dumps(m))
    kb = load_known_bad([p], spec, fp)
    assert kb.pairs == {} and "ignored" in kb.notes[0]
