"""Issue 27: triage by structure, crashes named apart from kills, user rules, and the new corpus.

The corpus under tests/data/triage_corpus/ was split (split.py) into dev and scored logs before any
rule was written; every log of both sets must get its expected cause or `unknown`, never another
cause, and the dev logs (which rules were written from) must all be named right.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bakeoff.cli import app
from bakeoff.judge.triage import classify, explain, find_cause, load_rules
from bakeoff.judge.triage import structure
from bakeoff.judge.triage.schema import RulesError

CORPUS = Path(__file__).parent / "data" / "triage_corpus"
sys.path.insert(0, str(CORPUS))
from split import split  # noqa: E402

ENGINE_OF = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llamacpp", "pytorch": "transformers"}
DEV, SCORED = split()
FRESH = sorted(p.relative_to(CORPUS).as_posix() for p in CORPUS.glob("fresh/*/*.log"))


def read_case(rel: str) -> tuple[dict, str]:
    lines = (CORPUS / rel).read_text(encoding="utf-8").split("\n")
    header, i = {}, 0
    while i < len(lines) and lines[i].startswith("# "):
        key, _, value = lines[i][2:].partition(":")
        header[key.strip()] = value.strip()
        i += 1
    return header, "\n".join(lines[i:])


def run_case(rel: str):
    header, body = read_case(rel)
    engine = ENGINE_OF.get(rel.split("/")[-2])
    code = int(header["exit_code"]) if "exit_code" in header else None
    return header, body, engine, classify(body, exit_code=code, engine=engine)


# ---------------------------------------------------------------- the corpus
def test_corpus_is_split_and_sourced():
    assert len(DEV) >= 20 and len(SCORED) >= 60
    assert not set(DEV) & set(SCORED)
    for rel in DEV + SCORED:
        header, body = read_case(rel)
        assert header["source"].startswith("https://github.com/"), rel
        assert header["expected"] and header.get("established"), rel
        assert body.strip(), rel


@pytest.mark.parametrize("rel", DEV)
def test_dev_log_is_named_right(rel):
    header, body, engine, d = run_case(rel)
    if header["expected"] == "none":
        assert find_cause(body, engine=engine) is None, d.evidence
    else:
        assert d.cause == header["expected"], d.evidence
        assert d.evidence and all(e.startswith("L") for e in d.evidence)


def test_scored_and_fresh_logs_never_get_a_wrong_cause():
    """`unknown` beats a guess: a held-out log gets its own cause or unknown (the rate is in the report)."""
    assert len(FRESH) >= 10
    wrong = []
    for rel in SCORED + FRESH:
        header, body, engine, d = run_case(rel)
        want = header["expected"]
        if want == "none":
            if find_cause(body, engine=engine) is not None:
                wrong.append(f"{rel}: a healthy log named {d.cause}")
        elif d.cause not in (want, "unknown"):
            wrong.append(f"{rel}: expected {want}, got {d.cause}")
        assert d.evidence, rel  # every verdict quotes lines, unknown too
    assert not wrong


# ---------------------------------------------------------------- signals: a crash is not a kill
@pytest.mark.parametrize("code", [-11, 139, -7, 135, -6, 134])
def test_crash_signals_are_crashes(code):
    d = classify("INFO loading\nsomething went wrong in a kernel\n", exit_code=code)
    assert d.cause == "crash"
    assert any(name in d.explanation for name in ("SIGSEGV", "SIGBUS", "SIGABRT")), d.explanation
    assert "SIGKILL" not in d.explanation and "OOM killer" not in d.explanation


@pytest.mark.parametrize("code", [-9, 137])
def test_sigkill_is_a_kill(code):
    d = classify("Loading safetensors checkpoint shards:  75% Completed | 3/4\n", exit_code=code)
    assert d.cause == "killed" and "SIGKILL" in d.explanation and "While loading the model." in d.explanation


def test_segfault_quotes_the_crashing_frame():
    log = ("[2025-02-09 TP0] Init torch distributed begin.\n"
           "Fatal Python error: Segmentation fault\n\n"
           "Current thread 0x00007f4858f86740 (most recent call first):\n"
           '  File "/x/sglang/srt/distributed/device_communicators/pynccl_wrapper.py", line 351 in ncclCommInitRank\n'
           '  File "/x/sglang/srt/distributed/parallel_state.py", line 233 in __init__\n')
    d = classify(log, exit_code=-11)
    assert d.cause == "crash" and d.line == 2
    assert any("in ncclCommInitRank" in e for e in d.evidence), d.evidence
    assert "SIGSEGV" in d.explanation and "initialising distributed workers" in d.explanation


def test_cli_triage_on_a_segfault_names_a_crash(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("main: loading model\nSegmentation fault (core dumped)\n")
    res = CliRunner().invoke(app, ["triage", str(log), "--exit-code", "-11"])
    assert res.exit_code == 0, res.output
    assert "cause: crash" in res.output and "SIGSEGV" in res.output and "cause: killed" not in res.output


def test_an_uncaught_cpp_exception_defers_to_its_what_line():
    log = ("terminate called after throwing an instance of 'std::runtime_error'\n"
           "  what():  [FT][ERROR] CUDA runtime error: out of memory /w/allocator.h:220\n")
    assert classify(log, exit_code=-6).cause == "oom_gpu"
    assert classify("terminate called after throwing an instance of 'x'\n  what():  n1.back != null\n").cause == "crash"


# ---------------------------------------------------------------- structure: the decisive line and the phase
def test_unknown_quotes_the_final_exception_and_the_phase():
    log = ("[2026-05-09] Load weight begin. avail mem=78.50 GB\n"
           "Traceback (most recent call last):\n"
           '  File "/x/scheduler.py", line 1, in run\n'
           "    raise ValueError(msg)\n"
           "ValueError: think_end_token '</think>' must encode to exactly one token\n"
           "[2026-05-09] Received sigquit from a child process. It usually means the child failed.\n")
    d = classify(log, exit_code=1)
    assert d.cause == "unknown"
    assert "L5: ValueError: think_end_token '</think>' must encode to exactly one token" in d.evidence
    assert "While loading the model." in d.explanation


def test_the_phase_is_named_with_the_cause():
    log = ("Capture cuda graph begin. This can take up to several minutes.\n"
           "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB.\n")
    d = classify(log, exit_code=1)
    assert d.cause == "oom_gpu" and d.explanation.endswith("While capturing CUDA graphs.")


@pytest.mark.parametrize("line", [
    "Invalid value for MAX_JOBS: 'abc', using the default 4",
    "[2025-03-11 TP0] max_total_tokens=131072 is larger than the profiled value 90000. Use the profiled value instead.",
    "INFO: KV cache usage 97%, not enough free blocks: preempting 2 requests",
])
def test_lines_that_only_look_like_the_new_phrasings(line):
    assert find_cause(line + "\n") is None, classify(line + "\n").rule


def test_host_memory_words_veto_the_gpu_memory_plan():
    line = "RuntimeError: not enough host memory for the KV cache offload (swap space 64 GiB)\n"
    assert classify(line, exit_code=1).cause != "oom_gpu"


# ---------------------------------------------------------------- user rules
SHIPPED_BIND = "Error: listen EADDRINUSE: 0.0.0.0:8000\n"


def _write(d: Path, name: str, text: str) -> Path:
    d.mkdir(exist_ok=True)
    (d / name).write_text(text)
    return d


def test_user_rules_add_a_cause_and_override_a_shipped_rule_by_id(tmp_path):
    user = _write(tmp_path / "rules", "gpu_lost.toml", '''
cause = "gpu_lost"
explanation = "The GPU fell off the bus (Xid 79)."
hint = "Drain the node; reset or replace the GPU."
tier = "root"
priority = 99
confidence = 0.9

[[rule]]
id = "xid79"
patterns = ['GPU has fallen off the bus']
''')
    _write(user, "port_in_use.toml", '''
cause = "port_in_use"
hint = "Our launcher reuses ports: run `fuser -k` on it."

[[rule]]
id = "bind"
patterns = ['socket busy on port \\d+']
''')
    log = "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
    assert classify(log, exit_code=1).cause == "unknown"  # the shipped rules do not know it
    d = classify(log, exit_code=1, rules_dir=user)
    assert (d.cause, d.hint, d.line) == ("gpu_lost", "Drain the node; reset or replace the GPU.", 1)
    assert explain("gpu_lost", rules_dir=user)[0] == "The GPU fell off the bus (Xid 79)."
    # the user's "bind" replaced the shipped rule of that id: its phrasing counts, the shipped one not
    assert classify(SHIPPED_BIND, exit_code=1).cause == "port_in_use"
    assert classify(SHIPPED_BIND, exit_code=1, rules_dir=user).cause == "unknown"
    d = classify("socket busy on port 8000\n", exit_code=1, rules_dir=user)
    assert d.cause == "port_in_use" and d.hint.startswith("Our launcher")
    # the other shipped rules of that cause stay
    assert classify("OSError: [WinError 10048] x\n", exit_code=1, rules_dir=user).cause == "port_in_use"
    assert len(load_rules(user)) == len(load_rules()) + 1


@pytest.mark.parametrize("name,text,expect", [
    ("bad_regex.toml", 'cause = "oom_gpu"\n[[rule]]\npatterns = ["(unclosed"]\n', "bad_regex.toml: rule.0.patterns: "),
    ("unknown_key.toml", 'cause = "oom_gpu"\n[[rule]]\npaterns = ["x"]\n', "unknown_key.toml: rule.0.paterns: Extra inputs"),
    ("no_hint.toml", 'cause = "new_cause"\nexplanation = "x"\n', "no_hint.toml: hint: required for the new cause 'new_cause'"),
    ("bad_class.toml", 'cause = "oom_gpu"\n[[rule]]\nid = "y"\nnear = ["nope"]\n', "bad_class.toml: rule y: unknown token classes ['nope']"),
    ("bad_tier.toml", 'cause = "oom_gpu"\ntier = "top"\n', "bad_tier.toml: tier: "),
    ("bad_toml.toml", 'cause = \n', "bad_toml.toml: not valid TOML"),
    ("bad_cause.toml", 'cause = "Bad Cause"\nexplanation = "x"\nhint = "y"\n', "bad_cause.toml: cause: "),
    ("bad_union.toml", 'cause = "oom_gpu"\n[[rule]]\nid = "z"\npatterns = ["x"]\nnot_patterns = ["a", "(?i)b"]\n',
     "bad_union.toml: rule z: the patterns do not compile together"),
    ("_common.toml", '[classes]\nfoo = ["a", "(?i)b"]\n', "_common.toml: the patterns of a class, filter or phase"),
    ("_common.toml", 'retry_within = -1\n', "_common.toml: retry_within: "),
])
def test_bad_rule_files_are_one_error_naming_file_and_field(tmp_path, name, text, expect):
    user = _write(tmp_path / "rules", name, text)
    with pytest.raises(RulesError) as err:
        classify("x\n", rules_dir=user)
    assert expect in str(err.value)
    log = tmp_path / "server.log"
    log.write_text("x\n")
    res = CliRunner().invoke(app, ["triage", str(log), "--rules", str(user)])
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit), res.output
    flat = "".join(res.output.split())  # the console wraps long paths anywhere
    assert "".join(expect.split()) in flat and res.output.count("error:") == 1 and "Traceback" not in res.output


def test_cli_rules_flag(tmp_path):
    user = _write(tmp_path / "rules", "gpu_lost.toml",
                  'cause = "gpu_lost"\nexplanation = "GPU lost."\nhint = "Drain."\n[[rule]]\npatterns = ["fallen off the bus"]\n')
    log = tmp_path / "server.log"
    log.write_text("NVRM: Xid 79, GPU has fallen off the bus.\n")
    res = CliRunner().invoke(app, ["triage", str(log), "--rules", str(user)])
    assert res.exit_code == 0 and "cause: gpu_lost" in res.output, res.output
    res = CliRunner().invoke(app, ["triage", str(log), "--rules", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "--rules:" in res.output and "not a directory" in " ".join(res.output.split())


def test_spec_triage_rules_is_validated_at_load(tmp_path):
    from test_spec_errors import GOOD

    from bakeoff.errors import SpecError
    from bakeoff.spec import loads

    bad = _write(tmp_path / "rules", "x.toml", 'cause = "oom_gpu"\n[[rule]]\npatterns = ["(unclosed"]\n')
    with pytest.raises(SpecError) as err:
        loads(GOOD + f'\n[triage]\nrules = "{bad}"\n', "spec.toml")
    assert "triage.rules" in str(err.value) and "x.toml: rule.0.patterns" in str(err.value)
    with pytest.raises(SpecError, match="triage.rules: .*is not a directory"):
        loads(GOOD + f'\n[triage]\nrules = "{tmp_path / "nope"}"\n', "spec.toml")
    good = _write(tmp_path / "good", "gpu_lost.toml", 'cause = "gpu_lost"\nexplanation = "x"\nhint = "y"\n')
    assert loads(GOOD + f'\n[triage]\nrules = "{good}"\n', "spec.toml").triage.rules == str(good.resolve())


# ---------------------------------------------------------------- dev2: the thin classes, widened
DEV2 = sorted(p.relative_to(CORPUS).as_posix() for p in [*CORPUS.glob("dev2/*/*.log"), *CORPUS.glob("check/*/*.log")])
SCORE = Path(__file__).parent.parent / "bench" / "triage_score.py"


@pytest.mark.parametrize("rel", DEV2)
def test_dev2_log_is_named_right(rel):
    """Logs collected for the failure classes the rules were thin on, and the check set scored once
    before rules were written from it (both development data now)."""
    header, body, engine, d = run_case(rel)
    assert header["source"].startswith("https://github.com/") and header.get("established"), rel
    if header["expected"] == "none":
        assert find_cause(body, engine=engine) is None, d.evidence
        return
    assert d.cause == header.get("named", header["expected"]), d.evidence  # `named: unknown` = a known miss
    assert d.evidence and all(e.startswith("L") for e in d.evidence)


def test_a_wrapper_logging_engine_errors_at_info_is_still_evidence():
    wrapped = "2025-08-13 04:39:39,837 - __main__ - INFO - ERROR 08-13 04:39:39 engine.py:400] CUDA error: no kernel image is available for execution on the device\n"
    assert classify(wrapped, exit_code=1).cause == "arch_unsupported"
    plain = "2025-08-13 04:39:39,837 - __main__ - INFO - probing: no kernel image is available for execution on the device\n"
    assert find_cause(plain) is None


@pytest.mark.parametrize("line,cause", [
    ("TypeError: Llama.__init__() got an unexpected keyword argument 'ngl'", "bad_args"),
    ("  Extra inputs are not permitted [type=extra_forbidden, input_value='fr', input_type=str]", "bad_args"),
    ("pydantic_core._pydantic_core.ValidationError: 1 validation error for ServeConfig", "bad_args"),
    ("huggingface_hub.errors.GatedRepoError: 401 Client Error. (Request ID: Root=1-6604c5e0)", "model_load"),
    ("ValueError: Unsupported model type phi-msft", "model_load"),
    ("CUDA error 222 at ggml-cuda.cu:9635: the provided PTX was compiled with an unsupported toolchain.", "arch_unsupported"),
    ("RuntimeError: Assertion error (csrc/jit_kernels/heuristics/layout.hpp:76): Unknown recipe", "arch_unsupported"),
    ("Exception: Capture cuda graph failed: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:1234", "distributed_init"),
    ("RuntimeError: [../torch/csrc/distributed/c10d/TCPStore.cpp:1] Connection reset by peer", "distributed_init"),
    ("Error: model requires more system memory (5.0 GiB) than is available (3.9 GiB)", "oom_host"),
    ("NotImplementedError: FP8 block scaling not yet implemented for Blackwell", "arch_unsupported"),
    ("AssertionError: expected sm90 or sm100", "arch_unsupported"),
    ("RuntimeError: HIP error: device kernel image is invalid", "arch_unsupported"),
    ("RuntimeError: Worker failed with error 'FP8 is not supported', please check the stack trace above", "arch_unsupported"),
    ("RuntimeError: flashinfer is not installed; the flashinfer attention backend needs it", "import_error"),
    ('Error: Os { code: 98, kind: AddrInUse, message: "Address already in use" }', "port_in_use"),
    ("Bind for 0.0.0.0:8000 failed: port is already allocated", "port_in_use"),
    ("error: unknown option '--ctx-size'", "bad_args"),
    ("Error: unknown flag: --gpus", "bad_args"),
    ("Error: llama runner process has terminated: exit status 0xc0000409", "crash"),
    ("./run.sh: line 3: 12345 Illegal instruction     ./llama-server -m x.gguf", "crash"),
    ('State: {"OOMKilled": true, "ExitCode": 137}', "killed"),
    ("fatal error: runtime: out of memory", "oom_host"),
    ("ggml_metal_graph_compute: command buffer 0 failed with status 5 error: Insufficient Memory", "oom_gpu"),
    ("dyld[123]: Library not loaded: @rpath/libllama.dylib", "import_error"),
    ("FileNotFoundError: [Errno 2] No such file or directory: '/models/llama/config.json'", "model_load"),
    ("java.lang.RuntimeException: Failed to bind to address. Maybe it is already in use?", "port_in_use"),
    ("RuntimeError: FlashAttention cannot be used on Turing GPUs", "arch_unsupported"),
    ("RuntimeError: ROCm 7 no longer supports gfx906", "arch_unsupported"),
    ("AssertionError: FP8 MoE is not enabled for sm_120 yet", "arch_unsupported"),
    ("Error: No such option: --prot (Possible options: --port)", "bad_args"),
    ("│ No such option: --tp-size                                       │", "bad_args"),
    ("Error: Invalid value for '--dtype': 'bf61' is not one of 'auto', 'bf16'.", "bad_args"),
    ("server: unrecognized option '--ctx'", "bad_args"),
    ("flag provided but not defined: -prot", "bad_args"),
    ("ValueError: Some specified arguments are not used by the HfArgumentParser: ['--tp', '2']", "bad_args"),
    ("OSError: [WinError 10048] Only one usage of each socket address (protocol/network address/port) is normally permitted", "port_in_use"),
    ("ERROR:    [Errno 48] error while attempting to bind on address ('0.0.0.0', 8000): address already in use", "port_in_use"),
    ("ValueError: The checkpoint you are trying to load has model type `qwen9` but Transformers does not recognize this architecture.", "model_load"),
    ("OSError: my-model is not a local folder and is not a valid model identifier listed on 'https://huggingface.co/models'", "model_load"),
    ("ValueError: The model's max seq len (8192) is larger than the maximum number of tokens that can be stored in KV cache (4688).", "oom_gpu"),
    ("RuntimeError: KV cache needs 12 GiB but not enough memory is left for it (mem-fraction-static=0.5)", "oom_gpu"),
    ("OpError: expects arch to be one of ['sm_100a', 'sm_103a'], but got sm_120a", "arch_unsupported"),
])
def test_phrasings_by_structure(line, cause):
    assert classify(line + "\n", exit_code=1).cause == cause


def test_what_only_looks_like_the_widened_classes_names_nothing_wrong():
    # a quoted backend name is a value, not a build tool at work
    line = "AssertionError: Only {'trtllm_mha', 'triton', 'fa4'} backends are supported for this model. Got flashinfer.\n"
    assert classify(line, exit_code=1).cause == "unknown"
    # a checkpoint's "architectures" field or a config's architecture is not a GPU's
    assert classify("ValueError: 'architectures' is required in config.json\n", exit_code=1).cause == "unknown"
    assert classify("ValueError: the checkpoint architecture requires trust_remote_code=True\n", exit_code=1).cause == "unknown"
    # "expected" names an architecture only with an architecture token; a container not OOM-killed is no kill
    assert classify("ValueError: expected the architecture in config.json to be a list\n", exit_code=1).cause == "unknown"
    assert classify('State: {"OOMKilled": false, "ExitCode": 1}\n', exit_code=1).cause == "unknown"
    # a number format refused for a model (not for the GPU) is not an architecture refusal
    assert classify("ValueError: FP8 is not supported for this model's checkpoint format\n", exit_code=1).cause == "unknown"
    # ... nor is one refused in combination with a backend
    assert classify("ValueError: fp8 kv cache is not supported with the flashinfer backend\n", exit_code=1).cause == "unknown"
    # a model's forward() called with a keyword it lacks is a version mismatch inside the engine
    d = classify("TypeError: Qwen2Model.forward() got an unexpected keyword argument 'cache_position'\n", exit_code=1)
    assert d.cause == "unknown"
    # a pydantic header is a fallback: the line under it that names a cause decides
    log = ("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
           "  Value error, Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
           "Your Tesla T4 GPU has compute capability 7.5.\n")
    assert classify(log, exit_code=1).cause == "arch_unsupported"
    log = ("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
           "  Value error, Model architectures ['Qwen3NextForCausalLM'] failed to be inspected. "
           "Please check the logs for more details. [type=value_error]\n")
    assert classify(log, exit_code=1).cause == "model_load"
    # an undefined symbol logged as a warning names the cause only when nothing else does
    log = ("WARNING 06-13 _custom_ops.py:11] Failed to import from vllm._C with ImportError('x.so: undefined symbol: _ZN5')\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert classify(log, exit_code=1).cause == "oom_gpu"
    # a faulthandler dump without its header is a crash only when nothing else is named
    dump = 'Current thread 0x00007769465bb740 (most recent call first):\n  File "x/loader.py", line 377 in load_model\n'
    assert classify(dump).cause == "crash"
    assert classify("RuntimeError: CUDA error: an illegal memory access was encountered\n" + dump).cause == "illegal_memory_access"


def test_score_script_scores_a_directory(tmp_path):
    import os
    import subprocess

    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "a.log").write_text("# source: x\n# expected: oom_gpu\ntorch.OutOfMemoryError: CUDA out of memory.\n")
    (tmp_path / "vllm" / "b.log").write_text("# source: x\n# expected: port_in_use\nsomething odd happened\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent / "src")}
    out = subprocess.run([sys.executable, str(SCORE), str(tmp_path)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"{tmp_path}: 2 logs: right 1 (50 %), unknown 1, wrong cause 0" in out.stdout
    assert "expected port_in_use, got unknown" in out.stdout
    bad = subprocess.run([sys.executable, str(SCORE), str(tmp_path / "nope")], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "not a directory" in bad.stderr
    # a set collected in halves: each half, then both together
    half = tmp_path.parent / f"{tmp_path.name}-b"
    (half / "sglang").mkdir(parents=True)
    (half / "sglang" / "c.log").write_text("# source: x\n# expected: none\nINFO all good\n")
    both = subprocess.run([sys.executable, str(SCORE), str(tmp_path), str(half)], capture_output=True, text=True,
                          env=env, timeout=120)
    assert both.returncode == 0, both.stderr
    assert f"{half}: 1 logs: right 1 (100 %)" in both.stdout
    assert f"{tmp_path.name} + {half.name}: 3 logs: right 2 (67 %), unknown 1, wrong cause 0, false alarm 0" in both.stdout



def test_label_agreement_study_reproduces_its_sample_and_figures(tmp_path):
    """bench/triage_label_agreement.py: the sample re-drawn from the score files is the one the two
    readers labelled, and the figures it prints are the ones the corpus README reports."""
    import os
    import subprocess

    script = Path(__file__).parent.parent / "bench" / "triage_label_agreement.py"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent / "src")}  # it reads logs with triage_score's read_log
    drawn = subprocess.run([sys.executable, str(script), "--draw"], capture_output=True, text=True, timeout=120, env=env)
    assert drawn.returncode == 0 and "reproduces" in drawn.stdout, drawn.stdout + drawn.stderr
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert "A == B                             wrong 39/45 (87%, 74%-94%); rest 71/75 (95%, 87%-98%); population 94.2%" in out.stdout
    assert "population: right 75.3%, wrong 4.8%" in out.stdout
    subprocess.run([sys.executable, str(script), "--blind", str(tmp_path)], check=True, timeout=120, env=env)
    blind = sorted(tmp_path.glob("L*.log"))
    assert len(blind) == 120
    for f in blind:  # nothing a reader could take the label from
        head = [ln for ln in f.read_text().split("\n") if ln.startswith("# ")][:3]
        assert head[0].startswith("# folder: ") and not any(ln.startswith(("# expected", "# source", "# established")) for ln in head)

# Round 3 (issue 27): the classes of heldout2's misses, tested with lines derived from the engines' and
# libraries' own messages (not from issue logs). Each id says where the wording comes from.
@pytest.mark.parametrize("line,cause", [
    # from the source of Ollama: os.ErrNotExist reads "file does not exist"; the API's 404 text
    pytest.param("Error: pull model manifest: file does not exist", "model_load", id="ollama-manifest"),
    pytest.param('Error: model "llama9:70b" not found, try pulling it first', "model_load", id="ollama-not-pulled"),
    # from the source of vLLM's multiproc executor and SGLang's scheduler watchdog
    pytest.param("TimeoutError: RPC call to execute_model timed out.", "hang", id="vllm-rpc-timeout"),
    pytest.param("[2025-06-01 10:00:00 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
                 "hang", id="sglang-watchdog"),
    # from the source of readiness waiters (wrappers, routers, launch scripts)
    pytest.param("unable to start process: health check timed out after 120s", "startup_timeout", id="health-timed-out"),
    pytest.param("RuntimeError: Timed out waiting for server readiness: connection refused", "startup_timeout",
                 id="waiting-readiness"),
    pytest.param("error: server did not become ready within 600 s", "startup_timeout", id="not-ready"),
    # from the source of glibc's translated strerror(EADDRINUSE), Go's net package and nginx
    pytest.param("OSError: [Errno 98] Die Adresse wird bereits verwendet", "port_in_use", id="glibc-de"),
    pytest.param("nginx: [emerg] bind() to 0.0.0.0:80 failed (98: Адрес уже используется)", "port_in_use", id="nginx-ru"),
    pytest.param("Error: listen tcp 127.0.0.1:11434: bind: 通常每个套接字地址(协议/网络地址/端口)只允许使用一次。",
                 "port_in_use", id="go-windows-zh"),
    pytest.param("error: failed to bind socket: os error 48", "port_in_use", id="errno-48-macos"),
    # from the source of the kernel's memcg OOM killer, the OOM reaper and the kubelet's eviction
    pytest.param("Memory cgroup out of memory: Killed process 4242 (python3) total-vm:93229640kB", "killed", id="memcg"),
    pytest.param("oom_reaper: reaped process 4242 (python3), now anon-rss:0kB", "killed", id="oom-reaper"),
    pytest.param("Pod was evicted: The node was low on resource: memory.", "killed", id="k8s-evicted"),
    pytest.param("worker exceeded its memory limit and was killed", "killed", id="memory-limit-killed"),
    # from the source of argparse (without a program name), clap, cobra and getopt
    pytest.param("error: unrecognized arguments: --served-model-name m", "bad_args", id="argparse-bare"),
    pytest.param("error: unexpected argument '--ngl' found", "bad_args", id="clap"),
    pytest.param("Error: unknown shorthand flag: 'x' in -x", "bad_args", id="cobra"),
    # from the source of vLLM, Megatron-style and TGI model code: a parallel size that does not divide
    pytest.param("ValueError: Total number of attention heads (71) must be divisible by tensor parallel size (2).",
                 "bad_args", id="heads-by-tp"),
    pytest.param("AssertionError: num_layers must be divisible by pipeline_model_parallel_size", "bad_args",
                 id="layers-by-pp"),
    # from the source of TensorRT-LLM's attention module: a feature with one backend only
    pytest.param("AssertionError: Attention sinks are only supported for TRTLLM backend.", "bad_args", id="trtllm-sinks"),
    pytest.param("ValueError: sliding window requires the FLASH_ATTN backend", "bad_args", id="requires-backend"),
    # from the source of Triton's compiler: its ptxas run as a subprocess, its PTXASError
    pytest.param("subprocess.CalledProcessError: Command '['/x/triton/backends/nvidia/bin/ptxas', '--gpu-name=sm_100', "
                 "'/tmp/a.ptx']' returned non-zero exit status 255.", "jit_compile", id="triton-ptxas"),
    pytest.param("triton.runtime.errors.PTXASError: PTXAS error: Internal Triton PTX codegen error", "jit_compile",
                 id="triton-ptxaserror"),
    # from the source of vLLM's config checks: a value not among the choices, a parallel size over the GPUs
    pytest.param("ValueError: Unknown quantization method: awqx. Must be one of ['awq', 'gptq'].", "bad_args",
                 id="value-choices"),
    pytest.param("ValueError: World size (4) is larger than the number of available GPUs (2) in this node.",
                 "bad_args", id="world-size-over-gpus"),
    pytest.param("ValueError: Tensor parallel size (4) cannot be larger than the number of available GPUs (2).",
                 "bad_args", id="tp-over-gpus"),
    # from the source of clap and of engines' own flag checks: a constraint on an option as typed
    pytest.param("error: the argument '--port <PORT>' cannot be used multiple times", "bad_args", id="clap-twice"),
    pytest.param("ValueError: --tensor-parallel-size must be a power of two", "bad_args", id="flag-constraint"),
    pytest.param("ValueError: --enable-dp-attention requires --dp-size > 1", "bad_args", id="flag-requires-flag"),
    pytest.param("ValueError: Unknown quantization type, got gptq_v3 - supported types are: ['awq', 'gptq']", "bad_args",
                 id="supported-types-are"),
    # from the source of vLLM's custom-op loader: a compiled module missing, with advice to reinstall
    pytest.param("RuntimeError: vllm._C is not available, please reinstall vLLM", "import_error", id="reinstall"),
    # from the source of vLLM's engine-core start-up wait and of launchers' readiness waits
    pytest.param("TimeoutError: Timed out waiting for engine core processes to start. This is often caused by slow "
                 "weight loading.", "startup_timeout", id="vllm-engine-core-start"),
    pytest.param("TimeoutError: Server failed to start within the timeout period.", "startup_timeout",
                 id="server-start-within"),
    # from the source of Ollama's scheduler: its runner did not start in time; a model newer than Ollama
    pytest.param("Error: timed out waiting for llama runner to start - progress 0.00 - ", "startup_timeout",
                 id="ollama-runner-start"),
    pytest.param("Error: this model is not supported by your version of Ollama. You may need to upgrade",
                 "model_load", id="ollama-model-newer"),
    # from the source of transformers' from_pretrained: the folder has no weights file
    pytest.param("OSError: Error no file named pytorch_model.bin, model.safetensors, tf_model.h5 found in directory "
                 "/models/x.", "model_load", id="transformers-no-file-named"),
])
def test_round3_classes_from_the_sources(line, cause):
    assert classify(line + "\n", exit_code=1).cause == cause


@pytest.mark.parametrize("line,cause", [
    # a chat template, a container image or a backend not found is not a model that is missing
    ("ERROR: chat template not found for model qwen", "unknown"),
    ("Error response from daemon: manifest for vllm/vllm-openai:v9 not found: manifest unknown", "unknown"),
    ("ERROR Failed to load model error=backend not found: llama-cpp", "unknown"),
    # CUDA's error numbers 98 and 48 are not EADDRINUSE (no socket call on the line)
    ("RuntimeError: CUDA error 98: invalid device function", "arch_unsupported"),
    ("RuntimeError: CUDA error: invalid argument", "unknown"),
    # a collective's watchdog timeout is a hang by LABELS.md (round 7's collective rule; it was distributed_init
    # before the guide), not the engine's RPC watchdog
    ("[rank0]:[E] ProcessGroupNCCL's watchdog caught collective operation timeout: WorkNCCL(SeqNum=1) ran for 600000 ms", "hang"),
    # a GPU out of memory that killed a process is the GPU's memory
    ("torch.OutOfMemoryError: CUDA out of memory; the worker was killed", "oom_gpu"),
    # a refusal tied to the GPU is an architecture's, not the backend choice's
    ("ValueError: FP8 attention is only supported for the FLASHINFER backend on sm_90", "arch_unsupported"),
    # ... and one tied to a platform is about the build
    ("ValueError: FlashInfer backend is only supported for CUDA backend", "unknown"),
    # a compiler refusing its own command line is no flag of ours
    ("c++: error: unrecognized command line option '-std=c++20'", "unknown"),
    ("gcc: error: unrecognized command-line option '-mavx512fp16'", "jit_compile"),
    # a choice list for a GPU architecture is the GPU's
    ("OpError: expects arch to be one of ['sm_100a', 'sm_103a'], but got sm_120a", "arch_unsupported"),
    # WSAEACCES (10013) is a port the OS reserves, not one in use
    ("ERROR:    [Errno 10013] error while attempting to bind on address ('0.0.0.0', 8000): an attempt was made to "
     "access a socket in a way forbidden by its access permissions", "unknown"),
    # a driver, a command or a library not found is no model that is missing (a program not installed is an
    # install problem: round 16)
    ("RuntimeError: CUDA driver not found; the model cannot run", "unknown"),
    ("bash: ollama: command not found", "import_error"),
    ("ImportError: /usr/lib/libstdc++.so.6: version `GLIBCXX_3.4.32' not found (required by /x/model_ops.so)", "import_error"),
    # an install hint naming a flag is the import error's, not an argument's
    ("ImportError: Please install flash_attn; it requires --no-build-isolation", "import_error"),
    # a wrapper's generic "could not load model" (its backend died) names nothing; zerolog's INF is info
    ("8:39AM ERR [llama-cpp] Fails: could not load model: rpc error: code = Unavailable desc = EOF", "unknown"),
    ("8:39AM INF [llama-cpp] Fails: could not load model: no such file or directory", "unknown"),
    # advice to rebuild for a GPU architecture is the architecture's
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device; rebuild from source "
     "with TORCH_CUDA_ARCH_LIST=12.0", "arch_unsupported"),
    # a list of supported models after an unknown one is about the model, not an argument
    ("ValueError: Unknown architecture foo. Supported models are: ['llama', 'qwen2']", "unknown"),
    # a waiting line is no timeout
    ("INFO: waiting for server to start (attempt 3)", "unknown"),
])
def test_round3_lookalikes_name_nothing_wrong(line, cause):
    assert classify(line + "\n", exit_code=1).cause == cause


def test_an_error_the_engine_went_on_after_is_no_failure():
    err = "ERROR 02-02 14:28:39 [loader.py:47] Failed to load the model weights from the hub cache\n"
    assert find_cause(err).cause == "model_load"
    # one worker's "weights loaded" says nothing of the rank that failed: only server-wide lines count
    one_rank = err + "(Worker rank=1) INFO 02-02 14:29:01 [loader.py:90] Loading weights took 21.3 seconds\n"
    assert find_cause(one_rank).cause == "model_load"
    started = err + "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)\n"
    assert find_cause(started) is None
    # each error alone names its cause; the line after it says the server went on: a web UI's port fallback (from
    # the source of Gradio's launch(): "Running on local URL:  {url}"), a request answered 200 (uvicorn's access
    # log), LocalAI's start after its entrypoint's GPU probe (round 22)
    for error, cause, went_on in [
        ("ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 7860): address already in use\n",
         "port_in_use", "Running on local URL:  http://0.0.0.0:7861\n"),
        (err, "model_load", 'INFO:     127.0.0.1:57334 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'),
        ("/aio/entrypoint.sh: line 52: nvidia-smi: command not found\n", "import_error",
         "10:29AM INF LocalAI API is listening! Please connect to the endpoint for API documentation.\n"),
    ]:
        assert find_cause(error).cause == cause
        assert find_cause(error + went_on) is None, went_on
    # an error after the engine went on still counts
    later = "INFO:     Application startup complete.\n" + err
    assert find_cause(later).cause == "model_load"


def test_a_retried_operation_is_no_failure_until_its_retries_run_out():
    first = ("ERROR 02-02 14:28:39 [repo_utils.py:47] Error retrieving safetensors: Repo id must be in the form 'a/b'\n"
             ": '/data/m'. Use `repo_type` argument if needed., retrying 1 of 2\n")
    last = "ERROR 02-02 14:28:41 [repo_utils.py:45] Error retrieving safetensors: Repo id must be in the form 'a/b'\n"
    # the last attempt repeats the retried message without "retrying": still a retry
    assert find_cause(first + last) is None
    # a different error after a retried one is evidence
    assert find_cause(first + "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n").cause == "oom_gpu"
    # the retries ran out: the retried error is the failure
    assert find_cause(first + last + "RuntimeError: giving up after 2 attempts\n").cause == "model_load"
    c10d = ("[E210 09:54:57.12 socket.cpp:1011] [c10d] The client socket has timed out after 60000ms while trying to connect to (h, 29400).\n"
            "[W210 09:54:57.12 TCPStore.cpp:358] [c10d] TCP client failed to connect to host h:29400 - retrying (try=0)\n"
            "Exception raised from throwTimeoutError at ../torch/csrc/distributed/c10d/socket.cpp:1013 (most recent call first):\n")
    assert classify(c10d, exit_code=1).cause == "distributed_init"


def test_a_benign_phrase_makes_only_what_follows_it_speculation():
    ray = ("The actor is dead because its worker process has died. There are some potential root causes. "
           "(1) The process is killed by SIGKILL by OOM killer due to high memory usage.\n")
    assert find_cause(ray) is None
    assert classify(ray + "(RayWorker pid=1) *** SIGBUS received at time=1 on cpu 2 ***\n").cause == "crash"
    # a finding before the phrase on the same line still counts
    line = "Task was killed due to the node running low on memory. There are some potential root causes.\n"
    assert find_cause(line).cause == "killed"


def test_a_readiness_setting_is_no_timeout():
    assert find_cause("2025-01-01 10:00:00 router: Waiting for worker health check, timeout: 300s\n") is None
    pending = "[Router] Worker http://w:31000 health check is pending with error: error sending request\n"
    assert classify(pending).cause == "startup_timeout"
    # the worker became healthy afterwards: the pending checks were the start-up, not a failure
    assert find_cause(pending + "[Router] All workers are healthy\n") is None


def test_a_4xx_answered_to_a_client_is_no_failure():
    line = "ERROR 03-18 09:02:03 [serving_chat.py:133] message='The model `m` does not exist.' type='NotFoundError' code=404\n"
    assert find_cause("INFO:     Application startup complete.\n" + line) is None
    assert find_cause(line) is None


# Round 4b (issue 27): a quoted crash outranks the wrapper's summary that quotes or follows it, and an
# assertion's expression is code. Wordings from the source of ggml (GGML_ABORT prints "file:line: "
# then "GGML_ASSERT(%s) failed"), of Ollama's scheduler ("error loading llama server", error= "llama
# runner process has terminated: ...") and of glibc/glog/torch/Rust's assertion and panic formats.
OLLAMA_SUMMARY = ('time=2025-03-05T04:13:07.343Z level=ERROR source=sched.go:456 msg="error loading llama server" '
                  'error="llama runner process has terminated: {}"\n')


@pytest.mark.parametrize("log", [
    # the wrapper's summary alone, quoting the assert: "tensor" inside the expression is code
    pytest.param(OLLAMA_SUMMARY.format("GGML_ASSERT(tensor->op == GGML_OP_UNARY) failed"), id="summary-quotes-assert"),
    # ... with the load-failure words outside the assert, before it on the line: the summary quotes the crash
    pytest.param(OLLAMA_SUMMARY.format("error loading model: GGML_ASSERT(ggml_nelements(a) == ne0) failed"),
                 id="summary-words-before-the-assert"),
    # the assert, then the wrapper's summary naming a model load: the summary follows the crash
    pytest.param("ggml/src/ggml.c:1721: GGML_ASSERT(hparams.n_swa > 0) failed\n"
                 + OLLAMA_SUMMARY.format("error loading model: llama_model_load: failed to load model weights"),
                 id="summary-follows-the-assert"),
    # a fail-fast exit status (STATUS_STACK_BUFFER_OVERRUN), then the summary
    pytest.param('time=x level=ERROR source=server.go:421 msg="llama runner terminated" error="exit status 0xc0000409"\n'
                 + OLLAMA_SUMMARY.format("error loading model weights"), id="fail-fast-then-summary"),
    # ggml's print format cut inside the expression
    pytest.param("ggml\\src\\ggml.c:1554: GGML_ASSERT(view_src == NULL || data_size == 0 || da\n", id="cut-assert"),
    # the expression's words ("tensor", "truncated") are code, not a model file that failed to load
    pytest.param("llama-model-loader.cpp:903: GGML_ASSERT(tensor->data != nullptr && !file.truncated) failed\n",
                 id="expression-words-are-code"),
    pytest.param("python3: ../src/kv_cache.cpp:88: void f(): Assertion `cache_blocks < max_memory_blocks' failed.\n"
                 "Aborted (core dumped)\n", id="glibc-assert-words-are-code"),
    pytest.param("F0101 10:00:00.000 1 allocator.cc:42] Check failed: tensor_memory_bytes <= free_bytes\n",
                 id="glog-check-words-are-code"),
    pytest.param("RuntimeError: weights.dim() == 2 INTERNAL ASSERT FAILED at \"/pytorch/aten/src/x.cpp\":51, please "
                 "report a bug to PyTorch.\n", id="torch-internal-assert"),
    pytest.param("thread 'main' panicked at src/loader.rs:40:9:\nindex out of bounds: the len is 3 but the index is 7\n",
                 id="rust-panic"),
    # from the source of Go's runtime: an unrecovered panic, then the running goroutine's stack; the
    # wrapper's later summary ("error loading model") is its consequence
    pytest.param("panic: runtime error: index out of range [3] with length 3\n\ngoroutine 1 [running]:\nmain.main()\n"
                 + OLLAMA_SUMMARY.format("error loading model: unable to load model weights"), id="go-panic"),
])
def test_a_quoted_crash_outranks_the_summary_that_quotes_or_follows_it(log):
    d = classify(log, exit_code=1)
    assert d.cause == "crash", (d.cause, d.rule)


@pytest.mark.parametrize("log,cause", [
    # a cause named in the assertion's message (a string literal, after the expression, the panic's payload)
    ("python: AccelerateMatmul.cpp:36: int f(int, DotOp): Assertion `false && \"computeCapability not supported\"' "
     "failed.\n", "arch_unsupported"),
    ("Check failed: error == cudaSuccess (48 vs. 0) no kernel image is available for execution on the device\n",
     "arch_unsupported"),
    ("RuntimeError: Expected is_sm90 || is_sm8x to be true, but got false.\n", "arch_unsupported"),
    ("thread 'main' panicked at 'error binding to 0.0.0.0:3000: Address already in use (os error 98)', src/main.rs:9:5\n",
     "port_in_use"),
    ("panic: listen tcp 127.0.0.1:11434: bind: address already in use\n\ngoroutine 1 [running]:\n", "port_in_use"),
    # glog's check with the device only in its expression ("cudaSuccess"): the expression's words qualify
    # the cause the message names (out of memory), they do not name one
    ("F0101 x.cc:1] Check failed: status == cudaSuccess (2 vs. 0) out of memory\n*** Check failure stack trace: ***\n"
     "Aborted (core dumped)\n", "oom_gpu"),
    # TVM's form of the check ("Check failed: (expr) is false: message"): the message names the cause
    ("tvm.error.InternalError: Check failed: (code == CUDA_SUCCESS) is false: NVRTC error\n", "jit_compile"),
    # an earlier root cause still wins over the abort it led to
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\nterminate called without an active "
     "exception\nAborted (core dumped)\n", "oom_gpu"),
    # a wrapper that names the child's signal, then dumps the child's stderr: the traceback in the dump is
    # a report of its own, not the crash's summary
    ("ERROR launcher: worker process was signaled to shutdown with signal 6\nERROR launcher: worker stderr:\n"
     "Traceback (most recent call last):\n  File \"/x/server.py\", line 9, in <module>\n"
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n", "oom_gpu"),
    # a root cause far after the crash (another run, another process) is no summary of it
    ("ggml.c:1721: GGML_ASSERT(a->ne[2] == b->ne[0]) failed\n" + "INFO step\n" * 30
     + "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n", "oom_gpu"),
    # a CUDA kernel's device-side assert (it names block and thread) is a kernel fault, not a host abort
    ("Indexing.cu:1236: indexSelectSmallIndex: block: [0,0,0], thread: [3,0,0] Assertion `srcIndex < srcSelectDimSize` "
     "failed.\nRuntimeError: CUDA error: device-side assert triggered\n", "illegal_memory_access"),
])
def test_a_cause_named_by_the_crash_itself_or_before_it_still_wins(log, cause):
    assert classify(log, exit_code=1).cause == cause


def test_assertion_expressions_are_blanked_but_their_messages_stay():
    from bakeoff.judge.triage.structure import mask_assertions
    line = 'ggml.c:9: GGML_ASSERT(buf != NULL && "failed to allocate buffer") failed'
    masked = mask_assertions(line)
    assert len(masked) == len(line) and "buf !=" not in masked and '"failed to allocate buffer"' in masked
    assert mask_assertions("plain line with tensor memory") == "plain line with tensor memory"


# Round 4b: the classes of heldout3's misses, generalized; each wording from a library's or engine's
# own source (never from an issue log), named by where it comes from.
@pytest.mark.parametrize("line,cause", [
    # from the source of vLLM's CUTLASS entry points (STD_TORCH_CHECK_NOT_IMPLEMENTED): a kernel missing for a capability
    pytest.param("NotImplementedError: No compiled get_cutlass_moe_mm_problem_sizes_from_expert_offsets: no "
                 "cutlass_moe_mm kernel for CUDA device capability: 89. Required capability: 90", "arch_unsupported",
                 id="vllm-cutlass-no-kernel-for-capability"),
    pytest.param("NotImplementedError: No compiled cutlass_scaled_mm for CUDA device capability: 75", "arch_unsupported",
                 id="vllm-no-compiled-for-capability"),
    # from the source of Triton's OutOfResources: a kernel needs more shared memory than this GPU has
    pytest.param("triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 114688, Hardware "
                 "limit: 101376. Reducing block sizes or `num_stages` may help.", "arch_unsupported",
                 id="triton-out-of-resource"),
    # from NVIDIA's Xid catalog: 8 IDLE_TIMEOUT (GPU stopped processing), 109 CTX SWITCH TIMEOUT
    pytest.param("NVRM: Xid (PCI:0000:0b:00): 109, pid=9468, name=python3, channel 0x0000000f, errorString CTX SWITCH "
                 "TIMEOUT", "hang", id="xid-109"),
    pytest.param("[ 8123.5] NVRM: Xid (PCI:0000:01:00): 8, pid=4242, name=llama-server, Channel 00000007", "hang", id="xid-8"),
    # from the source of torch's op namespaces and dispatcher: a custom op that is not registered
    pytest.param("AttributeError: '_OpNamespace' '_C' object has no attribute 'rms_norm'", "import_error",
                 id="torch-op-namespace"),
    pytest.param("RuntimeError: No such operator sgl_kernel::fp8_blockwise_scaled_mm", "import_error",
                 id="torch-no-such-operator"),
    # from the source of vLLM's scheduler (swap-out) and Ollama's scheduler (system memory)
    pytest.param("RuntimeError: Aborted due to the lack of CPU swap space. Please increase the swap space to avoid "
                 "this error.", "oom_host", id="vllm-cpu-swap-space"),
    pytest.param('"model requires more system memory (7.2 GiB) than is available (3.1 GiB)"', "oom_host",
                 id="ollama-system-memory-quoted"),
    # from the source of torch.distributed's _store_based_barrier
    pytest.param("RuntimeError: Timed out initializing process group in store based barrier on rank: 1, for key: "
                 "store_based_barrier_key:1 (world_size=8, worker_count=7, timeout=0:30:00)", "distributed_init",
                 id="torch-store-based-barrier"),
    # from the source of the NVIDIA toolchain's option parser (ptxas/nvcc/nvlink)
    pytest.param("Value 'sm_120a' is not defined for option 'gpu-name'", "jit_compile", id="ptxas-value-not-defined"),
    # from the source of torch's cpp_extension / FlashInfer's JIT: the failed compiler command echoed at error level
    pytest.param("(EngineCore pid=1) ERROR 03-05 09:56:09 [core.py:1100] /usr/local/cuda/bin/nvcc --generate-dependencies"
                 "-with-compile --dependency-output x.cuda.o.d -c x.cu -o x.cuda.o", "jit_compile",
                 id="nvcc-command-at-error"),
    # from the source of vLLM's engine client (its start-up handshake with the engine cores)
    pytest.param("TimeoutError: Timed out waiting for engines to send initial message on input socket.",
                 "startup_timeout", id="vllm-engines-initial-message"),
    # from the source of torch's CUDA caching allocator: the OOM message's body without its header line
    pytest.param("    Tried to allocate 136.00 MiB. GPU 0 has a total capacity of 22.36 GiB of which 120.88 MiB is free.",
                 "oom_gpu", id="torch-allocator-body"),
    # from the source of Ollama's model reader and ggml's gguf reader; the Git LFS pointer spec
    pytest.param("Error: invalid file magic", "model_load", id="ollama-file-magic"),
    pytest.param("gguf_init_from_file_impl: invalid magic characters: 'vers', expected 'GGUF'", "model_load",
                 id="gguf-magic"),
])
def test_round4b_classes_from_the_sources(line, cause):
    assert classify(line + "\n", exit_code=1).cause == cause


@pytest.mark.parametrize("log,cause", [
    # a GPU refusal at warning level names the cause only when the engine then failed
    ("2023-07-24T02:39:19Z  WARN launcher: Could not import Flash Attention enabled models: GPU with CUDA capability "
     "7 0 is not supported\n2023-07-24T02:39:20Z ERROR launcher: Error when initializing model\n", "arch_unsupported"),
    ("2023-07-24T02:39:19Z  WARN launcher: Could not import Flash Attention enabled models: GPU with CUDA capability "
     "7 0 is not supported\n2023-07-24T02:39:25Z  INFO launcher: Connected\n", None),
    ("WARN: GPU with CUDA capability 7 0 is not supported\nERROR: Error when initializing model\n", "arch_unsupported"),
    # ... only when the failure follows closely (an unrelated error much later is not what it warned of)
    ("WARN: GPU with CUDA capability 7 0 is not supported\n" + "INFO step\n" * 15 + "ERROR: something else\n", None),
    # a compiler's command line at INFO is the build's progress, not its failure
    ("INFO 03-05 09:56:09 [jit.py:10] /usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -c x.cu\n", None),
    # a wait for a worker's response is the engine serving, not its start-up
    ("ERROR 01-01 10:00:00 [x.py:1] Timed out waiting for worker response; RPC call to execute_model timed out.\n", "hang"),
    # Xid numbers that are not timeouts (13: a graphics engine exception) and a Python bytecode magic are not these causes
    ("NVRM: Xid (PCI:0000:01:00): 13, Graphics Exception\n", None),
    ("ImportError: bad magic number in 'vllm': b'\\x03\\xf3\\r\\n'\n", "import_error"),
    # a swap-space setting is no shortfall
    ("INFO 01-01 10:00:00 [config.py:1] swap_space=4 GiB of CPU memory per GPU\n", None),
    # a start-up timeout setting is no timeout; a collective's initialisation timing out is distributed_init's
    ("INFO: startup took 12 s, timeout 600s\n", None),
    ("Initializing the engine, startup timeout 600 s\n", None),
    ("INFO: warmup finished within 12 seconds\n", None),
    ("Startup complete within 30 seconds\n", None),
    ("INFO: handshake completed within 2 seconds\n", None),
    # a 404 for an optional file of the repository (engines probe for them) is no missing model
    ("404 Client Error: Not Found for url: https://huggingface.co/org/m/resolve/main/generation_config.json\n", None),
    ("RuntimeError: NCCL initialization timed out after 600 seconds\n", "distributed_init"),
    # a process group's timeout setting is no timeout
    ("Initializing process group with timeout 0:30:00 for 8 ranks\n", None),
    # a model's architecture is no GPU's (from the source of transformers' GGUF loader; model types in
    # an engine's refusal): the first names the model, the others name nothing rather than a GPU
    ("ValueError: GGUF model with architecture gemma3n is not supported yet.\n", "model_load"),
    ("ValueError: GGUF architecture 'qwen35' not supported\n", None),
    ("RuntimeError: Unsupported architecture: qwen3next\n", None),
    ("RuntimeError: Unsupported architecture: sm_120\n", "arch_unsupported"),
    # a number format refused for a quantization method is the method's, not the GPU's (from the source
    # of vLLM's quantization configs): a value refused with the supported ones listed (round 16: bad_args)
    ("ValueError: torch.bfloat16 is not supported for quantization method awq. Supported dtypes: "
     "[torch.float16]\n", "bad_args"),
    # a bare AssertionError whose failing statement checks the device's capability (torch's
    # get_device_capability, vLLM's current_platform.has_device_capability) is the GPU's; another
    # bare assert names nothing
    ('Traceback (most recent call last):\n  File "/x/fa3.py", line 12, in forward\n'
     "    assert torch.cuda.get_device_capability()[0] >= 9\nAssertionError\n", "arch_unsupported"),
    ("(EngineCore pid=1) ERROR [core.py:1]     assert current_platform.has_device_capability(90)\n"
     "(EngineCore pid=1) ERROR [core.py:1] AssertionError\n", "arch_unsupported"),
    ('Traceback (most recent call last):\n  File "/x/a.py", line 12, in f\n    assert len(x) == 3\nAssertionError\n',
     None),
    # the loader's "error loading model:" prefix before an allocation failure is no file problem (from the
    # source of llama.cpp's loader); with a device named it is the GPU's memory
    ("llama_model_load: error loading model: unable to allocate backend buffer\n", None),
    ("llama_model_load: error loading model: unable to allocate CUDA0 buffer\n", "oom_gpu"),
    # a parallel size that does not divide the heads, in other words
    ("ValueError: Tensor parallel size 3 does not divide the number of attention heads 32\n", "bad_args"),
    # a port check that goes on with another port; a hanging thread of an emulator is no engine hang verdict
    ("Port 30000 is not available, trying 30001\n", None),
    ("emulator: ERROR | detected a hanging thread 'QEMU2 CPU0 thread'\n", None),
    # a model file that fails to load next to a library name is the model's
    ("ERROR: failed to load model weights /models/x.safetensors (loader libllama.so)\n", "model_load"),
])
def test_round4b_lookalikes_name_nothing_wrong(log, cause):
    found = find_cause(log)
    assert (found.cause if found else None) == cause, found


# Round 4b, widening the same classes with more of the sources' own wordings (not from any log set).
@pytest.mark.parametrize("line,cause", [
    # from the source of torch's ProcessGroupNCCL watchdog and torch.distributed.elastic's rendezvous
    pytest.param("[rank3]:[E1203 10:00:00.0 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation "
                 "timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600123 milliseconds",
                 "hang", id="torch-nccl-watchdog"),
    # the first collective too (LABELS.md: a collective that was running and timed out)
    pytest.param("[rank3]:[E1203 10:00:00.0 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation "
                 "timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, Timeout(ms)=600000) ran for 600123 milliseconds",
                 "hang", id="torch-nccl-watchdog-first-collective"),
    # a group that never formed is set-up
    pytest.param("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system "
                 "error, NCCL version 2.21.5", "distributed_init", id="nccl-error-at-init"),
    pytest.param("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError", "distributed_init",
                 id="torch-elastic-rendezvous"),
    # from the source of SGLang's assert_pkg_version, transformers' require_version, importlib.metadata
    pytest.param("Exception: sgl-kernel is installed with version 0.3.1, which is less than the minimum required "
                 "version 0.3.5. Please reinstall the latest version", "import_error", id="sglang-pkg-version"),
    pytest.param("huggingface-hub>=0.34.0,<1.0 is required for a normal functioning of this module, but found "
                 "huggingface-hub==1.2.3.", "import_error", id="transformers-require-version"),
    pytest.param("importlib.metadata.PackageNotFoundError: No package metadata was found for flashinfer-python",
                 "import_error", id="importlib-metadata"),
    # from the source of CUTLASS's sm90 kernels: the stub of a kernel built without the arch-specific target
    pytest.param("ERROR : Arch conditional MMA instruction used without targeting appropriate compute capability. "
                 "Aborting.", "arch_unsupported", id="cutlass-arch-conditional"),
    # from the source of nvcc's EDG front end and gcc: diagnostics without their file prefix
    pytest.param('error: identifier "__nv_fp8_e4m3" is undefined', "jit_compile", id="nvcc-identifier-undefined"),
    pytest.param("error: 'cudaGetDriverEntryPointByVersion' was not declared in this scope", "jit_compile",
                 id="gcc-not-declared"),
    # from the source of vLLM's engine core start-up handshake
    pytest.param("RuntimeError: Did not receive response from front-end process within 5 minutes", "startup_timeout",
                 id="vllm-handshake"),
    # from the source of older ggml (GGML_ASSERT: file:line: expr) and of launchers' readiness verdicts
    pytest.param('GGML_ASSERT: /llama.cpp/ggml-cuda.cu:6742: !"CUDA error"', "crash", id="ggml-old-assert"),
    pytest.param("RuntimeError: The server is not healthy after 600 seconds", "startup_timeout", id="not-healthy-after"),
    # from the device APIs' error enums (HIP's hipError_t, Vulkan's VkResult / vk::Result)
    pytest.param("ggml_cuda_init: hipMalloc failed with hipErrorOutOfMemory", "oom_gpu", id="hip-enum"),
    pytest.param("ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory", "oom_gpu", id="vulkan-enum"),
    # from the source of torchvision's extension loader and torch's dispatcher; Windows' loader (WinError 127)
    pytest.param("RuntimeError: Couldn't load custom C++ ops. This can happen if your PyTorch and torchvision versions "
                 "are incompatible", "import_error", id="torchvision-custom-ops"),
    pytest.param("RuntimeError: operator torchvision::nms does not exist", "import_error", id="torch-operator-missing"),
    pytest.param("OSError: [WinError 127] The specified procedure could not be found. Error loading "
                 "\"C:\\torch\\lib\\c10_cuda.dll\" or one of its dependencies.", "import_error", id="winerror-127"),
    pytest.param("RuntimeError: Failed to load library libnvinfer_plugin.so.10", "import_error", id="failed-to-load-so"),
    # the GPU as the subject of a refusal; the CUDA runtime's "driver version is insufficient" in other words
    pytest.param("RuntimeError: This GPU does not support tensor memory accelerator operations", "arch_unsupported",
                 id="this-gpu-does-not-support"),
    # from the source of llama.cpp's model loader: a tensor of another shape than the architecture expects
    pytest.param("llama_model_load: error loading model: check_tensor_dims: tensor 'output.weight' has wrong shape; "
                 "expected  4096, 32000, got  4096, 32001", "model_load", id="llamacpp-wrong-shape"),
    # from the source of servers' own port checks before they bind
    pytest.param("ValueError: Port 30000 is not available. Please choose another port.", "port_in_use",
                 id="port-not-available"),
    pytest.param("ERROR: Address 0.0.0.0:8000 is already in use", "port_in_use", id="address-already-in-use"),
    # requests' own message for the hub's 404 on the model's URL
    pytest.param("requests.exceptions.HTTPError: 404 Client Error: Not Found for url: "
                 "https://huggingface.co/api/models/org/missing-model", "model_load", id="hub-404"),
    # a watchdog's verdict that the work stopped making progress
    pytest.param("ERROR: detected a hang: no progress for 600 seconds", "hang", id="hang-detected"),
    # launchers' and routers' start-up verdicts in other words
    pytest.param("ERROR: Timeout waiting for workers to become ready: 1/2 ready after 600s", "startup_timeout",
                 id="timeout-waiting-for-workers"),
    pytest.param("RuntimeError: Initialization timed out after 1800 seconds", "startup_timeout",
                 id="initialization-timed-out"),
    pytest.param("TimeoutError: The engine did not start within 600 seconds", "startup_timeout", id="did-not-start-within"),
    pytest.param("RuntimeError: server did not start up within the given timeout", "startup_timeout",
                 id="within-the-given-timeout"),
])
def test_round4b_more_source_wordings(line, cause):
    assert classify(line + "\n", exit_code=1).cause == cause


def test_nccl_warning_of_a_cuda_failure_is_not_named_a_collective_failure():
    # NCCL reports a CUDA allocation failure as a WARN line: not a failure between ranks
    assert classify("host:1:2 [0] NCCL WARN Cuda failure 'out of memory'\n", exit_code=1).cause != "distributed_init"


# --- round 5: heldout4's wrong causes, by structure -------------------------------------------------

_V1_TRACEBACK = (
    "ERROR 02-17 20:51:49 core.py:210] Traceback (most recent call last):\n"
    'ERROR 02-17 20:51:49 core.py:210]   File "/x/y.py", line 156, in __init__\n'
    "ERROR 02-17 20:51:49 core.py:210]     assert check(self.version)\n"
    "ERROR 02-17 20:51:49 core.py:210] AssertionError\n"
    "ERROR 02-17 20:51:49 core.py:210] \n"
    # from the source of vLLM V1's engine client: it logs this, then kill_process_tree(os.getpid())
    "CRITICAL 02-17 20:51:49 core_client.py:158] Got fatal signal from worker processes, shutting down. "
    "See stack trace above for root cause issue.\n"
)


@pytest.mark.parametrize("exit_code", [None, 137])
def test_a_kill_right_after_the_final_exception_is_its_consequence(exit_code):
    # the shell's "Killed" after the engine's own fatal error: the exception decides (here unknown to
    # the rules), not the kill; the SIGKILL exit status is that same death
    d = classify(_V1_TRACEBACK + "Killed\n", exit_code=exit_code)
    assert d.cause == "unknown"
    assert any("AssertionError" in e for e in d.evidence)
    # a known exception still names its cause
    oom = _V1_TRACEBACK.replace("AssertionError", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert classify(oom + "Killed\n", exit_code=exit_code).cause == "oom_gpu"


@pytest.mark.parametrize("log", [
    pytest.param("INFO loading weights\nINFO loading weights 50%\nKilled\n", id="no-exception"),
    # the exception is long past: the kill is something else
    pytest.param(_V1_TRACEBACK + "INFO serving\n" * 25 + "Killed\n", id="exception-long-before"),
    # a kill that names memory is a kill for memory, whatever came before it
    pytest.param(_V1_TRACEBACK + "[12345.6] Out of memory: Killed process 42 (python)\n", id="oom-killer"),
    pytest.param("bash: line 1:  4242 Killed                  python -m server\n", id="bash-line"),
])
def test_a_kill_that_follows_no_exception_is_still_a_kill(log):
    assert classify(log).cause == "killed"


def test_a_shape_window_does_not_cut_a_word_into_a_token():
    # the 40-character window before "cannot be" began inside "TensorRT-LLM", so "-LLM" read as a flag
    # (bad_args): it was cut out of the line, losing the "T" the flag's lookbehind needs
    line = "  what():  [TensorRT-LLM][ERROR] Assertion failed: KV reuse cannot be combined with this model.\n"
    assert line.index("cannot be") - 40 == line.index("-LLM")
    assert classify(line, exit_code=1).cause == "unknown"
    # a real flag in the window still counts
    flag = "ValueError: --enable-prefix-caching cannot be combined with --kv-cache-dtype fp8\n"
    assert classify(flag, exit_code=1).cause == "bad_args"


@pytest.mark.parametrize("line,cause", [
    # GPU architecture families are architecture vocabulary (like sm_NN), and "except on" states a floor
    ("  what():  [TensorRT-LLM][ERROR] Assertion failed: FP8 FMHA cannot be enabled except on Ada or Hopper "
     "or Blackwell Arch. (/code/attentionOp.cpp:2357)", "arch_unsupported"),
    ("RuntimeError: this kernel is only supported on CDNA3", "arch_unsupported"),
    # an architecture next to a flag's constraint makes it the GPU's constraint, not the flag's
    ("ValueError: --kv-cache-dtype fp8_e4m3 requires Hopper or newer", "arch_unsupported"),
    ("ValueError: --kv-cache-dtype fp8_e4m3 requires sm_89 or newer", "arch_unsupported"),
    # lookalikes: "except for" without an architecture names no GPU
    ("ValueError: all modules except for lm_head must be quantized", "unknown"),
])
def test_round5_architecture_families(line, cause):
    assert classify(line + "\n", exit_code=1).cause == cause


@pytest.mark.parametrize("line,cause", [
    # from the source of TGI's warm-up: any failure of the warm-up batch is raised as this
    ("RuntimeError: Not enough memory to handle 16000 prefill tokens. You need to decrease "
     "`--max-batch-prefill-tokens`", "oom_gpu"),
    # CUDA's error 804 by its message and by its enum names (CUDA's own error catalog)
    ("RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 804: forward compatibility was "
     "attempted on non supported HW", "arch_unsupported"),
    ("CUDA error: cudaErrorCompatNotSupportedOnDevice", "arch_unsupported"),
    # from the source of TensorRT-LLM's modeling_auto: the engine has no class for the architecture
    ("ValueError: Unknown architecture for AutoModelForCausalLM: GraniteForCausalLM", "model_load"),
    # from the source of vLLM's input processing: the prompt is longer than the max model length set
    ("ValueError: The encoder prompt (length 5000) is longer than the maximum model length of 4096. "
     "Make sure that `max_model_len` is no smaller than the number of text tokens.", "bad_args"),
    # a start-up handshake's READY message that never came
    ("TimeoutError: Timed out waiting for READY from EngineCoreProc after 600s.", "startup_timeout"),
])
def test_round5_classes_from_the_sources(line, cause):
    assert classify(line + "\n", exit_code=1).cause == cause


@pytest.mark.parametrize("log", [
    # budgets and handshakes logged as settings or progress are no failure
    "INFO text_generation_launcher: Setting max batch total tokens to 27088\n",
    "INFO 01-01 00:00:00 [core.py:1] Waiting for READY from EngineCoreProc (timeout 600s)\n",
    # the prompt-length refusal quoted in an info line (not raised) is no failure
    "INFO 01-01 00:00:00 [serving.py:1] request 7 rejected: prompt (length 44) is longer than the maximum model length\n",
    # an architecture that is a GPU's, not a model class, is no model_load
    "WARNING Unknown architecture: sm_121, using defaults\n",
])
def test_round5_lookalikes_name_nothing(log):
    assert find_cause(log) is None


@pytest.mark.parametrize("line,cause", [
    # NCCL's result codes as CuPy names them (from the source of cupy's nccl bindings)
    ("cupy_backends.cuda.libs.nccl.NcclError: NCCL_ERROR_REMOTE_ERROR: remote process exited or there was a "
     "network error", "distributed_init"),
    # NVSHMEM's own words for transports it cannot set up (from its source)
    ("/opt/nvshmem/src/host/transport/transport.cpp:nvshmemi_transport_init:287: Unable to initialize any "
     "transports. returning error.", "distributed_init"),
    ("/opt/nvshmem/src/host/init/init.cu:nvshmemi_check_state_and_init:1080: nvshmem initialization failed, "
     "exiting", "distributed_init"),
    ("/opt/nvshmem/src/modules/transport/ibgda/ibgda.cpp:2010: non-zero status: 4 ibv_create_qp failed",
     "distributed_init"),
    # two packages that must share a version (from the source of FlashInfer's import-time check)
    ("RuntimeError: flashinfer-jit-cache version (0.5.2) does not match flashinfer version (0.5.3). Please "
     "install the same version of both packages.", "import_error"),
])
def test_round5_more_source_wordings(line, cause):
    assert classify(line + "\n", exit_code=1).cause == cause


def test_round5_nccl_success_code_is_no_failure():
    # NCCL_ERROR_SUCCESS is the success code's name, and a version that matches names nothing
    assert find_cause("DEBUG nccl status NCCL_ERROR_SUCCESS\n") is None
    assert find_cause("INFO flashinfer version (0.6.3) matches flashinfer-cubin version (0.6.3)\n") is None


@pytest.mark.parametrize("line", [
    # the CUDA driver API's names for the faults already known by their messages (CUDA's error catalog)
    "CUDA driver error (handle.hpp:154): 719 CUDA_ERROR_LAUNCH_FAILED",
    "RuntimeError: CUDA driver error: CUDA_ERROR_ILLEGAL_ADDRESS",
    "cuLaunchKernel failed: CUDA_ERROR_ASSERT",
])
def test_round5_driver_api_fault_names(line):
    assert classify(line + "\n", exit_code=1).cause == "illegal_memory_access"


# --- round 6: the final exception's frames (issue 27) ---------------------------------------------
# Tracebacks whose exception names no cause, with the engines' and libraries' real function and module
# names (vLLM's glm4_moe load_weights and gpu_worker determine_available_memory, torch.distributed's
# init_process_group/_store_based_barrier, Triton's compiler, argparse, importlib's bootstrap frames).

def _tb(frames: list[tuple[str, str, str]], exc: str, prefix: str = "") -> str:
    out = [f"{prefix}Traceback (most recent call last):"]
    for path, func, code in frames:
        out += [f'{prefix}  File "{path}", line 10, in {func}', f"{prefix}    {code}"]
    return "\n".join([*out, f"{prefix}{exc}"])


_SP = "/usr/local/lib/python3.12/site-packages"
_SCRIPT = ("/usr/local/bin/vllm", "<module>", "sys.exit(main())")
_FRAME_CASES = [
    ("model_load", [_SCRIPT, (f"{_SP}/vllm/v1/worker/gpu_model_runner.py", "load_model", "self.model = model_loader.load_model("),
                    (f"{_SP}/vllm/model_executor/models/glm4_moe.py", "load_weights", "shard = shards[rank]")],
     "IndexError: list index out of range", "load_weights"),
    ("model_load", [("train.py", "<module>", "tok = AutoTokenizer.from_pretrained(path)"),
                    (f"{_SP}/transformers/models/auto/tokenization_auto.py", "from_pretrained", "return cls(...)")],
     "TypeError: expected str, bytes or os.PathLike object, not NoneType", "from_pretrained"),
    ("import_error", [_SCRIPT, (f"{_SP}/vllm/__init__.py", "<module>", "from vllm.engine.arg_utils import AsyncEngineArgs"),
                      ("<frozen importlib._bootstrap>", "_call_with_frames_removed", ""),
                      (f"{_SP}/flashinfer/comm/cuda_ipc.py", "<module>", "def exchange(a: array.array[int]):")],
     "TypeError: type 'array.array' is not subscriptable", "<module>"),
    ("bad_args", [("/usr/lib/python3.12/runpy.py", "_run_module_as_main", "return _run_code(code, main_globals, None,"),
                  ("train.py", "<module>", "model_args, data_args = parser.parse_args_into_dataclasses()"),
                  (f"{_SP}/transformers/hf_argparser.py", "parse_args_into_dataclasses", "obj = dtype(**inputs)"),
                  ("<string>", "__init__", "")],
     "TypeError: unsupported operand type(s) for +: 'int' and 'str'", "parse_args_into_dataclasses"),
    ("jit_compile", [_SCRIPT, (f"{_SP}/triton/compiler/compiler.py", "compile", "next_module = compile_ir(module, metadata)"),
                     (f"{_SP}/triton/backends/nvidia/compiler.py", "make_cubin", "raise RuntimeError(msg)")],
     "IndexError: list index out of range", "make_cubin"),
    ("distributed_init", [_SCRIPT, (f"{_SP}/vllm/distributed/parallel_state.py", "init_distributed_environment",
                                    "torch.distributed.init_process_group("),
                          (f"{_SP}/torch/distributed/distributed_c10d.py", "init_process_group", "store, rank, world_size = next(rendezvous_iterator)")],
     "ValueError: invalid literal for int() with base 10: ''", "init_process_group"),
    ("oom_gpu", [_SCRIPT, (f"{_SP}/vllm/v1/worker/gpu_worker.py", "determine_available_memory", "self.model_runner.profile_run()"),
                 (f"{_SP}/vllm/v1/worker/gpu_model_runner.py", "profile_run", "dummy = torch.empty(n, dtype=dtype, device=dev)")],
     "RuntimeError: could not reserve 4.50 GiB for the profile run", "profile_run"),
]


@pytest.mark.parametrize(("cause", "frames", "exc", "deciding"), _FRAME_CASES, ids=[c[0] + str(i) for i, c in enumerate(_FRAME_CASES)])
def test_frames_name_the_cause_no_rule_names(cause, frames, exc, deciding):
    log = "INFO starting\n" + _tb(frames, exc, prefix="(EngineCore pid=1) ERROR 08-16 11:45:16 [core.py:1] ") + "\n"
    d = classify(log, exit_code=1)
    assert (d.cause, d.rule) == (cause, f"{cause}/frames"), d
    assert any(exc in e for e in d.evidence)  # the verdict quotes the final exception...
    assert any(f"in {deciding}" in e for e in d.evidence)  # ...and the deciding frame
    assert deciding in d.explanation
    assert find_cause(log) is not None


def test_frames_without_any_cause_frame_stay_unknown():
    # the program's own <module> frame (and runpy's) is no import: a KeyError in main() names nothing
    log = _tb([("/usr/lib/python3.12/runpy.py", "_run_module_as_main", ""), ("serve.py", "<module>", "main()"),
               ("serve.py", "main", "cfg = conf['architecture']")], "KeyError: 'architecture'")
    assert classify(log, exit_code=1).cause == "unknown"


_FRAME_LOOKALIKES = {
    # frames of two causes: loading weights inside a process group's set-up
    "two_causes": _tb([_SCRIPT, (f"{_SP}/torch/distributed/distributed_c10d.py", "init_process_group", ""),
                       (f"{_SP}/vllm/model_executor/models/llama.py", "load_weights", "")], "KeyError: 'x'"),
    # the engine survived the traceback: the server listened afterwards
    "survived": _tb([_SCRIPT, (f"{_SP}/vllm/model_executor/models/llama.py", "load_weights", "")], "KeyError: 'x'")
                + "\nINFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
    # the engine went on to another phase after it (CUDA graphs captured)
    "went_on": _tb([_SCRIPT, (f"{_SP}/vllm/model_executor/models/llama.py", "load_weights", "")], "KeyError: 'x'")
               + "\nINFO 08-16 [gpu_model_runner.py:1] Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%",
    # logged as a warning: the engine reported it and went on
    "warning": _tb([_SCRIPT, (f"{_SP}/vllm/model_executor/models/llama.py", "load_weights", "")],
                   "KeyError: 'x'", prefix="WARNING 08-16 11:45:16 [utils.py:1] "),
    # an allocation frame without a memory word is not memory
    "alloc_frame_no_memory_word": _tb([_SCRIPT, (f"{_SP}/vllm/v1/worker/gpu_worker.py", "determine_available_memory", ""),
                                       (f"{_SP}/vllm/v1/worker/gpu_model_runner.py", "profile_run", "")],
                                      "AssertionError: expected 3 dimensions, got 2"),
    # a model-loading function that is not reading weights (load_model also builds the layers)
    "load_model_only": _tb([_SCRIPT, (f"{_SP}/vllm/v1/worker/gpu_model_runner.py", "load_model", ""),
                            (f"{_SP}/vllm/attention/layer.py", "__init__", "")], "AssertionError"),
}


@pytest.mark.parametrize("name", sorted(_FRAME_LOOKALIKES))
def test_frames_lookalikes_stay_unknown(name):
    log = _FRAME_LOOKALIKES[name]
    assert classify(log, exit_code=1).cause == "unknown"
    assert find_cause(log) is None


def test_a_rule_always_wins_over_the_frames():
    # weights were loading, but the exception itself names the GPU running out of memory
    log = _tb([_SCRIPT, (f"{_SP}/vllm/model_executor/models/llama.py", "load_weights", "")],
              "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")
    d = classify(log, exit_code=1)
    assert d.cause == "oom_gpu" and not d.rule.endswith("/frames")


def test_only_the_last_traceback_counts():
    # an earlier traceback (weights) handled; the final one (an import chain) decides
    first = _tb([_SCRIPT, (f"{_SP}/vllm/model_executor/models/llama.py", "load_weights", "")], "KeyError: 'x'")
    second = _tb([_SCRIPT, (f"{_SP}/vllm/__init__.py", "<module>", "import vllm._C"),
                  ("<frozen importlib._bootstrap>", "_find_and_load", "")], "TypeError: bad operand")
    log = first + "\n\nDuring handling of the above exception, another exception occurred:\n\n" + second
    assert classify(log, exit_code=1).cause == "import_error"


# --- round 6: heldout5's wrong causes, by structure -----------------------------------------------

@pytest.mark.parametrize(("log", "cause"), [
    # TensorRT's builder runs out of device memory: memory, not a compiler (TensorRT-LLM's logger tags
    # TensorRT's own messages "[TRT]"; "Error Code 2: OutOfMemory" is TensorRT's error category)
    ("[TRT] [E] 2: [virtualMemoryBuffer.cpp::resizePhysical::140] Error Code 2: OutOfMemory (no further information)\n"
     "[TRT-LLM] [E] Engine building failed, please check the error log.", "oom_gpu"),
    # TensorRT's builder failing without a memory word is not a compile either
    ("[TRT-LLM] [E] Engine building failed, please check the error log.", "unknown"),
    # a build line with an allocation failure on it is no compile failure (no device named: unknown)
    ("[E] JIT compilation failed: unable to allocate the workspace", "unknown"),
    # TensorRT's OutOfMemory alone, tagged as TensorRT's: device memory
    ("[TRT] [E] 2: [virtualMemoryBuffer.cpp::resizePhysical::140] Error Code 2: OutOfMemory (no further information)",
     "oom_gpu"),
    # a signal named by the launcher is the rank's death
    ("mpirun noticed that process rank 6 with PID 0 on node n1 exited on signal 9 (Killed).", "killed"),
    ("mpirun noticed that process rank 0 with PID 12 on node n1 exited on signal 11 (Segmentation fault).", "crash"),
    # without a signal, mpirun's report stays the job's distributed failure
    ("mpirun has detected an attempt by a process to exit without calling MPI_FINALIZE.", "distributed_init"),
    # a Rust panic whose payload (on the next line) is serde's parse error of the model's config
    ("thread 'main' panicked at src/main.rs:406:19:\n"
     'APIError { data: "missing field `vocab_size` at line 46 column 1" }', "model_load"),
    # a panic with any other payload stays a crash
    ("thread 'main' panicked at src/main.rs:406:19:\ncalled `Option::unwrap()` on a `None` value", "crash"),
])
def test_round6_wrong_causes_by_structure(log, cause):
    assert classify(log, exit_code=1).cause == cause


def test_serde_error_of_a_request_is_not_the_model():
    log = 'ERROR router: Failed to parse request body: missing field `messages` at line 1 column 20'
    assert classify(log, exit_code=1).cause != "model_load"


# --- round 7: classes from heldout3-6's misses (development data), written from the libraries' sources ---

_ROUND7 = [
    # a KV cache is device memory even when the message mentions the CPU backend's memory
    ("ValueError: To serve at least one request with the model's max seq len (32768), (2.50 GiB KV cache is "
     "needed, which is larger than the available KV cache memory (0.90 GiB). Try increasing "
     "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend)", "oom_gpu"),
    # TensorRT's builder plans a layer's scratch space on the device
    ("[TRT] [E] 4: Internal error: plugin node attn_0 requires 9000000000 bytes of scratch space, but only "
     "8000000000 is available.", "oom_gpu"),
    # MLIR's diagnostics from any MLIR-based compiler
    ("error: failed to legalize operation 'tt.make_range' that was explicitly marked illegal", "jit_compile"),
    ("kernel.py:12:0: error: Failures have been detected while processing an MLIR pass pipeline", "jit_compile"),
    # a native access violation raised through ctypes, and in Windows' own words
    ("OSError: exception: access violation writing 0x0000000000000010", "crash"),
    ("Unhandled exception: Access violation reading location 0xFFFFFFFFFFFFFFFF.", "crash"),
    # a native assertion logged by a wrapper at DEBUG is still the abort
    ("[2025-01-01 10:00:00][DEBUG] llama.cpp abort:99: GGML_ASSERT(n_tokens <= n_batch) failed", "crash"),
    # ggml's context buffer is a host allocation: its null check failing is host memory, in both forms
    ("ggml.c:1500: GGML_ASSERT(ctx->mem_buffer != NULL) failed\nAborted (core dumped)", "oom_host"),
    ("GGML_ASSERT: /src/ggml.c:4411: ctx->mem_buffer != NULL\nAborted", "oom_host"),
    # another null check in an assertion is no allocation we can name
    ("GGML_ASSERT: /src/ggml.c:4411: tensor->data != NULL\nAborted", "crash"),
    # HIP's fat-binary loader has no code object for this GPU
    (":1:hip_fatbin.cpp :600 : 1 us: No compatible code objects found for: gfx1103, value of "
     "HIP_FORCE_SPIRV_CODEOBJECT: 0\nSegmentation fault (core dumped)", "arch_unsupported"),
    # FlashAttention 3 exists for Hopper only
    ("AssertionError: Attention sinks are only supported in FlashAttention 3", "arch_unsupported"),
    # NCCL's WARN line of a failing CUDA call is an error: the CUDA error names the cause
    ("node:1:2 [0] include/alloc.h:50 NCCL WARN Cuda failure 'an illegal memory access was encountered'",
     "illegal_memory_access"),
    ("node:1:2 [0] include/alloc.h:50 NCCL WARN Cuda failure 'out of memory'", "oom_gpu"),
    # cosmopolitan's flag parser (llamafile)
    ("./llamafile: --port unknown argument", "bad_args"),
    ("error: invalid parameter for argument: --temp\nerror: failed to parse flags", "bad_args"),
    # an argparse usage block whose error line the excerpt lost; a real cause after it wins
    ("usage: api_server.py [-h] [--host HOST] [--port PORT]\n                     [--model MODEL]", "bad_args"),
    ("usage: api_server.py [-h] [--host HOST]\ntorch.OutOfMemoryError: CUDA out of memory.", "oom_gpu"),
    # a value over a limit a setting gave; a memory budget on the line is memory instead
    ("RuntimeError: Worker failed with error 'LoRA rank 64 is greater than max_lora_rank 8.'", "bad_args"),
    ("ValueError: max_num_seqs (1024) exceeds --max-num-batched-tokens (512)", "bad_args"),
    ("ValueError: The model's max_model_len (131072) is larger than the maximum number of tokens that can be "
     "stored in KV cache (20000)", "oom_gpu"),
    # a LoRA adapter that cannot be loaded is the model's
    ("ValueError: Loading lora my_adapter failed: No adapter found for /ckpt/checkpoint-10", "model_load"),
    ("ValueError: base_model.model.embed_tokens.weight is unsupported LoRA weight", "model_load"),
    # a LoRA word next to a failure that is not the adapter's load is not named so
    ("RuntimeError: the LoRA kernel failed: CUDA error: an illegal memory access was encountered",
     "illegal_memory_access"),
    ("RuntimeError: LoRA forward failed with error code 3", "unknown"),
    # Open MPI's collective component failing to initialise
    ("Error: coll_ucc_module.c:273 - mca_coll_ucc_init_ctx() UCC library doesn't support MPI_THREAD_MULTIPLE",
     "distributed_init"),
    # a file that is not in the format it is named for
    ("Failed to create data: java.lang.IllegalArgumentException: File is not in GGUF format", "model_load"),
]


def test_round7_a_limit_comparison_at_info_level_is_no_failure():
    log = "INFO 01-01 10:00:00 config.py:100] max_num_batched_tokens (8192) is larger than max_model_len (4096)\n"
    assert classify(log + "INFO: Application startup complete.\n", exit_code=None).cause == "unknown"


# --- round 8: heldout7's misses and wrong causes (development data after its one scoring) ---

_TCPSTORE_RETRY = ("[W1226 15:44:31.548330712 TCPStore.cpp:358] [c10d] TCP client failed to connect/validate to host "
                   "h1:8000 - retrying (try=0, timeout=600000ms, delay=7116ms): The client socket has timed out after "
                   "600000ms while trying to connect to (h1, 8000).\n")


_ROUND8 = [
    # a wrapper relaying a child's stderr at its own DEBUG level: the child's line decides
    ("8:02AM DBG GRPC(m-127.0.0.1:39595): stderr ggml_backend_cuda_buffer_type_alloc_buffer: allocating 5563.66 MiB "
     "on device 0: cudaMalloc failed: out of memory", "oom_gpu"),
    # ... and a relayed line with its own warning level stays a warning
    ("8:02AM DBG GRPC(m-127.0.0.1:39595): stderr W0101 12:00:00 alloc.cc:1] cudaMalloc failed: out of memory", "unknown"),
    # a wrapper's own DEBUG line (no relayed stream) stays a debug line
    ("8:02AM DBG probing: cudaMalloc failed: out of memory", "unknown"),
    # a warning of a retried operation whose retries ran out (the C++ exception after it) is the failure
    (_TCPSTORE_RETRY + "Exception raised from throwTimeoutError at ../torch/csrc/distributed/c10d/socket.cpp:1013 "
     "(most recent call first):", "distributed_init"),
    # ... retried and then nothing, or retried and then connected: no failure named
    (_TCPSTORE_RETRY, "unknown"),
    # readiness in a wrapper's and a harness's words
    ("Starting server with model: m.gguf\nError: Server did not start in time\nServer stopped", "startup_timeout"),
    ("E   RuntimeError: Server failed to start in time.", "startup_timeout"),
    # a CUDA kernel's assert in MSVC's form (block and thread named, no backticks)
    ("C:\\pytorch\\aten\\src\\ATen\\native\\cuda\\IndexKernel.cu:92: block: [1115,0,0], thread: [11,0,0] "
     "Assertion -sizes[i] <= index && index < sizes[i] && \"index out of bounds\" failed.", "illegal_memory_access"),
    # the driver's Xid of a memory page fault (dmesg); Xid 8 stays a stall
    ("[Fri Jun  5 01:02:42 2026] NVRM: Xid (PCI:0000:10:00): 31, pid=1958081, name=python3, channel 0x00000009, "
     "intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 faulted @ 0x7f0b_27600000.", "illegal_memory_access"),
    ("[Fri Jun  5 01:02:42 2026] NVRM: Xid (PCI:0000:10:00): 8, pid=1958081, name=python3, channel 0x00000009",
     "hang"),
    # HIP finds no kernel of that name in this GPU's code objects
    (":0:/src/clr/hipamd/src/hip_global.cpp:114 : 1 us: [pid:1 tid:0x1] Cannot find Symbol with name: "
     "Cijk_Alik_Bljk_HB_MT32x32x16\nAborted (core dumped)", "arch_unsupported"),
    # TGI's launcher refusing its arguments
    ('Error: ArgumentValidation("`max_input_tokens`(4097) must be < `max_total_tokens`(4096)")', "bad_args"),
    # a checkpoint without a weight the model code loads
    ("RuntimeError: weight model.embed_tokens.weight does not exist", "model_load"),
    # TensorRT-LLM's world check: the MPI world is not tp * pp ranks
    ("RuntimeError: [TensorRT-LLM][ERROR] Assertion failed: mpiSize == tp * pp (/src/cpp/tensorrt_llm/runtime/"
     "worldConfig.cpp:90)", "distributed_init"),
    # an assertion inside MLIR (Triton's compiler) is the compile failing; another glibc assertion is a crash
    ("python: /project/lib/Analysis/Allocation.cpp:40: std::pair<int, int> mlir::triton::getCvtOrder(mlir::Attribute, "
     "mlir::Attribute): Assertion `!(srcMma && dstMma) && \"Unexpected mma -> mma layout conversion\"' failed.",
     "jit_compile"),
    ("python: /src/server.cpp:40: void Server::run(): Assertion `queue.size() > 0' failed.\nAborted (core dumped)",
     "crash"),
]


def test_round8_user_rules_may_set_the_relayed_stream(tmp_path):
    (tmp_path / "_common.toml").write_text("relayed = '\\bchild>\\s'\n")
    log = "10:00 DBG runner: child> cudaMalloc failed: out of memory"
    assert classify(log, exit_code=1).cause == "unknown"
    assert classify(log, exit_code=1, rules_dir=tmp_path).cause == "oom_gpu"


def test_round8_a_missing_option_or_file_is_no_missing_weight():
    assert classify("RuntimeError: option --x does not exist", exit_code=1).cause != "model_load"
    assert classify("ValueError: parameter max_tokens not found in the request", exit_code=1).cause != "model_load"


# --- round 9: heldout8's misses (development data after its one scoring) ---

_ROUND9 = [
    # Metal's command-buffer error for device memory
    ("ggml-metal-context.m:235: fatal error\nerror: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)",
     "oom_gpu"),
    # DeepSpeed's op builder kept no compute capability of this GPU
    ("RuntimeError: Unable to load inference_core_ops op due to no compute capabilities remaining after filtering",
     "arch_unsupported"),
    # a Hopper-only kernel refused at launch ("invalid argument"); the same error from another kernel names nothing
    ("CUDA error (/src/flash-attention/hopper/flash_fwd_launch_template.h:188): invalid argument", "arch_unsupported"),
    ("CUDA Error: invalid argument (invalid argument) /src/include/flashinfer/attention/hopper/prefill_sm90.cuh: line 414 "
     "at function cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_size)",
     "arch_unsupported"),
    ("CUDA error (/src/csrc/attention/paged_attention.cu:88): invalid argument", "unknown"),
    # a native library not where the package looks; a model file not found is not an import
    ("RuntimeError: Configured CUDA binary not found at /venv/site-packages/bitsandbytes/libbitsandbytes_cuda128.so",
     "import_error"),
    ("OSError: libcudart.so.13: cannot be found", "import_error"),
    # Open MPI's runtime failing to start its processes
    ("It looks like orte_init failed for some reason; your parallel process is\nlikely to abort.", "distributed_init"),
    # DeepGEMM's JIT runtime: its compiler run did not exit 0
    ("RuntimeError: Assertion error (csrc/apis/../jit/kernel_runtime.hpp:45): exit_code == 0", "jit_compile"),
    # a toolchain without this GPU is a compile failure, and so is ptxas refusing a kernel's instruction for the
    # target it builds (LABELS.md, relabelled in round 13); a kernel refused at run time is the GPU's
    ("ptxas /tmp/x.ptx, line 6; error   : PTX .version 8.4 does not support .target sm_120a\n"
     "ptxas fatal   : Ptx assembly aborted due to errors", "jit_compile"),
    ("ptxas /tmp/x.ptx, line 110274; error   : Feature 'f16 arithemetic and compare instructions' requires .target "
     "sm_53 or higher", "jit_compile"),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device (sm_52)", "arch_unsupported"),
]


def test_round9_a_model_file_not_found_is_not_an_import():
    log = "FileNotFoundError: model file not found at /models/llama.so.gguf"
    assert classify(log, exit_code=1).cause != "import_error"


def test_round9_a_config_attribute_missing_in_transformers_frames_is_the_model():
    log = _tb([_SCRIPT, (f"{_SP}/sglang/srt/configs/model_config.py", "__init__", "self.hidden_size = c.hidden_size"),
               (f"{_SP}/transformers/configuration_utils.py", "__getattribute__", "return super().__getattribute__(key)")],
              "AttributeError: 'InternVLChatConfig' object has no attribute 'hidden_size'")
    d = classify(log, exit_code=1)
    # round 20: a config class's missing field names the model by its own rule; the frames no longer decide
    # an AttributeError (a code error says itself what went wrong)
    assert (d.cause, d.rule) == ("model_load", "model_load/model_config_lacks_field")


def test_round20_frames_do_not_name_a_code_error():
    """An attribute the running code does not have is two versions that do not match, wherever it happens: the
    frames of init_process_group do not make it a failed set-up of communication."""
    log = _tb([_SCRIPT, (f"{_SP}/openrlhf/trainer/ray/vllm_engine.py", "init_process_group",
                         "return self.llm.collective_rpc('init_process_group')"),
               (f"{_SP}/vllm/entrypoints/llm.py", "collective_rpc", "executor = self.llm_engine.model_executor")],
              "AttributeError: 'LLMEngine' object has no attribute 'model_executor'")
    assert classify(log, exit_code=1).cause == "unknown"


# --- round 10: heldout9's misses (development data after its one scoring) ---

_ROUND10 = [
    # vLLM's optional kernel extension not built for this GPU's arch
    ("RuntimeError: vllm_flashmla_C is not available, likely was not compiled due to insufficient nvcc version or a "
     "supported arch was not in the list of target arches to compile for.", "arch_unsupported"),
    # Windows' DLL loader in ctypes' and a C++ loader's words
    ("FileNotFoundError: Could not find module 'C:\\\\tmp\\\\ggml_cuda.dll' (or one of its dependencies). Try using the "
     "full path with constructor syntax.", "import_error"),
    ('ERROR Could not load engine: Could not load library "C:\\\\app\\\\engines\\\\llamacpp\\\\engine.dll"', "import_error"),
    # Go's os/exec reporting the child's death, at the wrapper's DEBUG level; a kill stays a kill
    ("[DEBUG] <model-a> cmd.Wait() returned error: signal: segmentation fault (core dumped)", "crash"),
    ("[DEBUG] <model-a> cmd.Wait() returned error: signal: killed", "killed"),
    # UCX's handler caught a fatal signal (its stack kept, the "Caught signal" line not)
    (" 0  /opt/ucx/lib/libucs.so.0(ucs_handle_error+0x2e4) [0x7f09577e4774]\n"
     " 1  /opt/ucx/lib/libucs.so.0(+0x3796a) [0x7f09577e496a]", "crash"),
    # a KV/token pool of a hybrid cache exhausted; SGLang's scheduler out of KV tokens
    ("RuntimeError: SWA pool exhausted: need 1669, have 1306", "oom_gpu"),
    ("RuntimeError: Prefill out of memory. Try to lower your batch size.\nTry to allocate 8192 tokens.", "oom_gpu"),
    # ... an HTTP connection pool is no memory
    ("ERROR urllib3.connectionpool: connection pool exhausted, retrying", "unknown"),
    # no weights in the model folder
    ("ERROR - POST /v1/messages -> 500 (unhandled): No safetensors found in /models/Minimalism", "model_load"),
    # clap's refusal with the typographic quotes of a thread's formatting
    ("error: unexpected argument ‘–max-input-tokens’ found", "bad_args"),
    # a world size that does not match; Open MPI 5's runtime; NIXL's memory registration
    ("AssertionError: Engine world size (2 * 1) != Runtime world size (1)", "distributed_init"),
    ("[worker:15806] PRTE ERROR: Bad parameter in file base/odls_base_default_fns.c at line 962", "distributed_init"),
    ("E nixl_agent.cpp:545] registerMem: registration failed for the specified or all potential backends",
     "distributed_init"),
    # vLLM's backend selection refused for the configuration; for the GPU it is the GPU's
    ("ValueError: Selected backend AttentionBackendEnum.CUTLASS_MLA is not valid for this configuration. Reason: "
     "['kv_cache_dtype not supported', 'sparse not supported']", "bad_args"),
    ("ValueError: Selected backend AttentionBackendEnum.FLASHMLA is not valid for this configuration. Reason: "
     "['compute capability not supported']", "arch_unsupported"),
    # a runner's start-up limit
    ("Runner failed with exception: Runner has been initializing for too long: 300 seconds", "startup_timeout"),
    # NCCL's WARN is its error level
    ("node5:240:240 [6] misc/socket.cc:533 NCCL WARN socketPollConnect: Connect to 10.0.0.4<56849> returned "
     "113(No route to host) errno 115(Operation now in progress)", "distributed_init"),
    # a backend value refused; on a GPU it is the GPU's
    ("ValueError: Attention backend 'sage_attn' is not supported by this attention layer;", "bad_args"),
    ("ValueError: Attention backend 'flashinfer' is not supported on sm_75", "arch_unsupported"),
]


# --- round 11: heldout10's misses and wrong causes (development data after its one scoring) ---

_ROUND11 = [
    # a Windows crash status reported by the parent is the crash
    ("llama runner process has terminated: exit status 0xc0000409", "crash"),
    # advice to allow overriding a limit is no coping
    ("Value error, User-specified max_model_len (131072) is greater than the derived max_model_len (32768). To "
     "allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.", "bad_args"),
    # ... an engine that overrides a value did cope
    ("ERROR: kv cache dtype fp8 is not supported here, overriding to auto", "unknown"),
    # a level given as a flag's value in the shell's job report is no log level
    ("1926179 Segmentation fault      (core dumped) lmdeploy serve api_server m --log-level INFO --tp 4", "crash"),
    # NCCL's WARN of a failing CUDA call in its transport
    ("host:845:845 [7] transport/nvls.cc:157 NCCL WARN Cuda failure 1 'invalid argument'", "distributed_init"),
    # NVSHMEM's host API status and its init thread aborting
    ("/x/nvshmem/include/host/nvshmemx_api.h:63: non-zero status: 7: Connection timed out, exiting...\n"
     "aborting due to error in nvshmemi_init_thread", "distributed_init"),
    # llama.cpp's RPC backend between hosts
    ("0.00.386.093 E RPC server version mismatch: 4.0.1\n0.00.386.102 E Failed to connect to 10.0.0.185:50052",
     "distributed_init"),
    # a projector type, a tokenizer, a config the loader cannot read
    ("clip_init: failed to load model 'mmproj.gguf': load_hparams: unknown projector type: gemma9", "model_load"),
    ("RuntimeError: Failed to load the tokenizer. If the tokenizer is a custom tokenizer not yet available in the "
     "HuggingFace transformers library, consider setting `trust_remote_code=True`", "model_load"),
    ("ERROR inferrs::server: Model load failed: Failed to parse config.json", "model_load"),
    # ... a parser of something else is not the model's
    ("error: failed to parse flags", "bad_args"),
    # a port another process holds, in SGLang's words
    ("ValueError: metrics_port at 40290 is not available in 30 seconds. metrics_port is used by a process already.",
     "port_in_use"),
    # AMD's driver: a GPU page fault
    ("[Thu Feb 12 20:35:53 2026] amdgpu 0000:65:00.0: amdgpu: [gfxhub0] retry page fault (src_id:0 ring:0 vmid:3 "
     "pasid:32826)", "illegal_memory_access"),
]


# --- round 12: heldout11's misses (development data after its one scoring) ---

_ROUND12 = [
    # torch's newer report of a running collective's timeout
    ("[rank3]:[E227 16:30:43.526301625 ProcessGroupNCCL.cpp:1834] [PG ID 2 PG GUID 3 Rank 3] Timeout at NCCL work: "
     "32, last enqueued NCCL work: 32, last completed NCCL work: 31.", "hang"),
    # ggml without pinned memory uses pageable memory: no failure
    ("ggml_cuda_host_malloc: failed to allocate 31393.86 MiB of pinned memory: out of memory\n"
     "llm_load_tensors: offloading 17 repeating layers to GPU", "unknown"),
    # ... a host allocation that fails otherwise still is one
    ("ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 31393860000", "oom_host"),
    # Windows' NTSTATUS codes as ctypes prints them; Triton Inference Server's signal handler
    ("OSError: [WinError -1073741795] Windows Error 0xc000001d", "crash"),
    ("Signal (11) received.\n 0# 0x000055f0c3 in /opt/tritonserver/bin/tritonserver", "crash"),
    # ... a Windows error that is no crash names nothing
    ("OSError: [WinError 5] Access is denied", "unknown"),
    # a tensor of the wrong size in the model file
    ("ERROR stablelm_model_load: tensor 'gpt_neox.embed_in.weight' has wrong size in model file", "model_load"),
    # the container runtime refusing an image for a newer CUDA than the driver
    ("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.4, please update your driver to a "
     "newer version, or use an earlier cuda container: unknown.", "arch_unsupported"),
]


# --- round 13: wrong causes left in heldout9-11 (development data) ---

_ROUND13 = [
    # the watchdog's summary names neither an error nor a timeout; the line after it names the timeout
    ("[rank3]:[E227 16:30:43.5 ProcessGroupNCCL.cpp:1785] [PG ID 2 PG GUID 3 Rank 3] Exception (either an error or "
     "timeout) detected by watchdog at work: 32, last enqueued NCCL work: 32, last completed NCCL work: 31.\n"
     "[rank3]:[E227 16:30:43.5 ProcessGroupNCCL.cpp:1834] [PG ID 2 PG GUID 3 Rank 3] Timeout at NCCL work: 32, last "
     "enqueued NCCL work: 32, last completed NCCL work: 31.\n"
     "[rank3]:[E227 16:30:43.5 ProcessGroupNCCL.cpp:630] [Rank 3] Some NCCL operations have failed or timed out.",
     "hang"),
    # ... a lost connection between ranks still is set-up's, a set-up that timed out too
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:4321",
     "distributed_init"),
    ("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined. "
     "rendezvous timed out", "distributed_init"),
    # ptxas's per-line diagnostic is a compiler run that failed, whatever target it names
    ("ptxas /tmp/tmpxft_0002_13_marlin_cuda_kernel.compute_60.ptx, line 7532; error   : Feature 'ldmatrix' requires "
     ".target sm_75 or higher", "jit_compile"),
    ("ptxas /tmp/q.compute_120.ptx, line 15870; error   : Instruction 'cvt with .e2m1x2' not supported on .target "
     "'sm_120'", "jit_compile"),
    # ... a GPU refused at run time is no compiler's line
    ("RuntimeError: FlashAttention only supports Ampere GPUs or newer.", "arch_unsupported"),
    # vLLM's executor waited for its workers' answer on the shared-memory queue: they stopped answering
    ("Traceback (most recent call last):\n"
     '  File "/usr/lib/python3/site-packages/vllm/v1/executor/multiproc_executor.py", line 395, in get_response\n'
     "    status, result = mq.dequeue(timeout=dequeue_timeout)\n"
     '  File "/usr/lib/python3/site-packages/vllm/distributed/device_communicators/shm_broadcast.py", line 755, '
     "in dequeue\n"
     "    with self.acquire_read(timeout, indefinite) as buf:\n"
     '  File "/usr/lib/python3/site-packages/vllm/distributed/device_communicators/shm_broadcast.py", line 674, '
     "in acquire_read\n"
     "    raise TimeoutError\n"
     "TimeoutError", "hang"),
    # ... another exception through the same queue, or a timeout elsewhere, names nothing
    ("Traceback (most recent call last):\n"
     '  File "/usr/lib/python3/site-packages/vllm/distributed/device_communicators/shm_broadcast.py", line 755, '
     "in dequeue\n"
     "    raise RuntimeError(\"Message queue is closed\")\n"
     "RuntimeError: Message queue is closed", "unknown"),
    ("Traceback (most recent call last):\n"
     '  File "/usr/lib/python3/site-packages/myapp/client.py", line 12, in fetch\n'
     "    raise TimeoutError\n"
     "TimeoutError", "unknown"),
    # ggml's loaders say a tensor's size is wrong without a level or an error word
    ("stablelm_model_load: memory_size =    36.00 MB, n_mem = 196608\n"
     "stablelm_model_load: tensor 'gpt_neox.embed_in.weight' has wrong size in model file", "model_load"),
    # an engine's config registered under a name the installed transformers already has
    ("ValueError: '<class 'sglang.srt.configs.qwen2_5_vl_config.Qwen2_5_VLConfig'>' is already used by a "
     "Transformers model.", "import_error"),
    ("ValueError: 'aimv2' is already used by a Transformers config, pick another name.", "import_error"),
    # NVSHMEM's transport status without a description on its line
    ("Unable to create ah.\n/sgl-workspace/nvshmem/src/modules/transport/ibgda/ibgda.cpp:3025: non-zero status: 7",
     "distributed_init"),
    # Triton Inference Server without the backend a model names
    ("E0306 16:40:07.7 1 model_lifecycle.cc:621] failed to load 'tensorrt_llm' version 2: Invalid argument: unable "
     "to find 'tensorrtllm/model.py' for model 'tensorrt_llm', in /opt/tritonserver/backends/tensorrtllm",
     "import_error"),
    ("E0306 16:40:07.7 1 model_lifecycle.cc:621] failed to load 'm' version 1: Invalid argument: unable to find "
     "backend library for backend 'vllm', try specifying runtime on the model configuration.", "import_error"),
    # bitsandbytes' CUDA set-up without its binary or the CUDA library; its ordinary loading line is none
    ("CUDA SETUP: Required library version not found: libbitsandbytes_cuda121_nocublaslt.so. Maybe you need to\n"
     "compile it from source?\nCUDA SETUP: Defaulting to libbitsandbytes_cpu.so...", "import_error"),
    ("CUDA SETUP: Problem: The main issue seems to be that the main CUDA library was not detected.", "import_error"),
    ("CUDA SETUP: Loading binary /venv/site-packages/bitsandbytes/libbitsandbytes_cuda118.so...", "unknown"),
]


def _cloud_log(newest_first: bool) -> str:
    """A launcher's log as a log viewer exports it: one timestamped entry per line."""
    entries = [
        'File "/sgl/python/sglang/srt/model_loader/loader.py", line 370, in load_model',
        "model.load_weights(self._get_all_weights(model_config, model))",
        'File "/sgl/python/sglang/srt/models/llama.py", line 508, in load_weights',
        "param = params_dict[name]",
        "KeyError: 'model.layers.55.mlp.gate_up_proj.input_scale'",
        "[2025-04-07 19:13:52] Received sigquit from a child process. It usually means the child failed.",
        "./entrypoint.sh: line 48: 27 Killed python3 -m sglang.launch_server --port 30000",
    ]
    lines = ["ERROR 2025-04-07T19:13:52.317856550Z Traceback (most recent call last):"]
    lines += [f"ERROR 2025-04-07T19:13:52.3178{60 + i:02d}000Z {e}" for i, e in enumerate(entries)]
    return "\n".join(reversed(lines) if newest_first else lines)


