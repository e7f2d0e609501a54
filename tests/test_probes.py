"""Probes on synthetic Results: the absolute detectors, compare() at a divergence, judge()'s
order and false-alarm guards, task scoring, prompt-set variants; the 'slow' verdict and the
report's detector/mode lines. Exact values throughout; no server here (see test_faults.py)."""

from __future__ import annotations

import math
import re

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


def test_trial_that_stops_early_is_an_early_stop_not_a_prefix():
    """Path 3: the old judge called any prefix 'a length difference only'. The baseline went on
    with a token of p=0.90: stopping there is 2.2 nats from a tie, an early stop."""
    stopped = words("a b")
    stopped.finish_reason = "stop"
    d = compare(words("a b c d"), stopped, top_k=5)
    assert (d.agreement, d.consistent, d.diverge_at, d.early_stop) == (0.5, False, 2, True)
    assert d.detail.startswith("early stop: the trial ended after 2 tokens, the baseline went on with 'c' (p=0.90, gap to EOS ≥ 2.25")


def test_stop_at_a_near_tie_with_eos_is_consistent():
    base = reply(tok("a", -0.1), tok("b", -0.1), tok("c", -0.9), tok("d", -0.1))  # p(c)=0.41: EOS may have had 0.59
    stopped = words("a b")
    stopped.finish_reason = "stop"
    d = compare(base, stopped, top_k=5)
    assert d.consistent and not d.early_stop and d.detail.startswith("stopped at a near-tie")


def test_truncated_reply_is_an_early_stop():
    cut = words("a b")
    cut.finish_reason = "length"
    d = compare(words("a b c d"), cut, top_k=5)
    assert (d.consistent, d.early_stop) == (False, True) and d.detail.startswith("truncated")


def test_trial_that_goes_on_past_the_baseline_is_consistent():
    d = compare(words("a b"), words("a b c d"), top_k=5)
    assert (d.consistent, d.diverge_at) == (True, 2) and "the trial went on" in d.detail


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


def test_baseline_token_below_the_trial_cut_list_is_a_near_tie_only_within_the_list_spread():
    """Seen on the H200 with a healthy V-cache q8_0: the trial's ' any' was 0.15 nats behind the
    baseline's ' crafting' in the baseline's list, while ' crafting' fell below the trial's top-5.
    Its gap there is at least the trial's list spread: a near-tie when that is within the limit,
    not when the list is steep, and never when the trial's own token is outside the baseline's list."""
    flat = [(" any", -1.0), (" your", -1.2), (" a", -1.3), (" the", -1.5), (" writing", -1.6)]
    base = reply(tok("I", -0.1), tok(" crafting", -0.9, [(" crafting", -0.9), (" any", -1.05), (" a", -2.0), (" the", -2.2), (" b", -3)]))
    trial_ = reply(tok("I", -0.1), tok(" any", -1.0, flat))
    d = compare(base, trial_, top_k=5, tie_gap=2.5)
    assert d.consistent and d.gap == pytest.approx(0.6)
    assert "top-5: True/False; logprob gaps 0.15/≥0.60 (near-tie" in d.detail
    steep = [(" any", -0.1), (" your", -3.0), (" a", -3.3), (" the", -3.5), (" writing", -3.6)]
    d = compare(base, reply(tok("I", -0.1), tok(" any", -0.1, steep)), top_k=5, tie_gap=2.5)
    assert not d.consistent and "gaps 0.15/≥3.50 (not a near-tie" in d.detail
    # a list shorter than k bounds nothing
    d = compare(base, reply(tok("I", -0.1), tok(" any", -1.0, flat[:3])), top_k=5, tie_gap=2.5)
    assert not d.consistent and "0.15/inf" in d.detail


def test_both_in_top_k_but_gap_too_large_is_inconsistent():
    base = reply(tok("A", -0.1, [("A", -0.1), ("B", -2.5)]))
    trial_ = reply(tok("B", -0.2, [("B", -0.2), ("A", -1.0)]))
    d = compare(base, trial_, top_k=5)
    assert d.consistent is False and d.gap == pytest.approx(2.4)
    assert compare(base, trial_, top_k=5, tie_gap=2.5).consistent is True
    # top_k cuts the lists: with k=1 neither sees the other
    assert "top-1: False/False" in compare(base, trial_, top_k=1).detail


def test_without_logprobs_the_text_comparison_is_strict():
    """Engines without logprobs: the old judge called a divergence consistent at half the words
    agreeing; with no near-tie to show, it now takes 90 %."""
    a, b = Result(text="one two three four"), Result(text="one two three five")
    d = compare(a, b, top_k=5)
    assert (d.agreement, d.consistent) == (0.75, False)
    assert d.detail == "diverged at word 3 of 4 (no logprobs: text agreement 0.75, need 0.9)"
    ten = " ".join(f"w{i}" for i in range(10))
    assert compare(Result(text=ten), Result(text=ten[:-2] + "xx"), top_k=5).consistent  # 9 of 10 words


