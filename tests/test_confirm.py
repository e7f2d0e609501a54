"""A statistical gate's failure is confirmed on a relaunch (bakeoff.judge.confirm), and a trial
judged while the baseline had not passed is judged against it once it has (judge.rejudge): the
sweep loop's part, driven through ``pipeline._loop`` with a STUB executor that hands back canned
records (what each launch's judgement said). No engine here produces launch-dependent gate
answers (llama.cpp on CPU is deterministic launch to launch); tests/test_probes.py has the
gate's statistics and tests/test_faults.py the re-judging on real stored answers."""

from __future__ import annotations

import time

from bakeoff import decide, spec
from bakeoff.pipeline import Events, Sweep, _loop
from bakeoff.plan.prune import Gate
from bakeoff.store import Store, TrialRecord

GATE_FAIL = dict(verdict="wrong", cause="task_gate",
                 detail="wrong in gate mode (task_gate): task gate 31/80 vs baseline 38/80: lost 7, gained 0, exact McNemar p=0.0078 < 0.01",
                 evidence=["gate:add0: baseline '17', trial '16'"])


def _spec() -> spec.Spec:
    return spec.Spec.model_validate({"name": "c", "engine": "llamacpp", "model": {"path": "m.gguf"},
                                     "axes": [{"name": "t", "flag": "--threads", "values": ["1", "2"]}],
                                     "bench": {"launch_noise": 0.08}, "plan": {"strategy": "ofat"}})


class StubExecutor:
    """One trial at a time; each launch of a configuration answers with the next canned outcome."""

    def __init__(self, outcomes: dict[bool, list[dict]], store: Store) -> None:
        self.outcomes = outcomes  # changed? -> one dict per launch
        self.store = store
        self.jobs: list = []
        self.launches: list[tuple[int, dict | None]] = []

    def capacity(self) -> int:
        return 0 if self.jobs else 1

    def submit(self, job) -> None:
        self.jobs.append(job)

    def wait(self) -> list[TrialRecord]:
        job = self.jobs.pop()
        self.launches.append((job.record.idx, job.baseline_probes))
        got = self.outcomes[bool(job.planned.changed)].pop(0)
        if not job.planned.changed:  # the baseline's answers, as a trial run stores them (none here)
            self.store.put_artifact(job.record.key, "probes", {"results": {}})
        levels = [{"level": "c=1", "valid": True, "output_tok_s": 100.0, "samples": {"output_tok_s": [100.0, 101.0]}}]
        return [job.record.with_(state="finished", metrics={"levels": levels} if got["verdict"] == "ok" else {},
                                 finished=time.time(), **got)]


def _sweep(tmp_path, outcomes) -> tuple[Sweep, StubExecutor, Store]:
    s = _spec()
    store = Store(tmp_path)
    store.init_sweep(s.name, s.model_dump(mode="json"), {}, "i")
    ex = StubExecutor(outcomes, store)
    return Sweep(s, store, None, ex, Gate.for_spec(s), Events(), "m.gguf", "i", lambda: False), ex, store


def test_a_gate_only_failure_that_passes_on_a_relaunch_is_unstable_never_recommended(tmp_path):
    """The H200 case: one launch of a healthy change failed the gate. The old loop recorded it
    ``wrong`` at once; now it is launched again, passes, and is ``unstable`` in every output."""
    sw, ex, store = _sweep(tmp_path, {False: [dict(verdict="ok")], True: [GATE_FAIL, dict(verdict="ok", detail="agreement=1.0")]})
    relaunched = []

    def relaunch():  # relaunch.remeasure: the baseline launched once more, its gate answers stored
        relaunched.append(len(ex.launches))
        store.set_meta("baseline_runs", [{"identity": "i", "launch": 2, "answers": {"gate": {"gate:add0": False}}}])
        return {}

    sw.relaunch = relaunch
    _loop(sw)
    with store:
        base, t = store.current()
        d = decide.save(store)
    assert [i for i, _ in ex.launches] == [0, 1, 1]  # the baseline, the trial, the trial again
    assert relaunched == [2] and ex.launches[2][1]["launch_answers"] == [{"gate": {"gate:add0": False}}]  # before the confirmation
    assert (t.verdict, t.cause) == ("unstable", "task_gate"), t.detail
    assert t.detail.startswith("unstable: the first launch failed a statistical gate (wrong in gate mode (task_gate)")
    assert t.metrics["first_launch"]["detail"] == GATE_FAIL["detail"] and t.metrics["launches_judged"] == 2
    assert d.winner.key == base.key and all(f.key != t.key for f in d.fallbacks)
    assert any(c.startswith("UNSTABLE: t=2 failed the task_gate on one launch and passed on a relaunch") for c in d.cautions)
    assert any(line.startswith("Caution: UNSTABLE: t=2") for line in d.summary_lines())  # every output prints these


