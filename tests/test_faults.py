"""Real faults, real engine: llama-server serving the real SmolLM2-135M, and GGUFs broken at
test time (tests/faultmodels.py) in tmp_path. No mock of the engine anywhere; the one fake
binary (the hang) is a stub *launcher* standing in for a server that never gets to listen.

One mixed sweep (baseline, a healthy change, a flag combination llama.cpp refuses, a NaN model
and a shuffled model as values of a model axis) runs once per module; the tests read its store
and report. Launch-only faults each run a one-trial sweep. Every crash is asserted to be judged
within seconds of the process exiting, not at the startup timeout.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import faultmodels
from bakeoff import spec as specmod
from bakeoff.errors import SpecError
from bakeoff.store import Store, TrialRecord
from bakeoff.pipeline import Events, run_sweep
from clirun import run_cli

pytestmark = pytest.mark.engine

STARTUP_TIMEOUT = 240
# the shuffled model answers 2+3 and the capital wrong: below the absolute floor before any diff
SHUFFLED_CAUSE = "task_floor"  # never reached by a crash: each must be judged within seconds of the exit
# the layers whose ffn_down rows are permuted: finite, fluent-looking, and wrong
SHUFFLED = [f"blk.{i}.ffn_down.weight" for i in range(4, 7)]  # 8 layers: it loops instead


def spec_data(eng, **over) -> dict:
    data = {
        "name": "faults", "engine": "llamacpp", "engine_options": {"binary": eng.binary},
        "model": {"path": eng.model, "name": "smollm2"},
        # one thread: on a contended 2-core machine two spinning threads are slower, not faster
        "server": {"args": ["--ctx-size", "512", "--parallel", "2", "--threads", "1", "--no-webui"],
                   "startup_timeout_s": STARTUP_TIMEOUT, "hang_timeout_s": 90, "request_timeout_s": 400},
        # the gate at 40 items (the default 80 costs ~1 min per trial on 2 busy cores)
        "probes": {"set": "quick", "max_tokens": 24, "concurrency": 2, "gate_items": 40},
        # the bench is not what is tested here; slow_fraction low so contention noise is not 'slow'; a fixed
        # launch noise: no extra launches of the baseline to measure it (test_baseline_relaunch.py does)
        "bench": {"concurrency": [1], "requests_per_level": 2, "warmup_requests": 0,
                  "input_tokens": 32, "output_tokens": 16, "slow_fraction": 0.05, "launch_noise": 0.08},
        "plan": {"strategy": "baseline"},
    }
    for key, value in over.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) and isinstance(data.get(key), dict) else value
    return data


def one_trial(tmp_path: Path, data: dict, events: Events | None = None) -> tuple[TrialRecord, str]:
    out = tmp_path / "run"
    report = run_sweep(specmod.parse(data), out, events=events)
    with Store(out) as store:
        (rec,) = store.trials()
    return rec, report.read_text()


def assert_judged_at_exit(rec: TrialRecord) -> None:
    """The crash verdict came seconds after the server's last log line, far from the timeout."""
    last_output = os.path.getmtime(rec.log_path)
    assert rec.finished - last_output < 5, (rec.finished - last_output, rec.detail)
    assert rec.finished - rec.started < 30 < STARTUP_TIMEOUT


def trial_by(store_trials: list[TrialRecord], label: str) -> TrialRecord:
    from bakeoff.report.markdown import label as label_of

    return next(t for t in store_trials if label_of(t).startswith(label))


# ------------------------------------------------------------------ the mixed sweep
@pytest.fixture(scope="module")
def mixed(real_llamacpp, tmp_path_factory):
    eng = real_llamacpp
    d = tmp_path_factory.mktemp("mixed")
    nan = faultmodels.nan_weights(eng.model, d / "nan.gguf")
    shuffled = faultmodels.shuffled_rows(eng.model, d / "shuffled.gguf", SHUFFLED)
    data = spec_data(eng, plan={"strategy": "ofat"}, axes=[
        {"name": "flash_attn", "flag": "--flash-attn", "values": ["off", "on"]},
        {"name": "cache_type_v", "flag": "--cache-type-v", "values": ["f16", "q8_0"]},
        {"name": "weights", "model": True, "values": [eng.model, str(nan), str(shuffled)]},
        # token 2 is SmolLM2's <|im_end|> (EOS): +6 nats on it ends replies early, text still plausible
        {"name": "eos_bias", "flag": "--logit-bias", "values": ["2+0", "2+6"]},
    ])
    out = d / "run"
    t0 = time.monotonic()
    report = run_sweep(specmod.parse(data), out)
    took = time.monotonic() - t0
    with Store(out) as store:
        trials = store.trials()
        artifacts = {t.key: store.artifact(t.key, "probes") for t in trials}
    return {"trials": trials, "report": report.read_text(), "took": took, "artifacts": artifacts, "dir": out,
            "spec": specmod.parse(data)}