def test_a_log_listed_newest_first_is_read_oldest_first():
    """A log viewer's export (newest entry first) puts the shell's "Killed" before the exception it
    follows: read in the order it was written, the exception decides, and the evidence keeps the line
    numbers of the log as given."""
    given = _cloud_log(newest_first=True)
    d = classify(given, exit_code=1, engine="sglang")
    assert d.cause == "model_load"
    key_error = 1 + given.split("\n").index(next(x for x in given.split("\n") if "KeyError" in x))
    assert d.line == key_error == 3
    assert any(e.startswith(f"L{key_error}: ") and "KeyError" in e for e in d.evidence)
    assert "newest line first" in d.explanation
    # the same log in the order it was written: the same cause, nothing said about the order
    d2 = classify(_cloud_log(newest_first=False), exit_code=1, engine="sglang")
    assert d2.cause == "model_load" and "newest" not in d2.explanation


def test_interleaved_or_sparse_timestamps_keep_the_order():
    """Processes that interleave their lines go back in time now and then; that is no newest-first log.
    Nor is a log with too few timestamps to tell."""
    stamps = [f"INFO 05-01 10:00:{s:02d} worker line" for s in (1, 2, 3, 2, 4, 5, 6, 5, 7, 8, 9, 10, 11, 12)]
    assert structure.oldest_first("\n".join(stamps)) is None
    few = [f"INFO 05-01 10:00:{s:02d} line" for s in (9, 8, 7, 6, 5)]
    assert structure.oldest_first("\n".join(few)) is None
    assert structure.oldest_first("\n".join([*few, "INFO 05-01 10:00:04 line"])) is not None
    # a countdown has no date: no logger's stamp
    eta = [f"ETA 00:00:{s:02d} downloading" for s in range(20, 0, -1)]
    assert structure.oldest_first("\n".join(eta)) is None


