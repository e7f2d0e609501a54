"""The Ray executor: each trial is a Ray task reserving its own CPUs, GPUs and custom resources.

The driver keeps the plan and the SQLite store; a worker runs the same TrialRunner with a
:class:`~bakeoff.run.executors.Recorder` and sends the finished record back. The steps:
connect -> the baseline alone -> the rest in parallel, each result saved as it arrives, and a
hard incompatibility cancelling the not-yet-started trials that contain it -> report.

A trial whose worker or node died is re-run up to ``[ray] max_retries`` times, then recorded as
``infra_error`` (never ``wrong``). Workers post the server's pid and process group to a small
actor (the board) right after launch, so the driver can stop what a dead worker left behind.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import signal
import socket
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import psutil

from bakeoff.errors import BakeoffError, InfraError, SpecError
from bakeoff.plan import Planned
from bakeoff.run.executors.base import Context, Executor, Job, Recorder, run_job, runner_for
from bakeoff.run.hosts import get_host
from bakeoff.run.hosts.local import TAG_ENV
from bakeoff.spec import RayOptions, Spec
from bakeoff.store import TrialRecord

try:
    import ray
except ImportError:  # pragma: no cover - exercised only without ray installed
    ray = None

TP_FLAGS = ("--tp", "-tp", "--tp-size", "--tp_size", "--tensor-parallel-size", "--tensor_parallel_size")
PP_FLAGS = ("--pp", "-pp", "--pp-size", "--pp_size", "--pipeline-parallel-size", "--pipeline_parallel_size")
LOG_TAIL_CHARS = 200_000
POLL_S = 0.5


# -- resources and placement ---------------------------------------------------------------
def gpus_for(argv: list[str], opts: RayOptions) -> float:
    """GPUs one trial reserves: ``[ray] num_gpus`` if set, else tp * pp read from its argv."""
    if opts.num_gpus is not None:
        return opts.num_gpus
    tp, pp = _int_flag(argv, TP_FLAGS), _int_flag(argv, PP_FLAGS)
    if tp is None and pp is None:
        return 0
    return (tp or 1) * (pp or 1)


def _int_flag(argv: list[str], flags: tuple[str, ...]) -> int | None:
    for i, a in enumerate(argv):
        name, eq, val = a.partition("=")
        if name in flags:
            val = val if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            if val.isdigit():
                return int(val)
    return None


def placement_env(gpu_ids: list, spec: Spec) -> dict[str, str]:
    """The env a trial's server needs to see only its own GPUs.

    NVLink multicast (NCCL_NVLS_ENABLE) is off unless the spec sets it: on shared H200 hosts it
    fails at NCCL init.
    """
    if not gpu_ids:
        return {}
    env = {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpu_ids)}
    spec_env = set(spec.server.env) | {a.env for a in spec.axes if a.env}
    if "NCCL_NVLS_ENABLE" not in spec_env:
        env["NCCL_NVLS_ENABLE"] = "0"
    return env


def trial_resources(rec: TrialRecord, opts: RayOptions) -> dict[str, Any]:
    return {"num_cpus": opts.num_cpus, "num_gpus": gpus_for(rec.argv, opts), "resources": dict(opts.resources)}


# -- what runs on a worker -----------------------------------------------------------------
class _Board:
    """Workers post here what they started: worker pid, node, server pid/pgid, phase."""

    def __init__(self) -> None:
        self.info: dict[int, dict] = {}

    def update(self, token: int, info: dict) -> None:
        self.info.setdefault(token, {}).update(info)

    def snapshot(self) -> dict[int, dict]:
        return self.info


def _trial_task(spec: Spec, planned: Planned, rec: TrialRecord, sweep_dir: str, baseline_probes: dict | None,
                board: Any, token: int, driver_host: str) -> dict:
    """One trial on a Ray worker. Never touches the driver's store; returns the record as a dict."""
    me = {"worker_pid": os.getpid(), "hostname": socket.gethostname(), "node_id": ray.get_runtime_context().get_node_id()}
    same_machine = me["hostname"] == driver_host
    log_root = Path(sweep_dir) if same_machine else Path(tempfile.mkdtemp(prefix="bakeoff-"))
    env = placement_env(ray.get_gpu_ids(), spec)
    if env:
        spec = spec.model_copy(update={"server": spec.server.model_copy(update={"env": {**spec.server.env, **env}})})
    ray.get(board.update.remote(token, {**me, "state": "started"}))

    def on_save(r: TrialRecord) -> None:  # after launch: what to stop if this worker dies
        ray.get(board.update.remote(token, {"state": "running", "pid": r.pid, "pgid": r.pgid, "argv0": r.argv0,
                                            "port": r.port, "log_path": r.log_path, "attempts": r.attempts,
                                            "started": r.started}))

    last_phase: list[str] = []

    def progress(phase: str, line: str) -> None:
        if not last_phase or last_phase[-1] != phase:
            last_phase.append(phase)
            board.update.remote(token, {"phase": phase, "line": line})

    recorder = Recorder(on_save)
    host = get_host(spec.host)
    host.max_log_bytes = spec.server.max_log_bytes
    runner = runner_for(spec, host, recorder, log_root, spec.model.resolve(), progress=progress)
    done = run_job(runner, Job(planned, rec, baseline_probes))
    out = {"record": dataclasses.asdict(done), "artifacts": recorder.artifacts, "node": me}
    if not same_machine:
        if done.log_path and Path(done.log_path).exists():
            out["log_tail"] = Path(done.log_path).read_text(encoding="utf-8", errors="replace")[-LOG_TAIL_CHARS:]
        shutil.rmtree(log_root, ignore_errors=True)
    return out


