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
from typing import Any, Callable, Iterator

import psutil

from bakeoff.report import markdown as report
from bakeoff.errors import BakeoffError, InfraError, SpecError
from bakeoff.run.executors import Recorder, run_detached
from bakeoff.run.fingerprint import for_spec as fingerprint_for
from bakeoff.run.hosts.base import Host
from bakeoff.run.hosts.local import TAG_ENV
from bakeoff.plan import Planned, make_plan, pruned_by
from bakeoff.spec import RayOptions, Spec
from bakeoff.store import Store, TrialRecord
from bakeoff.pipeline import (Events, StopFlag, _judge_speed, _learn, make_host, planned_records, recover_orphans,
                           remember_secrets)

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
    done = run_detached(spec, planned, rec, log_root, spec.model.resolve(), baseline_probes, recorder, progress=progress)
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


# -- the driver ----------------------------------------------------------------------------
def run_sweep_ray(spec: Spec, out_dir: Path, *, events: Events | None = None,
                  known_bad: dict[tuple[str, str], str] | None = None) -> Path:
    """``bakeoff run --executor ray``: same plan, store, verdicts and report as the local executor."""
    if ray is None:
        raise SpecError("executor 'ray' needs the ray package: pip install 'ray==2.60.0'")
    if spec.host.get("kind", "local") != "local":
        raise SpecError("executor 'ray' runs each trial on a Ray node: host.kind must be 'local'")
    events = events or Events()
    out_dir = Path(out_dir).resolve()
    remember_secrets(spec)
    model_path = spec.model.resolve()
    plan = make_plan(spec)
    if spec.server.port:
        events.note(f"server.port = {spec.server.port} is fixed: parallel trials on one node will collide; set 0")
    with Store(out_dir, lock=True) as store:
        store.init_sweep(spec.name, spec.model_dump(mode="json"), fingerprint_for(spec))
        host = make_host(spec)
        recover_orphans(store, host, events)
        store.add_trials(planned_records(spec, plan, model_path))
        bad: dict[tuple[str, str], str] = dict(known_bad or {})
        for rec in store.trials():
            _learn(rec, bad)
        with connected(spec.ray):
            stop = StopFlag()
            dispatcher = _Dispatcher(spec, plan, store, host, out_dir, events, bad, dict(known_bad or {}), stop.stopped.is_set)
            stop.on_hard_stop = dispatcher.kill_now  # second Ctrl-C
            with stop:
                dispatcher.run()
        report.write(out_dir, store)
        if stop.stopped.is_set():
            events.note("interrupted: the report shows what finished; `bakeoff run` again resumes")
    return out_dir / "report.md"


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