# --- round 14: heldout12's misses (development data after its one scoring) ---

_ROUND14 = [
    # logfmt's WARN is a warning (Ollama goes on to CPU inference)...
    ('time=2025-07-29T13:31:47.016+02:00 level=WARN source=amd_windows.go:138 msg="amdgpu is not supported '
     '(supported types:[])" gpu_type=gfx1100 gpu=0\n'
     'time=2025-07-29T13:31:47.017+02:00 level=INFO source=gpu.go:377 msg="no compatible GPUs were discovered"',
     "unknown"),
    # ... its ERROR is an error, and a child's stderr relayed at INFO keeps its own words
    ('time=2025-07-29T13:31:47.016+02:00 level=ERROR source=x.go:1 msg="amdgpu is not supported (supported '
     'types:[])" gpu_type=gfx1100', "arch_unsupported"),
    ('time=2026-03-03T21:36:20.133Z level=INFO msg="llama_model_load: error loading model: unable to allocate '
     'CUDA0 buffer"', "oom_gpu"),
    # CUDA's error 803: the user-mode driver and the kernel driver differ
    ("[2025-08-12 10:49:52.992240] E ggml_cuda_init: failed to initialize CUDA: system has unsupported display "
     "driver / cuda driver combination", "arch_unsupported"),
    # gloo's transfer timed out while running (hang), or in a set-up step (distributed_init)
    ("Exception: Capture cuda graph failed: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:133] "
     "Timed out waiting 1800000ms for send operation to complete", "hang"),
    ("ERROR 04-11 13:45:00 [parallel_state.py:1158] Error ignored in is_in_the_same_node: [/pytorch/third_party/"
     "gloo/gloo/transport/tcp/unbound_buffer.cc:133] Timed out waiting 1800000ms for send operation to complete",
     "distributed_init"),
    # an input larger than the TensorRT engine's profiles
    ("[TRT] [E] IExecutionContext::setInputShape: Error Code 3: API Usage Error (Parameter check failed, condition: "
     "satisfyProfile. Set dimension [16000] for tensor position_ids does not satisfy any optimization profiles. "
     "Valid range for profile 0: [1]..[8192].)", "bad_args"),
    # llama.cpp without its CPU back-end library
    ("llama_model_load: error loading model: make_cpu_buft_list: no CPU backend found", "import_error"),
    # Ray's memory monitor killed the worker
    ("Memory on the node (IP: 10.0.0.2, ID: 708c) where the task (actor ID: 0dab, name=RayWorkerVllm.__init__, "
     "pid=308, memory used=11.15GB) was running was 12.49GB / 13.15GB (0.950003), which exceeds the memory usage "
     "threshold of 0.95. Ray killed this worker (ID: 79a5) because it was the most recently scheduled task",
     "killed"),
    # deaths in other words: Rust's ExitStatus on Windows, libc++abi's terminate, bash's on macOS
    ("Failed to load llama-server: llamacpp error: Process exited with code ExitStatus(ExitStatus(3221225477))",
     "crash"),
    ("Failed to load llama-server: llamacpp error: Process exited with code ExitStatus(ExitStatus(1))", "unknown"),
    ("libc++abi: terminating due to uncaught exception of type std::runtime_error: boom", "crash"),
    ("./start.sh: line 1: 19516 Abort trap: 6           mlx-openai-server launch --port 11834", "crash"),
    # TensorRT: an engine of another version; a precision this GPU lacks
    ("[TensorRT-LLM][ERROR] 1: [stdArchiveReader.cpp::stdArchiveReaderInitCommon::47] Error Code 1: Serialization "
     "(Serialization assertion stdVersionRead == kSERIALIZATION_VERSION failed.Version tag does not match. Note: "
     "Current Version: 226, Serialized Engine Version: 228)", "import_error"),
    ("[TRT] [E] 9: [standardEngineBuilder.cpp::buildEngine::2266] Error Code 9: Internal Error (Networks with FP8 "
     "precision require hardware with FP8 support.)", "arch_unsupported"),
    # LoRA on for a model without it
    ("ValueError: Model GemmaForCausalLM does not support LoRA, but LoRA is enabled. Support for this model may be "
     "added in the future.", "bad_args"),
    # Ascend: its NPU's memory, its SoCs
    ("ERROR 03-05 07:15:39 engine.py:387] NPU out of memory. Tried to allocate 22.00 MiB (NPU 0; 60.97 GiB total "
     "capacity; 10.24 GiB already allocated; 19.52 MiB free)", "oom_gpu"),
    ("CANN error: EZ9903: [PID: 71888] 2025-12-17-18:13:01.238.630 support for Ascend910 is not implemented",
     "arch_unsupported"),
    ("INFO: found device Ascend910B3 with 64 GiB", "unknown"),
    # Dynamo's discovery service is not there
    ('Error: Failed to connect to etcd server with config ClientOptions { etcd_url: ["http://localhost:2379"] }',
     "distributed_init"),
]


