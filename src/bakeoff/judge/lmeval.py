"""The lm-evaluation-harness gate: ``lm_eval`` run against a trial's server, each document's
right/wrong compared with the baseline's by the exact one-sided McNemar test.

``run`` starts lm_eval as a subprocess (an argv list, never a shell string) with its
``local-chat-completions`` model pointed at the server's ``/v1/chat/completions``, the chat
template applied by the server, and ``--log_samples`` into the trial's own folder; it reads the
per-sample jsonl back into ``{task: {doc_id: [right, reply, target]}}``, which the store keeps
with the trial's probe answers (a later trial is paired with the baseline's documents).
``check`` is the judge's last check: accuracy with its Wilson interval beside the baseline's, per
task, and one paired test pooled over every task's documents (one p, no multiple testing).

lm_eval failing (not installed, crashed, no samples, a metric that is not 0/1 per document) is
``LmEvalError``, an infrastructure fault: never a pass, never ``wrong`` for the configuration.
The API key its model sends is ``[server] api_key_env``'s value, else whatever ``OPENAI_API_KEY``
holds in bakeoff's own environment, passed in its environment; no secret is put on its argv, and
its stderr is redacted.
"""

from __future__ import annotations

import ctypes
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

from bakeoff.errors import LmEvalError
from bakeoff.measure import client
from bakeoff.run.hosts.local import TAG_ENV
from bakeoff.redact import redact_text
from bakeoff.spec import LmEval
from bakeoff.judge.stats import mcnemar_worse, wilson

ENV_COMMAND = "BAKEOFF_LM_EVAL"  # a command line for lm_eval (split as a shell would), when the spec names none
VERSION = "0.4.13"               # what scripts/setup_lmeval.sh installs (and the tests run)
_SAMPLES = re.compile(r"samples_(?P<task>.+)_\d{4}-\d{2}-\d{2}T[\d.\-]+\.jsonl$")


def default_command() -> list[str]:
    """``$BAKEOFF_LM_EVAL``, else ``.venv-lmeval/bin/lm_eval`` of this checkout (made by
    ``scripts/setup_lmeval.sh``), else ``lm_eval`` on PATH."""
    if os.environ.get(ENV_COMMAND, "").strip():
        return shlex.split(os.environ[ENV_COMMAND])
    local = Path(__file__).resolve().parents[3] / ".venv-lmeval" / "bin" / "lm_eval"
    if local.exists():
        return [str(local)]
    return [shutil.which("lm_eval") or "lm_eval"]


def argv(cfg: LmEval, base_url: str, model: str | None, out_dir: Path, request_timeout_s: float) -> list[str]:
    """The exact lm_eval command line for one trial's server."""
    model_args = [f"base_url={base_url}/v1/chat/completions", *([f"model={model}"] if model else []),
                  f"num_concurrent={cfg.num_concurrent}", f"max_gen_toks={cfg.max_gen_toks}",
                  f"timeout={max(1, round(request_timeout_s))}", "tokenized_requests=False"]
    out = [*(cfg.command or default_command()), "--model", "local-chat-completions", "--model_args", ",".join(model_args),
           "--tasks", ",".join(cfg.tasks), "--limit", str(cfg.limit), "--apply_chat_template", "--log_samples",
           "--output_path", str(out_dir)]
    if cfg.include_path:
        out += ["--include_path", cfg.include_path]
    if cfg.num_fewshot is not None:
        out += ["--num_fewshot", str(cfg.num_fewshot)]
    return out + list(cfg.args)


