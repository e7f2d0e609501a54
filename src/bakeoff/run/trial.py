"""One trial's lifecycle: launch -> wait_ready -> probe -> bench -> teardown (always).

Each step is a method whose docstring says what it promises. A configuration that fails is a
result, not an exception: ``run`` returns a finished record for every outcome except bugs.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import httpx

from bakeoff import measure
from bakeoff import progress
from bakeoff.measure import bench
from bakeoff.measure.power import EnergyMeter
from bakeoff.judge import lmeval, probes
from bakeoff.judge.checks import drift as drift_check
from bakeoff.judge.checks import sampled as sampled_path
from bakeoff.run.engines.base import Engine, LaunchContext
from bakeoff.errors import InfraError, LaunchError
from bakeoff.run.hosts.base import Handle, Host, PathEdit
from bakeoff.plan import Planned, axis_env_and_args, model_of
from bakeoff.measure.client import auth_headers, use_api_key_env
from bakeoff.redact import redact_env, redact_obj, redact_text, remember, remember_argv
from bakeoff.spec import Spec
from bakeoff.store import Store, TrialRecord
from bakeoff.judge.triage import Diagnosis, classify

Progress = Callable[[str, str], None]  # (phase, last log line)


class Interrupted(Exception):
    """Raised inside a trial when the user pressed Ctrl-C; the trial is saved as interrupted."""


@dataclass
class Launch:
    argv: list[str]
    env: dict[str, str]
    port: int


@dataclass
class ReadyOutcome:
    ready: bool
    phases: dict[str, float] = field(default_factory=dict)
    exit_code: int | None = None
    timed_out: bool = False
    hung: bool = False
    last_line: str = ""
    server_said: str = ""  # the last non-200 health answer (status and body), e.g. "GET /health -> 503 Loading model"
    why: str = ""  # how it failed, when the flags above do not say it (a generation that never returned)


def build_launch(spec: Spec, engine: Engine, planned: Planned, port: int, model_path: str) -> Launch:
    """The exact argv and env of one configuration (what `bakeoff plan` prints)."""
    axis_args, axis_env = axis_env_and_args(spec, planned.config)
    model_path = model_of(spec, planned.config, model_path)
    ctx = LaunchContext(model=model_path, host=spec.server.host, port=port, args=list(spec.server.args),
                        axis_args=axis_args, served_model_name=spec.model.name)
    edits = {k: PathEdit(k, before, after) for k, (before, after) in spec.server.path_edits().items()}
    # an engine's env needs; the spec wins
    env = {**engine.default_env(ctx), **spec.server.env, **edits, **axis_env}
    return Launch(engine.command(ctx), env, port)


def deploy_port(spec: Spec, engine: Engine) -> int:
    """The port of the command to deploy: the spec's ``server.port``, else the engine's own
    default. Never the free port a trial happened to run on."""
    return spec.server.port or engine.default_port


def deploy_launch(spec: Spec, engine: Engine, planned: Planned, model_path: str) -> Launch:
    """The argv and env to deploy this configuration with: the trial's launch on the user's port
    (what `bakeoff plan`, the store and every recommendation show)."""
    return build_launch(spec, engine, planned, deploy_port(spec, engine), model_path)


class TrialRunner:
    def __init__(self, spec: Spec, engine: Engine, host: Host, store: Store, sweep_dir: Path,
                 model_path: str, progress: Progress | None = None, should_stop: Callable[[], bool] = lambda: False) -> None:
        self.spec, self.engine, self.host, self.store = spec, engine, host, store
        self.dir = Path(sweep_dir)
        self.model_path = model_path
        self.progress = progress or (lambda phase, line: None)
        self.should_stop = should_stop
        self._current: Handle | None = None
        self.energy: dict | None = None  # GPU energy and memory during the last bench (NVML), when measurable
        use_api_key_env(spec.server.api_key_env)  # here too: a Ray worker runs trials in its own process

    def abort_current(self) -> None:
        """Ctrl-C: stop the running trial's server now (from a thread, so the signal handler
        returns at once); probe/bench then fail fast and ``run`` saves the trial as interrupted."""
        handle = self._current
        if handle is not None:
            threading.Thread(target=self.host.stop, args=(handle, 5.0), name="abort-trial", daemon=True).start()

    # -- the steps ---------------------------------------------------------------------------
    def launch(self, rec: TrialRecord, planned: Planned) -> tuple[TrialRecord, Handle, Launch]:
        """Start the server; its pid and process group are in the store before we wait on it."""
        port = self.spec.server.port or self.host.free_port()
        launch = build_launch(self.spec, self.engine, planned, port, self.model_path)
        remember(launch.env)
        remember_argv(launch.argv)
        log_path = self.dir / "logs" / f"{planned.idx:03d}-{planned.key}.log"
        self.progress("launch", " ".join(launch.argv[:3]))
        handle = self.host.start(launch.argv, launch.env, log_path)
        # the store keeps the command to deploy (the user's port); the port this trial ran on is rec.port
        deploy = deploy_launch(self.spec, self.engine, planned, self.model_path)
        rec = rec.with_(state="running", argv=redact_obj(deploy.argv), env=redact_env(deploy.env), log_path=str(log_path),
                        pid=handle.pid, pgid=handle.pgid, port=port, argv0=launch.argv[0], started=time.time(),
                        attempts=rec.attempts + 1, verdict=None, cause=None, detail=None)
        self.store.save(rec)
        return rec, handle, launch

    def wait_ready(self, handle: Handle, port: int) -> ReadyOutcome:
        """Poll until every health path answers 200 and then one real generation (one token)
        answers: ready means it serves, not only that its health says so. While that generation
        is pending the log is still watched: a server whose health is fine and whose generation
        does not return while its log stays silent for ``hang_timeout_s`` is a ``hang`` (one still
        logging, compiling kernels on its first request say, is given up to ``startup_timeout_s``).
        Returns at once when the process exits, when the log is silent for ``hang_timeout_s``,
        or at ``startup_timeout_s``."""
        srv = self.spec.server
        t0 = time.monotonic()
        last_change = t0
        last_size = -1
        phases: dict[str, float] = {}
        seen_lines = 0
        last_line = ""
        said = ""
        generation: _Pending | None = None  # the one-token request, once health said 200
        base = f"http://{self._client_host()}:{port}"
        with httpx.Client(timeout=2.0, headers=auth_headers()) as client:
            while True:
                if self.should_stop():
                    raise Interrupted()
                now = time.monotonic()
                text = self.host.read_log(handle)
                if len(text) != last_size:
                    last_size, last_change = len(text), now
                    lines = text.splitlines()
                    for line in lines[seen_lines:]:
                        name = self.engine.phase_of(line)
                        if name and name not in phases:
                            phases[name] = round(now - t0, 3)
                    seen_lines = len(lines)
                    if lines:
                        last_line = lines[-1][-200:]
                        self.progress("starting", last_line)
                code = self.host.exit_code(handle)
                if code is not None:
                    return ReadyOutcome(False, phases, exit_code=code, last_line=last_line, server_said=said)
                if generation is None:
                    healthy, answer = self._healthy(client, base)
                    said = answer or said
                    if healthy:
                        generation = _Pending(self._first_generation, base)
                        last_change = max(last_change, time.monotonic())  # the generation's own time starts now
                elif generation.done.is_set():
                    if generation.result:
                        phases["ready"] = round(time.monotonic() - t0, 3)
                        return ReadyOutcome(True, phases, last_line=last_line)
                    generation = None  # the connection failed: the server is going, or health says more
                waiting = (f"its health answered 200, but a one-token generation "
                           f"({self._generation_request()[0]}) has not returned" if generation is not None else "")
                if now - t0 > srv.startup_timeout_s:
                    return ReadyOutcome(False, phases, timed_out=True, last_line=last_line, server_said=said,
                                        why=waiting and f"{waiting} after {srv.startup_timeout_s:g}s")
                if now - last_change > srv.hang_timeout_s:
                    return ReadyOutcome(False, phases, hung=True, last_line=last_line, server_said=said,
                                        why=waiting and f"{waiting}, and no new log line for {srv.hang_timeout_s:g}s")
                time.sleep(0.25)

    def probe(self, base_url: str, baseline: dict | None, role: str = "trial",
              lm_eval_dir: Path | None = None, changed: list[str] = ()) -> tuple[probes.ProbeOutcome, dict]:
        """Run the probe set in every mode (the benchmark's shape included) and judge it: the
        absolute floors always, the baseline's answers when given (teacher-forcing the trial on
        them after each near-tie), the sampled path when an axis may change sampling
        (``probes.sampled``). ``role`` ``baseline``: floors failing is ``baseline_below_floor``.
        ``changed``: the trial's changed axes (a lossy one's drift is said, not failed).
        When those pass and the spec has ``[probes.lm_eval]``, lm_eval runs its tasks too (its
        files in ``lm_eval_dir``) and the judgement includes its gate; lm_eval failing to run
        raises LmEvalError (an infrastructure fault, not a verdict)."""
        self.progress("probe", "")
        cfg = self.spec.probes
        with progress.reporting(lambda line: self.progress("probe", line)):
            collected = probes.run_probes(base_url, cfg, model=self._request_model(),
                                          ctx_size=_ctx_size(self.spec.server.args), timeout_s=self.spec.server.request_timeout_s,
                                          expect_logprobs=self.engine.supports_logprobs, bench=self.spec.bench, baseline=baseline,
                                          thinking=self.spec.server.thinking, thinking_room=self.spec.server.thinking_room,
                                          templated_prompt=self.engine.templated_prompt,
                                          sampled=sampled_path.wanted(cfg.sampled, self.spec.engine, self.spec.axes))
        lossy = drift_check.lossy_axes(self.spec.engine, self.spec.axes, changed)
        outcome = probes.judge(collected, cfg, baseline, expect_logprobs=self.engine.supports_logprobs, role=role, lossy=lossy)
        if outcome.passed and cfg.lm_eval is not None:
            self.progress("lm_eval", ", ".join(cfg.lm_eval.tasks))
            collected["lm_eval"] = lmeval.run(cfg.lm_eval, base_url, self._request_model(), lm_eval_dir or self.dir / "lm_eval",
                                              request_timeout_s=self.spec.server.request_timeout_s, should_stop=self.should_stop)
            outcome = probes.judge(collected, cfg, baseline, expect_logprobs=self.engine.supports_logprobs, role=role,
                                   lossy=lossy)
        return outcome, collected

    def bench(self, base_url: str, baseline: dict | None = None) -> list[dict]:
        """Run the load levels; each level says whether its replies passed the detectors, whether
        it may be ranked (``valid``) and what makes the trial not ok (``fault``), judged request by
        request against the baseline's same level when given (early stops, loops)."""
        self.progress("bench", "")
        cfg = self.spec.bench
        eos = cfg.sends_ignore_eos(self.engine.supports_ignore_eos)
        with EnergyMeter(devices=_visible_gpus(self.spec.server.env)) as meter, \
                progress.reporting(lambda line: self.progress("bench", line)):
            levels = measure.run(base_url, cfg, model=self._request_model(),
                                 ignore_eos=self.engine.supports_ignore_eos, timeout_s=self.spec.server.request_timeout_s * 4,
                                 expect_logprobs=self.engine.supports_logprobs, thinking=self.spec.server.thinking)
        self.energy = meter.result(sum(lv.output_tokens for lv in levels))
        base_levels = {lv["level"]: lv for lv in ((baseline or {}).get("bench") or [])}
        return [bench.check_against_baseline(lv.to_json(), base_levels.get(lv.level), early_stop_ratio=cfg.early_stop_ratio,
                                             max_tokens=cfg.output_tokens, ignore_eos=bool(eos),
                                             early_stop_share=cfg.early_stop_share) for lv in levels]

    def teardown(self, handle: Handle, port: int) -> bool:
        """Stop the whole process tree and confirm the port is free again."""
        self.progress("teardown", "")
        self.host.stop(handle)
        free = self.host.wait_port_free(port)
        if not self.host.wait_gpu_free({handle.pid}):
            self.progress("teardown", f"GPU memory of pid {handle.pid} still held after stop")
        return free

    # -- the whole trial ---------------------------------------------------------------------
    def run(self, rec: TrialRecord, planned: Planned, baseline: dict | None) -> TrialRecord:
        """One trial, start to teardown. The host failing under it (an SSH connection lost,
        say) is an ``infra_error``, not a verdict on the configuration: it is retried on resume.
        A server the host could not stop is marked ``server_left_running``: the next run stops it."""
        try:
            rec, handle, launch = self.launch(rec, planned)
        except InfraError as err:
            return _infra_error(rec, err)
        except LaunchError as err:  # this configuration cannot start (its PATH lacks the binary...): a result
            return _not_started(rec, err)
        self._current = handle
        left_running = None
        try:
            result = self._judge(rec, handle, launch, planned, baseline)
        finally:
            self._current = None
            try:
                if not self.teardown(handle, launch.port):
                    self.progress("teardown", f"port {launch.port} still busy after stop")
            except InfraError as err:
                left_running = str(err)
                self.progress("teardown", f"could not stop the server: {err}")
        if left_running:
            result = result.with_(metrics={**result.metrics, "server_left_running": left_running})
        return result

    def _judge(self, rec: TrialRecord, handle: Handle, launch: Launch, planned: Planned, baseline: dict | None) -> TrialRecord:
        base_url = f"http://{self._client_host()}:{launch.port}"
        try:
            ready = self.wait_ready(handle, launch.port)
            if not ready.ready:
                self._check_stop()
                return self._failed_start(rec, handle, ready)
            role = "trial" if planned.changed else "baseline"
            outcome, collected = self.probe(base_url, baseline, role, self.dir / "lm_eval" / f"{planned.idx:03d}-{planned.key}",
                                            changed=planned.changed)
            self._check_stop()
            self.store.put_artifact(rec.key, "probes", probes.results_to_json(collected))
            if not outcome.passed:
                died = self._died_serving(rec, handle, ready, "probe",
                                          settle_s=3.0 if outcome.detector == "request_error" else 0.0)
                if died:
                    return died
                if outcome.detector == "request_error":
                    failed = self._failed_serving(rec, handle, ready, outcome)
                    if failed:
                        return failed
                return rec.with_(state="finished", verdict="wrong", cause=outcome.detector,
                                 detail=f"wrong in {outcome.failed_mode} mode ({outcome.detector}): {outcome.detail}",
                                 evidence=outcome.evidence or [outcome.detail], phases=ready.phases,
                                 metrics={"probe": outcome.values, "failed_mode": outcome.failed_mode,
                                          "detector": outcome.detector, "checks_not_run": outcome.checks_not_run,
                                          **({"baseline_below_floor": True} if outcome.detector == "baseline_below_floor" else {})},
                                 finished=time.time())
            levels = self.bench(base_url, baseline)
            self._check_stop()
            if role == "baseline":  # the reference reply lengths of every benchmark request
                self.store.put_artifact(rec.key, "probes", probes.results_to_json(collected, levels))
            faults = [lv for lv in levels if lv.get("fault")]
            levels = [{k: v for k, v in lv.items() if k != "replies"} for lv in levels]  # replies: the artifact only
            metrics = {"probe": outcome.values, "levels": levels, **bench.headline(levels),
                       "checks_not_run": outcome.checks_not_run}
            if self.energy:
                metrics["energy"] = self.energy
            if faults or any(lv.get("errors") for lv in levels):
                died = self._died_serving(rec, handle, ready, "bench")
                if died:
                    return died
                errored = next((lv for lv in faults if lv["fault"] == "bench_errors"), None)
                if errored:
                    failed = self._failed_serving(rec, handle, ready, probes.ProbeOutcome(
                        False, f"bench {errored['level']}", "request_error", errored["why_invalid"] or "", outcome.values))
                    if failed:
                        return failed
            if faults:
                lv = faults[0]
                mode = f"bench {lv['level']}"
                return rec.with_(state="finished", verdict="wrong", cause=lv["fault"],
                                 detail=f"wrong in {mode} mode ({lv['fault']}): {lv['why_invalid']}", evidence=[lv["why_invalid"] or ""],
                                 phases=ready.phases, metrics={**metrics, "failed_mode": mode, "detector": lv["fault"]},
                                 finished=time.time())
            # correct as far as this run can tell; speed and the baseline's health are judged in bakeoff.decide
            return rec.with_(state="finished", verdict="ok", detail=outcome.detail, phases=ready.phases,
                             metrics=metrics, finished=time.time())
        except Exception as err:
            # Ctrl-C killed the server under probe/bench, which may then fail any way it likes
            if isinstance(err, Interrupted) or self.should_stop():
                return rec.with_(state="pending", verdict="interrupted", detail="stopped by Ctrl-C; `bakeoff run` again resumes it",
                                 finished=time.time())
            if isinstance(err, InfraError):
                return _infra_error(rec, err)
            raise

    def _request_model(self) -> str | None:
        """The ``model`` field the client sends: the served name, unless the engine says
        otherwise (``transformers serve`` pinned to one model wants it omitted)."""
        return self.engine.request_model(self.spec.model.name)

    def _check_stop(self) -> None:
        if self.should_stop():
            raise Interrupted()

    def _failed_start(self, rec: TrialRecord, handle: Handle, ready: ReadyOutcome) -> TrialRecord:
        log = self.host.read_log(handle)
        diag = classify(log, exit_code=ready.exit_code, engine=self.engine.kind, rules_dir=self.spec.triage.rules,
                        timed_out=ready.timed_out, hung=ready.hung, server_said=ready.server_said or None)
        how = (ready.why if ready.why
               else f"exited with code {ready.exit_code} before ready" if ready.exit_code is not None
               else "no new log line for %ss while not ready" % self.spec.server.hang_timeout_s if ready.hung
               else "not ready after %ss" % self.spec.server.startup_timeout_s)
        return _crashed(rec, diag, ready, f"crashed at startup: {how}; {diag.explanation}", exit_code=ready.exit_code)

    def _died_serving(self, rec: TrialRecord, handle: Handle, ready: ReadyOutcome, phase: str,
                      settle_s: float = 3.0) -> TrialRecord | None:
        """After failed probes or bench requests: was it the answers, or the server (or host)
        going away under them? A dead server is a crash triaged from its log, an unreachable
        host raises InfraError; ``None`` means the server is alive and the answers stand."""
        code = self.host.exit_code(handle)
        deadline = time.monotonic() + settle_s
        while code is None and time.monotonic() < deadline:  # a dying engine may still answer errors for a moment
            time.sleep(0.25)
            code = self.host.exit_code(handle)
        if code is None:
            return None
        diag = classify(self.host.read_log(handle), exit_code=code, engine=self.engine.kind,
                        rules_dir=self.spec.triage.rules)
        return _crashed(rec, diag, ready, f"crashed while serving ({phase}): exited with code {code}; {diag.explanation}",
                        exit_code=code, failed_mode=phase)

    def _failed_serving(self, rec: TrialRecord, handle: Handle, ready: ReadyOutcome,
                        outcome: probes.ProbeOutcome) -> TrialRecord | None:
        """Requests failed while the server stayed up (HTTP 500s after its engine died, as vLLM's
        API server does after a CUDA fault): when the log names a known cause, that is the
        verdict, with the log lines; ``None`` leaves the answers to speak."""
        diag = classify(self._settled_log(handle), engine=self.engine.kind, rules_dir=self.spec.triage.rules)
        if diag.rule is None:
            return None
        return _crashed(rec, diag, ready, f"failed while serving ({outcome.failed_mode}): {outcome.detail}; the log says: {diag.explanation}",
                        extra_evidence=outcome.evidence[:2], failed_mode=outcome.failed_mode, probe=outcome.values)

    def _settled_log(self, handle: Handle, quiet_s: float = 0.3, max_s: float = 3.0) -> str:
        """The log of a live server once it stops growing: an engine logs its traceback as it
        fails the request, and that text reaches the log file a moment after the answer."""
        text = self.host.read_log(handle)
        deadline = time.monotonic() + max_s
        while time.monotonic() < deadline:
            time.sleep(quiet_s)
            again = self.host.read_log(handle)
            if again == text:
                break
            text = again
        return text

    def _healthy(self, client: httpx.Client, base: str) -> tuple[bool, str]:
        """(every health path answers 200, what a path that did not said: "GET /health -> 503
        <body>", "" while nothing answers at all)."""
        for path in self.engine.health_paths:
            try:
                r = client.get(base + path)
            except httpx.HTTPError:
                return False, ""
            if r.status_code != 200:
                body = " ".join(r.text.split())[:200]
                return False, redact_text(f"GET {path} -> {r.status_code} {body}".rstrip())
        return True, ""

    def _generation_request(self) -> tuple[str, dict]:
        """("POST /v1/chat/completions", body): the one-token request that proves a server serves."""
        if self.spec.bench.api == "completions":
            path, body = "/v1/completions", {"prompt": "Hello", "max_tokens": 1}
        else:
            path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 1}
        model = self._request_model()
        return f"POST {path}", {**body, **({"model": model} if model else {})}

    def _first_generation(self, base: str) -> bool:
        """One tiny generation (one token, not streamed): True once it answers, whatever its status
        (the probes judge what it says); False when the connection fails (the server is going).
        ``wait_ready`` gives up on it first (and the server is then stopped)."""
        what, body = self._generation_request()
        limit = self.spec.server.startup_timeout_s + 60
        try:
            with httpx.Client(headers=auth_headers(), timeout=httpx.Timeout(limit, connect=5.0)) as client:
                client.post(base + what.split(" ", 1)[1], json=body)
        except httpx.HTTPError:
            return False
        return True

    def _client_host(self) -> str:
        """Where the HTTP client connects: a remote host decides from what the server binds
        (its loopback through a tunnel, 0.0.0.0 at the host's address); here, the bind itself."""
        return self.host.client_host(self.spec.server.host)