# --- round 15: heldout13's misses (development data after its one scoring) ---

_ROUND15 = [
    # a KeyError on a checkpoint parameter's dotted name, raised or logged as str(e) alone
    ("[rank0]: KeyError: 'model.layers.6.mlp.experts.w2_weight_scale'", "model_load"),
    ("ERROR 06-13 06:59:07 [engine.py:448] 'model.layers.0.self_attn.q_proj.weight'", "model_load"),
    # ... a KeyError on a config key or a plain word is no tensor (a config without model_type is a model of a
    # kind the loader does not know: model_load by its own rule, round 20)
    ("KeyError: 'model_type'", "model_load"),
    ("ERROR 06-13 06:59:07 [engine.py:448] 'default'", "unknown"),
    # a model's own args class checks config.json, not the command line
    ("Traceback (most recent call last):\n"
     '  File "/site-packages/mlx_lm/utils.py", line 322, in load_model\n'
     "    model_args = model_args_class.from_dict(config)\n"
     '  File "/site-packages/mlx_lm/models/llama.py", line 31, in __post_init__\n'
     '    raise ValueError(f"rope_scaling must contain keys {required_keys}")\n'
     "ValueError: rope_scaling must contain keys {'type', 'factor'}", "model_load"),
    # ... an engine's arguments class does
    ('  File "/site-packages/vllm/engine/arg_utils.py", line 1201, in __post_init__\n'
     '    raise ValueError("bad")\nValueError: bad', "bad_args"),
    # a value over an engine's built maximum
    ("  File \"/site-packages/tensorrt_llm/runtime/model_runner_cpp.py\", line 311, in from_dir\n"
     "    assert max_batch_size <= model_config.max_batch_size\nAssertionError", "bad_args"),
    ("terminate called after throwing an instance of 'tensorrt_llm::common::TllmException'\n"
     "  what():  [TensorRT-LLM][ERROR] Assertion failed: max_context_len <= mMaxContextLength "
     "(/src/cpp/tensorrt_llm/plugins/gptAttentionPlugin/gptAttentionPlugin.cpp:249)", "bad_args"),
    # ... an assertion between two ordinary values is no limit
    ("AssertionError: assert num_tokens <= block_size", "unknown"),
    # TensorRT-LLM's network and a checkpoint of other tensors; vLLM's mistral-format config missing
    ("RuntimeError: Provided tensor names are different from those expected by the engine.", "model_load"),
    ("ValueError: Failed to load mistral 'params.json' config for model RedHatAI/Mistral-Small-3.1-24B. Please check "
     "if the model is a mistral-format model and if the config file exists.", "model_load"),
    # MLIR's diagnostic on an operation
    ("C:\\venv\\sageattention\\attn_qk_int8_per_block.py:17:26: error: 'tt.load' op operation destroyed but still "
     "has uses", "jit_compile"),
    # oneCCL's and HCCL's set-up; Ray cannot place the workers
    ("RuntimeError: oneCCL: ze_fd_manager.cpp:214 fill_device_fds: EXCEPTION: open failed: fd: -1, errno: No such "
     "file or directory", "distributed_init"),
    ("[rank1]: EI0009: [PID: 2225827] Transport init error. Reason: [Create][DestLink]Create Dest error!",
     "distributed_init"),
    ("Error: No available node types can fulfill resource request {'node:10.61.0.27': 0.001, 'GPU': 1.0}",
     "distributed_init"),
    # uvicorn without the app it was pointed at
    ('ERROR:    Error loading ASGI app. Attribute "app" not found in module "llama_cpp.server.app".', "bad_args"),
    # SGLang's health check on a detokenizer that stopped answering
    ("[2026-04-27 03:18:18] Health check failed. Server couldn't get a response from detokenizer for last 20 seconds.",
     "hang"),
]