def test_mixed_sweep_verdict_table(mixed):
    got = [(t.idx, t.verdict, t.cause) for t in mixed["trials"]]
    assert got == [(0, "ok", None), (1, "ok", None), (2, "crashed", "bad_args"),
                   (3, "wrong", "nonfinite_logprobs"), (4, "wrong", SHUFFLED_CAUSE), (5, "wrong", "early_stop")], \
        [t.detail for t in mixed["trials"]]


def test_early_eos_is_an_early_stop_not_a_prefix(mixed):
    """Path 3 on the real engine: an EOS bias ends replies early, each a prefix of the
    baseline's (the old judge called that 'a length difference only' and passed it). llama.cpp
    streams no EOS entry, so the gap comes from the baseline's top-k where the trial stopped."""
    eos = trial_by(mixed["trials"], "eos_bias=2+6")
    assert (eos.verdict, eos.cause, eos.metrics["failed_mode"]) == ("wrong", "early_stop", "single"), eos.detail
    assert eos.detail.startswith("wrong in single mode (early_stop): ") and "EOS" in eos.detail


def test_a_trial_judged_while_the_baseline_was_missing_is_judged_against_it_once_it_passes(mixed, tmp_path):
    """No verdict without its baseline, on the real stored answers of this sweep. The early-EOS
    configuration's answers pass every absolute check; stored as if it had run while the
    baseline was an ``infra_error`` (no teacher forcing, judged alone, ``ok``) and benchmarked
    1.94x the healthy flash-attention trial's real figures (the speed of the reported case). Once
    the baseline passes: (1) before any re-judging the decision never ranks it and says why (the
    old code recommended it "faster beyond the noise"); (2) re-judged from its stored answers
    against the baseline's it is ``wrong (early_stop)``, with the evidence and how it was judged."""
    import shutil

    from bakeoff import decide
    from bakeoff.judge.probes import judge, results_from_json
    from bakeoff.judge.rejudge import NOT_COMPARED, rejudge_all

    spec = mixed["spec"]
    eos, fa = trial_by(mixed["trials"], "eos_bias=2+6"), trial_by(mixed["trials"], "flash_attn=on")
    alone = {k: v for k, v in mixed["artifacts"][eos.key].items() if k != "anchored"}  # no baseline: no teacher forcing
    first = judge(results_from_json(alone, spec.probes.set), spec.probes, None)
    assert first.passed and NOT_COMPARED in first.checks_not_run, first.detail  # the absolute checks alone find nothing
    fast = [{**lv, "output_tok_s": lv["output_tok_s"] * 1.94,
             "samples": {**(lv.get("samples") or {}), "output_tok_s": [x * 1.94 for x in (lv.get("samples") or {}).get(
                 "output_tok_s") or [lv["output_tok_s"]]]}} for lv in fa.metrics["levels"]]
    d = tmp_path / "resumed"
    shutil.copytree(mixed["dir"], d, ignore=shutil.ignore_patterns(".lock"))
    with Store(d) as store:
        store.put_artifact(eos.key, "probes", alone)
        store.save(eos.with_(verdict="ok", cause=None, detail=first.detail, evidence=[],
                             metrics={"probe": first.values, "levels": fast, "checks_not_run": first.checks_not_run}))
        dec = decide.save(store)
        assert "eos_bias=2+6" not in dec.headline and all("eos_bias=2+6" not in f.label for f in dec.fallbacks), dec.headline
        assert any(c.startswith("NOT COMPARED WITH THE BASELINE: ") and "eos_bias=2+6" in c for c in dec.cautions), dec.cautions
        assert store.get(eos.key).metrics["unverified"] is True
        notes: list[str] = []
        (new,) = rejudge_all(store, spec, expect_logprobs=True, ignore_eos=True, note=notes.append)
        dec = decide.save(store)
        rec = store.get(eos.key)
    assert (rec.verdict, rec.cause, rec.metrics["failed_mode"]) == ("wrong", "early_stop", "single"), rec.detail
    assert rec.detail.startswith("wrong in single mode (early_stop): ") and "once the baseline passed" in rec.detail
    assert "re-judged against it from its stored answers: wrong" in notes[0]
    assert not any(c.startswith("NOT COMPARED") for c in dec.cautions) and "eos_bias=2+6" not in dec.headline