# ------------------------------------------------------------------ compare_whole(): teacher forcing
def flip_then(tail: list[dict]) -> tuple[Result, Result, list[tuple[int, Result]]]:
    """Baseline 'a b alpha c d e f', trial flips alpha->beta at a near-tie (token 2); the trial's
    continuation, teacher-forced on the baseline's 'a b alpha', is ``tail``."""
    base = reply(tok("a", -0.1), tok(" b", -0.1), tok(" alpha", -0.6, [(" alpha", -0.6), (" beta", -0.8)]),
                 *[tok(w, -0.1, [(w, -0.1), (" zz", -4.0)]) for w in (" c", " d", " e", " f")])
    tri = reply(tok("a", -0.1), tok(" b", -0.1), tok(" beta", -0.7, [(" beta", -0.7), (" alpha", -0.75)]),
                *[tok(w, -0.2) for w in (" c", " d", " e", " f")])
    return base, tri, [(3, reply(*tail))]


def test_near_tie_then_gibberish_fails_the_whole_answer():
    """Path 2: the old judge stopped at the first divergence (a near-tie) and passed this."""
    base, tri, anchored = flip_then([tok(" c", -0.1), tok(" qq", -0.3, [(" qq", -0.3), (" d", -3.5)]), tok(" rr", -0.3), tok(" ss", -0.3)])
    d = probes.compare_whole(base, tri, anchored, top_k=5, tie_gap=1.5)
    assert (d.consistent, d.reanchored) == (False, 1)
    assert d.detail.startswith("after a near-tie at token 2, teacher-forced from token 3: diverged at token 4: baseline ' d' vs ' qq'")
    assert d.agreement == pytest.approx(3 / 7)  # a b <alpha forced> c: 2 + 1 of 7


def test_near_tie_then_the_same_continuation_passes():
    base, tri, anchored = flip_then([tok(w, -0.1) for w in (" c", " d", " e", " f")])
    d = probes.compare_whole(base, tri, anchored, top_k=5, tie_gap=1.5)
    assert (d.consistent, d.reanchored, d.agreement) == (True, 1, pytest.approx(6 / 7))


# ------------------------------------------------------------------ judge()
PROMPTS = [Prompt("arith", "2+3?", answer=r"\b5\b"), Prompt("capital", "capital?", answer="paris"),
           Prompt("json", "json please", json=True), Prompt("story", "Once upon a time")]
LONG = {"filler": "x ", "intro": "Find {key}.", "needle": "The {key} word is {word}.", "question": "Which {key}?",
        "needles": [{"key": "red", "word": "PELICAN", "depth": 0.2}, {"key": "blue", "word": "WALRUS", "depth": 0.7}]}
CFG = spec.Probes(max_tokens=24, concurrency=1, gate_items=0)

GOOD = {"arith": "2 + 3 = 5", "capital": "The capital is Paris .", "json": '{"name": "Alice"}',
        "story": "there was a small cat who lived by the sea"}


def collected(single: dict[str, Result], long: dict[str, Result] | None = None, concurrent: dict[str, Result] | None = None,
              anchored: dict | None = None, **modes) -> dict:
    return {"prompts": PROMPTS, "long": LONG, "anchored": anchored or {},
            "results": {"single": single, "long": long or {"red": words("It is PELICAN ."), "blue": words("It is WALRUS .")},
                        "concurrent": concurrent if concurrent is not None else {f"{k}#0": v for k, v in single.items()}, **modes}}


def good() -> dict[str, Result]:
    return {k: words(v) for k, v in GOOD.items()}


def test_a_json_reply_cut_by_max_tokens_inside_its_object_is_not_scored():
    """A healthy reply cut at max_tokens = 16 (seen on the real engine: a q8_0 K cache trial was
    called wrong by json_floor): truncation is no evidence either way, unless the text is not a
    JSON object's beginning at all."""
    cut = good()
    cut["json"] = words('Here is the JSON object : {"name": "Al')
    cut["json"].finish_reason = "length"
    assert probes.absolute_floors(collected(cut), CFG) == []
    assert probes.task_score(collected(cut)["prompts"], collected(cut)["results"]["single"]) == (2, 2)
    prose = good()
    prose["json"] = words("Sure , here is a person named Alice who is")
    prose["json"].finish_reason = "length"
    assert probes.absolute_floors(collected(prose), CFG)[0].startswith("json_floor: prompt json asked for a JSON object")
    broken = good()
    broken["json"] = words('{"name": }} ]] {{')
    broken["json"].finish_reason = "length"
    assert probes.absolute_floors(collected(broken), CFG)[0].startswith("json_floor")


def test_baseline_alone_passes_with_measured_values():
    out = judge(collected(good()), CFG, None, role="baseline")
    assert out.passed
    assert out.values == {"requests": {"single": 4, "long": 2, "concurrent": 4}, "task_accuracy": "3/3", "needles_found": "2/2",
                          "concurrent_consistency": 1.0,
                          "checks_not_run": ["differential (this is the baseline: judged by the detectors and the absolute floors)"]}


def test_a_baseline_that_answers_wrong_is_below_the_floor():
    """Path 1: '2 + 3 = 7' and 'Berlin' passed before and became the reference for every trial."""
    bad = good()
    bad["arith"], bad["capital"] = words("2 + 3 = 7"), words("Berlin")
    out = judge(collected(bad), CFG, None, role="baseline")
    assert (out.passed, out.failed_mode, out.detector) == (False, "single", "baseline_below_floor")
    assert out.detail.startswith("the baseline itself is below the absolute floors, so nothing known-good exists: "
                                 "task_floor: 1/3 checkable tasks right (floor 60%); missed ['arith', 'capital']")
    # the same answers from a trial with no healthy baseline: below the floor, not 'ok on detectors alone'
    assert judge(collected(bad), CFG, None).detector == "task_floor"