# --- round 16: heldout14's misses (development data after its one scoring) ---

_ROUND16 = [
    # an uncaught C++ exception whose what() states its error in words named a cause (unread: unknown) ...
    ("terminate called after throwing an instance of 'tensorrt_llm::common::TllmException'\n"
     "  what():  [TensorRT-LLM][ERROR] Assertion failed: No valid SQ GEMM tactic (/src/cpp/tensorrt_llm/plugins/"
     "smoothQuantGemmPlugin/smoothQuantGemmPlugin.cpp:242)", "unknown"),
    ("libc++abi: terminating due to uncaught exception of type std::runtime_error: Context FMHA is not supported "
     "for this head size", "unknown"),
    # ... what() in code is the crash
    ("terminate called after throwing an instance of 'std::out_of_range'\n"
     "  what():  vector::_M_range_check: __n (which is 5) >= this->size() (which is 5)", "crash"),
    ("terminate called after throwing an instance of 'vk::DeviceLostError'\n"
     "  what():  vk::Queue::submit: ErrorDeviceLost", "crash"),
    ("Unhandled exception caught in c10/util/AbortHandler.h\n"
     "00007FFE12AE1DE4 torch_python.dll!THPGenerator_initDefaultGenerator [<unknown file> @ <unknown line number>]",
     "crash"),
    # ggml's GGML_ABORT alone; a compiler's fatal error is not it
    ("D:\\a\\llama.cpp\\llama.cpp\\ggml\\src\\ggml-cuda\\fattn.cu:574: fatal error", "crash"),
    ("/tmp/build/kernel.cu:12:10: fatal error: cuda_fp8.h: No such file or directory", "jit_compile"),
    # Windows' NTSTATUS crash codes in their three spellings
    ("[ERROR] llama-server process has terminated with exit code: -1073740791", "crash"),
    ("Exception code: 0xc0000094", "crash"),
    ("server exited with exit code 3221225477", "crash"),
    ("[ERROR] llama-server process has terminated with exit code: 1", "unknown"),
    # the engine's program not installed
    ("bash: trtllm-serve: command not found", "import_error"),
    ("'vllm' is not recognized as an internal or external command,", "import_error"),
    ("sh: 1: llama-server: not found", "import_error"),
    # ... an API route is no model (a client asked for /v1/models)
    ("ERROR: route not found for /v1/models", "unknown"),
    # NVML's kernel module and library of different driver versions; a shared library missing on macOS
    ("nvidia-container-cli: initialization error: nvml error: driver/library version mismatch: unknown", "import_error"),
    ('level=ERROR msg="error loading llama server" error="mlx runner failed: Error: failed to initialize MLX: '
     'libmlxc.dylib not found (exit: exit status 1)"', "import_error"),
    # a world of another size; a monitored barrier that saw errors
    ("[TensorRT-LLM][ERROR] Assertion failed: With communicationMode kLEADER, MPI worldSize is expected to be equal "
     "to tp*pp when participantIds are not specified", "distributed_init"),
    ("[rank3]:[E421 04:13:43.426633564 ProcessGroupGloo.cpp:143] Rank 3 successfully reached monitoredBarrier, but "
     "received errors while waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank.",
     "distributed_init"),
    # transformers cannot load the configuration; a registry without this architecture
    ("OSError: Can't load the configuration of 'Qwen/Qwen1.5-72B-Chat-AWQ'. If you were trying to load it from "
     "'https://huggingface.co/models', make sure you don't have a local directory with the same name.", "model_load"),
    ("ValueError: No processor registered for architecture: ['Phi4MMForCausalLM'].", "model_load"),
    # a value refused with the supported ones listed
    ("ValueError: torch.bfloat16 is not supported for quantization method awq. Supported dtypes: [torch.float16]",
     "bad_args"),
    # the device APIs' out-of-device-memory result
    ("level_zero backend failed with error: 39 (UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)", "oom_gpu"),
]