def run(cfg: LmEval, base_url: str, model: str | None, out_dir: Path, *, request_timeout_s: float = 120,
        should_stop: Callable[[], bool] = lambda: False) -> dict:
    """Run lm_eval against a ready server; return its per-document results,
    ``{"metric", "tasks": {task: {"filter", "docs": {doc_id: [right, reply, target]}}}}``.
    Raises LmEvalError when it cannot start, fails, times out or writes nothing usable."""
    out_dir = Path(out_dir).resolve()
    if out_dir.exists():  # an earlier attempt's samples are not this one's
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    cmd = argv(cfg, base_url, model, out_dir, request_timeout_s)
    env = dict(os.environ)
    key = client.api_key()  # [server] api_key_env: what its model sends, through its environment, never its argv
    if key:
        env["OPENAI_API_KEY"] = key
    if cfg.offline:
        env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    log = out_dir / "lm_eval.log"
    env[TAG_ENV] = str(log)  # tagged like a server: a killed bakeoff's next run finds and stops it
    t0 = time.monotonic()
    with open(log, "wb") as sink:
        try:
            proc = subprocess.Popen(cmd, cwd=cfg.include_path or out_dir, env=env, stdin=subprocess.DEVNULL,
                                    stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
                                    preexec_fn=_die_with_parent)
        except OSError as err:
            raise LmEvalError(f"lm_eval could not start ({cmd[0]}: {err.strerror or err}); install it with "
                              f"`bash scripts/setup_lmeval.sh` (lm-eval {VERSION}), or name it in [probes.lm_eval] "
                              f"command or ${ENV_COMMAND}") from None
        _RUNNING[proc.pid] = proc
        try:
            while proc.poll() is None:
                if should_stop() or time.monotonic() - t0 > cfg.timeout_s:
                    stop(proc)
                    why = "stopped by Ctrl-C" if should_stop() else f"no result after timeout_s={cfg.timeout_s:g} s"
                    raise LmEvalError(f"lm_eval {why}", _tail(log))
                time.sleep(0.2)
        finally:  # any way out of here (an exception, a second Ctrl-C's SystemExit) stops it
            if proc.poll() is None:
                stop(proc, grace_s=2)
            _RUNNING.pop(proc.pid, None)
    if proc.returncode != 0:
        raise LmEvalError(f"lm_eval exited with code {proc.returncode} (log: {log})", _tail(log))
    return {"metric": cfg.metric, "seconds": round(time.monotonic() - t0, 1), "tasks": read_samples(out_dir, cfg, log)}


_RUNNING: dict[int, subprocess.Popen] = {}  # lm_eval processes running now (``kill_running``)