def test_floors_cover_json_the_gate_and_the_long_document():
    bad = good()
    bad["json"] = words("name Alice age 30")
    assert probes.absolute_floors(collected(bad), CFG)[0].startswith("json_floor: prompt json asked for a JSON object")
    lost = collected(good(), long={"red": words("I do not know ."), "blue": words("No idea at all .")})
    assert probes.absolute_floors(lost, CFG) == []  # no needle floor by default (SmolLM2 finds 0-3 of 4 when healthy)
    with_floor = CFG.model_copy(update={"min_needles": 1})
    assert probes.absolute_floors(lost, with_floor) == ["long_floor: 0/2 needles found in the long document (floor 1); e.g. red: 'Idonotknow.'"]
    cfg = spec.Probes(gate_items=20, concurrency=1)
    items = probes.gate_items(20)
    gate = {p.id: words("I cannot say .") for p in items}
    gate[items[0].id] = words(re.sub(r"\\", "", items[0].answer.replace("(?<!\\d)", "").replace("(?!\\d)", "")))
    c = collected(good(), gate=gate)
    assert probes.absolute_floors(c, cfg) == ["gate_floor: task gate 1/20 right (5%, 95% CI 1%–24%), floor 15%"]


def test_identical_trial_passes_with_agreement_one():
    out = judge(collected(good()), CFG, collected(good()))
    assert out.passed
    assert out.values["agreement"] == 1.0 and out.values["topk_consistency"] == 1.0 and out.values["diverged"] == "0/6"
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
    out = judge(collected(good(), long={"red": reply(*[tok("\ufffd", -0.1)] * 6), "blue": words("WALRUS")}), CFG, collected(good()))
    assert (out.failed_mode, out.detector) == ("long", "bad_characters")
    out = judge(collected(good(), long={"red": reply(tok("I", -0.1, [("I", -0.1), ("It", -3.0)]), tok(" forget", -0.1)),
                                        "blue": words("It is WALRUS .")}), CFG, collected(good()))
    assert (out.failed_mode, out.detector) == ("long", "divergence")
    assert out.values["needles_found"] if "needles_found" in out.values else True


def test_a_lost_needle_fails_even_at_a_near_tie_first_token():
    base = collected(good())
    lost = reply(tok("It", -0.1), tok(" is", -0.1), tok(" OTTER", -0.4, [(" OTTER", -0.4), (" PEL", -0.5)]), tok(" .", -0.1))
    base["results"]["long"]["red"] = reply(tok("It", -0.1), tok(" is", -0.1), tok(" PEL", -0.45, [(" PEL", -0.45), (" OTTER", -0.5)]),
                                           tok("ICAN", -0.1, [("ICAN", -0.1), ("ICANS", -5.0)]), tok(" .", -0.1))
    # teacher-forced on 'It is PEL', the trial goes on with garbage: not a near-tie chain
    anchored = {"long": {"red": [(3, reply(tok("zzz", -0.2, [("zzz", -0.2), ("ICAN", -6.0)]), tok(" .", -0.1)))]}}
    out = judge(collected(good(), long={"red": lost, "blue": words("It is WALRUS .")}, anchored=anchored), CFG, base)
    assert (out.failed_mode, out.detector) == ("long", "divergence"), out.detail


def test_near_tie_then_gibberish_fails_the_judge():
    """Path 2 through judge(): the old test 'near ties everywhere are ok even with low agreement'
    passed this; with the teacher-forced continuation the trial fails by divergence."""
    base_story, tri_story, anchored = flip_then([tok(" c", -0.1), tok(" qq", -0.3, [(" qq", -0.3), (" d", -3.5)]), tok(" rr", -0.3)])
    base, tri = good(), good()
    base["story"], tri["story"] = base_story, tri_story
    out = judge(collected(tri, concurrent={}, anchored={"single": {"story": anchored}}), CFG, collected(base))
    assert (out.passed, out.failed_mode, out.detector) == (False, "single", "divergence"), out.detail
    assert "teacher-forced from token 3" in out.detail


def test_low_agreement_alone_fails():
    """Every divergence a near-tie, but the trial reproduces little of the baseline: each
    teacher-forced continuation flips again at once."""
    cfg = spec.Probes(max_tokens=24, concurrency=1, gate_items=0, max_reanchors=3)
    base, tri = good(), good()
    flip = lambda a, b: tok(a, -0.6, [(a, -0.6), (b, -0.7)])  # noqa: E731
    base["story"] = reply(flip("a", "x"), flip(" b", " y"), flip(" c", " z"), flip(" d", " w"))
    tri["story"] = reply(flip("x", "a"), tok(" x2", -0.1))
    anchored = {"story": [(1, reply(flip(" y", " b"))), (2, reply(flip(" z", " c"))), (3, reply(flip(" w", " d")))]}
    c = collected(tri, concurrent={}, anchored={"single": anchored})
    for k in ("arith", "capital", "json"):  # other replies also flip at once, with no re-anchoring left
        base[k] = reply(flip("a", "x"), *[tok(" ok", -0.1)] * 3)
        c["results"]["single"][k] = reply(flip("x", "a"), *[tok(" ok", -0.1)] * 3)
        base[k].text = c["results"]["single"][k].text = GOOD[k]
    c["results"]["long"] = {}
    out = judge(c, cfg, collected(base))
    assert (out.passed, out.detector) == (False, "low_agreement"), out.detail
    assert out.values["topk_consistency"] == 1.0 and out.values["agreement"] < cfg.min_agreement