# --- round 17: heldout15's misses (development data after its one scoring) ---

_ROUND17 = [
    # the NVIDIA driver's resource manager out of memory
    ("NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY]", "oom_gpu"),
    # a wrapper's death report quoting the runner's GPU error after the exit status: that error, unread, is unknown
    ("llama-server process has terminated: exit status 0xc0000409: The system detected an overrun of a stack-based "
     "buffer in this application.: CUDA error: shared object initialization failed", "unknown"),
    # a kernel built for another architecture
    ("FATAL: kernel `fmha_cutlassF_f16_aligned_64x128_rf_sm80` is for sm80-sm100, but was built for sm50",
     "arch_unsupported"),
    # a KV-cache budget that cannot hold one sequence; "large enough" with no budget is nothing
    ("ERROR: Failed to create instance: unexpected error when creating modelInstanceState: maxTokensInPagedKvCache "
     "must be large enough to process at least 1 sequence to completion", "oom_gpu"),
    ("ValueError: the prompt list must be large enough to fill one batch", "unknown"),
    # vLLM's choice list ("chose from", its source's spelling)
    ("KeyError: 'invalid tool call parser: kimi_k2 (chose from { deepseek_v3,granite,hermes,mistral })'", "bad_args"),
    # torch.compile's tracer
    ("ERROR 02-23 22:09:11 core.py:291] torch._dynamo.exc.Unsupported: Observed exception", "jit_compile"),
    # a model load that failed names the step, not why (LABELS.md: unknown), with or without a detail after it ...
    ("Error: unable to load model\n\nCaused by:\n    null result from llama cpp", "unknown"),
    ("text-generation-webui  | 2023-10-12 13:35:19 ERROR:Failed to load the model.", "unknown"),
    ('ERROR Failed to load model modelID="qwen3-vl-4b" error=failed to load model with internal loader: backend not '
     'found: llama-cpp backend="llama-cpp"', "unknown"),
    # ... and a cause on another line wins over it
    ("llama_model_load: error loading model: cudaMalloc failed: out of memory\nERROR: failed to load model", "oom_gpu"),
    # a native backtrace through libc's abort; Go's register dump on a fatal signal
    ("[e8c9d86cc3cb:90099] [ 3] /lib/x86_64-linux-gnu/libc.so.6(abort+0xd3)[0x7fb2812377f3]", "crash"),
    ("ollama[1610]: rip    0x7f98b88abe4b\nollama[1610]: rflags 0x246\nollama[1610]: cs     0x33", "crash"),
    # PyO3's refusal of an argument of the wrong type
    ("[Router (Python)] 2025-01-09 00:28:10 - ERROR - Error starting router: argument 'worker_urls': 'NoneType' "
     "object cannot be converted to 'Sequence'", "bad_args"),
    # a Python warning's message on two lines: its second line is the warning's, not an import failure ...
    ("/usr/local/lib/python3.10/dist-packages/vllm/connections.py:8: RuntimeWarning: Failed to read commit hash:\n"
     "No module named 'vllm._version'\n  from vllm.version import __version__ as VLLM_VERSION", "unknown"),
    # ... but what follows a warning without its source line is what the program printed next
    ("/x/app.py:8: UserWarning: TypedStorage is deprecated\nRuntimeError: CUDA error: out of memory", "oom_gpu"),
]


