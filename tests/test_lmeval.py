"""The lm-evaluation-harness gate on the real engine: llama-server serving the real SmolLM2-135M,
and the real lm_eval (scripts/setup_lmeval.sh installs it) running a local task offline:
tests/data/lmeval/addition.yaml, 40 one-digit additions whose sums are all 10-18.

One sweep: the baseline, a healthy change (a smaller batch) and a change that really breaks
answers, a logit bias of -100 on SmolLM2's token "1" (id 33): every sum has a 1 in it, while the
probe set here (tests/data/lmeval/probes.toml) asks nothing whose answer has one, so the probes
pass and only the lm-eval gate can see the fault. Then one trial whose lm_eval cannot start: an
infrastructure fault, never a pass and never ``wrong``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bakeoff import decide
from bakeoff import spec as specmod
from bakeoff.errors import SpecError
from bakeoff.judge import lmeval
from bakeoff.pipeline import run_sweep
from bakeoff.store import Store

pytestmark = pytest.mark.engine

DATA = Path(__file__).resolve().parent / "data" / "lmeval"
ONE = "33"  # SmolLM2's token "1" (llama-server /tokenize: digits are single tokens 32-41)


def spec_data(eng, **lm_eval) -> dict:
    return {
        "name": "lmeval", "engine": "llamacpp", "engine_options": {"binary": eng.binary},
        "model": {"path": eng.model, "name": "smollm2"},
        "server": {"args": ["--ctx-size", "1024", "--parallel", "2", "--threads", "1", "--no-webui"],
                   "startup_timeout_s": 240, "hang_timeout_s": 90, "request_timeout_s": 300},
        # the built-in checks kept small (no gate, no concurrent copies): lm-eval is what is tested
        "probes": {"set": str(DATA / "probes.toml"), "max_tokens": 16, "concurrency": 0, "gate_items": 0,
                   "load_probe": False,
                   "lm_eval": {"tasks": ["bakeoff_addition"], "include_path": str(DATA), "limit": 40,
                               "num_concurrent": 2, "max_gen_toks": 16, "offline": True, **lm_eval}},
        "bench": {"concurrency": [1], "requests_per_level": 2, "warmup_requests": 0,
                  "input_tokens": 16, "output_tokens": 8, "slow_fraction": 0.05},
        "plan": {"strategy": "ofat"},
    }


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory):
    """lm_eval's datasets cache in a fresh folder (HF_HOME), restored after."""
    old = os.environ.get("HF_HOME")
    os.environ["HF_HOME"] = str(tmp_path_factory.mktemp("hf"))
    yield
    if old is None:
        os.environ.pop("HF_HOME", None)
    else:
        os.environ["HF_HOME"] = old


@pytest.fixture(scope="module")
def sweep(real_llamacpp, tmp_path_factory, hf_home):
    data = spec_data(real_llamacpp)
    data["axes"] = [{"name": "batch", "flag": "--batch-size", "values": [2048, 64]},
                    {"name": "bias", "flag": "--logit-bias", "values": [f"{ONE}+0", f"{ONE}-100"]}]
    out = tmp_path_factory.mktemp("lmeval") / "run"
    report = run_sweep(specmod.parse(data), out)
    with Store(out) as store:
        trials = store.trials()
        artifacts = {t.key: store.artifact(t.key, "probes") for t in trials}
    return {"trials": trials, "report": report.read_text(), "artifacts": artifacts, "dir": out}


def _lm(t) -> dict:
    return t.metrics["probe"]["lm_eval"]["tasks"]["bakeoff_addition"]


def test_verdicts(sweep):
    got = [(t.idx, t.verdict, t.cause) for t in sweep["trials"]]
    assert got == [(0, "ok", None), (1, "ok", None), (2, "wrong", "lm_eval_task")], [t.detail for t in sweep["trials"]]


def test_baseline_and_healthy_change_report_accuracy_with_intervals(sweep):
    base, healthy, _ = sweep["trials"]
    b = _lm(base)
    k, n = map(int, b["accuracy"].split("/"))
    assert n == 40 and 7 <= k and b["ci95"][0] <= k / n <= b["ci95"][1] and b["filter"] == "last-number"
    h = _lm(healthy)  # beside the baseline's, on the same 40 documents
    assert h["baseline"] == b["accuracy"] and h["ci95_baseline"] == b["ci95"]
    assert h["lost"] <= 3 and sweep["trials"][1].metrics["probe"]["lm_eval"]["p"] >= 0.01
    assert f"lm_eval bakeoff_addition {h['accuracy']}" in healthy.detail and "vs baseline" in healthy.detail
    # the baseline's per-document answers are stored with its probe answers: the reference
    docs = sweep["artifacts"][base.key]["lm_eval"]["tasks"]["bakeoff_addition"]["docs"]
    assert len(docs) == 40 and sum(right for right, *_ in docs.values()) == k


