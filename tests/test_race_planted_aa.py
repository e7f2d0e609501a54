"""bench/race_planted_aa.py's bookkeeping (no engine: the script's real sweeps are its own
measurement, docs/results/bench/race-planted-aa-*.txt): what counts as a planted slowdown called,
an A/A false call, the launches each design spent, and the interleaving of the two kinds of run."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from race_planted_aa import Outcome, delay_for, order, totals  # noqa: E402


def run(kind: str, idx: int, race: str, state: str, today: str, race_launches: int = 20, today_launches: int = 2) -> Outcome:
    return Outcome(kind, idx, race, state, "0.9x", race_launches, today, "0.9x", today_launches, 0.05, 0.9, 60.0, "0,1")


def test_planted_and_aa_runs_alternate_over_the_whole_run():
    jobs = order(2, 4)
    assert sorted(jobs) == [("aa", 0), ("aa", 1), ("aa", 2), ("aa", 3), ("planted", 0), ("planted", 1)]
    assert [k for k, _ in jobs] == ["aa", "planted", "aa", "aa", "planted", "aa"]


def test_the_delay_slows_tok_s_at_c1_by_the_effect():
    assert delay_for(900.0, 0.10) == 100  # 900 / (900 + 100) = 0.90


def test_totals_count_each_design_on_the_same_runs():
    done = [run("planted", 0, "worse", "behind", "tie"), run("planted", 1, "tie", "unresolved", "worse"),
            run("planted", 2, "better", "unresolved", "better"),
            run("aa", 0, "tie", "equivalent", "better", 30, 5), run("aa", 1, "worse", "behind", "tie", 10, 2)]
    lines = "\n".join(totals(done, {"planted": 4, "aa": 2}, 0.10, 300.0))
    assert "called slower: race 1/3, today 1/3" in lines and "called faster (wrong way): race 1, today 1" in lines
    assert "A/A false calls (faster or slower): race 1/2, today 1/2" in lines
    assert "race states: behind 1, equivalent 1" in lines
    assert "1 planted and 0 A/A not started" in lines
    assert "launches in all: race 100, today 13" in lines
