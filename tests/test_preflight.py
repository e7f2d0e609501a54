"""Preflight: registry, verdict rules, and planner pruning on RECORDED H200 results.

CPU-only. tests/data/preflight/h200.json is the real output of `bakeoff preflight` on an
NVIDIA H200 (torch 2.11, CUDA 13; see docs/results/h200/).
"""

from __future__ import annotations

import importlib.util
import json
import tomllib
from pathlib import Path

import pytest

from bakeoff import preflight as pf
from bakeoff.errors import SpecError
from bakeoff.plan import make_plan
from bakeoff.plan.prune import Gate
from bakeoff.preflight import plan as pfplan
from bakeoff.spec import parse

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "tests/data/preflight/h200.json"


def _spec(path: str = "examples/gpu-transformers.toml", **preflight):
    data = tomllib.loads((ROOT / path).read_text())
    data["preflight"] = {**data.get("preflight", {}), **preflight}
    return parse(data, path)


def _h200() -> dict:
    return json.loads(H200.read_text())


# -- registry -------------------------------------------------------------------------------


def test_registry_has_every_probe_family():
    names = set(pf.registry())
    sdpa = {n for n in names if n.startswith("sdpa.")}
    assert len(sdpa) == 4 * 3 * 3  # backends x dtypes x head dims
    assert {"sdpa.flash.bf16.d128", "sdpa.cudnn.fp32.d256", "sdpa.math.fp16.d64"} <= sdpa
    assert {"fp8.e4m3.tensorwise", "fp8.e4m3.rowwise", "grouped_mm.bf16", "triton.vector_fma.fp32"} <= names
    # optional libraries register only when importable
    assert ("flashinfer.decode.fp16" in names) == (importlib.util.find_spec("flashinfer") is not None)
    assert ("flash_attn.fwd.bf16.d128" in names) == (importlib.util.find_spec("flash_attn") is not None)


def test_select_globs_and_duplicate_registration():
    got = [p.name for p in pf.select(["sdpa.flash.*.d64", "fp8.*"])]
    assert got == sorted(got) and len(got) == 5
    with pytest.raises(ValueError, match="registered twice"):
        pf.probe("fp8.e4m3.rowwise", "x")(lambda: None)


def test_gpu_only_probes_are_unsupported_here_not_errors():
    # this machine has no GPU: each GPU-only probe is a verdict with the reason, never a raise
    for name in ("fp8.e4m3.tensorwise", "triton.vector_fma.fp32"):
        r = pf.run_probe(pf.registry()[name], reps=1)
        assert r.verdict == "unsupported"
        assert ("CUDA" in r.reason) or ("torch" in r.reason) or ("triton" in r.reason), r.reason


# -- verdict rules --------------------------------------------------------------------------


def test_verdict_rules():
    tol = pf.Tolerance(atol=1e-3, rtol=1e-2)
    assert pf.verdict_for(3, 100, None, 1.0, tol)[0] == "nan"
    assert "3/100" in pf.verdict_for(3, 100, None, 1.0, tol)[3]
    assert pf.verdict_for(0, 100, 0.0105, 1.0, tol)[0] == "ok"          # 1e-3 + 1e-2 * 1.0
    v, abs_err, rel, why = pf.verdict_for(0, 100, 0.02, 1.0, tol)
    assert (v, abs_err, rel) == ("mismatch", 0.02, 0.02) and "max abs err" in why
    assert pf.verdict_for(0, 100, 0.1, 10.0, tol)[0] == "ok"             # relative to max |ref|
    assert pf.verdict_for(0, 100, 0.102, 10.0, tol)[0] == "mismatch"