def test_baseline_passes_its_absolute_floors_with_measured_values(mixed):
    """Path 1: the baseline is judged too (floors); its measured gate accuracy has an interval."""
    base = mixed["trials"][0]
    probe = base.metrics["probe"]
    assert base.verdict == "ok" and probe["task_accuracy"] == "3/3"
    k, n = map(int, probe["gate_accuracy"].split("/"))
    assert n == 40 and k / n >= 0.15 and probe["gate_ci95"][0] <= k / n <= probe["gate_ci95"][1]
    assert int(probe["needles_found"].split("/")[0]) >= 1
    lc = probe["long_context"]  # prompt + answer fill most of the served context, measured by the server
    assert 0.6 * lc["served_context"] < lc["prompt_tokens"] + 48 <= lc["served_context"], lc


def test_healthy_flash_attention_is_ok_with_its_measured_agreement(mixed):
    fa = trial_by(mixed["trials"], "flash_attn=on")
    assert fa.verdict == "ok", fa.detail
    measured = fa.metrics["probe"]
    assert measured["topk_consistency"] >= 0.9 and measured["task_accuracy"] == measured["task_accuracy_baseline"]
    assert "agreement=" in fa.detail and "topk_consistency=" in fa.detail
    assert fa.metrics["output_tok_s"] > 0


def test_nan_weights_are_wrong_by_the_nan_detector(mixed):
    nan = next(t for t in mixed["trials"] if str(t.config["weights"]).endswith("nan.gguf"))
    assert (nan.verdict, nan.cause, nan.metrics["failed_mode"]) == ("wrong", "nonfinite_logprobs", "single")
    # llama-server sends NaN logits as "logprob": null
    assert "tokens have logprob null" in nan.detail
    assert any(line.startswith("first tokens:") and "None" in line for line in nan.evidence)


def test_shuffled_weights_are_wrong_by_the_task_floor_while_baseline_is_ok(mixed):
    base = mixed["trials"][0]
    assert base.verdict == "ok" and base.changed == []
    shuf = next(t for t in mixed["trials"] if str(t.config["weights"]).endswith("shuffled.gguf"))
    assert (shuf.verdict, shuf.cause, shuf.metrics["failed_mode"]) == ("wrong", SHUFFLED_CAUSE, "single"), shuf.detail
    assert shuf.detail.startswith("wrong in single mode (task_floor): below the absolute floor: task_floor: ")


def test_refused_flag_combination_crashes_with_bad_args_at_exit(mixed):
    bad = trial_by(mixed["trials"], "cache_type_v=q8_0")
    assert (bad.verdict, bad.cause) == ("crashed", "bad_args")
    assert any("flash" in e.lower() for e in bad.evidence), bad.evidence
    assert_judged_at_exit(bad)


def test_mixed_report_shows_every_verdict_and_its_evidence(mixed):
    text = mixed["report"]
    for row in ("| 0 | baseline | **ok** |", "| 1 | flash_attn=on | **ok** |",
                "| 2 | cache_type_v=q8_0 | **crashed** | bad_args |", "| **wrong** | nonfinite_logprobs (single) |",
                f"| **wrong** | {SHUFFLED_CAUSE} (single) |", "| **wrong** | early_stop (single) |"):
        assert row in text, row
    assert "### Trial 2: cache_type_v=q8_0 — crashed (bad_args)" in text
    assert "Detector `nonfinite_logprobs` fired in the single-request run (mode `single`)." in text
    assert "Measured: " in text and "topk_consistency=" in text
    # the recommendation is one of the two correct configurations, never a broken one
    rec_section = text.split("## Recommendation", 1)[1].split("\n## ", 1)[0]
    head = rec_section.split("\n\n", 2)[1]
    assert ("the baseline" in head or "flash_attn=on" in head) and "nan.gguf" not in rec_section