def _need(res: dict[str, Any]) -> dict[str, float]:
    return {"CPU": res["num_cpus"], "GPU": res["num_gpus"], **res["resources"]}


def _log_name(p: Planned) -> str:
    return f"{p.idx:03d}-{p.key}.log"  # as TrialRunner.launch names it


def tagged_servers(sweep_dir: Path, log_name: str | None = None) -> list[int]:
    """Live servers of this sweep on this machine, found by the tag LocalHost puts in each
    server's env (its log path); ``log_name`` narrows it to one trial."""
    root = os.path.realpath(sweep_dir) + os.sep
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            tag = proc.environ().get(TAG_ENV)
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except (psutil.Error, OSError):
            continue
        if tag and tag.startswith(root) and (log_name is None or os.path.basename(tag) == log_name):
            found.append(proc.pid)
    return found


def _kill_task(pid: int, pgid: int, argv0: str | None) -> bool:
    from bakeoff.run.hosts.local import LocalHost

    return LocalHost().kill_orphan(pid, pgid, argv0)


# -- the executor --------------------------------------------------------------------------
@contextmanager
def connected(opts: RayOptions) -> Iterator[None]:
    """Use the running Ray (tests, notebooks), else join ``address`` or start a local cluster."""
    if ray.is_initialized():
        yield
        return
    try:
        if opts.address == "local":
            ray.init(num_cpus=opts.local_num_cpus or os.cpu_count(), num_gpus=opts.local_num_gpus,
                     include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
        else:
            ray.init(address=opts.address, log_to_driver=False, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise InfraError(f"ray: cannot connect to {opts.address!r}: {err}") from None
    try:
        yield
    finally:
        ray.shutdown()


def _worker_died_errors() -> tuple[type, ...]:
    e = ray.exceptions
    return (e.WorkerCrashedError, e.NodeDiedError, e.RayActorError, e.OwnerDiedError,
            e.LocalRayletDiedError, e.ObjectLostError)


class RayExecutor(Executor):
    """Trials as Ray tasks, as many at once as their resources fit in the cluster."""

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        if ray is None:
            from bakeoff.errors import MissingExtra

            raise MissingExtra("executor 'ray'", "ray", "ray")
        spec = ctx.spec
        if spec.host.get("kind", "local") != "local":
            raise SpecError("executor 'ray' runs each trial on a Ray node: host.kind must be 'local'")
        if spec.server.port:
            ctx.events.note(f"server.port = {spec.server.port} is fixed: parallel trials on one node will collide; set 0")
        self.spec, self.store, self.host, self.dir, self.events = spec, ctx.store, ctx.host, ctx.out_dir, ctx.events
        self.should_stop = ctx.should_stop
        self.running: dict[Any, tuple[Job, int, dict]] = {}  # ref -> (job, token, resources it holds)
        self.queue: list[Job] = []  # submitted but not yet fitting next to the running ones
        self.ended: list[TrialRecord] = []  # ended without running (no resources)
        self.info: dict[int, dict] = {}  # token -> what its worker posted
        self.announced: set[int] = set()
        self.deaths: dict[str, int] = {}
        self.next_token = 0
        self.hostname = socket.gethostname()
        self.local_cluster = spec.ray.address == "local"
        self._conn = connected(spec.ray)

    def __enter__(self) -> "RayExecutor":
        self._conn.__enter__()
        self.task = ray.remote(_trial_task)
        self.board = ray.remote(num_cpus=0)(_Board).remote()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._stop_all("stopped by Ctrl-C" if self.should_stop() else "sweep aborted")
            try:
                ray.kill(self.board)
            except ray.exceptions.RayError:
                pass
        finally:
            self._conn.__exit__(*exc)

    # -- the contract ----------------------------------------------------------------------
    def capacity(self) -> int:
        """How many more trials of the baseline's size fit next to the running ones (at least
        one when nothing runs: a trial larger than the cluster is reported, not starved)."""
        if self.queue:
            return 0
        need = _need(trial_resources(self.store.get(self._base_key()) or self._any_record(), self.spec.ray))
        free = self._free()
        fits = [int(free.get(k, 0) // v) for k, v in need.items() if v]
        n = min(fits) if fits else 64
        return max(n, 0 if self.running else 1)

    def submit(self, job: Job) -> None:
        self.queue.append(job)
        self._top_up()

    def wait(self) -> list[TrialRecord]:
        """Records of trials that ended; a worker that died is re-run (``[ray] max_retries``)."""
        done, self.ended = self.ended, []
        while not done and (self.running or self.queue) and not self.should_stop():
            self._top_up()
            if not self.running:
                continue
            ready, _ = ray.wait(list(self.running), num_returns=1, timeout=POLL_S)
            self._poll_board()
            for ref in ready:
                rec = self._collect(ref)
                if rec is not None:
                    done.append(rec)
        return done

    def kill_now(self) -> None:
        """Second Ctrl-C: SIGKILL every server of this sweep on this machine, without waiting."""
        for pid in tagged_servers(self.dir):
            for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
                try:
                    kill()
                except OSError:
                    pass

    # -- dispatch ----------------------------------------------------------------------------
    def _base_key(self) -> str:
        from bakeoff.plan import config_key

        return config_key(self.spec.baseline_config())

    def _any_record(self) -> TrialRecord:
        return self.queue[0].record if self.queue else next(iter(self.running.values()))[0].record

    def _start(self, job: Job) -> TrialRecord | None:
        rec = job.record
        res = trial_resources(rec, self.spec.ray)
        missing = self._infeasible(res)
        if missing:
            return rec.with_(state="finished", verdict="infra_error", cause="no_resources", detail=missing,
                             finished=time.time())
        token, self.next_token = self.next_token, self.next_token + 1
        ref = self.task.options(**res, max_retries=0, name=f"bakeoff-trial-{job.planned.idx}").remote(
            self.spec, job.planned, rec, str(self.dir), job.baseline_probes, self.board, token, self.hostname)
        self.running[ref] = (job, token, _need(res))
        return None

    def _top_up(self) -> None:
        """Start queued trials while they fit in the cluster next to the running ones."""
        while self.queue and not self.should_stop():
            job = self.queue[0]
            if self.running and not self._fits(_need(trial_resources(job.record, self.spec.ray))):
                return
            self.queue.pop(0)
            failed = self._start(job)
            if failed is not None:
                self.ended.append(failed)

    def _free(self) -> dict[str, float]:
        total = dict(ray.cluster_resources())
        for _, _, held in self.running.values():
            for k, v in held.items():
                total[k] = total.get(k, 0) - v
        return total

    def _fits(self, need: dict[str, float]) -> bool:
        free = self._free()
        return all(v <= free.get(k, 0) + 1e-9 for k, v in need.items() if v)

    def _infeasible(self, res: dict) -> str | None:
        if not self.local_cluster:
            return None  # an autoscaling cluster may still add the node
        total = ray.cluster_resources()
        need = _need(res)
        short = [f"{k}={v:g} (cluster has {total.get(k, 0):g})" for k, v in need.items() if v and v > total.get(k, 0)]
        return "the local Ray cluster cannot fit this trial: needs " + ", ".join(short) if short else None

    # -- results -----------------------------------------------------------------------------
    def _poll_board(self) -> None:
        try:
            self.info = ray.get(self.board.snapshot.remote(), timeout=10)
        except (ray.exceptions.RayError, TimeoutError):
            return
        for job, token, _ in list(self.running.values()):
            p = job.planned
            i = self.info.get(token)
            if not i:
                continue
            if token not in self.announced:
                self.announced.add(token)
                self.events.trial_start(p, len(self.store.trials()))
            rec = self.store.get(p.key)
            if i.get("pid") and rec.pid != i["pid"]:  # a killed driver's resume can stop this server
                self.store.save(rec.with_(state="running", pid=i["pid"], pgid=i["pgid"], argv0=i["argv0"], port=i["port"],
                                          log_path=i["log_path"], attempts=i["attempts"], started=i["started"],
                                          verdict=None))
            if i.get("phase") and i.get("shown") != i["phase"]:
                i["shown"] = i["phase"]
                self.events.phase(i["phase"], f"[trial {p.idx}] {i.get('line') or ''}")

    def _collect(self, ref: Any) -> TrialRecord | None:
        """The finished record of one task (artifacts saved), or None when it is re-run."""
        job, token, _ = self.running.pop(ref)
        p = job.planned
        rec = self.store.get(p.key)
        try:
            out = ray.get(ref)
        except ray.exceptions.OutOfMemoryError as err:
            return self._worker_died(job, token, rec, err, "worker_oom")
        except _worker_died_errors() as err:
            return self._worker_died(job, token, rec, err, "worker_died")
        except ray.exceptions.RayTaskError as err:
            self._stop_server(token, p)
            if not isinstance(err.cause, BakeoffError):
                raise  # a bug in bakeoff itself
            return rec.with_(state="finished", verdict="infra_error", cause="node_setup", detail=str(err.cause),
                             finished=time.time())
        done = TrialRecord(**out["record"])
        for name, data in out["artifacts"].items():
            self.store.put_artifact(p.key, name, data)
        if "log_tail" in out and done.log_path:
            local_log = self.dir / "logs" / Path(done.log_path).name
            local_log.parent.mkdir(parents=True, exist_ok=True)
            local_log.write_text(out["log_tail"], encoding="utf-8")
            done = done.with_(log_path=str(local_log))
        return done

    def _worker_died(self, job: Job, token: int, rec: TrialRecord, err: Exception, cause: str) -> TrialRecord | None:
        """Stop the dead worker's server; re-run the trial (None), or record an infrastructure failure."""
        p = job.planned
        i = self.info.get(token) or {}
        stopped = self._stop_server(token, p)
        self.deaths[p.key] = self.deaths.get(p.key, 0) + 1
        n = self.deaths[p.key]
        attempts = max(rec.attempts, i.get("attempts") or 0)
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        what = f"trial {p.idx}: Ray worker died ({type(err).__name__}), attempt {n}" + (
            f"; stopped its server (pid {i.get('pid', '?')})" if stopped else "")
        self.events.note(what)
        base = rec.with_(pid=i.get("pid", rec.pid), pgid=i.get("pgid", rec.pgid), port=i.get("port", rec.port),
                         argv0=i.get("argv0", rec.argv0), log_path=i.get("log_path", rec.log_path), attempts=attempts)
        if n <= self.spec.ray.max_retries:
            self.store.save(base.with_(state="pending", verdict=None))
            self.queue.insert(0, Job(p, self.store.get(p.key), job.baseline_probes))
            return None
        return base.with_(state="finished", verdict="infra_error", cause=cause, finished=time.time(),
                          detail=f"the Ray worker running this trial died {n} time(s) ({type(err).__name__}); "
                                 f"not a verdict on the configuration",
                          evidence=[first[:300]])

    def _stop_server(self, token: int, p: Planned | None = None) -> bool:
        """Stop the server a worker started (for a worker that died or was force-cancelled).

        On this machine the server is also found by its trial's tag in its env, in case the
        worker died between starting it and posting its pid.
        """
        i = self.info.get(token) or {}
        if i.get("hostname", self.hostname) == self.hostname and (self.local_cluster or i):
            pids = {i["pid"]: (i["pgid"] or i["pid"], i.get("argv0"))} if i.get("pid") else {}
            for pid in tagged_servers(self.dir, p and _log_name(p)):
                pids.setdefault(pid, (pid, None))
            stopped = [self.host.kill_orphan(pid, pgid, argv0) for pid, (pgid, argv0) in pids.items()]
            if i.get("port"):
                self.host.wait_port_free(i["port"])
            return any(stopped)
        if not i.get("pid"):
            return False
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        try:
            strategy = NodeAffinitySchedulingStrategy(node_id=i["node_id"], soft=False)
            kill = ray.remote(_kill_task).options(num_cpus=0, scheduling_strategy=strategy, max_retries=0)
            return ray.get(kill.remote(i["pid"], i["pgid"] or i["pid"], i.get("argv0")), timeout=60)
        except (ray.exceptions.RayError, TimeoutError):
            return False  # the node is gone, and its processes with it

    def _stop_all(self, why: str) -> None:
        """Cancel queued trials, force-cancel running ones, then stop the servers they left."""
        if not self.running:
            return
        self._poll_board()
        self.queue.clear()
        for ref, (_, token, _) in self.running.items():
            ray.cancel(ref, force=token in self.info)
        ray.wait(list(self.running), num_returns=len(self.running), timeout=15)
        self._poll_board()
        for ref, (job, token, _) in self.running.items():
            p = job.planned
            i = self.info.get(token) or {}
            if self._stop_server(token, p):
                self.events.note(f"trial {p.idx}: stopped its server (pid {i.get('pid', '?')})")
            if i.get("pid"):
                rec = self.store.get(p.key)
                self.store.save(rec.with_(state="pending", verdict="interrupted", detail=why, pid=i["pid"],
                                          pgid=i["pgid"], argv0=i["argv0"], port=i["port"], log_path=i["log_path"],
                                          attempts=max(rec.attempts, i.get("attempts") or 0), finished=time.time()))
        self.running.clear()
        for pid in tagged_servers(self.dir):  # nothing of this sweep runs now: whatever is left is an orphan
            self.host.kill_orphan(pid, pid, None)
