"""The correctness checks a trial's verdict was reached without (``checks_not_run`` of its probe
outcome), said next to the verdict in every output: the Markdown and HTML reports, the JSON
export and the CLI's last lines. A verdict resting on weaker checks (no teacher forcing on this
engine, no logprobs at all) must never read like one that had them all.

Formatting only; the judge decides what ran (bakeoff.judge.probes)."""

from __future__ import annotations

import re

from bakeoff.store import TrialRecord

# the baseline's own note (it is the reference: nothing to compare it with) is no weakness of its verdict
_SELF = "differential (this is the baseline"
_PER_REPLY = re.compile(r"^(?P<check>teacher-forced continuation) of (?P<where>\S+) \((?P<why>.*)\)$")


def not_run(t: TrialRecord) -> list[str]:
    """The checks the trial's verdict did not have, one line per kind: per-reply notes counted."""
    notes = [n for n in t.metrics.get("checks_not_run") or [] if not n.startswith(_SELF)]
    counted: dict[tuple[str, str], int] = {}
    plain: list[str] = []
    for n in notes:
        m = _PER_REPLY.match(n)
        if m:
            key = (m["check"], m["why"])
            counted[key] = counted.get(key, 0) + 1
        elif n not in plain:
            plain.append(n)
    per = [f"{check} on {k} repl{'y' if k == 1 else 'ies'} ({why})" for (check, why), k in counted.items()]
    return plain + per


def weaker_line(t: TrialRecord) -> str | None:
    """'weaker check: ...' for a trial whose verdict lacked a check, else None."""
    lines = not_run(t)
    return "weaker check, not run: " + "; ".join(lines) if lines else None


def recommended_lines(trials: list[TrialRecord], keys: list[str]) -> list[str]:
    """The weaker-check line of each recommended trial (winner first, then fallbacks), by key."""
    by_key = {t.key: t for t in trials}
    out = []
    for key in keys:
        t = by_key.get(key)
        line = weaker_line(t) if t is not None else None
        if line:
            out.append(f"trial {t.idx}: {line}")
    return out
