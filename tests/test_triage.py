"""Failure triage: the real-log corpus under tests/data/logs (failures) and tests/data/logs_ok
(healthy startups), plus unit tests of the shape matcher.

Every failure file names its cause in its header (`# expected: <cause>`); a file whose cause the
rules cannot prove yet says so (`# named: unknown`): triage must then answer `unknown`, never
another cause. The held-out measurement of the rules is in tests/data/logs/HOLDOUT.md.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bakeoff.judge.triage import CAUSES, Diagnosis, classify, explain, find_cause, is_failure_evidence, load_rules
from bakeoff.judge.triage import matcher

CORPUS = Path(__file__).parent / "data" / "logs"
HEALTHY = Path(__file__).parent / "data" / "logs_ok"
# corpus folder -> engine passed to classify (these folders hold logs of several engines)
ENGINE_OF = {"flashinfer": None, "pytorch": "transformers", "rocm": None, "misc": None}
SPECIFIC = set(CAUSES) - {"unknown"}


def read_case(path: Path) -> tuple[dict, str]:
    lines = path.read_text(encoding="utf-8").split("\n")
    header, i = {}, 0
    while i < len(lines) and lines[i].startswith("# "):
        key, _, value = lines[i][2:].partition(":")
        header[key.strip()] = value.strip()
        i += 1
    return header, "\n".join(lines[i:])


CASES = sorted(CORPUS.glob("*/*.log"))
HEALTHY_CASES = sorted(HEALTHY.glob("*.log"))


def run_case(path: Path) -> tuple[dict, Diagnosis]:
    header, body = read_case(path)
    exit_code = int(header["exit_code"]) if "exit_code" in header else None
    engine = ENGINE_OF.get(path.parent.name, path.parent.name)
    return header, classify(body, exit_code=exit_code, engine=engine)


def test_corpus_is_big_and_covers_every_cause():
    headers = [read_case(p)[0] for p in CASES]
    assert len(CASES) >= 40
    assert all(h.get("source", "").startswith("https://github.com/") for h in headers)
    expected = {h["expected"] for h in headers}
    assert SPECIFIC - {"startup_timeout", "hang"} <= expected
    assert sum(h["expected"] == "none" for h in headers) >= 3
    for engine in ("sglang", "vllm", "trtllm", "flashinfer", "pytorch", "llamacpp", "rocm"):
        assert len(list((CORPUS / engine).glob("*.log"))) >= 4, engine
    assert len(HEALTHY_CASES) >= 15


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_corpus(path):
    header, d = run_case(path)
    _, body = read_case(path)
    engine = ENGINE_OF.get(path.parent.name, path.parent.name)
    if header["expected"] == "none":
        assert d.cause not in SPECIFIC
        assert d.confidence <= 0.1
        assert find_cause(body, engine=engine) is None
        assert not is_failure_evidence(body, engine=engine)
    else:
        want = header.get("named", header["expected"])  # `named: unknown` = a known miss
        assert d.cause == want, d.evidence
        assert d.evidence and all(e.startswith("L") for e in d.evidence)
        assert 0 < d.confidence <= 1


@pytest.mark.parametrize("path", HEALTHY_CASES, ids=lambda p: p.stem)
def test_healthy_logs_name_no_cause(path):
    """Real healthy startups (warnings about unsupported features, fallbacks, a retried
    allocation) are not failures, with or without the engine named."""
    body = read_case(path)[1]
    assert find_cause(body) is None, classify(body).evidence
    assert classify(body, exit_code=0).cause == "unknown"


def test_never_a_wrong_cause_over_the_corpus():
    """`unknown` beats a guess: no failure log is given a specific cause other than its own."""
    wrong = []
    for path in CASES:
        header, d = run_case(path)
        if header["expected"] not in ("none", d.cause) and d.cause != "unknown":
            wrong.append(f"{path.parent.name}/{path.name}: expected {header['expected']}, got {d.cause}")
    assert not wrong
    named = sum(run_case(p)[1].cause == read_case(p)[0]["expected"] for p in CASES)
    assert named >= len(CASES) - 3  # known misses carry `named: unknown` in their header


def test_warning_that_mentions_capability_is_not_a_cause():
    log = (
        "INFO 10-24 09:50:10 [api_server.py:1] vLLM API server version 0.11\n"
        "(Worker_TP0 pid=201) WARNING 10-24 09:50:14 [marlin_utils_fp4.py:137] Your GPU does not have "
        "native support for FP4 computation but FP4 quantization is being used. Weight-only FP4 "
        "compression will be used leveraging the Marlin kernel.\n"
        "WARNING 10-24 09:50:15 [x.py:1] CUDA out of memory on a previous attempt, retrying\n"
        "INFO:     Application startup complete.\n"
    )
    assert find_cause(log) is None
    d = classify(log, exit_code=0)
    assert d.cause == "unknown" and d.confidence <= 0.1
    assert d.explanation == "No fatal error found in the log."


def test_sigkill_without_log_is_killed():
    for kwargs in ({"exit_code": -9}, {"signal": 9}, {"exit_code": 137}):
        d = classify("", **kwargs)
        assert d.cause == "killed", kwargs
        assert "SIGKILL" in d.explanation or kwargs == {"exit_code": 137}


def test_log_cause_beats_sigkill():
    d = classify("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n", exit_code=-9)
    assert d.cause == "oom_gpu"


def test_timed_out_is_startup_timeout_with_last_lines():
    log = "\n".join(f"INFO loading shard {i}/40" for i in range(40)) + "\n"
    d = classify(log, timed_out=True, exit_code=-9)  # we killed it ourselves after the timeout
    assert d.cause == "startup_timeout"
    assert d.evidence[-1] == "L40: INFO loading shard 39/40"
    assert explain("startup_timeout") == (d.explanation, d.hint)


def test_hung_is_hang():
    d = classify("INFO capturing cuda graphs\n", hung=True, signal=9)
    assert d.cause == "hang"
    assert d.evidence == ["L1: INFO capturing cuda graphs"]


def test_fatal_error_in_log_beats_timeout_flag():
    d = classify("RuntimeError: NCCL error: unhandled system error\n", timed_out=True)
    assert d.cause == "distributed_init"


def test_unknown_keeps_last_traceback_lines():
    log = (
        "INFO starting\n"
        "Traceback (most recent call last):\n"
        '  File "server.py", line 10, in <module>\n'
        "    main()\n"
        "KeyError: 'rope_scaling'\n"
        "\n"
    )
    d = classify(log, exit_code=1)
    assert d.cause == "unknown"
    assert d.evidence[-1] == "L5: KeyError: 'rope_scaling'"
    assert "L2: Traceback (most recent call last):" in d.evidence
    assert "exited with code 1" in d.explanation
    assert find_cause(log, exit_code=1) is None


def test_crash_signal_is_a_signal_death_with_its_line():
    d = classify("Segmentation fault (core dumped)\n", exit_code=-11)
    assert d.cause == "killed"
    assert "SIGSEGV" in d.explanation
    assert d.evidence == ["L1: Segmentation fault (core dumped)"]
    # a signal death hidden behind exit status 1: the text proves it
    d = classify("Fatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most recent call first):\n", exit_code=1)
    assert d.cause == "killed" and d.line == 1


def test_unknown_with_unmatched_signal():
    d = classify("shutting down\n", exit_code=-15)  # SIGTERM: someone stopped it, no cause named
    assert d.cause == "unknown"
    assert "SIGTERM" in d.explanation


def test_evidence_has_line_numbers_and_context():
    log = "line one\nline two\nRuntimeError: CUDA error: an illegal memory access was encountered\nnext line\nlast\n"
    d = classify(log)
    assert d.cause == "illegal_memory_access"
    assert d.line == 3
    assert d.evidence == [
        "L2: line two",
        "L3: RuntimeError: CUDA error: an illegal memory access was encountered",
        "L4: next line",
    ]


def test_first_fatal_error_wins_over_cascade():
    log = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB\n"
        "[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout\n"
        "RuntimeError: NCCL error: unhandled system error\n"
    )
    assert classify(log).cause == "oom_gpu"


def test_root_cause_beats_generic_runtime_error():
    log = (
        "RuntimeError: RMSNorm failed with error code no kernel image is available for execution on the device\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    d = classify(log)
    assert d.cause == "arch_unsupported" and d.hard


def test_jit_failure_beats_import_error_it_causes():
    log = (
        "ninja: build stopped: subcommand failed.\n"
        "ImportError: /root/.cache/flashinfer/sampling/sampling.so: cannot open shared object file: No such file or directory\n"
    )
    assert classify(log).cause == "jit_compile"


def test_llamacpp_alloc_failure_beats_generic_context_failure():
    log = (
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 16384.00 MiB on device 0: cudaMalloc failed: out of memory\n"
        "llama_init_from_model: failed to initialize the context\n"
        "ValueError: Failed to create llama_context\n"
    )
    assert classify(log, engine="llama.cpp").cause == "oom_gpu"
    assert classify("ValueError: Failed to create llama_context\n", engine="llamacpp").cause == "bad_args"


def test_llama_cpp_python_quantized_v_cache_text():
    # the two lines llama-cpp-python prints for -ctv q8_0 without flash attention
    log = "llama_init_from_model: quantized V cache requires flash_attn to be enabled\nValueError: Failed to create llama_context\n"
    d = classify(log, engine="llamacpp", exit_code=1)
    assert d.cause == "bad_args" and d.line == 1


def test_engine_filter():
    log = "llama_new_context_with_model: V cache quantization requires flash_attn\n"
    assert classify(log, engine="llamacpp").cause == "bad_args"
    assert classify(log, engine="llama-cpp-python").cause == "bad_args"
    assert classify(log).cause == "bad_args"  # no engine: every rule applies
    assert classify(log, engine="vllm").cause == "unknown"


def test_hard_flags():
    assert classify("CUDA error: no kernel image is available for execution on the device").hard
    assert classify("ModuleNotFoundError: No module named 'sgl_kernel'").hard
    assert not classify("torch.OutOfMemoryError: CUDA out of memory.").hard


def test_port_in_use_variants():
    for line in (
        "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use",
        "main: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080",
        "OSError: [Errno 98] Address already in use",
    ):
        assert classify(line).cause == "port_in_use", line


def test_server_args_assertion_is_bad_args():
    log = (
        "Traceback (most recent call last):\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/server_args.py", line 512, in __post_init__\n'
        "    assert self.tp_size % self.pp_size == 0\n"
        "AssertionError\n"
    )
    assert classify(log).cause == "bad_args"
    # the same exception elsewhere is not an argument problem
    assert classify(log.replace("server_args.py", "scheduler.py").replace("__post_init__", "step")).cause == "unknown"


def test_speed_on_big_log():
    line = "[2025-03-11 15:02:53 TP0] Decode batch. #running-req: 12, #token: 4096, gen throughput (token/s): 812.3\n"
    big = line * (20_000_000 // len(line)) + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    t0 = time.perf_counter()
    d = classify(big, exit_code=1)
    elapsed = time.perf_counter() - t0
    assert d.cause == "oom_gpu"
    assert d.line == big.count("\n")
    assert elapsed < 5, f"classify took {elapsed:.1f}s on a 20 MB log"


def test_explain_every_cause_and_rules_load():
    rules = load_rules()
    assert {r.cause for r in rules} == SPECIFIC - {"startup_timeout", "hang", "unknown"}
    for cause in CAUSES:
        explanation, hint = explain(cause)
        assert explanation and hint
    with pytest.raises(KeyError):
        explain("nope")


def test_diagnosis_json():
    d = classify("OSError: [Errno 98] Address already in use", engine="vllm")
    assert isinstance(d, Diagnosis)
    j = d.to_json()
    assert {"cause", "explanation", "hint", "evidence", "confidence", "hard"} <= set(j)
    assert j["cause"] == "port_in_use" and j["evidence"] == ["L1: OSError: [Errno 98] Address already in use"]
    with pytest.raises(Exception):
        d.cause = "x"  # frozen