def stop(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """Stop lm_eval and everything it started (its own process group): SIGTERM, then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def kill_running() -> int:
    """A second Ctrl-C: SIGKILL every lm_eval running now, at once; how many there were."""
    n = 0
    for pid, proc in list(_RUNNING.items()):
        n += proc.poll() is None
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return n


def _die_with_parent() -> None:
    """lm_eval ends with bakeoff, even when bakeoff is killed (Linux prctl PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def read_samples(out_dir: Path, cfg: LmEval, log: Path | None = None) -> dict[str, dict]:
    """``{task: {"filter", "docs": {doc_id: [right, reply, target]}}}`` from lm_eval's
    ``samples_<task>_<date>.jsonl`` files under ``out_dir``; right is ``metric`` under ``filter``
    (default: the first filter the task logs), which must be 0 or 1 for each document."""
    import json

    files = sorted(p for p in Path(out_dir).rglob("samples_*.jsonl") if _SAMPLES.search(p.name))
    if not files:
        raise LmEvalError(f"lm_eval wrote no per-sample results under {out_dir}", _tail(log) if log else None)
    tasks: dict[str, dict] = {}
    for path in files:
        task = _SAMPLES.search(path.name)["task"]
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        filters = list(dict.fromkeys(r.get("filter") for r in rows))
        chosen = cfg.filter or filters[0]
        if chosen not in filters:
            raise LmEvalError(f"lm_eval task {task!r} has no filter {chosen!r} (it logs {', '.join(map(str, filters))}): "
                              "set [probes.lm_eval] filter to one of them")
        docs: dict[str, list] = {}
        for r in (r for r in rows if r.get("filter") == chosen):
            value = r.get(cfg.metric)
            if value is None:
                raise LmEvalError(f"lm_eval task {task!r} logs no metric {cfg.metric!r} per document "
                                  f"(it logs {', '.join(r.get('metrics') or [])}): set [probes.lm_eval] metric")
            if value not in (0, 1):
                raise LmEvalError(f"lm_eval task {task!r}: metric {cfg.metric!r} is {value!r} for document {r.get('doc_id')}; "
                                  "the gate needs a right/wrong (0 or 1) metric per document, such as exact_match or acc")
            reply = (r.get("resps") or [[""]])[0]
            docs[str(r["doc_id"])] = [bool(value), str(reply[0] if isinstance(reply, list) and reply else reply)[:160],
                                      str(r.get("target"))[:80]]
        tasks[task] = {"filter": chosen, "docs": docs}
    return tasks


def _tail(log: Path, lines: int = 12) -> list[str]:
    """The last lines of lm_eval's output (progress bars folded), secrets masked."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    rows = [seg.rstrip() for line in text.splitlines() for seg in line.split("\r")[-1:] if seg.strip()]
    return [redact_text(r)[:300] for r in rows[-lines:]]


# -- the judgement ------------------------------------------------------------------------


def check(mine: dict, base: dict | None, cfg: LmEval, values: dict):
    """Accuracy per task with its Wilson interval (and the baseline's, on the same documents)
    into ``values["lm_eval"]``; a trial worse than the baseline by the exact one-sided McNemar
    test over every task's documents (p < ``alpha``) fails as ``lm_eval_task``, with the lost
    documents as evidence. Documents the baseline answered otherwise on one of its relaunches
    (``base["unstable_docs"]``, from ``bakeoff.judge.checks.lm_eval``) are launch noise, not a
    reference: left out of the pairs. Returns (mode, detector, detail, evidence) or None."""
    report: dict = {"metric": mine.get("metric"), "tasks": {}}
    values["lm_eval"] = report
    pairs, lines = [], []
    for task, got in mine["tasks"].items():
        docs = got["docs"]
        k = sum(right for right, *_ in docs.values())
        row = {"filter": got["filter"], "accuracy": f"{k}/{len(docs)}", "ci95": list(wilson(k, len(docs)))}
        theirs = ((base or {}).get("tasks") or {}).get(task)
        if theirs is not None:
            shaky = set(((base or {}).get("unstable_docs") or {}).get(task) or ())  # the baseline's own launches disagree
            same = [d for d in docs if d in theirs["docs"] and d not in shaky]
            if shaky:
                row["unstable_on_baseline"] = len(shaky)
            b = [theirs["docs"][d][0] for d in same]
            t = [docs[d][0] for d in same]
            lost, gained, _ = mcnemar_worse(b, t)
            row.update(accuracy_same_docs=f"{sum(t)}/{len(same)}", baseline=f"{sum(b)}/{len(same)}",
                       ci95_baseline=list(wilson(sum(b), len(same))), lost=lost, gained=gained)
            pairs += [(task, d, theirs["docs"][d], docs[d]) for d in same]
            lines.append(f"{task} ({got['filter']}): {row['accuracy_same_docs']} {_ci(wilson(sum(t), len(same)))} "
                         f"vs baseline {row['baseline']} {_ci(row['ci95_baseline'])}")
        report["tasks"][task] = row
    if base is None or not pairs:
        return None
    lost, gained, p = mcnemar_worse([b[0] for _task, _d, b, _t in pairs], [t[0] for _task, _d, _b, t in pairs])
    report.update(lost=lost, gained=gained, p=float(f"{p:.3g}"), alpha=cfg.alpha, documents=len(pairs))
    if p >= cfg.alpha:
        return None
    shown = [f"{task} doc {d} (target {b[2]!r}): baseline {b[1][:60]!r}, trial {t[1][:60]!r}"
             for task, d, b, t in pairs if b[0] and not t[0]][:6]
    verdict = (f"over {len(pairs)} documents the trial lost {lost} the baseline got right and gained {gained}: "
               f"exact one-sided McNemar p={p:.2g} < alpha {cfg.alpha}")
    return "lm_eval", "lm_eval_task", f"lm-eval {'; '.join(lines)}; {verdict}", [*lines, verdict, *shown]


def summary(report: dict) -> str:
    """One line for a trial's detail: each task's accuracy (95 % CI) beside the baseline's."""
    parts = []
    for task, row in (report.get("tasks") or {}).items():
        text = f"lm_eval {task} {row['accuracy']} {_ci(row['ci95'])}"
        if "baseline" in row:
            text += f" vs baseline {row['baseline']} {_ci(row['ci95_baseline'])}"
        parts.append(text)
    if "p" in report:
        parts.append(f"lm_eval McNemar p={report['p']:.2g}")
    return ", ".join(parts)


def _ci(ci) -> str:
    return f"(95% CI {ci[0]:.0%}–{ci[1]:.0%})"
