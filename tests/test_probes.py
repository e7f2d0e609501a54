"""Probes on synthetic Results: the absolute detectors, compare() at a divergence, judge()'s
order and false-alarm guards, task scoring, prompt-set variants; the 'slow' verdict and the
report's detector/mode lines. Exact values throughout; no server here (see test_faults.py)."""

from __future__ import annotations

import math

import pytest

from bakeoff import plan
from bakeoff.judge import probes
from bakeoff.report import markdown as report
from bakeoff import spec
from bakeoff import pipeline as sweep
from bakeoff.run import trial
from bakeoff.measure.client import Result
from bakeoff.errors import SpecError
from bakeoff.judge.probes import Prompt, compare, detect, judge
from bakeoff.store import Store, TrialRecord


def tok(token: str, logprob, top: list[tuple[str, float]] | None = None) -> dict:
    return {"token": token, "logprob": logprob,
            "top_logprobs": [{"token": t, "logprob": lp} for t, lp in (top or [(token, logprob)])]}


def reply(*tokens: dict, error: str | None = None) -> Result:
    return Result(text="".join(t["token"] for t in tokens), tokens=list(tokens), logprobs_requested=True, error=error)


def words(text: str, lp: float = -0.1) -> Result:
    """A healthy reply: one token per word, each with a finite logprob."""
    return reply(*(tok(w, lp) for w in text.split(" ")))


# ------------------------------------------------------------------ absolute detectors
def test_healthy_reply_has_no_findings():
    assert detect(words("The capital of France is Paris .")) == []


def test_null_logprobs_are_nonfinite_and_named_before_the_rest():
    # what llama-server sends for NaN logits: "logprob": null on every token, dots as text
    r = reply(*[tok(".", None, [("", None)]) for _ in range(10)])
    found = detect(r)
    assert found[0] == "nonfinite_logprobs: 10/10 tokens have logprob null (first at token 0, '.')"
    assert any(f.startswith("all_same_token: 10 x '.'") for f in found[1:])


def test_nan_and_inf_floats_are_nonfinite():
    assert detect(reply(tok("a", -0.1), tok("b", float("nan"))))[0].startswith("nonfinite_logprobs: 1/2 tokens have logprob nan (first at token 1")
    assert detect(reply(tok("a", -math.inf)))[0].startswith("nonfinite_logprobs: 1/1 tokens have logprob -inf")


def test_missing_logprobs_and_not_asked_for():
    r = Result(text="Paris", logprobs_requested=True)
    assert detect(r) == ["missing_logprobs: logprobs requested, none returned"]
    assert detect(r, expect_logprobs=False) == []


def test_empty_reply():
    assert detect(Result(text="  \n", logprobs_requested=False)) == ["empty: the reply has no text"]


def test_replacement_and_control_characters():
    found = detect(Result(text="ab\ufffd\ufffd\x01cd", logprobs_requested=False))
    assert found == ["bad_characters: 2 replacement and 1 control characters in 7"]
    # newlines and tabs are not control garbage; one stray replacement char in a long text is tolerated
    assert detect(Result(text="line one\n\tline two \ufffd and more words here to make it long", logprobs_requested=False)) == []


def test_all_same_token_needs_eight():
    assert detect(reply(*[tok("x", -0.1)] * 8)) == ["all_same_token: 8 x 'x'"]
    assert detect(reply(*[tok("x", -0.1)] * 7)) == []


def test_degenerate_repetition_of_a_short_period():
    toks = [tok(w, -0.1) for w in ["Once", " upon"]] + [tok(w, -0.1) for w in [" a", " cat"] * 14]
    assert detect(reply(*toks)) == ["degenerate_repetition: ' a cat' repeated 11 times"]


def test_repetition_needs_a_long_enough_reply():
    assert probes.repetition(["a", "b"] * 11) is None  # 22 tokens < 24
    assert probes.repetition(["a", "b"] * 12) == "'ab' repeated 9 times"


def test_request_error_short_circuits():
    assert detect(Result(error="HTTP 500: boom")) == ["request_error: HTTP 500: boom"]


# ------------------------------------------------------------------ compare()
def test_identical():
    d = compare(words("a b c"), words("a b c"), top_k=5)
    assert (d.agreement, d.consistent, d.diverge_at, d.detail, d.gap) == (1.0, True, None, "identical", None)


def test_prefix_is_a_length_difference_only():
    d = compare(words("a b c d"), words("a b"), top_k=5)
    assert (d.agreement, d.consistent, d.diverge_at) == (0.5, True, 2)
    assert d.detail == "same tokens, lengths 4 vs 2"