def test_one_real_divergence_in_four_fails_by_divergence():
    base, tri = good(), good()
    tri["story"] = reply(*[tok(w, -0.3, [(w, -0.3)]) for w in ["zq", "vv", "kk", "pp"]])
    out = judge(collected(tri, concurrent={}), CFG, collected(base))
    assert (out.passed, out.failed_mode, out.detector) == (False, "single", "divergence")
    assert out.values["max_divergence_gap"] == "inf"
    assert out.detail.startswith("1/6 replies diverge from the baseline beyond a near-tie")
    assert "single / story: diverged at token 0" in out.detail
    assert out.evidence[1].startswith("  baseline: 'there")


def test_one_lost_task_of_three_fails():
    """Path 3: the old default let one task in three go (max_task_drop 0.34)."""
    base, tri = good(), good()
    tri["capital"] = reply(tok("The", -0.1), tok(" capital", -0.1), tok(" is", -0.1), tok(" Lyon", -0.2, [(" Lyon", -0.2), (" Paris", -0.4)]))
    base["capital"] = reply(tok("The", -0.1), tok(" capital", -0.1), tok(" is", -0.1), tok(" Paris", -0.3, [(" Paris", -0.3), (" Lyon", -0.35)]),
                            tok(" .", -0.1, [(" .", -0.1), ("!", -5.0)]))
    anchored = {"single": {"capital": [(4, reply(tok("!", -0.1, [("!", -0.1), (" .", -6.0)])))]}}
    out = judge(collected(tri, concurrent={}, anchored=anchored), CFG, collected(base))
    assert (out.failed_mode, out.detector) == ("single", "divergence"), out.detail
    # a task lost at a near-tie whose whole answer stays near-tied is the tie's, not the engine's
    anchored = {"single": {"capital": [(4, reply(tok(" .", -0.1)))]}}
    ok = judge(collected(tri, concurrent={}, anchored=anchored), CFG, collected(base))
    assert ok.passed, ok.detail
    # without teacher forcing to show it, the lost task fails
    strict = judge(collected(tri, concurrent={}), CFG, collected(base))
    assert strict.passed is False


def test_two_garbage_copies_of_24_concurrent_fail():
    """Path 4: the old judge tolerated 10 % inconsistent concurrent copies."""
    conc = {f"{k}#{i}": words(GOOD[k]) for k in GOOD for i in range(6)}
    conc["arith#3"] = reply(*[tok(w, -0.2, [(w, -0.2)]) for w in ["7", "8"]])
    conc["story#5"] = reply(*[tok(w, -0.2, [(w, -0.2)]) for w in ["zq", "vv", "kk"]])
    out = judge(collected(good(), concurrent=conc), CFG, None)
    assert (out.failed_mode, out.detector) == ("concurrent", "concurrency_divergence")
    assert out.values["concurrent_consistency"] == round(22 / 24, 3)
    assert out.detail.startswith("2 of 24 concurrent copies differ")


def test_bench_shaped_mode_is_judged_and_named():
    base, tri = collected(good(), **{"bench c=32": {"arith#0": words("2 + 3 = 5")}}), collected(good(), **{"bench c=32": {"arith#0": reply(
        *[tok(w, -0.2, [(w, -0.2)]) for w in ["so", "me", "th"]])}})
    out = judge(tri, CFG, base)
    assert (out.failed_mode, out.detector) == ("bench c=32", "divergence")


def test_task_gate_is_a_paired_significance_test_with_intervals():
    cfg = spec.Probes(gate_items=40, concurrency=1, min_gate_accuracy=0.0)
    items = probes.gate_items(40)
    assert items == probes.gate_items(40) and len({p.text for p in items}) == 40  # deterministic, distinct
    answer = lambda p: words(str(eval(re.search(r"What is (\d+ \+ \d+)", p.text).group(1)))  # noqa: E731,S307
                             if p.id.startswith("gate:add") else re.sub(r"\\", "", p.answer))
    right = {p.id: answer(p) for p in items}
    assert all(probes._task_right(p, right) for p in items)
    wrong = {p.id: words("I do not know .") for p in items}
    half = {p.id: (right if i % 2 else wrong)[p.id] for i, p in enumerate(items)}
    base = collected(good(), gate=half)
    out = judge(collected(good(), gate=wrong), cfg, base)
    assert (out.failed_mode, out.detector) == ("gate", "task_gate")
    assert out.values["gate_lost"] == 20 and out.values["gate_p"] < 1e-5
    assert out.values["gate_ci95_baseline"] == [0.352, 0.648]  # Wilson, 20/40
    # the same accuracy on different items is no evidence of being worse
    swapped = {p.id: (wrong if i % 2 else right)[p.id] for i, p in enumerate(items)}
    same = judge(collected(good(), gate=swapped), cfg, base)
    assert same.passed and same.values["gate_p"] > 0.5


def test_task_score_kinds():
    res = {"arith": words("5"), "capital": words("PARIS"), "json": words('noise {"a": [1]} more'), "story": words("x")}
    assert probes.task_score(PROMPTS, res) == (3, 3)
    res["json"] = words("{not json}")
    assert probes.task_score(PROMPTS, res) == (2, 3)