def test_a_gate_failure_that_fails_again_on_a_relaunch_is_wrong_with_both_launches(tmp_path):
    """A real fault fails on every launch: still ``wrong``, the relaunch's evidence and the first's."""
    again = {**GATE_FAIL, "detail": GATE_FAIL["detail"].replace("lost 7", "lost 9"), "evidence": ["second"]}
    sw, ex, store = _sweep(tmp_path, {False: [dict(verdict="ok")], True: [GATE_FAIL, again]})
    _loop(sw)
    with store:
        _, t = store.current()
    assert (t.verdict, t.cause) == ("wrong", "task_gate") and len(ex.launches) == 3
    assert "lost 9" in t.detail and "confirmed on a relaunch (the first launch failed too: " in t.detail and "lost 7" in t.detail
    assert t.evidence == ["second", "first launch:", *GATE_FAIL["evidence"]]


def test_any_other_wrong_is_not_relaunched(tmp_path):
    sw, ex, store = _sweep(tmp_path, {False: [dict(verdict="ok")], True: [dict(verdict="wrong", cause="divergence", detail="x")]})
    _loop(sw)
    with store:
        _, t = store.current()
    assert (t.verdict, t.cause, len(ex.launches)) == ("wrong", "divergence", 2)


def test_the_baselines_relaunch_answers_reach_every_later_trial(tmp_path):
    """What the baseline's relaunches answered right (``relaunch.remeasure`` stores it in
    ``baseline_runs``) goes with the baseline's answers to every trial it judges."""
    from bakeoff.pipeline import _trial

    sw, ex, store = _sweep(tmp_path, {True: [dict(verdict="ok")]})
    base = _trial(sw, sw.spec.baseline_config())
    store.put_artifact(base.key, "probes", {"results": {}})
    store.save(base.with_(state="finished", verdict="ok"))
    store.set_meta("baseline_runs", [{"identity": "i", "launch": 2, "answers": {"gate": {"gate:add0": False}}}])
    _loop(sw)
    ((idx, ref),) = ex.launches
    assert idx == 1 and ref["launch_answers"] == [{"gate": {"gate:add0": False}}]


def test_a_trial_run_while_the_baseline_failed_is_rejudged_once_it_passes(tmp_path):
    """The resume case: the baseline's launch hit a host failure (``infra_error``), the trial ran
    without it and was ``ok`` by the absolute checks. The next run launches the baseline, which
    passes: the trial, with no stored answers to judge again, runs again against it."""
    sw, ex, store = _sweep(tmp_path, {False: [dict(verdict="infra_error", cause="host", detail="ssh lost")],
                                      True: [dict(verdict="ok", detail="absolute only")]})
    _loop(sw)
    with store:
        base, t = store.current()
        assert base.verdict == "infra_error" and t.verdict == "ok" and t.metrics["without_baseline"] is True
        d = decide.save(store)
        assert d.headline.startswith("Recommended, unverified")  # nothing known-good: said so
    assert ex.launches[1] == (1, None)  # judged with no baseline
    sw2, ex2, store2 = _sweep(tmp_path, {False: [dict(verdict="ok")], True: [dict(verdict="ok", detail="agreement=1.0")]})
    _loop(sw2)
    with store2:
        base, t = store2.current()
        d = decide.save(store2)
    assert [i for i, _ in ex2.launches] == [0, 1] and ex2.launches[1][1] is not None  # run again, with the baseline's answers
    assert base.verdict == "ok" and t.verdict == "ok" and not t.metrics.get("without_baseline") and not t.metrics.get("unverified")
    assert not any(c.startswith("NOT COMPARED") for c in d.cautions)


def test_a_sampled_path_failure_is_confirmed_on_a_relaunch_like_the_gates(tmp_path):
    """The sampled path is a significance test too (judge.checks.sampled): one launch's noise may
    fail it, a real sampler fault fails on every launch."""
    sampled = dict(verdict="wrong", cause="sampled_path", detail="wrong in sampled mode (sampled_path): moved -0.3 nats",
                   evidence=["capital@1: d = -0.41 nats"])
    sw, ex, store = _sweep(tmp_path, {False: [dict(verdict="ok")], True: [sampled, sampled]})
    _loop(sw)
    with store:
        _, t = store.current()
    assert (t.verdict, t.cause, len(ex.launches)) == ("wrong", "sampled_path", 3)
    assert "confirmed on a relaunch" in t.detail