def test_a_bias_against_the_digit_one_is_wrong_by_the_lm_eval_gate(sweep):
    bad = sweep["trials"][2]
    assert bad.config["bias"] == f"{ONE}-100" and bad.metrics["failed_mode"] == "lm_eval"
    lm = _lm(bad)
    assert lm["lost"] >= 7 and lm["gained"] == 0 and bad.metrics["probe"]["lm_eval"]["p"] < 0.01
    assert bad.detail.startswith("wrong in lm_eval mode (lm_eval_task): lm-eval bakeoff_addition (last-number): ")
    assert any("exact one-sided McNemar p=" in e and "< alpha 0.01" in e for e in bad.evidence)
    assert any(e.startswith("bakeoff_addition doc ") and "baseline" in e for e in bad.evidence), bad.evidence
    # a statistical gate's failure is confirmed on a relaunch (judge.confirm): a real fault fails
    # on every launch; the baseline was relaunched first, its lm-eval answers stored (stable docs only)
    assert bad.metrics["launches_judged"] == 2 and "confirmed on a relaunch (the first launch failed too: " in bad.detail
    assert "first launch:" in bad.evidence
    with Store(sweep["dir"]) as store:
        runs = decide.baseline_runs(store)
    assert runs and len(runs[0]["answers"]["lm_eval"]["bakeoff_addition"]) == 40
    # the probes passed: the fault is invisible to them
    assert bad.metrics["probe"]["task_accuracy"] == bad.metrics["probe"]["task_accuracy_baseline"]


def test_lm_eval_ran_as_a_subprocess_with_its_files_in_the_sweep(sweep):
    logs = sorted((sweep["dir"] / "lm_eval").glob("*/lm_eval.log"))
    assert len(logs) >= 4  # the three trials (the bias trial's relaunch rewrote its own) and the baseline's relaunches
    assert any(logs[0].parent.rglob("samples_bakeoff_addition_*.jsonl"))


def test_report_shows_accuracy_beside_the_baseline(sweep):
    text = sweep["report"]
    assert "## lm-evaluation-harness" in text
    base = _lm(sweep["trials"][0])["accuracy"]
    assert f"| 0 | baseline | bakeoff_addition (last-number) | {base} (" in text
    bad = _lm(sweep["trials"][2])
    assert (f"| 2 | bias=33-100 | bakeoff_addition (last-number) | {bad['accuracy']} (0%–" in text
            and f"| {base} (" in text.split("| 2 | bias=33-100 | bakeoff_addition", 1)[1].split("\n", 1)[0])
    assert "### Trial 2: bias=33-100 — wrong (lm_eval_task)" in text
    from bakeoff.report.html import render_html

    with Store(sweep["dir"]) as store:  # the HTML report (`bakeoff report DIR --html`) prints the same rows
        html = render_html(store)
    table = html.split('<table id="lm-eval">', 1)[1].split("</table>", 1)[0]
    assert f"<td>2</td><td>bias=33-100</td><td>bakeoff_addition (last-number)</td><td>{bad['accuracy']} (0%–" in table


def test_lm_eval_that_cannot_start_is_an_infra_error_not_a_verdict(real_llamacpp, tmp_path, hf_home):
    data = spec_data(real_llamacpp, command=[str(tmp_path / "no-such-lm_eval")])
    data["plan"] = {"strategy": "baseline"}
    out = tmp_path / "run"
    run_sweep(specmod.parse(data), out)
    with Store(out) as store:
        (rec,) = store.trials()
    assert (rec.verdict, rec.cause) == ("infra_error", "lm_eval"), rec.detail
    assert "lm_eval could not start" in rec.detail and "scripts/setup_lmeval.sh" in rec.detail


# -- the spec edge ----------------------------------------------------------------------------


def _probes(**lm_eval) -> dict:
    return specmod.Probes.model_validate({"lm_eval": lm_eval}).lm_eval


def test_spec_defaults_to_gsm8k_and_is_off_when_absent():
    assert specmod.Probes().lm_eval is None
    cfg = _probes()
    assert cfg.tasks == ["gsm8k"] and cfg.metric == "exact_match" and cfg.alpha == 0.01


@pytest.mark.parametrize("table, says", [
    ({"task": ["gsm8k"]}, "probes.lm_eval.task: unknown key"),
    ({"tasks": []}, "probes.lm_eval.tasks: List should have at least 1 item"),
    ({"tasks": ["gsm8k", "gsm8k"]}, "probes.lm_eval.tasks: a task is listed twice"),
    ({"include_path": "/no/such/dir"}, "probes.lm_eval.include_path: include_path '/no/such/dir' is not a directory"),
    ({"limit": 0}, "probes.lm_eval.limit: Input should be greater than 0"),
    ({"args": ["--output_path=x"]}, "probes.lm_eval.args: --output_path is set by bakeoff"),
])
def test_spec_errors_name_the_field(real_llamacpp, table, says):
    data = spec_data(real_llamacpp)
    data["probes"]["lm_eval"] = table
    with pytest.raises(SpecError) as err:
        specmod.parse(data)
    assert says in str(err.value), str(err.value)


def test_argv_is_a_list_with_no_secret_and_the_default_command(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-not-on-argv")
    monkeypatch.setenv(lmeval.ENV_COMMAND, "/opt/x/lm_eval")
    cmd = lmeval.argv(_probes(tasks=["gsm8k"], limit=5), "http://127.0.0.1:8080", "m", tmp_path, 60)
    assert cmd[0] == "/opt/x/lm_eval" and not any("sk-secret" in a for a in cmd)
    assert cmd[cmd.index("--model_args") + 1] == ("base_url=http://127.0.0.1:8080/v1/chat/completions,model=m,"
                                                  "num_concurrent=4,max_gen_toks=256,timeout=60,tokenized_requests=False")
    assert "--apply_chat_template" in cmd and "--log_samples" in cmd and cmd[cmd.index("--limit") + 1] == "5"