def test_engine_without_logprobs_lists_the_checks_that_could_not_run():
    plain = {k: Result(text=v) for k, v in GOOD.items()}
    long = {"red": Result(text="PELICAN"), "blue": Result(text="WALRUS")}
    out = judge(collected(plain, long=long), CFG, collected(dict(plain), long=dict(long)), expect_logprobs=False)
    assert out.passed and "teacher-forced continuation" in out.checks_not_run
    assert any(x.startswith("logprob near-tie test") for x in out.values["checks_not_run"])


def test_prompt_set_variant_includes_its_parent():
    quick, long_cfg = probes.load_prompt_set("quick")
    full, full_long = probes.load_prompt_set("default")
    assert [p.id for p in quick] == ["arith", "capital", "story", "json"]
    assert long_cfg == full_long and {p.id for p in quick} < {p.id for p in full}
    assert len(full_long["needles"]) == 4


@pytest.mark.parametrize("content,match", [
    ('include = "default"\nonly = ["arith", "nope"]\n', r"probes\.set: .*`only` names unknown prompt ids \['nope'\]"),
    ('include = "default"\nonly = []\n', r"probes\.set: .* resolves to no prompts"),
    ('[long]\nfiller = "x"\n', r"probes\.set: .* resolves to no prompts"),
])
def test_bad_probe_set_is_a_spec_error_naming_the_field(tmp_path, content, match):
    """Path 7: a set whose `only` named unknown ids loaded as zero prompts and passed with 0/0."""
    f = tmp_path / "set.toml"
    f.write_text(content)
    with pytest.raises(SpecError, match=match):
        spec.parse({"name": "s", "engine": "llamacpp", "model": {"path": "m.gguf"}, "probes": {"set": str(f)}})


def test_missing_probe_set_file_exits_2(tmp_path):
    import sys

    spec_file = tmp_path / "spec.toml"
    spec_file.write_text(f'name = "x"\nengine = "llamacpp"\n[model]\npath = "{tmp_path / "m.gguf"}"\n'
                         f'[probes]\nset = "{tmp_path / "missing.toml"}"\n')
    cli = run_cli([sys.executable, "-m", "bakeoff.cli", "run", str(spec_file), "--out", str(tmp_path / "o")],
                  capture_output=True, text=True, timeout=120)
    assert cli.returncode == 2, cli.stdout + cli.stderr
    assert "probes.set" in cli.stdout + cli.stderr and "does not exist" in cli.stdout + cli.stderr


def test_results_roundtrip_through_json():
    c = collected(good())
    back = probes.results_from_json(probes.results_to_json(c, [{"level": "c=1", "lens": [3, 4], "repeats": []}]), "quick")
    assert back["results"]["single"]["arith"] == c["results"]["single"]["arith"]
    assert back["bench"] == [{"level": "c=1", "lens": [3, 4], "repeats": []}]


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


# ------------------------------------------------------------------ the benchmark's replies (path 5)
from bakeoff.measure import bench as benchmod  # noqa: E402
from clirun import run_cli


def timed(text_tokens: list[str], lp=-0.1, finish="stop", error=None) -> Result:
    r = reply(*[tok(w, lp) for w in text_tokens], error=error)
    r.start, r.first_token, r.end, r.chunk_times, r.last_token = 0.0, 0.1, 1.0, [0.1, 0.5], 0.5
    r.finish_reason, r.completion_tokens = finish, len(text_tokens)
    return r


def near(text_tokens: list[str], at: int) -> Result:
    """``timed``, with token ``at`` chosen at p = 0.5: a divergence there can be a near-tie flip
    (bench_replies.logit_floor 0), elsewhere a token chosen at p = 0.9 cannot (floor 2.25 nats)."""
    r = timed(text_tokens)
    r.tokens[at] = tok(text_tokens[at], -0.69)
    return r


def test_a_level_with_failed_requests_is_never_ranked_and_past_2_percent_is_a_fault():
    ok = [timed(["a", " b", " c"]) for _ in range(49)]
    one = benchmod.summarize("c=4", ok + [Result(error="HTTP 500: boom")], 1.0)
    assert (one.valid, one.fault) == (False, None) and one.why_invalid.startswith("1/50 requests failed (2%)")
    two = benchmod.summarize("c=4", ok[:48] + [Result(error="HTTP 500: boom")] * 2, 1.0)
    assert (two.valid, two.fault) == (False, "bench_errors") and "more than 2% of the level" in two.why_invalid


def test_nan_logprobs_in_a_bench_reply_are_a_fault():
    nan = timed(["x"] * 3, lp=None)
    lv = benchmod.summarize("c=32", [timed(["a", " b", " c"]), nan], 1.0)
    assert (lv.valid, lv.fault) == (False, "nonfinite_logprobs")


def test_bench_requests_ask_for_the_chosen_token_logprob_and_its_runner_up():
    cfg = spec.Bench()
    body = benchmod.request_body(cfg, "hi", model=None, ignore_eos=False, logprobs=True)
    assert body["logprobs"] is True and body["top_logprobs"] == 2
    assert "logprobs" not in benchmod.request_body(cfg, "hi", model=None, ignore_eos=False)


def test_bench_prompts_are_the_same_per_index(monkeypatch):
    """Baseline and trial send the same prompt at the same request index, whatever the count."""
    import asyncio

    async def no_server(*a, **k):  # no /tokenize: prompts are cut by the word estimate
        return None

    monkeypatch.setattr(benchmod, "tokenize_ids", no_server)
    five, by = asyncio.run(benchmod.make_prompts(None, "http://x", 5, 16, seed=3))
    eight, _ = asyncio.run(benchmod.make_prompts(None, "http://x", 8, 16, seed=3))
    assert by == "estimate" and eight[:5] == five and len(set(eight)) == 8


