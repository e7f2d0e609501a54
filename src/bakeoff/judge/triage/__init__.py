"""Failure triage: map an engine's launch log (+ exit status) to a stable cause id.

Rules are data: one TOML file per cause under ``rules/`` (``rules/_common.toml`` holds shared
warning/benign line filters). A rule lists regexes over single log lines plus optional
``not_patterns``, ``exit_codes``/``signals``, ``engines``, ``before``/``within`` (an earlier line must
also match) and the cause's ``explanation``, ``hint``, ``hard``, ``priority`` and ``confidence``.

API::

    classify(log_text, *, exit_code=None, signal=None, engine=None, timed_out=False, hung=False) -> Diagnosis
    find_cause(...same arguments...) -> Diagnosis | None   # None: nothing fatal found
    is_failure_evidence(log_text, *, engine=None) -> bool
    load_rules() -> list[Rule];  explain(cause) -> (explanation, hint)

Decision order:

1. Every line matching some rule is a hit (WARNING lines and ``benign`` lines never are). The
   cause whose best rule has the highest ``priority`` wins; ties go to the earliest line, so the
   first fatal error beats later cascades (cascade-prone causes such as distributed_init and killed
   have low priority). A rule may also match on the exit status (``exit_code`` < 0 or ``signal``
   means killed by that signal; 137 = SIGKILL in a container).
2. With no match: ``hung`` -> "hang", ``timed_out`` -> "startup_timeout" (evidence: last lines).
   When either flag is set, the caller's own kill does not count (``killed`` is ignored), but a
   fatal error in the log still wins over the flag.
3. Otherwise "unknown" with the last traceback / error-looking lines as evidence. A clean log
   (no failure status, nothing error-like) gives "unknown" with confidence 0.05 and the
   explanation "No fatal error found in the log."; use ``find_cause``/``is_failure_evidence``
   (which return None/False there) to tell "clean" from "failed for an unknown reason".

Evidence lines are "L<n>: <text>" with 1-based line numbers, one context line around each match.
"""

from bakeoff.judge.triage.matcher import (
    CAUSES,
    Diagnosis,
    Rule,
    classify,
    explain,
    find_cause,
    is_failure_evidence,
    load_rules,
)

__all__ = [
    "CAUSES", "Diagnosis", "Rule", "classify", "explain", "find_cause", "is_failure_evidence", "load_rules",
]