def test_near_tie_nova_haven_vs_new_haven_is_consistent():
    base = reply(tok("The", -0.1), tok(" city", -0.2), tok(" Nova", -0.70, [(" Nova", -0.70), (" New", -0.90)]), tok(" Haven", -0.05))
    trial_ = reply(tok("The", -0.1), tok(" city", -0.2), tok(" New", -0.75, [(" New", -0.75), (" Nova", -0.80)]), tok(" Haven", -0.05))
    d = compare(base, trial_, top_k=5)
    assert d.diverge_at == 2 and d.agreement == 0.5
    assert d.consistent is True
    assert d.gap == pytest.approx(0.20)
    assert d.detail == ("diverged at token 2: baseline ' Nova' vs ' New'; in each other's top-5: True/True; "
                        "logprob gaps 0.20/0.05 (near-tie, limit 1.5)")


def test_token_outside_the_other_top_k_is_inconsistent():
    base = reply(tok("The", -0.1), tok(" Paris", -0.2, [(" Paris", -0.2), (" Lyon", -3.0)]))
    trial_ = reply(tok("The", -0.1), tok(" zxq", -0.4, [(" zxq", -0.4), (" Paris", -1.0)]))
    d = compare(base, trial_, top_k=5)
    assert (d.agreement, d.consistent, d.diverge_at, d.gap) == (0.5, False, 1, math.inf)
    assert "in each other's top-5: False/True; logprob gaps inf/0.60 (not a near-tie" in d.detail


def test_both_in_top_k_but_gap_too_large_is_inconsistent():
    base = reply(tok("A", -0.1, [("A", -0.1), ("B", -2.5)]))
    trial_ = reply(tok("B", -0.2, [("B", -0.2), ("A", -1.0)]))
    d = compare(base, trial_, top_k=5)
    assert d.consistent is False and d.gap == pytest.approx(2.4)
    assert compare(base, trial_, top_k=5, tie_gap=2.5).consistent is True
    # top_k cuts the lists: with k=1 neither sees the other
    assert "top-1: False/False" in compare(base, trial_, top_k=1).detail


def test_without_logprobs_falls_back_to_words():
    a, b = Result(text="one two three four"), Result(text="one two three five")
    d = compare(a, b, top_k=5)
    assert (d.agreement, d.consistent, d.detail) == (0.75, True, "diverged at token 3 (no logprobs to judge)")


# ------------------------------------------------------------------ judge()
PROMPTS = [Prompt("arith", "2+3?", answer=r"\b5\b"), Prompt("capital", "capital?", answer="paris"),
           Prompt("json", "json please", json=True), Prompt("story", "Once upon a time")]
LONG = {"fact": "f", "filler": "x ", "question": "q", "answer": "pelican"}
CFG = spec.Probes(max_tokens=24, concurrency=1)

GOOD = {"arith": "2 + 3 = 5", "capital": "The capital is Paris .", "json": '{"name": "Alice"}',
        "story": "there was a small cat who lived by the sea"}


def collected(single: dict[str, Result], long: Result | None = None, concurrent: dict[str, Result] | None = None) -> dict:
    return {"prompts": PROMPTS, "long": LONG,
            "results": {"single": single, "long": {"long": long or words("PELICAN .")},
                        "concurrent": concurrent if concurrent is not None else {f"{k}#0": v for k, v in single.items()}}}


def good() -> dict[str, Result]:
    return {k: words(v) for k, v in GOOD.items()}


def test_baseline_alone_passes_with_measured_values():
    out = judge(collected(good()), CFG, None)
    assert out.passed
    assert out.values == {"requests": {"single": 4, "long": 1, "concurrent": 4}, "concurrent_consistency": 1.0,
                          "long_prompt_tokens": None, "long_answer_ok": True, "task_accuracy": "3/3"}


def test_identical_trial_passes_with_agreement_one():
    out = judge(collected(good()), CFG, collected(good()))
    assert out.passed
    assert out.values["agreement"] == 1.0 and out.values["topk_consistency"] == 1.0 and out.values["diverged"] == "0/4"
    assert out.values["task_accuracy"] == "3/3" and out.values["task_accuracy_baseline"] == "3/3"


def looping() -> Result:
    return reply(*[tok(w, -0.1) for w in ["Once"] + [" upon", " a", " time"] * 10])


def test_repetition_the_baseline_shows_too_is_not_a_failure():
    base, tri = good(), good()
    base["story"] = tri["story"] = looping()
    out = judge(collected(tri), CFG, collected(base))
    assert out.passed, out.detail