def test_a_reply_far_shorter_than_the_baselines_is_an_early_stop_not_slow():
    """Path 5: garbage that ended early under load was 'correct but slow'."""
    base = benchmod.summarize("c=4", [timed(["w"] * 2 + [f" t{i}" for i in range(30)]) for _ in range(4)], 1.0).to_json()
    short = [timed(["w"] * 2 + [f" t{i}" for i in range(30)]) for _ in range(3)] + [timed(["w", " t0", " t1"])]
    lv = benchmod.check_against_baseline(benchmod.summarize("c=4", short, 1.0).to_json(), base)
    assert (lv["valid"], lv["fault"]) == (False, "early_stop")
    assert lv["why_invalid"].startswith("early_stop: 1/4 replies far shorter than the baseline's for the same request (request 3: 3 tokens vs 32")
    # under ignore_eos every reply must reach max_tokens where the baseline's did
    forced = benchmod.check_against_baseline(benchmod.summarize("c=4", short[:3] + [timed(["w"] * 2 + [f" t{i}" for i in range(25)])], 1.0).to_json(),
                                             base, max_tokens=32, ignore_eos=True)
    assert forced["fault"] == "early_stop"
    same = benchmod.check_against_baseline(benchmod.summarize("c=4", short[:3] * 1 + [short[0]], 1.0).to_json(), base)
    assert same["fault"] is None and same["valid"]


def test_without_ignore_eos_one_short_reply_in_forty_is_listed_not_a_fault():
    """Measured on the real engine (bench/judge_margins.py, KV q8_0 + flash attention, round 2):
    a healthy near-tie flip ended 1 of 40 replies at 18 tokens where the baseline's ran to 64.
    Without ignore_eos up to 5 % of a level may stop early (listed); more is a fault; under
    ignore_eos none may."""
    long_ = [f" t{i}" for i in range(30)]
    base = benchmod.summarize("c=4", [timed(["w"] * 2 + long_) for _ in range(40)], 1.0).to_json()
    one = [timed(["w"] * 2 + long_) for _ in range(39)] + [timed(["w", "w", " t0"])]  # the baseline's first tokens, then EOS
    lv = benchmod.check_against_baseline(benchmod.summarize("c=4", one, 1.0).to_json(), base)
    assert lv["valid"] and lv["fault"] is None and lv["short_tolerated"] == ["request 39: 3 tokens vs 32"]
    three = [timed(["w"] * 2 + long_) for _ in range(37)] + [timed(["w", "w", " t0"])] * 3
    assert benchmod.check_against_baseline(benchmod.summarize("c=4", three, 1.0).to_json(), base)["fault"] == "early_stop"
    forced = benchmod.check_against_baseline(benchmod.summarize("c=4", one, 1.0).to_json(), base, max_tokens=32, ignore_eos=True)
    assert forced["fault"] == "early_stop"


def test_one_new_loop_in_forty_bench_replies_is_listed_more_is_a_fault():
    """Measured on the real engine (bench/judge_margins.py, flash attention on, round 3): a
    healthy near-tie flip sent 1 of 40 bench replies into "' Day' repeated 48 times"."""
    long_ = [f" t{i}" for i in range(30)]
    loop = near(["w"] * 2 + [" the", " day", " is", " long"] * 8, 2)  # after a near-tie flip at token 2
    base = benchmod.summarize("c=4", [near(["w"] * 2 + long_, 2) for _ in range(40)], 1.0).to_json()
    one = benchmod.summarize("c=4", [timed(["w"] * 2 + long_) for _ in range(39)] + [loop], 1.0).to_json()
    assert one["fault"] is None and one["repeats"] == [39]
    lv = benchmod.check_against_baseline(one, base)
    assert lv["valid"] and lv["fault"] is None and lv["loops_tolerated"] == ["request 39"]
    three = benchmod.summarize("c=4", [timed(["w"] * 2 + long_) for _ in range(37)] + [loop] * 3, 1.0).to_json()
    assert three["fault"] == "degenerate_repetition"


def test_repetition_under_ignore_eos_is_excused_only_where_the_baseline_loops_too():
    loop = near(["Once"] + [" upon", " a", " time"] * 10, 0)
    fine = near(["w"] * 2 + [f" t{i}" for i in range(30)], 0)
    base = benchmod.summarize("c=2", [loop, fine], 1.0, ignore_eos=True).to_json()
    assert base["valid"] and base["repeats"] == [0]
    same = benchmod.check_against_baseline(benchmod.summarize("c=2", [loop, fine], 1.0, ignore_eos=True).to_json(), base)
    assert same["fault"] is None
    # a loop that moved to another request (one new, one gone): what a near-tie flip does, either
    # way; a share of the level (LOOP_SHARE, 10 %): one in twelve
    base12 = benchmod.summarize("c=4", [loop] + [fine] * 11, 1.0, ignore_eos=True).to_json()
    moved = benchmod.check_against_baseline(benchmod.summarize("c=4", [fine, loop] + [fine] * 10, 1.0, ignore_eos=True).to_json(), base12)
    assert moved["fault"] is None and moved["loops_tolerated"] == ["request 1"]
    # five new loops: beyond the share, whatever the baseline lost
    new = benchmod.check_against_baseline(
        benchmod.summarize("c=4", [loop] * 6 + [fine] * 6, 1.0, ignore_eos=True).to_json(), base12)
    assert new["fault"] == "degenerate_repetition"
    assert "requests [1, 2, 3, 4, 5] loop where the baseline's same requests do not (5/12 new loops" in new["why_invalid"]