# --- round 18: heldout16's misses (development data after its one scoring) ---

_ROUND18 = [
    # a Python frame's source line is code: "architectures" and "unsupported" in a call name no GPU ...
    ('  File "/site-packages/vllm/model_executor/models/registry.py", line 438, in inspect_model_cls\n'
     "    return self._raise_for_unsupported(architectures)\n"
     "ValueError: Model architectures ['Gemma3ForConditionalGeneration'] failed to be inspected. Please check the "
     "logs for more details.", "model_load"),
    # ... but a raise statement's message is the exception's own words (an excerpt may end before the exception)
    ('  File "/site-packages/triton/runtime/build.py", line 32, in _build\n'
     '    raise RuntimeError("Failed to find C compiler. Please specify via CC environment variable.")', "jit_compile"),
    # Open MPI's report of SIGFPE; systemd-coredump; a Go runner's exit status 2 (Ollama)
    ("[198181d05d5a:1195236] *** Process received signal ***\n"
     "[198181d05d5a:1195236] Signal: Floating point exception (8)", "crash"),
    ("Jan 29 00:10:57 spectra systemd-coredump[1343917]: Process 1337387 (server) of user 1000 dumped core.", "crash"),
    ('time=2025-03-16T23:30:36.769+01:00 level=ERROR source=server.go:449 msg="llama runner terminated" '
     'error="exit status 2"', "crash"),
    ('level=ERROR source=sched.go:456 msg="error loading llama server" error="llama runner process has terminated: '
     'exit status 2"', "crash"),
    # ... a Go runner's panic that names its cause still wins over the exit status
    ('panic: failed to bind to 127.0.0.1:11434: address already in use\n'
     'level=ERROR msg="llama runner terminated" error="exit status 2"', "port_in_use"),
    # Windows' STATUS_DLL_NOT_FOUND as an exit status
    ('level=ERROR source=sched.go:456 msg="error loading llama server" error="llama runner process has terminated: '
     'exit status 0xc0000135"', "import_error"),
    # pybind11 refusing a call's arguments (the native API's form of an unknown flag)
    ("TypeError: __init__(): incompatible constructor arguments. The following argument types are supported:",
     "bad_args"),
    # Metal compiling ggml's shaders at load time; a build tool run by subprocess
    ("program_source:6464:18: error: use of undeclared identifier 'kernel_mul_mm_id'\n"
     "ggml_metal_device_init: error: failed to allocate context", "jit_compile"),
    ("subprocess.CalledProcessError: Command 'cmake --build . --config Release --parallel 16 --target tensorrt_llm' "
     "returned non-zero exit status 1.", "jit_compile"),
    ("subprocess.CalledProcessError: Command '['nvidia-smi', '-L']' returned non-zero exit status 9.", "unknown"),
    # a checkpoint without the tensors the network expects; a checkpoint name the model lacks; the hub offline
    ("AssertionError: Expected but not provided tensors:{'transformer.vocab_embedding.weight'}", "model_load"),
    ("ValueError: There is no module or parameter named 'embed_tokens' in LlamaForCausalLM", "model_load"),
    ("huggingface_hub.utils._http.OfflineModeIsEnabled: Cannot reach https://huggingface.co/api/models/bigcode/"
     "starcoder: offline mode is enabled.", "model_load"),
    ("Error: DownloadError", "model_load"),
    # SGLang's token pool (its other wording); a GPU queue ROCm found hung; Ray without a GPU on the driver node
    ("Prefill out of memory. This should nerver happen.", "oom_gpu"),
    ("ollama[3744]: HW Exception by GPU node-1 (Agent handle: 0x753cf86eff60) reason :GPU Hang", "hang"),
    ("Ray does not allocate any GPUs on the driver node. Consider adjusting the Ray placement group or running the "
     "driver on a GPU node.", "distributed_init"),
    # Kubernetes' startup probe; a client that gave up reaching the server
    ('Warning  Unhealthy  3s (x3 over 13s)  kubelet  Startup probe failed: Get "http://10.244.0.13:8000/health": '
     "dial tcp 10.244.0.13:8000: connect: connection refused", "startup_timeout"),
    ("ConnectionError: The vLLM server can't be reached at 0.0.0.0:8000 after 120.0 seconds. Make sure the server is "
     "running by running `trl vllm-serve`.", "startup_timeout"),
    # llama.cpp's loader summary after its own reason is no reason of its own (the fallback does not name it)
    ("llama_prepare_model_devices: invalid value for main_gpu: 0 (available devices: 0)\n"
     "srv    load_model: failed to load model", "unknown"),
    ("ERROR:Failed to load the model.", "unknown"),
    # a Rust panic's message on the line after "panicked at file:line:col:" is the panic's reason: a cause it
    # names wins; a message that names none leaves the crash
    ("thread 'main' panicked at mistralrs-core/src/pipeline/normal.rs:232:9:\n"
     'File "tokenizer.json" not found at model id "mistralai/Mistral-7B-Instruct-v0.1"\n'
     "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace", "model_load"),
    ("thread 'main' panicked at src/main.rs:40:5:\nindex out of bounds: the len is 3 but the index is 5\n"
     "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace", "crash"),
]


# --- round 19: heldout17's misses (development data after its one scoring) ---

_ROUND19 = [
    # an argument module by its file name, not a call that mentions engine_args: vLLM's KV-cache check is memory
    ('  File "/usr/local/lib/python3.10/dist-packages/vllm/entrypoints/llm.py", line 109, in __init__\n'
     "    self.llm_engine = LLMEngine.from_engine_args(engine_args)\n"
     '  File "/usr/local/lib/python3.10/dist-packages/vllm/engine/llm_engine.py", line 331, in _init_cache\n'
     "    raise ValueError(\n"
     "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in "
     "KV cache (1984).", "oom_gpu"),
    ('  File "/site-packages/vllm/engine/arg_utils.py", line 1201, in create_engine_config\n'
     '    raise ValueError("bad value")\nValueError: bad value', "bad_args"),
    # a bare "warning:" / "Warning:" at a line's start is a warning (llama.cpp's mlock; a config registration) ...
    (" warning: failed to mlock 1555828736-byte buffer (after previously locking 0 bytes): Cannot allocate memory\n"
     " llama_model_load: error loading model: read error: Bad address", "model_load"),
    ("Warning: '<class 'sglang.srt.configs.qwen2_5_vl_config.Qwen2_5_VLConfig'>' is already used by a Transformers "
     "model.", "unknown"),
    # ... unless an error was printed onto it
    ("Warning: please use at least NVCC 12.9 for the best DeepGEMM performanceNVCC compilation failed: nvcc fatal   : "
     "Unsupported gpu architecture 'sm_100f'", "jit_compile"),
    # ROCm's runtime on a kernel's hardware exception, before the abort
    (":0:rocdevice.cpp            :3586: 1183357978 us:  Callback: Queue 0x7f35e8100000 aborting with error : "
     "HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception. code: 0x101\n"
     "Fatal Python error: Aborted", "illegal_memory_access"),
    # the Go runtime's fatal signal (Ollama's runner in C code)
    ("SIGSEGV: segmentation violation\nPC=0x55e63fa050d9 m=12 sigcode=128 addr=0x0\nsignal arrived during cgo execution",
     "crash"),
    # a checkpoint split for another number of ranks
    ("AssertionError: Loading a checkpoint for MP=1 but world size is 2", "distributed_init"),
    # transformers refusing the attention implementation for this model
    ("ValueError: QWenLMHeadModel does not support Flash Attention 2.0 yet. Please open an issue on GitHub to "
     "request support for this architecture", "bad_args"),
]

_ROUND20 = [
    # a load failure that gives no reason is unknown (LABELS.md): bare, with the model's path or name, or the
    # wrapper's summary of a process that failed to start; the shape rule's not_patterns veto it
    ("Error: Failed to load model from file: /Users/me/models/llama3.2:3b.gguf/llama3.2:3b.gguf", "unknown"),
    ("🥲 Failed to load the model\n\nError loading model.\n\n(Exit code: 18446744073709515000). Unknown error.", "unknown"),
    ("ValueError: Failed to load model from file: /models/blobs/f8a206f03ea08c1cfaab8695c7fb86a72dc16208", "unknown"),
    ("llama_prepare_model_devices: invalid value for main_gpu: 0 (available devices: 0)\n"
     "llama_model_load_from_file_impl: failed to load model", "unknown"),
    ("""[Error] (ServerManager) Exception loading model: HTTP request failed with status: 500: {"error":{"code":"""
     """"model_load_error","message":"Failed to load model 'Qwen3-0.6B-GGUF': llama-server failed to start"}}""", "unknown"),
    # ... llama.cpp's model loader's own message is printed only when the GGUF reader cannot read the file
    ('{"error":"llama runner process has terminated: error loading model: llama_model_loader: failed to load model '
     'from /root/.ollama/models/blobs/sha256-26bd607a51eb"}', "model_load"),
    # ... and a reason after the load failure names it
    ("Error when loading model: UnicodeDecodeError: 'utf-8' codec can't decode byte 0xb0 in position 37", "model_load"),
    ("gguf_init_from_file: failed to open '': 'Invalid argument'\n"
     '{"level":"ERROR","function":"LoadModel","message":"llama.cpp unable to load model","model":""}', "model_load"),
    # a GGUF repo's name is no file: "Failed to load model 'Qwen3-0.6B-GGUF'" alone names nothing
    ("Failed to load model 'Qwen3-0.6B-GGUF'", "unknown"),
    # llama.cpp's context that could not be created, alone: the step, not why (memory, a flag, a backend)
    ("Error: llama runner process has terminated: error:failed to create context with model '/m/blobs/sha256-7995'",
     "unknown"),
    # a model type the engine does not know, found by importing its module: the model, not the packages
    ("Error when loading model: ValueError: Model type gemma4 not supported. Error: No module named "
     "'mlx_vlm.models.gemma4'", "model_load"),
    ("ModuleNotFoundError: No module named 'vllm._C'", "import_error"),
    # a Rust panic whose message quotes a GPU runtime's error names that error (unknown here), not a crash ...
    ("thread 'main' panicked at mistralrs-core/src/lib.rs:253:69:\n"
     'called `Result::unwrap()` on an `Err` value: WithBacktrace { inner: Cuda(Cuda(DriverError(CUDA_ERROR_NO_DEVICE, '
     '"no CUDA-capable device is detected")))', "unknown"),
    # ... a panic on anything else stays a crash
    ("thread 'main' panicked at src/main.rs:406:19:\nindex out of bounds: the len is 3 but the index is 7", "crash"),
]

# round 21, from heldout18's misses (development data after its one scoring)
_ROUND21 = [
    # an option valid only with other models or modes; hardware as the only support is the GPU's
    ("AssertionError: FusedMoE flashinfer kernels are only supported for Llama4", "bad_args"),
    ("NotImplementedError: Pipeline parallelism is only supported for the following  architectures: "
     "['AquilaForCausalLM', 'LlamaForCausalLM']", "bad_args"),
    ("TritonModelException: Context model context failed with error: Context-only and generation-only requests are "
     "NOT currently supported in orchestrator mode", "bad_args"),
    ("RuntimeError: FP8 Marlin is only supported for GPUs with compute capability 8.0 or higher", "arch_unsupported"),
    ("ValueError: this attention backend is only supported on Linux", "unknown"),
    # TensorRT-LLM's runtime against what the engine was built with
    ("E1025 09:17:53.664847 126 backend_model.cc:553] ERROR: Failed to create instance: unexpected error when creating "
     "modelInstanceState: TrtGptModelInflightBatching requires GPT attention plugin with packed input and paged KV "
     "cache.", "bad_args"),
    ("ValueError: Couldn't assign past_key_value_0 with shape torch.Size([1, 2, 32, 2747, 128]), engine supports "
     "[min, opt, max] = [(1, 2, 32, 0, 128), (4, 2, 32, 1280, 128), (8, 2, 32, 2560, 128)]", "bad_args"),
    ("[TensorRT-LLM][ERROR] Assertion failed: Error opening engine file: ./out/llama_7b_float16_tp1_rank0.engine "
     "(/app/tensorrt_llm/cpp/tensorrt_llm/runtime/utils/sessionUtils.cpp:42)", "model_load"),
    # an architecture class named unsupported or unregistered is the model; a feature "for" it is the feature
    ("ValueError: Unsupported architectures: Phi3ForCausalLM. Supported list: ['LlamaForCausalLM']", "model_load"),
    ("ValueError: Cannot find model module. 'MiniMaxM1ForCausalLM' is not a registered model in the Transformers "
     "library", "model_load"),
    ("ValueError: LoRA for Qwen2VLForConditionalGeneration is not supported", "unknown"),
    # the hub unreachable for the model's files
    ("requests.exceptions.ConnectionError: (MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Max "
     "retries exceeded with url: /api/models/huggyllama/llama-7b/revision/main (Caused by NewConnectionError(", "model_load"),
    # macOS's loader through dlopen; TGI's flash-attention kernels
    ("Failed to load LLM engine from path: /Users/a/llm_engine_mlx.node. dlopen(/Users/a/llm_engine_mlx.node, 0x0001): "
     "Library not loaded: @rpath/libpython3.11.dylib", "import_error"),
    ("NotImplementedError: Sharded RefinedWeb requires Flash Attention CUDA kernels to be installed.", "import_error"),
    # Cloud Run's deploy that did not see the port in time
    ("ERROR: (gcloud.beta.run.deploy) The user-provided container failed to start and listen on the port defined "
     "provided by the PORT=8000 environment variable within the allocated timeout.", "startup_timeout"),
    # a missing positional argument is an API mismatch or a bug: read both ways by the collectors, unknown
    ("TypeError: DecoderModel.__init__() missing 7 required positional arguments: 'num_heads', 'hidden_size'", "unknown"),
]

# round 22, from heldout19's misses (development data after its one scoring)
_ROUND22 = [
    # a GPU runtime's error reported just above the abort names the failure; the abort is how it ended
    ("CUDA error: an internal operation failed\n  current device: 0, in function ggml_cuda_op_mul_mat_cublas at "
     "ggml-cuda.cu:1234\n  cublasSgemm_v2(ctx.cublas_handle(id), CUBLAS_OP_T, CUBLAS_OP_N, row_diff)\n"
     "Aborted (core dumped)", "unknown"),
    ("CUDA error: named symbol not found\n  current device: 0, in function ggml_cuda_op_mul_mat at ggml-cuda.cu:9464\n"
     "  hipGetLastError()\nGGML_ASSERT: D:/a/koboldcpp-rocm/ggml-cuda.cu:241: !\"CUDA error\"", "arch_unsupported"),
    ("Segmentation fault (core dumped)", "crash"),
    # Metal's library without the kernel; making a pipeline from it is no compiler run
    ("ggml_metal_library_compile_pipeline: failed to compile pipeline: base = 'kernel_mul_mv_bf16_f32_4'\n"
     'ggml_metal_library_compile_pipeline: Error Domain=MTLLibraryErrorDomain Code=5 "Function kernel_mul_mv_bf16_f32_4 '
     'was not found in the library"', "arch_unsupported"),
    # ggml's GPU back-ends by their function names are device memory
    ("ggml_backend_metal_buffer_from_ptr: error: failed to allocate buffer, size =     0.00 MiB\n"
     "llama_model_load: error loading model: failed to allocate buffer", "oom_gpu"),
    # a reason about the GPU after "error loading model:" is no model file; a JSON message of a bare load failure
    ("stderr llama_model_load: error loading model: can not find preferred GPU platform", "unknown"),
    ('{"timestamp":1,"level":"ERROR","function":"load_model","message":"unable to load model","model":"m.gguf"}',
     "unknown"),
    # a kernel's constraint on its operands is a bug, not an option
    ("Model failed with error `matmul is only supported for contiguous tensors lstride: [159744, 1]`", "unknown"),
    # SGLang's advice for -9 is no kill unless the code it reports is -9
    ("RuntimeError: Rank 0 scheduler died during initialization (exit code: -3). If exit code is -9 (SIGKILL), a "
     "common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.", "unknown"),
    ("RuntimeError: Rank 0 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL), a "
     "common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.", "killed"),
    # source wordings: torch's extension builder, Ray's worker registration, llama-cpp-python's device count,
    # Go's exec lookup, Ollama's runners
    ("RuntimeError:\n      The detected CUDA version (11.8) mismatches the version that was used to compile\n"
     "      PyTorch (12.1). Please make sure to use the same CUDA versions.", "import_error"),
    ("[2024-06-13 16:11:51,588 E 13261 13261] core_worker.cc:228: Failed to register worker 01000000ffff to Raylet. "
     "IOError: [RayletClient] Unable to register worker with raylet. No such file or directory", "distributed_init"),
    ("ValueError: Attempt to split tensors that exceed maximum supported devices. Current LLAMA_MAX_DEVICES=1",
     "bad_args"),
    ('Error: error starting the external llama server: exec: "ollama_llama_server": executable file not found in $PATH',
     "import_error"),
    ("2024/05/12 03:51:37 ERROR unable to locate llm runner directory.  Set OLLAMA_RUNNERS_DIR to the location of "
     "'ollama_runners'", "import_error"),
]