def test_repetition_only_the_trial_shows_fails_and_names_mode():
    tri = good()
    conc = {f"{k}#0": v for k, v in good().items()}
    conc["story#0"] = looping()
    out = judge(collected(tri, concurrent=conc), CFG, collected(good()))
    assert (out.passed, out.failed_mode, out.detector) == (False, "concurrent", "degenerate_repetition")
    assert out.detail.startswith("concurrent / prompt story#0: degenerate_repetition: ' upon a time' repeated")
    assert out.evidence[1] == "prompt: 'Once upon a time'"


def test_nan_never_excused_by_the_baseline():
    nan = reply(*[tok(".", None)] * 5)
    base, tri = good(), good()
    base["story"] = tri["story"] = nan  # even if the baseline had it (it would not be ok then)
    out = judge(collected(tri), CFG, collected(base))
    assert (out.passed, out.failed_mode, out.detector) == (False, "single", "nonfinite_logprobs")
    assert "first tokens: '.' None" in out.evidence[3]


def test_long_mode_failure_is_reported_as_long():
    out = judge(collected(good(), long=reply(*[tok("\ufffd", -0.1)] * 6)), CFG, collected(good()))
    assert (out.failed_mode, out.detector) == ("long", "bad_characters")
    out = judge(collected(good(), long=words("I do not know .")), CFG, collected(good()))
    assert (out.failed_mode, out.detector) == ("long", "long_context_task")
    assert out.values["long_answer_ok"] is False and out.values["long_answer_baseline"] is True


def near_tie_variant(text: str) -> tuple[Result, Result]:
    """Baseline and trial that share two words, then flip a near-tie."""
    w = text.split(" ")
    base = reply(tok(w[0], -0.1), tok(" " + w[1], -0.1), tok(" alpha", -0.6, [(" alpha", -0.6), (" beta", -0.8)]), tok(" end", -0.1))
    tri = reply(tok(w[0], -0.1), tok(" " + w[1], -0.1), tok(" beta", -0.7, [(" beta", -0.7), (" alpha", -0.75)]), tok(" fin", -0.1))
    return base, tri


def test_near_ties_everywhere_are_ok_even_with_low_agreement():
    base, tri = good(), good()
    for k in ("story", "capital"):
        base[k], tri[k] = near_tie_variant(GOOD[k])
    base["capital"].text = tri["capital"].text = "Paris"  # keep the task answer on both sides
    out = judge(collected(tri), CFG, collected(base))
    assert out.passed, out.detail
    assert out.values["agreement"] == pytest.approx((1 + 1 + 0.5 + 0.5) / 4)
    assert out.values["topk_consistency"] == 1.0 and out.values["diverged"] == "2/4"
    assert out.values["max_divergence_gap"] == pytest.approx(0.2)


def test_one_real_divergence_in_four_fails_by_divergence():
    base, tri = good(), good()
    tri["story"] = reply(*[tok(w, -0.3, [(w, -0.3)]) for w in ["zq", "vv", "kk", "pp"]])
    out = judge(collected(tri, concurrent={}), CFG, collected(base))
    assert (out.passed, out.failed_mode, out.detector) == (False, "single", "divergence")
    assert out.values["topk_consistency"] == 0.75 and out.values["max_divergence_gap"] == "inf"
    assert out.detail.startswith("token agreement 0.75 (need 0.5), top-k consistency 0.75 (need 0.9); story: diverged at token 0")
    assert out.evidence[1].startswith("  baseline: 'there")


def test_low_agreement_with_any_real_divergence_fails():
    cfg = spec.Probes(max_tokens=24, concurrency=1, min_topk_consistency=0.7, min_agreement=0.8)
    base, tri = good(), good()
    tri["story"] = reply(*[tok(w, -0.3) for w in ["zq", "vv"]])            # inconsistent
    base["json"], tri["json"] = near_tie_variant('{"a": 1}')               # consistent, agreement 0.5
    base["json"].text = tri["json"].text = '{"a": 1}'
    out = judge(collected(tri, concurrent={}), cfg, collected(base))
    assert out.detector == "divergence" and out.values["agreement"] == pytest.approx(0.625)


def test_task_accuracy_drop_beyond_margin_fails():
    base, tri = good(), good()
    tri["arith"], tri["capital"] = words("2 + 3 = 6"), words("Lyon")
    cfg = spec.Probes(max_tokens=24, concurrency=1, min_topk_consistency=0.0, min_agreement=0.0)
    out = judge(collected(tri, concurrent={}), cfg, collected(base))
    assert (out.failed_mode, out.detector) == ("single", "task_accuracy")
    assert out.detail == "tasks right 1/3 vs baseline 3/3 (allowed drop 34%)"
    # one miss of three is within the default margin
    tri["capital"] = words("The capital is Paris .")
    assert judge(collected(tri, concurrent={}), cfg, collected(base)).passed