def test_loops_moving_both_ways_are_near_tie_flips_not_faults():
    """Measured on the H200 (flash attention off, ignore_eos, 36 replies at c=1): requests 11, 14,
    27 looped where the baseline's did not, and the baseline's loop on request 12 was gone: 3 new vs
    1 gone, a sign test's p = 0.31. Requests past the baseline's count (more repetitions) have no
    partner: their loops count as new."""
    loop = near(["Once"] + [" upon", " a", " time"] * 10, 0)
    fine = near(["w"] * 2 + [f" t{i}" for i in range(30)], 0)
    base = benchmod.summarize("c=1", [loop if i == 12 else fine for i in range(36)], 1.0, ignore_eos=True).to_json()
    trial = benchmod.summarize("c=1", [loop if i in (11, 14, 27) else fine for i in range(36)], 1.0, ignore_eos=True).to_json()
    lv = benchmod.check_against_baseline(trial, base, ignore_eos=True)
    assert lv["fault"] is None and lv["loops_tolerated"] == ["request 11", "request 14", "request 27"]
    assert benchmod.loop_pairs(trial, base) == ([11, 14, 27], [12])
    longer = benchmod.summarize("c=1", [loop if i in (12, 40) else fine for i in range(48)], 1.0, ignore_eos=True).to_json()
    assert benchmod.loop_pairs(longer, base) == ([40], [])


def test_a_token_chosen_below_its_own_best_alternative_is_not_greedy():
    """A greedy request whose chosen token is not the top of the server's own distribution: a
    logit bias (what llama.cpp's --logit-bias does: logprobs are the model's, the choice is not)."""
    r = reply(tok("The", -0.1), tok(" cat", -1.4, [(" dog", -0.5), (" cat", -1.4)]), tok(" sat", -0.1))
    assert detect(r) == ["not_greedy: token 1 ' cat' (logprob -1.40) was chosen over ' dog' (-0.50) in a greedy request"]
    eos = reply(tok("Paris", -0.1), tok("", -1.2, [(".", -0.4), ("", -1.2)]))
    eos.finish_reason = "stop"
    assert detect(eos)[0].startswith("early_stop: the reply ended at token 1 with EOS (logprob -1.20) though the model's own top "
                                     "choice there was '.' (-0.40, 0.80 nats more likely)")
    tie = reply(tok("a", -0.70, [("b", -0.69), ("a", -0.70)]))  # an exact-ish tie either way is greedy
    assert detect(tie) == []


def test_early_stop_gap_uses_the_baselines_own_eos_probability():
    """The baseline's top-k tells how likely EOS was where the trial stopped: listed, the exact
    gap; not listed in a full top-k, at least the gap to the last entry (SmolLM2 under an EOS
    logit bias stopped where the baseline's token had p=0.34: 1-p allowed a tie, the top-5 did not)."""
    def stopped_after(k):
        r = words(" ".join("abcdefgh"[:k]))
        r.finish_reason = "stop"
        return r
    listed = reply(tok("a", -0.1), tok("b", -0.6, [("b", -0.6), ("", -1.0), ("c", -2.0)]))
    d = compare(listed, stopped_after(1), top_k=5)
    assert d.consistent and d.gap == pytest.approx(0.4)
    unlisted = reply(tok("a", -0.1), tok("b", -1.08, [("b", -1.08), ("c", -1.5), ("d", -2.0), ("e", -3.0), ("f", -4.0)]))
    d = compare(unlisted, stopped_after(1), top_k=5)
    assert (d.early_stop, d.consistent) == (True, False) and d.gap == pytest.approx(2.92)


def test_an_end_token_suppressed_by_ignore_eos_is_not_a_greedy_violation():
    """Seen on the H200 (docs/results/h200-llamacpp): under ignore_eos llama.cpp reports the
    end-of-turn token ('' as text) as the likelier alternative it was told to skip. That is the
    request's doing, not a broken sampler; any other likelier token still is."""
    from bakeoff.measure.client import Result

    def reply(alt: str) -> Result:
        toks = [{"token": w, "logprob": -0.1, "top_logprobs": [{"token": w, "logprob": -0.1}]} for w in ("The", " cat")]
        toks.append({"token": " I", "logprob": -2.28, "top_logprobs": [{"token": alt, "logprob": -1.02},
                                                                      {"token": " I", "logprob": -2.28}]})
        return Result(text="The cat I", tokens=toks, logprobs_requested=True, finish_reason="length")

    assert not [f for f in probes.detect(reply(""), ignore_eos=True) if f.startswith("not_greedy")]
    assert not [f for f in probes.detect(reply("<|im_end|>"), ignore_eos=True) if f.startswith("not_greedy")]
    assert [f for f in probes.detect(reply(""), ignore_eos=False) if f.startswith("not_greedy")]
    assert [f for f in probes.detect(reply(" dog"), ignore_eos=True) if f.startswith("not_greedy")]


