"""The judge's correctness notions, one module each, behind one small contract.

A check reads the typed evidence of one trial (``Evidence``: what this server answered, the
baseline's answers, the probe settings) and returns a ``Finding`` when the trial is not ok, or
None. It may add what it measured to ``Evidence.values`` (the report shows them). The judge
(``bakeoff.judge.probes.judge``) runs the checks in order; the first finding decides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from bakeoff.spec import Probes


@dataclass
class Evidence:
    """What a check may read: this server's collection (``probes.run_probes``), the baseline's
    (None: there is none healthy to compare with), the probe settings, whether the engine
    gives logprobs, and the trial's role (``baseline`` for the reference itself). ``values``
    is the outcome's measured values, shared by the checks, written in order."""

    collected: dict
    baseline: dict | None
    cfg: Probes
    values: dict
    expect_logprobs: bool = True
    role: str = "trial"
    # every reply with a baseline counterpart judged whole (``probes.whole_diffs``: (mode, id) -> Diff);
    # empty without a baseline
    diffs: dict = field(default_factory=dict)
    # the checks that could not run and why (the outcome's ``checks_not_run``): a check appends a line
    not_run: list = field(default_factory=list)
    # the trial's changed axes that change numeric precision (``drift.lossy_axes``): its drift is said, not failed
    lossy: tuple = ()


class Finding(NamedTuple):
    """Why a trial is not ok: the probe mode that showed it, the cause (the verdict's
    ``cause``, e.g. ``sampled_path``), one line of detail and the evidence lines the report shows."""

    mode: str
    detector: str
    detail: str
    evidence: list[str]


class Check(Protocol):
    """One correctness notion: evidence in, a finding (or None) out."""

    def __call__(self, ev: Evidence) -> Finding | None: ...