class _Dispatcher:
    def __init__(self, spec: Spec, plan: list[Planned], store: Store, host: Host, out_dir: Path, events: Events,
                 bad: dict, known_bad: dict, should_stop: Callable[[], bool]) -> None:
        self.spec, self.plan, self.store, self.host, self.dir = spec, plan, store, host, out_dir
        self.events, self.bad, self.known_bad, self.should_stop = events, bad, known_bad, should_stop
        self.task = ray.remote(_trial_task)
        self.board = ray.remote(num_cpus=0)(_Board).remote()
        self.running: dict[Any, tuple[Planned, int, dict]] = {}  # ref -> (trial, token, resources it holds)
        self.queue: list[Planned] = []  # dispatched only when they fit: pruning still sees them
        self.info: dict[int, dict] = {}  # token -> what its worker posted
        self.announced: set[int] = set()
        self.deaths: dict[str, int] = {}
        self.cancelled: dict[str, str] = {}  # key -> why it was pruned while queued
        self.next_token = 0
        self.hostname = socket.gethostname()
        self.local_cluster = spec.ray.address == "local"

    def run(self) -> None:
        """The baseline alone (later trials compare against it), then the rest in parallel."""
        try:
            base = self.plan[0]
            if not self.store.get(base.key).is_finished():
                self._submit(base)
                self._drain()
            self.queue = [p for p in self.plan[1:] if not self.store.get(p.key).is_finished()]
            self._drain()
        finally:
            self._stop_all("stopped by Ctrl-C" if self.should_stop() else "sweep aborted")
            try:
                ray.kill(self.board)
            except ray.exceptions.RayError:
                pass

    # -- dispatch ----------------------------------------------------------------------------
    def _submit(self, p: Planned) -> None:
        rec = self.store.get(p.key)
        res = trial_resources(rec, self.spec.ray)
        missing = self._infeasible(res)
        if missing:
            self._finish(rec.with_(state="finished", verdict="infra_error", cause="no_resources", detail=missing,
                                   finished=time.time()))
            return
        token, self.next_token = self.next_token, self.next_token + 1
        ref = self.task.options(**res, max_retries=0, name=f"bakeoff-trial-{p.idx}").remote(
            self.spec, p, rec, str(self.dir), self._baseline_probes(p), self.board, token, self.hostname)
        self.running[ref] = (p, token, _need(res))

    def _top_up(self) -> None:
        """Dispatch queued trials while they fit in the cluster next to the running ones.

        Holding the rest here (not in Ray's queue) lets a result that just arrived prune a
        trial before Ray would start it on the freed CPU.
        """
        while self.queue and not self.should_stop():
            p = self.queue[0]
            if self._skip_if_pruned(p):
                self.queue.pop(0)
                continue
            if self.running and not self._fits(_need(trial_resources(self.store.get(p.key), self.spec.ray))):
                return
            self._submit(self.queue.pop(0))

    def _fits(self, need: dict[str, float]) -> bool:
        total = ray.cluster_resources()
        used: dict[str, float] = {}
        for _, _, held in self.running.values():
            for k, v in held.items():
                used[k] = used.get(k, 0) + v
        return all(used.get(k, 0) + v <= total.get(k, 0) + 1e-9 for k, v in need.items() if v)

    def _infeasible(self, res: dict) -> str | None:
        if not self.local_cluster:
            return None  # an autoscaling cluster may still add the node
        total = ray.cluster_resources()
        need = _need(res)
        short = [f"{k}={v:g} (cluster has {total.get(k, 0):g})" for k, v in need.items() if v and v > total.get(k, 0)]
        return "the local Ray cluster cannot fit this trial: needs " + ", ".join(short) if short else None

    def _baseline_probes(self, p: Planned) -> dict | None:
        base = self.store.get(self.plan[0].key)
        if not p.changed or base is None or base.verdict not in ("ok", "slow"):
            return None
        return self.store.artifact(base.key, "probes")

    def _skip_if_pruned(self, p: Planned) -> bool:
        why = pruned_by(p, self.bad, self.spec.plan.force) if self.spec.plan.prune else None
        if not why:
            return False
        self._skip(self.store.get(p.key), why)
        return True

    def _skip(self, rec: TrialRecord, why: str) -> None:
        cause = "known_bad" if why in self.known_bad.values() else "pruned"
        self._finish(rec.with_(state="finished", verdict="skipped", cause=cause, detail=why))

    def _finish(self, rec: TrialRecord) -> None:
        self.store.save(rec)
        self.events.trial_end(rec)

    # -- results -----------------------------------------------------------------------------
    def _drain(self) -> None:
        """Save results as trials end, until none is in flight or the user pressed Ctrl-C."""
        while (self.queue or self.running) and not self.should_stop():
            self._top_up()
            if not self.running:
                continue
            ready, _ = ray.wait(list(self.running), num_returns=1, timeout=POLL_S)
            self._poll_board()
            for ref in ready:
                self._collect(ref)

    def _poll_board(self) -> None:
        try:
            self.info = ray.get(self.board.snapshot.remote(), timeout=10)
        except (ray.exceptions.RayError, TimeoutError):
            return
        for p, token, _ in list(self.running.values()):
            i = self.info.get(token)
            if not i:
                continue
            if token not in self.announced:
                self.announced.add(token)
                self.events.trial_start(p, len(self.plan))
            rec = self.store.get(p.key)
            if i.get("pid") and rec.pid != i["pid"]:  # a killed driver's resume can stop this server
                self.store.save(rec.with_(state="running", pid=i["pid"], pgid=i["pgid"], argv0=i["argv0"], port=i["port"],
                                          log_path=i["log_path"], attempts=i["attempts"], started=i["started"],
                                          verdict=None))
            if i.get("phase") and i.get("shown") != i["phase"]:
                i["shown"] = i["phase"]
                self.events.phase(i["phase"], f"[trial {p.idx}] {i.get('line') or ''}")

    def _collect(self, ref: Any) -> None:
        p, token, _ = self.running.pop(ref)
        rec = self.store.get(p.key)
        try:
            out = ray.get(ref)
        except ray.exceptions.TaskCancelledError:
            self._stop_server(token, p)
            self._skip(rec, self.cancelled.get(p.key, "cancelled"))
            return
        except ray.exceptions.OutOfMemoryError as err:
            self._worker_died(p, token, rec, err, "worker_oom")
            return
        except _worker_died_errors() as err:
            self._worker_died(p, token, rec, err, "worker_died")
            return
        except ray.exceptions.RayTaskError as err:
            self._stop_server(token, p)
            if not isinstance(err.cause, BakeoffError):
                raise  # a bug in bakeoff itself
            self._finish(rec.with_(state="finished", verdict="infra_error", cause="node_setup", detail=str(err.cause),
                                   finished=time.time()))
            return
        done = TrialRecord(**out["record"])
        for name, data in out["artifacts"].items():
            self.store.put_artifact(p.key, name, data)
        if "log_tail" in out and done.log_path:
            local_log = self.dir / "logs" / Path(done.log_path).name
            local_log.parent.mkdir(parents=True, exist_ok=True)
            local_log.write_text(out["log_tail"], encoding="utf-8")
            done = done.with_(log_path=str(local_log))
        done = _judge_speed(done, self.store, self.plan, self.spec)
        self._finish(done)
        before = len(self.bad)
        _learn(done, self.bad)
        if len(self.bad) > before:
            self._cancel_pruned()

    def _cancel_pruned(self) -> None:
        """A new hard incompatibility: cancel queued trials that contain the condemned value."""
        self._poll_board()
        for ref, (p, token, _) in list(self.running.items()):
            why = pruned_by(p, self.bad, self.spec.plan.force) if self.spec.plan.prune else None
            if why and token not in self.info:  # not started yet
                self.cancelled[p.key] = why
                ray.cancel(ref)

    def _worker_died(self, p: Planned, token: int, rec: TrialRecord, err: Exception, cause: str) -> None:
        """Stop the dead worker's server; re-run the trial, or record an infrastructure failure."""
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
            self._submit(p)
            return
        self._finish(base.with_(state="finished", verdict="infra_error", cause=cause, finished=time.time(),
                                detail=f"the Ray worker running this trial died {n} time(s) ({type(err).__name__}); "
                                       f"not a verdict on the configuration",
                                evidence=[first[:300]]))

    def kill_now(self) -> None:
        """Second Ctrl-C: SIGKILL every server of this sweep on this machine, without waiting."""
        for pid in tagged_servers(self.dir):
            for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
                try:
                    kill()
                except OSError:
                    pass

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
            waiter = getattr(self.host, "wait_port_free", None)
            if waiter and i.get("port"):
                waiter(i["port"])
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
        for ref, (p, token, _) in self.running.items():
            ray.cancel(ref, force=token in self.info)
        ray.wait(list(self.running), num_returns=len(self.running), timeout=15)
        self._poll_board()
        for ref, (p, token, _) in self.running.items():
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