# ------------------------------------------------------------------ launch faults, one trial each
def test_model_file_that_is_not_a_gguf_crashes_with_model_load(real_llamacpp, tmp_path):
    garbage = faultmodels.garbage_file(tmp_path / "garbage.gguf")
    rec, report = one_trial(tmp_path, spec_data(real_llamacpp, model={"path": str(garbage)}))
    assert rec.verdict == "crashed"
    # the log names the file's bad magic: a model that fails to load is a cause of its own
    assert rec.cause == "model_load", rec.cause
    assert any("magic" in e or "failed to load model" in e for e in rec.evidence), rec.evidence
    assert_judged_at_exit(rec)
    assert "**crashed**" in report


def test_port_in_use_crashes_with_port_in_use_at_exit(real_llamacpp, tmp_path):
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    port = blocker.getsockname()[1]
    events = Events(phase=lambda phase, line: blocker.close() if phase == "teardown" else None)
    try:
        rec, _ = one_trial(tmp_path, spec_data(real_llamacpp, server={"port": port}), events)
    finally:
        blocker.close()
    assert (rec.verdict, rec.cause, rec.port) == ("crashed", "port_in_use", port)
    assert any("couldn't bind" in e for e in rec.evidence), rec.evidence
    assert_judged_at_exit(rec)


def test_startup_that_hangs_is_judged_hang_by_the_watchdog(real_llamacpp, tmp_path):
    # stub launcher: prints one line like a server starting, then never listens nor logs again
    stub = tmp_path / "stuck-server"
    stub.write_text('#!/bin/sh\ncase "$*" in *--help*|*--version*) exit 0;; esac\necho "loading model $2"\nexec sleep 600\n')
    stub.chmod(0o755)
    hang = 3
    data = spec_data(real_llamacpp, engine_options={"binary": str(stub)}, server={"hang_timeout_s": hang})
    t0 = time.monotonic()
    rec, _ = one_trial(tmp_path, data)
    took = time.monotonic() - t0
    assert (rec.verdict, rec.cause) == ("crashed", "hang"), rec.detail
    assert f"no new log line for {float(hang)}s" in rec.detail or f"no new log line for {hang}s" in rec.detail
    assert rec.finished - rec.started < hang + 10
    assert took < hang + 30  # whole sweep, teardown of the stub included
    assert subprocess.run(["pgrep", "-f", str(stub)], capture_output=True).stdout == b""


def test_nonexistent_model_path_is_a_spec_error_exit_2(real_llamacpp, tmp_path):
    missing = tmp_path / "nope" / "model.gguf"
    with pytest.raises(SpecError, match="does not exist"):  # caught before any launch
        run_sweep(specmod.parse(spec_data(real_llamacpp, model={"path": str(missing)})), tmp_path / "o")
    assert not list((tmp_path / "o").glob("logs/*"))
    spec_file = tmp_path / "spec.toml"
    spec_file.write_text(f'name = "x"\nengine = "llamacpp"\n[model]\npath = "{missing}"\n')
    cli = run_cli([sys.executable, "-m", "bakeoff.cli", "run", str(spec_file), "--out", str(tmp_path / "o")],
                  capture_output=True, text=True, timeout=120)
    assert cli.returncode == 2, cli.stdout + cli.stderr
    assert "does not exist" in cli.stdout + cli.stderr
    assert not list((tmp_path / "o").glob("logs/*"))


def test_server_that_dies_while_serving_is_crashed_not_wrong(real_llamacpp, tmp_path):
    """Fault: the real llama-server gets SIGSEGV a moment into the probes (as a kernel fault on
    the first real request would). Its failed requests are not answers: the verdict is a crash
    triaged from the log, not 'wrong'."""
    import signal
    import threading

    from bakeoff.store import open_readonly

    out = tmp_path / "run"
    killed: list[int] = []

    def on_phase(phase: str, line: str) -> None:
        if phase != "probe" or killed:
            return
        with open_readonly(out) as store:
            pid = next(t for t in store.trials() if t.state == "running").pid
        killed.append(pid)
        threading.Timer(0.3, os.kill, (pid, signal.SIGSEGV)).start()

    rec, report = one_trial(tmp_path, spec_data(real_llamacpp), Events(phase=on_phase))
    assert killed == [rec.pid]
    assert rec.verdict == "crashed" and rec.detail.startswith("crashed while serving (probe): exited with code -11"), rec.detail
    assert rec.metrics["failed_mode"] == "probe" and "**crashed**" in report