class _Pending:
    """``fn(*args)`` running in a daemon thread (never holds bakeoff's exit): ``done`` is set when
    it returns, ``result`` is what it returned."""

    def __init__(self, fn: Callable[..., bool], *args) -> None:
        self.done = threading.Event()
        self.result = False

        def run() -> None:
            try:
                self.result = fn(*args)
            finally:
                self.done.set()

        threading.Thread(target=run, name="first-generation", daemon=True).start()


def _crashed(rec: TrialRecord, diag: Diagnosis, ready: ReadyOutcome, detail: str, *, extra_evidence: list[str] | tuple = (),
             **metrics) -> TrialRecord:
    """A ``crashed`` record from a triage diagnosis: its cause, evidence, hint and confidence."""
    return rec.with_(state="finished", verdict="crashed", cause=diag.cause, detail=detail,
                     evidence=[*diag.evidence, *extra_evidence], phases=ready.phases,
                     metrics={"hint": diag.hint, "hard": diag.hard, "confidence": diag.confidence, **metrics},
                     finished=time.time())


def _not_started(rec: TrialRecord, err: LaunchError) -> TrialRecord:
    """A configuration the host could not start at all (its binary not found on its PATH, an
    argv the host refuses): ``crashed``, cause ``launch``, with the host's reason; the sweep goes on."""
    why = redact_text(str(err))
    return rec.with_(state="finished", verdict="crashed", cause="launch", detail=f"could not start: {why}",
                     evidence=[why], metrics={"hint": "check the binary and the PATH this configuration runs with",
                                              "hard": False, "confidence": 1.0},
                     attempts=rec.attempts + 1, started=rec.started or time.time(), finished=time.time())