def test_classify_error_keeps_the_librarys_reason():
    v, why = pf.classify_error(RuntimeError("No available kernel. Aborting execution."),
                               ["Flash attention kernel not used because: (Triggered internally at x.cpp:1.)",
                                "Expected query, key and value to all be of dtype: {Half, BFloat16}. Got Query dtype: float"])
    assert v == "unsupported"
    assert why.startswith("RuntimeError: No available kernel")
    assert "Got Query dtype: float" in why and "because:" not in why and "Triggered" not in why

    class CompilationError(Exception):
        pass

    assert pf.classify_error(CompilationError("at 3:4: bad"), [])[0] == "compile-failed"
    assert pf.classify_error(pf.CompileFailed("ptxas died"), [])[0] == "compile-failed"


# -- recorded H200 results -> planner -----------------------------------------------------


def test_recorded_h200_results_are_what_we_claim():
    res = {r["name"]: r for r in _h200()["results"]}
    assert _h200()["device"]["gpu"] == "NVIDIA H200"
    assert res["sdpa.flash.fp32.d64"]["verdict"] == "unsupported"
    assert "No available kernel" in res["sdpa.flash.fp32.d64"]["reason"]
    assert res["sdpa.flash.bf16.d128"]["verdict"] == "ok" and res["sdpa.flash.bf16.d128"]["time_ms"] > 0
    assert all(r["verdict"] in pf.VERDICTS for r in res.values())


def test_h200_results_prune_only_the_value_whose_library_is_missing():
    spec = _spec()
    bad = pfplan.bad_values(spec, _h200())
    assert list(bad) == [("attn", "flash_attention_2")]
    assert "flash_attn" in bad[("attn", "flash_attention_2")]
    plan = make_plan(spec)
    gate = Gate.for_spec(spec)
    for pair, why in bad.items():
        gate.add(frozenset([pair]), why, "preflight")
    skipped = {p.label: gate.skip(p) for p in plan}
    assert skipped["attn=flash_attention_2"][1].startswith("preflight:")
    assert skipped["baseline"] is None and skipped["dtype=float32"] is None


def test_unsupported_probe_prunes_with_reason_unless_forced():
    spec = _spec(map={"dtype=float32": "sdpa.flash.fp32.d64"})
    bad = pfplan.bad_values(spec, _h200())
    assert "No available kernel" in bad[("dtype", "float32")]
    assert "sdpa.flash.fp32.d64 is unsupported" in bad[("dtype", "float32")]
    forced = _spec(map={"dtype=float32": "sdpa.flash.fp32.d64"}, force=["dtype=float32"])
    assert ("dtype", "float32") not in pfplan.bad_values(forced, _h200())


def test_nan_prunes_and_mismatch_does_not():
    recorded = {"results": [{"name": "a.nan", "verdict": "nan", "reason": "4/8 outputs are NaN or inf"},
                            {"name": "b.off", "verdict": "mismatch", "reason": "max abs err 1"}]}
    spec = _spec(map={"dtype=float16": "a.*", "dtype=float32": "b.off"}, use_defaults=False)
    bad = pfplan.bad_values(spec, recorded)
    assert "is nan" in bad[("dtype", "float16")]
    assert ("dtype", "float32") not in bad  # mismatch is reported; the trial's own probes judge it


def test_for_sweep_uses_recorded_results_and_writes_them(tmp_path):
    spec = _spec(results=str(H200))
    bad = pfplan.for_sweep(spec, tmp_path)
    assert ("attn", "flash_attention_2") in bad
    assert json.loads((tmp_path / "preflight.json").read_text())["device"]["gpu"] == "NVIDIA H200"
    assert pfplan.for_sweep(_spec(enabled=False), tmp_path / "off") == {}


def test_engine_defaults_apply_by_flag():
    req = pfplan.required_probes(_spec("examples/gpu-transformers.toml", map={}, use_defaults=True))
    assert req[("attn", "flex_attention")] == ["triton.vector_fma.fp32"]  # from defaults.toml


def test_spec_rejects_unknown_axis_in_preflight_map():
    with pytest.raises(SpecError, match="preflight.map"):
        _spec(map={"nope=1": "sdpa.*"})
    with pytest.raises(SpecError, match="preflight.force"):
        _spec(force=["attn=not_a_value"])