def test_a_broken_baseline_is_below_the_floor_and_nothing_is_known_good(real_llamacpp, tmp_path):
    """Path 1 on the real engine: the baseline serves a model with shuffled FFN rows (fluent,
    finite, wrong). The old judge passed it on the detectors and made it every trial's reference."""
    shuffled = faultmodels.shuffled_rows(real_llamacpp.model, tmp_path / "shuffled.gguf", SHUFFLED)
    data = spec_data(real_llamacpp, model={"path": str(shuffled)}, plan={"strategy": "ofat"},
                     axes=[{"name": "flash_attn", "flag": "--flash-attn", "values": ["off", "on"]}])
    out = tmp_path / "run"
    run_sweep(specmod.parse(data), out)
    with Store(out) as store:
        base, change = store.trials()
    assert (base.verdict, base.cause) == ("wrong", "baseline_below_floor"), base.detail
    assert base.detail.startswith("wrong in single mode (baseline_below_floor): the baseline itself is below the absolute floors, "
                                  "so nothing known-good exists: task_floor: ")
    assert base.metrics["baseline_below_floor"] is True
    # the change has nothing to be compared with, and is held to the same floors
    assert (change.verdict, change.cause) == ("wrong", "task_floor"), change.detail


def test_ok_without_a_healthy_baseline_is_flagged_unverified(real_llamacpp, tmp_path):
    """The baseline itself is broken (quantized V cache without flash attention: llama.cpp refuses
    it), so the one change that starts has nothing known-good to be compared with. It may pass
    the absolute detectors, but the report must not present it as a verified winner."""
    data = spec_data(real_llamacpp, plan={"strategy": "ofat"},
                     axes=[{"name": "flash_attn", "flag": "--flash-attn", "values": ["off", "on"]}])
    data["server"]["args"] = [*data["server"]["args"], "--cache-type-v", "q8_0"]
    out = tmp_path / "run"
    report = run_sweep(specmod.parse(data), out).read_text()
    with Store(out) as store:
        base, change = store.trials()
    assert (base.verdict, base.cause) == ("crashed", "bad_args"), base.detail
    assert change.verdict == "ok" and change.metrics["unverified"] is True, change.detail
    assert change.detail.startswith("absolute checks only: the baseline is crashed")
    rec = report[report.index("## Recommendation"):]
    assert "flash_attn=on" in rec and "**Caution:** NOTHING KNOWN-GOOD: the baseline is crashed" in rec


@pytest.mark.parametrize("excerpt,verdict,cause", [
    ("logs/sglang/illegal_memory_access_moe.log", "crashed", "illegal_memory_access"),
    ("logs_ok/sglang-pr4826.log", "wrong", "request_error"),  # a clean log names nothing: the failed answers stand
])
def test_engine_dying_under_a_live_api_server_is_a_triaged_crash(tmp_path, excerpt, verdict, cause):
    """STUB server (bench/stub_server.py, no model): it comes up healthy, then at the first
    completion prints a real SGLang log excerpt (an illegal memory access in a MoE kernel,
    tests/data/logs/sglang/illegal_memory_access_moe.log) and answers HTTP 500 while staying up,
    as an API server does after its engine died. This tests the trial's judgement, not an
    engine: failed requests plus a log that names the cause are a crash with that cause and its
    lines, not a vague 'wrong'."""
    root = Path(__file__).resolve().parent.parent
    log_excerpt = root / "tests" / "data" / excerpt
    data = {
        "name": "engine-died", "engine": "generic",
        "engine_options": {"command": [sys.executable, str(root / "bench" / "stub_server.py"), "--port", "{port}",
                                       "--fail-with-log", str(log_excerpt)], "health": "/health"},
        "model": {"path": str(log_excerpt), "name": "stub"},
        "server": {"startup_timeout_s": 60, "hang_timeout_s": 30, "request_timeout_s": 30},
        "probes": {"set": "quick", "max_tokens": 8, "concurrency": 0},
        "plan": {"strategy": "baseline"},
    }
    rec, report = one_trial(tmp_path, data)
    assert (rec.verdict, rec.cause) == (verdict, cause), (rec.verdict, rec.cause, rec.detail)
    assert "HTTP 500" in rec.detail and rec.metrics["failed_mode"] == "single"
    if verdict == "crashed":
        assert rec.detail.startswith("failed while serving (single): ")
        assert any("illegal memory access" in line for line in rec.evidence), rec.evidence