def _infra_error(rec: TrialRecord, err: Exception) -> TrialRecord:
    """The host (or a tool bakeoff runs, such as lm_eval: ``err.cause``) failed under the trial."""
    cause = getattr(err, "cause", "host")
    what = "the host failed" if cause == "host" else f"{cause} could not judge the trial"
    return rec.with_(state="finished", verdict="infra_error", cause=cause,
                     detail=f"{what}, not the configuration: {err}; `bakeoff run` again retries this trial",
                     evidence=[str(err), *getattr(err, "evidence", [])][:14], finished=time.time())


def _visible_gpus(env: dict[str, str]) -> list[int] | None:
    """The GPU indices a server sees (CUDA_VISIBLE_DEVICES as numbers), else None (all)."""
    ids = env.get("CUDA_VISIBLE_DEVICES")
    if ids is None or not all(x.strip().isdigit() for x in ids.split(",") if x.strip()):
        return None
    return [int(x) for x in ids.split(",") if x.strip()]


def _ctx_size(args: list[str]) -> int | None:
    for flag in ("--ctx-size", "-c", "--max-model-len", "--context-length", "--max_seq_len"):
        if flag in args:
            i = args.index(flag)
            if i + 1 < len(args) and args[i + 1].isdigit():
                return int(args[i + 1])
    return None