def test_concurrent_copies_must_match_single_answers():
    conc = {f"{k}#0": v for k, v in good().items()}
    conc["arith#0"] = reply(*[tok(w, -0.2, [(w, -0.2)]) for w in ["7", "8"]])
    out = judge(collected(good(), concurrent=conc), CFG, None)
    assert (out.failed_mode, out.detector, out.values["concurrent_consistency"]) == ("concurrent", "concurrency_divergence", 0.75)


def test_task_score_kinds():
    res = {"arith": words("5"), "capital": words("PARIS"), "json": words('noise {"a": [1]} more'), "story": words("x")}
    assert probes.task_score(PROMPTS, res) == (3, 3)
    res["json"] = words("{not json}")
    assert probes.task_score(PROMPTS, res) == (2, 3)


def test_prompt_set_variant_includes_its_parent():
    quick, long_cfg = probes.load_prompt_set("quick")
    full, full_long = probes.load_prompt_set("default")
    assert [p.id for p in quick] == ["arith", "capital", "story", "json"]
    assert long_cfg == full_long and {p.id for p in quick} < {p.id for p in full}


def test_results_roundtrip_through_json():
    c = collected(good())
    back = probes.results_from_json(probes.results_to_json(c), "quick")
    assert back["results"]["single"]["arith"] == c["results"]["single"]["arith"]


# ------------------------------------------------------------------ slow verdict, report, model axis
def _rec(key, idx, changed, verdict, **metrics):
    return TrialRecord(key=key, idx=idx, config={"t": str(idx)}, changed=changed, argv=["x"], env={},
                       state="finished", verdict=verdict, metrics=metrics)


def _spec(**bench) -> spec.Spec:
    return spec.Spec.model_validate({"name": "s", "engine": "llamacpp", "model": {"path": "m.gguf"},
                                     "axes": [{"name": "t", "flag": "--threads", "values": ["0", "1"]}], "bench": bench})


def test_report_names_detector_and_mode(tmp_path):
    with Store(tmp_path) as store:
        store.init_sweep("r", {"engine": "llamacpp"}, {})
        store.save(_rec("b", 0, [], "ok", output_tok_s=10.0))
        store.save(_rec("w", 1, ["t"], "wrong", failed_mode="long", probe={"long_answer_ok": False}).with_(
            cause="long_context_task", detail="baseline found the fact", evidence=["trial: 'no idea'"]))
        text = report.render(store)
    assert "| **wrong** | long_context_task (long) |" in text
    assert "Detector `long_context_task` fired in the long-prompt (near the context length) run (mode `long`)." in text
    assert "Measured: long_answer_ok=False" in text and "trial: 'no idea'" in text


def test_model_axis_swaps_the_served_model(tmp_path):
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF")
    base = tmp_path / "base.gguf"
    base.write_bytes(b"GGUF")
    s = spec.parse({"name": "m", "engine": "llamacpp", "engine_options": {"binary": "/bin/true"},
                    "model": {"path": str(base)},
                    "axes": [{"name": "weights", "model": True, "values": [str(base), str(other)]},
                             {"name": "omp", "env": "OMP_NUM_THREADS", "values": ["1", "2"]}]})
    from bakeoff.run.engines.base import get_engine

    engine = get_engine("llamacpp", binary="/bin/true")
    launches = [trial.build_launch(s, engine, p, 8000, str(base)) for p in plan.make_plan(s)]
    models = [la.argv[la.argv.index("--model") + 1] for la in launches]
    assert models == [str(base), str(other), str(base)]
    assert all(la.argv.count("--model") == 1 and str(other) not in la.argv[3:] for la in launches)
    assert plan.make_plan(s)[1].label == f"weights={other}"


def test_model_axis_validation():
    with pytest.raises(SpecError, match="exactly one of 'flag', 'env' or 'model = true'"):
        spec.parse({"name": "m", "engine": "llamacpp", "model": {"path": "x"},
                    "axes": [{"name": "w", "model": True, "flag": "--model", "values": ["a"]}]})
    with pytest.raises(SpecError, match=r"axes\.w: model\.path: '/nonexistent/broken\.gguf' does not exist"):
        spec.parse({"name": "m", "engine": "llamacpp", "engine_options": {"binary": "/bin/true"}, "model": {"path": "x"},
                    "axes": [{"name": "w", "model": True, "values": ["/nonexistent/broken.gguf"]}]})


def test_collection_stops_early_only_on_unexcusable_findings():
    assert probes._unexcusable({"a": reply(tok(".", None))}, True) is True
    assert probes._unexcusable({"a": Result(error="HTTP 500: x")}, True) is True
    assert probes._unexcusable({"a": looping(), "b": words("fine")}, True) is False  # the baseline may excuse it
