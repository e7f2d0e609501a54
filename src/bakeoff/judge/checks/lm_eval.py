"""The lm-evaluation-harness gate as a check: lm-eval's documents vs the baseline's
(``bakeoff.judge.lmeval.check``: the exact one-sided McNemar test pooled over the tasks), when
lm-eval ran. Documents the baseline answered otherwise on one of its relaunches
(``launch_answers``) are launch noise, not a reference: left out of the pairs."""

from __future__ import annotations

from bakeoff.judge import lmeval
from bakeoff.judge.checks import Evidence, Finding
from bakeoff.judge.stats import unstable_items


def check(ev: Evidence) -> Finding | None:
    if not ev.collected.get("lm_eval") or ev.cfg.lm_eval is None:
        return None
    base = (ev.baseline or {}).get("lm_eval")
    runs = [a["lm_eval"] for a in (ev.baseline or {}).get("launch_answers") or [] if a.get("lm_eval")]
    if base and runs:
        base = {**base, "unstable_docs": {task: sorted(unstable_items({d: bool(v[0]) for d, v in got["docs"].items()},
                                                                      [r.get(task) or {} for r in runs]))
                                          for task, got in (base.get("tasks") or {}).items()}}
    found = lmeval.check(ev.collected["lm_eval"], base, ev.cfg.lm_eval, ev.values)
    return Finding(*found) if found else None