# round 23, from heldout20's misses (development data after its one scoring)
_ROUND23 = [
    # MLX's Metal allocator: one buffer larger than the device allows
    ("libc++abi: terminating due to uncaught exception of type std::runtime_error: Attempting to allocate 19081554496 "
     "bytes which is greater than the maximum allowed buffer size of 17179869184 bytes.", "oom_gpu"),
    # Meta's reference code counts checkpoint files: none found is the model, another count the ranks
    ("AssertionError: Loading a checkpoint for MP=0 but world size is 1", "model_load"),
    ("AssertionError: Loading a checkpoint for MP=2 but world size is 1", "distributed_init"),
    ("AssertionError: model parallel group is not initialized", "distributed_init"),
    # Windows' STATUS_DLL_NOT_FOUND in Tabby's supervisor's words; rocBLAS's Tensile library without a colon
    ("WARN llama_cpp_server::supervisor: llama-server <embedding> exited with status code -1073741515, args: `Command",
     "import_error"),
    (r"rocBLAS error: Cannot Read C:\Temp\_MEI369642\/library/TensileLibrary.dat No such file or directory for GPU "
     "arch : gfx1100", "arch_unsupported"),
    # 0xC0000409 as a signed exit code in LM Studio's error object is the crash
    ('  "cause": "(Exit code: -1073740791). Unknown error. Try a different model and/or config.",', "crash"),
    # from heldout19's unknowns: pip's resolver, vLLM's engine watchdog, Metal's shader compiler, a Triton cache race
    ("ERROR: Cannot install flashinfer-python==0.2.0 and torch==2.6.0 because these package versions have conflicting "
     "dependencies.", "import_error"),
    ("ERROR 11-27 11:55:55 async_llm_engine.py:960] Engine iteration timed out. This should never happen!", "hang"),
    ('ggml_metal_init: load pipeline error: Error Domain=CompilerError Code=2 "AIR builtin function was called but no '
     'definition was found."', "jit_compile"),
    ("FileNotFoundError: [Errno 2] No such file or directory: '/home/u/.triton/cache/a95dd98725/_fwd_kernel_stage2.json"
     ".tmp.pid_33358_98246'", "jit_compile"),
]

_ROUND24 = [
    # from the dev sets' wrong causes: a wrapper's exit status, then on the next lines the runner's last error it
    # quotes (Ollama on Windows) names the failure; the same status alone is the crash
    ("llama-server process has terminated:\nexit status 0xc0000409\n\nCUDA error:\nthe provided PTX was compiled "
     "with an unsupported toolchain", "arch_unsupported"),
    ("llama-server process has terminated:\nexit status 0xc0000409\n", "crash"),
    ("Error: llama runner process has terminated: exit status 0xc0000409\n\nCUDA error: an illegal memory access was "
     "encountered", "illegal_memory_access"),
    # a fatal check or an assertion whose message refuses the input in words is not read as a crash (unknown, as
    # no rule names its cause); an expression, or a literal that says what the check wanted, is the crash
    ("  Check failed: (fload_exec.defined()) is false: TVM runtime cannot find vm_load_executable\nAborted", "unknown"),
    ("  Check failed: (n_dims == 2) is false: \nAborted (core dumped)", "crash"),
    ('llama.cpp:123: GGML_ASSERT(false && "unsupported minicpmv version") failed', "unknown"),
    ('src/llama.cpp:16813: GGML_ASSERT(strcmp(res->name, "result_output") == 0 && "missing result_output tensor") '
     "failed", "crash"),
]

_AREAL = """Traceback (most recent call last):
  File "/w/AReaL/examples/lite/gsm8k_grpo.py", line 226, in <module>
    main(sys.argv[1:])
  File "/w/AReaL/areal/engine/sglang_remote.py", line 80, in initialize
    self._wait_for_server(addr_)
  File "/w/AReaL/areal/engine/sglang_remote.py", line 67, in _wait_for_server
    raise RuntimeError("server launch failed")
RuntimeError: server launch failed"""

_PYBIND_AT = """2026-02-15 17:32:13 [DEBUG]
 Exception: expected value at line 1 column 1

At:
  /u/lib/python3.11/site-packages/transformers/tokenization_utils_tokenizers.py(115): convert_to_native_format
  /u/lib/python3.11/site-packages/transformers/tokenization_utils_base.py(1712): from_pretrained
  /u/lib/python3.11/site-packages/transformers/models/auto/tokenization_auto.py(651): from_pretrained
  /u/lib/python3.11/site-packages/mlx_engine/generate.py(97): load_model"""

_ROUND25 = [
    # from heldout21's misses. An uncaught C++ exception that states its error in words, then Python's abort: the
    # error named the failure (a CuTe DSL kernel's MLIR, here); other words are unknown, code is still the crash
    ("terminate called after throwing an instance of 'nanobind::builtin_exception'\n  what():  Expected an MLIR object "
     "(got [<cutlass._mlir._mlir_libs._cutlass_ir._mlir.ir.OpResult object at 0x7f72>])\nFatal Python error: Aborted",
     "jit_compile"),
    ("terminate called after throwing an instance of 'std::runtime_error'\n  what():  Failed to open the shared state "
     "of the plugin\nFatal Python error: Aborted", "unknown"),
    ("terminate called after throwing an instance of 'std::runtime_error'\n  what():  mMaxSeqLen > 0\nFatal Python "
     "error: Aborted", "crash"),
    # LM Studio's exit code: 0xC0000409 as an unsigned 64-bit number in a JavaScript double; its neighbour is several
    # codes at once
    ("Error loading model.\n\n(Exit code: 18446744072635812000). Unknown error. Try a different model and/or config.",
     "crash"),
    ("Error loading model.\n\n(Exit code: 18446744072635810000). Unknown error. Try a different model and/or config.",
     "unknown"),
    ("  cause: 'Error when loading model: ValueError: Gemma 4 support is not ready yet, stay tuned!',", "model_load"),
    # pybind11's "At:" frames under the exception are its traceback: a tokenizer's from_pretrained loads the model
    (_PYBIND_AT, "model_load"),
    # a launcher's wait for its server, by its frames
    (_AREAL, "startup_timeout"),
    # TMA (Hopper and later) refused as not supported (801) is the GPU; another status is no cause
    ("Error: Failed to initialize the TMA descriptor 801", "arch_unsupported"),
    ("Error: Failed to initialize the TMA descriptor 1", "unknown"),
    ('Init error, Error: This model requires WebGPU extension shader-f16, which is not enabled in this browser.',
     "arch_unsupported"),
    ("ERROR:auto_gptq.nn_modules.qlinear.qlinear_exllama:exllama_kernels not installed.", "import_error"),
    ("ModuleNotFoundError                       Traceback (most recent call last)\n<ipython-input-3> in <cell line: 1>()",
     "import_error"),
    ("  \u00d7 Failed to build `uvloop==0.22.1`\n  \u251c\u2500\u25b6 The build backend returned an error", "import_error"),
    ('    raise RuntimeError("NIXL is not available")\nRuntimeError: NIXL is not available', "import_error"),
    ("ValueError: `.to` is not supported for `4-bit` or `8-bit` bitsandbytes models. Please use the model as it is",
     "bad_args"),
    # CUresult 2 (out of memory) from a driver allocation in NVSHMEM's words; a source folder named host is no host
    # memory; another status is no cause
    ("/nvshmem/src/host/mem/mem_heap.cpp:1509: non-zero status: 2 cuMemCreate failed ", "oom_gpu"),
    ("/nvshmem/src/host/mem/mem_heap.cpp:1509: non-zero status: 1 cuMemCreate failed ", "unknown"),
    ("RuntimeError: CUDA error: out of memory while allocating pinned host memory", "oom_host"),
    ("FAILED: [code=1] /w/flash-attention/hopper/build/temp.linux-x86_64-cpython-312/flash_api_stable.o",
     "jit_compile"),
]

_ROUND26 = [
    # from heldout22's misses. Windows' exception codes however the report spells "Exception code"; Windows Error
    # Reporting's APPCRASH record in any language; MSVC's uncaught C++ exception code as LM Studio prints it
    ("Exception Code: 0xC0000005", "crash"),
    ("Exception code:    0xC0000005", "crash"),
    ("Version=1\nEventType=APPCRASH\nEventTime=133832273413087131\nSig[3].Name=\u6545\u969c\u6a21\u5757\u540d\u79f0\n"
     "Sig[3].Value=MSVCP140.dll", "crash"),
    ("Version=1\nEventType=BEX64\nEventTime=133832273413087131", "unknown"),
    ("Error loading model.\n\n(Exit code: 18446744073179853000). Unknown error. Try a different model and/or config.",
     "crash"),
    # the Go runtime's signal report after a C++ exception that stated its error in words: that error named it
    ("terminate called after throwing an instance of 'std::runtime_error'\n  what():  can not find preferred GPU "
     "platform\nSIGABRT: abort\nPC=0x7e33dfe969fc m=0 sigcode=18446744073709551610\nsignal arrived during cgo execution",
     "unknown"),
    ("SIGSEGV: segmentation violation\nPC=0x7e33dfe969fc m=0 sigcode=1\nsignal arrived during cgo execution", "crash"),
    # the device lacks what the kernel needs: ggml-metal's supports_op, rocBLAS without its Tensile library, PyTorch's
    # MPS and XPU operators and dtypes (an exception's message that ends in advice, "as a fallback", "WARNING: ...",
    # is still the exception)
    ("ggml_metal_graph_compute_block_invoke: error: unsupported op 'MUL_MAT'\nGGML_ASSERT: ggml-metal.m:1460: false",
     "arch_unsupported"),
    ("rocBLAS error: Cannot read /e/lib/python3.9/site-packages/torch/lib/rocblas/library/TensileLibrary.dat: No such "
     "file or directory", "arch_unsupported"),
    ("NotImplementedError: The operator 'torch_ipex::ipex_woq_linear' is not currently implemented for the XPU device. "
     "You can set the environment variable `PYTORCH_ENABLE_XPU_FALLBACK=1` to use the CPU implementation as a fallback "
     "for XPU unimplemented operators. WARNING: this will bring unexpected performance.", "arch_unsupported"),
    ("libc++abi: terminating with uncaught exception of type c10::TypeError: Trying to convert ComplexFloat to the MPS "
     "backend but it does not have support for that dtype.", "arch_unsupported"),
    # a coping line still counts as coping
    ("RuntimeError: flash attention kernel not available, falling back to the math kernel\nINFO: Uvicorn running on "
     "http://0.0.0.0:8000", "unknown"),
    # model files the engine cannot use: mlx-lm's ModelArgs without a config field, MLX's quantize bits, MLC's model
    # library
    ("Error when loading model: TypeError: ModelArgs.__init__() missing 1 required positional argument: 'rope_theta'",
     "model_load"),
    ("Error when loading model: ValueError: [quantize] The requested number of bits 3 is not supported. The supported "
     "bits are 2, 4 and 8.", "model_load"),
    ("[11:37:45] /w/cpp/cli_main.cc:378: Cannot find the model library that corresponds to `vicuna-v1-7b-q3f16_0`.",
     "model_load"),
    # a program the launcher runs is not installed
    ("2025-03-24T17:44:27.843241Z ERROR download: text_generation_launcher: text-generation-server not found in PATH\n"
     "Error: DownloadError", "import_error"),
    # MSVC's linker; HIP's runtime compiler without a target
    ("cublas.obj : error LNK2001: unresolved external symbol cublasHgemm\nERROR: Failed building wheel for auto-gptq",
     "jit_compile"),
    ("ERROR 03-05 12:36:31 [core.py:1006] Error: Please provide architecture for which code is to be generated.",
     "jit_compile"),
]

_ROUND27 = [
    # from heldout23's misses. A shell's "not found" names a missing program, not a bash builtin run by sh nor a
    # variable's name run as a command; an engine's own binary not found is
    ("llama-server: not found", "unknown"),
    ("sh: 1: llama-server: not found", "import_error"),
    ("/var/spool/slurmd/job01/run.sh: 18: source: not found\n[ERROR] Failed to activate environment", "unknown"),
    ("sh: 1: Leader_Node_Address: not found\nError: Missing argument --ray_address", "bad_args"),
    ("Error: error loading model: 500 Internal Server Error: error starting llama-server: llama-server binary not found "
     "(checked: /opt/homebrew/Cellar/ollama/0.30.0/libexec/lib/ollama/llama-server)", "import_error"),
    # Windows' ERROR_MOD_NOT_FOUND text; "not installed" after an error level or an exception's word
    ("Failed to load LLM engine from path:\nC:\\Users\\u\\llm_engine_cuda12.node\nThe specified module could not be found.",
     "import_error"),
    ("[ERROR] !!! Exception during processing !!! llama.cpp runtime is not installed for windows. Run install_runtime.py",
     "import_error"),
    ("INFO: flash-attn is not installed, using the default attention", "unknown"),
    # an extension module's name undefined is its failed import; another name is a code error
    ("NameError: name 'exllamav2_ext' is not defined", "import_error"),
    ("NameError: name 'tokenizer' is not defined", "unknown"),
    # a GPU runtime's error after "error loading model:" is not the model's files
    ("llamacpp error: Error: llama_model_load: error loading model: vk::Queue::submit: ErrorDeviceLost", "unknown"),
    ("llama_model_load: error loading model: corrupted model: tensor data is not within the file bounds", "model_load"),
    # ComfyUI's prompt validation: the model file a node names is not in its folder
    ("Prompt outputs failed validation\nSearge_LLM_Node:\n    - Value not in list: model: 'Mistral-7B-Instruct-v0.3.Q4_K_M"
     ".gguf' not in []", "model_load"),
]

_ROUND28 = [
    # from heldout24's misses. "compute cap" as TEI and candle abbreviate it; a refusal next to it is the GPU's
    ("Error: Could not create backend\n\nCaused by:\n    Could not start backend: Runtime compute cap 75 is not "
     "compatible with compile time compute cap 80", "arch_unsupported"),
    ("cuda compute cap 120 is not supported", "arch_unsupported"),
    ("INFO text_embeddings_router: Starting model backend, compute cap 80", "unknown"),
    # glibc's heap checks abort the process; the words inside a sentence are no report of it
    ("slot 0 - encoding image [id: 1]\nmunmap_chunk(): invalid pointer\nAborted", "crash"),
    ("double free or corruption (out)", "crash"),
    ("INFO: the double free or corruption fix from #123 is in this build", "unknown"),
    # the checkpoint lacks what the engine's model needs; the engine lacks the model
    ("    Could not start backend: cannot find tensor encoder.layer.0.mlp.gated_layers.weight", "model_load"),
    ("Error: 500 Internal Server Error: failed to initialize model: qwen3next: layer 0 missing attn_qkv/attn_gate "
     "projections", "model_load"),
    ("[rank0]: ValueError: Processor was not found, please check and update your processor config.", "model_load"),
    ("ValueError: LiteWhisperForConditionalGeneration has no vLLM implementation and the Transformers implementation is "
     "not compatible with vLLM. Try setting VLLM_USE_V1=0.", "model_load"),
    ("ERROR 08-10 18:41:45 [multiproc_executor.py:511] ValueError: Currently, MiniCPMV only supports versions 2.0, 2.5, "
     "and 2.6", "model_load"),
    ("500 Internal Server Error: 'llama3.2-vision' is no longer compatible with your version of Ollama and has been "
     "replaced by a newer version. To re-download, run 'ollama pull llama3.2-vision'", "model_load"),
    # a library missing: cuDNN's DLL search, a package required with its install line
    ("Could not locate cudnn_ops_train64_8.dll. Please make sure it is in your library path!", "import_error"),
    ("Error: Using a `device_map`, `tp_plan`, `torch.device` context manager or setting `torch.set_default_device(device)`"
     " requires `accelerate`. You can install it with `pip install accelerate`", "import_error"),
]

_ROUND29 = [
    # from heldout25's misses: Windows' DLL initialisation failure in any language; bitsandbytes' CUDA set-up
    ("OSError: [WinError 1114] \u52a8\u6001\u94fe\u63a5\u5e93(DLL)\u521d\u59cb\u5316\u4f8b\u7a0b\u5931\u8d25\u3002",
     "import_error"),
    ("RuntimeError:\n        CUDA Setup failed despite GPU being available. Inspect the CUDA SETUP outputs above to fix "
     "your environment!", "import_error"),
    # a size of 0 refused; llama.cpp's row split on a back-end without split buffers
    ("  RuntimeError: cp_world_size must be positive, required by downstream unified code path. Use 1 if CP is not "
     "enabled.", "bad_args"),
    ("INFO: the batch size must be positive; using 1", "unknown"),
    ("llama_model_load: error loading model: device CUDA0 does not support split buffers", "bad_args"),
]

_ROUND30 = [
    # from heldout26's misses: the interpreter's `python -m` of a module that is not there; pip that can install
    # nothing (no version, a resolver conflict); the loader's versioned library of another version
    ("/workspace/venv/bin/python3: No module named mlc_llm.build", "import_error"),
    ("ERROR: Could not find a version that satisfies the requirement mlx (from versions: none)\n"
     "ERROR: No matching distribution found for mlx", "import_error"),
    ("ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/", "import_error"),
    ("/tmp/o/runners/cuda_v11/ollama_llama_server: /usr/local/cuda/lib64/libcublas.so.11: version `libcublas.so.11' "
     "not found (required by /tmp/o/runners/cuda_v11/ollama_llama_server)", "import_error"),
    # ggml's Metal library not built on this Mac; a library that was built is no failure
    ("ggml_metal_device_init: error: failed to create library", "jit_compile"),
    ("ggml_metal_library_init: using embedded metal library\nggml_metal_library_init: loaded in 0.012 sec", "unknown"),
    # vLLM's MoE oracle with no backend for this platform
    ("NotImplementedError: No WNA16 MoE backend supports the deployment configuration.", "arch_unsupported"),
    # ggml's gdb backtrace of its abort; a GPU runtime's error just before it named the failure
    ("/src/ggml/src/ggml-backend.cpp:746: pre-allocated tensor (cache_k_l0 (view)) in a buffer (RPC[]) that cannot "
     "run the operation (VIEW)\n[New LWP 25200]\n#0  0x00007ce8fff107e3 in __GI___wait4 (pid=27186) at wait4.c:30\n"
     "#1  0x0000000000dc8379 in ggml_abort ()\n#2  0x0000000000ddbec8 in ggml_backend_sched_backend_id_from_cur() ()",
     "crash"),
    ("CUDA error: an illegal memory access was encountered\n  current device: 0, in function ggml_cuda_op\n"
     "#1  0x00007f3a1c2b4e11 in ggml_abort ()", "illegal_memory_access"),
]


@pytest.mark.parametrize(("log", "cause"), [*_ROUND7, *_ROUND8, *_ROUND9, *_ROUND10, *_ROUND11, *_ROUND12,
                                            *_ROUND13, *_ROUND14, *_ROUND15, *_ROUND16, *_ROUND17, *_ROUND18,
                                            *_ROUND19, *_ROUND20, *_ROUND21, *_ROUND22, *_ROUND23,
                                            *_ROUND24, *_ROUND25, *_ROUND26,
                                            *_ROUND27, *_ROUND28, *_ROUND29, *_ROUND30])
def test_rounds_7_to_30_name_their_classes(log, cause):
    """Rounds 7-30: each line (the engines' and libraries' source wordings, with look-alikes) names its
    cause; the comments in the tables above say why."""
    assert classify(log, exit_code=1).cause == cause


def test_round16_a_user_rule_may_refuse_a_match_by_the_line_after_it(tmp_path):
    """``not_next``: the match does not count when the next line matches (the shipped rules use it for a C++
    exception whose what() states its error in words); the verdict still quotes the lines."""
    _write(tmp_path, "crash.toml", '''
cause = "crash"
[[rule]]
id = "runner_died"
patterns = ['runner died']
not_next = 'reason: \\w+'
''')
    assert classify("runner died\n", exit_code=1, rules_dir=tmp_path).cause == "crash"
    d = classify("runner died\nreason: quota\n", exit_code=1, rules_dir=tmp_path)
    assert d.cause == "unknown" and any("runner died" in e for e in d.evidence)


def test_a_rule_may_refuse_a_match_whose_next_line_holds_a_word_of_a_class(tmp_path):
    """``not_before``: the match does not count when the line right after it holds a word of a named class
    (_common.toml's): Rust's panic whose message quotes a GPU runtime's error is that error's report, not a
    crash. A class the rules do not define is refused when the rules load."""
    panic = "thread 'main' panicked at src/main.rs:12:5:\n"
    assert classify(panic + "index out of bounds: the len is 3 but the index is 7\n", exit_code=101).cause == "crash"
    d = classify(panic + "called `Result::unwrap()` on an `Err` value: DriverError(CUDA_ERROR_NOT_FOUND, \"named symbol not found\")\n",
                 exit_code=101)
    assert d.cause != "crash"
    _write(tmp_path, "crash.toml", '''
cause = "crash"
[[rule]]
id = "runner_died"
patterns = ['runner died']
not_before = ["memory_word"]
''')
    with pytest.raises(RulesError, match="memory_word"):
        classify("runner died\n", exit_code=1, rules_dir=tmp_path)