def test_the_gate_takes_only_the_baselines_stable_answers_as_its_reference():
    """The H200 false alarm, in its numbers: an identical launch lost 7 of the baseline's 38/80
    and gained none (exact McNemar p = 0.0078 < 0.01: ``wrong``), while identical launches of the
    baseline differed in 19–36 of the 80 answers. With one relaunch of the baseline that answered
    19 items otherwise (those 7 among them), those items are launch noise, not a reference: the
    same launch passes. A real fault that loses 20 items, half of them stable, still fails."""
    cfg = spec.Probes(gate_items=80, concurrency=1, min_gate_accuracy=0.0)
    items = probes.gate_items(80)
    answer = lambda p: words(str(eval(re.search(r"What is (\d+ \+ \d+)", p.text).group(1)))  # noqa: E731,S307
                             if p.id.startswith("gate:add") else re.sub(r"\\", "", p.answer))
    said = lambda right: {p.id: answer(p) if i in right else words("I do not know .") for i, p in enumerate(items)}  # noqa: E731
    base = collected(good(), gate=said(set(range(38))))
    relaunch = {p.id: (i < 38) != (i < 10 or 40 <= i < 49) for i, p in enumerate(items)}  # 19 items answered otherwise
    noisy = collected(good(), gate=said(set(range(7, 38))))
    out = judge(noisy, cfg, base)
    assert (out.detector, out.values["gate_lost"], out.values["gate_gained"], round(out.values["gate_p"], 4)) == \
        ("task_gate", 7, 0, 0.0078)  # the single launch as fixed truth: the false alarm
    base["launch_answers"] = [{"gate": relaunch}]
    out = judge(noisy, cfg, base)
    assert out.passed, out.detail
    assert (out.values["gate_baseline_launches"], out.values["gate_unstable_on_baseline"], out.values["gate_lost"]) == (2, 19, 0)
    broken = judge(collected(good(), gate=said(set(range(20, 38)))), cfg, base)
    assert (broken.detector, broken.values["gate_lost"], broken.values["gate_gained"]) == ("task_gate", 10, 0), broken.detail


def test_launch_answers_are_what_a_relaunch_stores():
    cfg = spec.Probes(gate_items=20, concurrency=1)
    items = probes.gate_items(20)
    got = probes.launch_answers(collected(good(), gate={p.id: words("I do not know .") for p in items}), cfg)
    assert got == {"gate": {p.id: False for p in items}}
    assert probes.unstable_items({"a": True, "b": False}, [{"a": True, "b": True}, {"a": True}]) == {"b"}


def test_multi_turn_chats_with_a_system_prompt_are_in_the_default_set():
    """vLLM #38652: an FP8 KV cache garbled only multi-turn chats with a system prompt. The
    default set asks two; each request carries the system message and the earlier turns."""
    full, _ = probes.load_prompt_set("default")
    chats = [p for p in full if p.chat]
    assert [p.id for p in chats] == ["chat_capital", "chat_pirate"] and all(p.answer for p in chats)
    assert probes.messages(chats[0]) == [
        {"role": "system", "content": "You are a geography assistant. Answer in one word."},
        {"role": "user", "content": "What is the capital of Italy?"}, {"role": "assistant", "content": "Rome."},
        {"role": "user", "content": "And the capital of France?"}]
    assert probes.messages(chats[0], "pad. And?")[-1] == {"role": "user", "content": "pad. And?"}
    assert probes.messages(probes.Prompt("x", "hi")) == [{"role": "user", "content": "hi"}]


def test_a_chat_whose_turns_do_not_pair_is_a_spec_error(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text('[[prompt]]\nid = "c"\ntext = "and?"\nturns = ["only the user"]\n')
    with pytest.raises(probes.ProbeSetError, match=r"prompt 'c': `turns` must be pairs of non-empty strings"):
        probes.load_prompt_set(str(f))


def test_long_request_budget_follows_the_servers_own_pace():
    """The long document's request may take LONG_SLACK times what the server's own single replies
    predict (a loaded 2-core machine prefilled 3.4k tokens at ~31 tok/s: past a fixed 120 s, and the
    baseline was called wrong for the probe's clock); never below request_timeout_s, capped."""
    from bakeoff.measure.client import Result

    def single(prompt, ttft, n, decode_s):
        return Result(start=0.0, first_token=ttft, last_token=ttft + decode_s, end=ttft + decode_s, text="x" * n,
                      prompt_tokens=prompt, completion_tokens=n)

    slow = {"a": single(40, 1.3, 33, 3.2), "b": single(60, 1.9, 17, 1.6)}  # ~31 tok/s prefill, ~10 tok/s decode
    budget = probes.long_timeout(slow, 3400, 64, 120)
    expected = probes.LONG_SLACK * (3400 / (40 / 1.3) + 64 / 10)
    assert budget == pytest.approx(expected, rel=0.01) and budget > 120
    fast = {"a": single(40, 0.01, 33, 0.05)}
    assert probes.long_timeout(fast, 3400, 64, 120) == 120  # a fast server keeps the configured floor
    assert probes.long_timeout({}, 3400, 64, 120) == 120  # nothing measured: the floor
    failed = {"a": Result(error="HTTP 500")}
    assert probes.long_timeout(failed, 3400, 64, 120) == 120
    crawl = {"a": single(40, 400.0, 3, 100.0)}
    assert probes.long_timeout(crawl, 100000, 64, 120) == probes.LONG_CAP_S
