"""One contract, every executor: the sweep's rules hold whether trials run in-process one after
another (``local``) or as parallel Ray tasks (``ray``, a real local Ray cluster).

Rules: pruning after a hard failure, ``--known-bad`` combinations, preflight skips, a trial
interrupted by Ctrl-C and resumed (nothing that finished runs twice), and the stop after the
host failed twice in a row. The server is a **stub** (harness test only, named so): these rules
are about bakeoff's loop, and a stub makes each one happen on cue in a second or two — argparse
rejects ``--mode bad`` as a real engine rejects a flag value it does not know; any other
configuration logs a line, sleeps ``STUB_SLEEP`` seconds and exits 1 (a crash at startup).
The real engines run the same loop in test_e2e_llamacpp.py and test_ray.py.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import ray

from bakeoff import spec as specmod
from bakeoff.pipeline import run_sweep
from bakeoff.store import open_readonly

STUB = """\
import argparse, os, sys, time
ap = argparse.ArgumentParser()
ap.add_argument("--port")
ap.add_argument("--mode", choices=["good"])
ap.add_argument("--other")
ap.parse_args()
print("stub: starting", flush=True)
time.sleep(float(os.environ.get("STUB_SLEEP", "1")))
sys.exit(1)
"""

EXECUTORS = ["local", "ray"]


@pytest.fixture(scope="module", autouse=True)
def cluster():
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _spec(tmp_path: Path, executor: str, *, sleep: float = 1.0, **extra) -> specmod.Spec:
    stub = tmp_path / "stub_server.py"
    stub.write_text(STUB)
    data = {
        "name": "contract", "engine": "generic",
        "engine_options": {"command": [sys.executable, str(stub), "--port", "{port}"]},
        "model": {"path": str(stub)},
        "server": {"env": {"STUB_SLEEP": str(sleep)}, "startup_timeout_s": 60},
        "axes": [{"name": "mode", "flag": "--mode", "values": ["good", "bad"]},
                 {"name": "other", "flag": "--other", "values": ["a", "b"]}],
        "plan": {"strategy": "grid"},
        "executor": executor,
        "ray": {"num_cpus": 1},
    }
    for k, v in extra.items():
        data[k] = {**data.get(k, {}), **v} if isinstance(v, dict) else v
    return specmod.parse(data)


def _trials(out: Path) -> dict[str, tuple]:
    with open_readonly(out) as store:
        return {",".join(f"{k}={v}" for k, v in sorted(t.config.items())): (t.verdict, t.cause, t.attempts)
                for t in store.current()}


def _stub_servers(tmp_path: Path) -> list[int]:
    me = str(tmp_path / "stub_server.py")
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if me in (p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(p.pid)
    return found


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_hard_failure_prunes_what_holds_the_value(tmp_path, executor):
    # good configurations take 10 s, so (bad, a) fails while (good, b) still runs beside it and
    # (bad, b) is proposed only after: a trial already started in parallel cannot be pruned
    # (4 s was too short on a loaded 2-core machine: Ray started (bad, a) after (good, b) ended)
    run_sweep(_spec(tmp_path, executor, sleep=10.0), tmp_path / "o")
    t = _trials(tmp_path / "o")
    assert t["mode=bad,other=a"][:2] == ("crashed", "bad_args")
    assert t["mode=bad,other=b"][:2] == ("skipped", "pruned")
    assert t["mode=good,other=b"][0] == "crashed"  # ran: it holds no condemned value


@pytest.mark.parametrize("executor", EXECUTORS)
def test_known_bad_combinations_are_skipped(tmp_path, executor):
    bad = {frozenset({("mode", "good"), ("other", "b")}): "known bad: from a matrix"}
    run_sweep(_spec(tmp_path, executor), tmp_path / "o", known_bad=bad)
    t = _trials(tmp_path / "o")
    assert t["mode=good,other=b"][:2] == ("skipped", "known_bad")
    assert t["mode=bad,other=a"][0] == "crashed"


@pytest.mark.parametrize("executor", EXECUTORS)
def test_preflight_skips_a_value_its_probe_rules_out(tmp_path, executor):
    results = tmp_path / "pf.json"
    results.write_text(json.dumps({"schema": 1, "device": {}, "results": [
        {"name": "stub.kernel", "library": "stub", "verdict": "unsupported", "reason": "no kernel for this GPU"}]}))
    s = _spec(tmp_path, executor, preflight={"map": {"other=b": "stub.kernel"}, "results": str(results)})
    run_sweep(s, tmp_path / "o")
    t = _trials(tmp_path / "o")
    assert t["mode=good,other=b"][:2] == ("skipped", "preflight")
    assert t["mode=good,other=a"][0] == "crashed"  # the baseline always runs


@pytest.mark.parametrize("executor", EXECUTORS)
def test_ctrl_c_interrupts_and_a_rerun_resumes_without_rerunning_finished_trials(tmp_path, executor):
    s = _spec(tmp_path, executor, sleep=6.0)

    def interrupt_when_a_changed_trial_runs() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            db = tmp_path / "o" / "bakeoff.sqlite"
            if db.exists():
                with open_readonly(tmp_path / "o") as store:
                    if any(t.state == "running" and t.changed for t in store.trials()) and _stub_servers(tmp_path):
                        break
            time.sleep(0.2)
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_when_a_changed_trial_runs, daemon=True).start()
    run_sweep(s, tmp_path / "o")
    first = _trials(tmp_path / "o")
    assert any(v[0] == "interrupted" for v in first.values()), first
    assert not _stub_servers(tmp_path), "Ctrl-C left a server running"
    finished_before = {k: v for k, v in first.items() if v[0] in ("crashed", "skipped")}
    assert finished_before["mode=good,other=a"][0] == "crashed"  # the baseline had finished

    run_sweep(s, tmp_path / "o")  # the same spec: an edited one would make every trial stale
    again = _trials(tmp_path / "o")
    assert all(v[0] in ("crashed", "skipped") for v in again.values()), again
    for k, v in finished_before.items():
        assert again[k] == v, f"{k} ran again"


@pytest.mark.parametrize("executor", EXECUTORS)
def test_two_host_failures_in_a_row_stop_the_sweep(tmp_path, executor):
    if executor == "local":  # an SSH host with nothing listening: the host fails, not the configuration
        s = _spec(tmp_path, executor, host={"kind": "ssh", "address": "127.0.0.1", "port": 1, "connect_timeout": 2})
    else:  # a trial that needs more GPUs than the cluster has: Ray cannot place it
        s = _spec(tmp_path, executor, ray={"num_gpus": 8})
    run_sweep(s, tmp_path / "o")
    with open_readonly(tmp_path / "o") as store:
        trials = store.current()
        why = store.meta("stop_reason")
    # two trials in a row failed for the host, not the configuration: the rest stay pending for the next run
    got = [t.verdict for t in trials]
    assert got[:2] == ["infra_error", "infra_error"] and not any(t.is_finished() for t in trials), got
    assert why == "host_failed"
