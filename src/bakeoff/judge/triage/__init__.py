"""Failure triage: map an engine's launch log (+ exit status) to a stable cause id.

Rules are data: one TOML file per cause under ``rules/``; ``rules/_common.toml`` holds the shared
line filters and the token classes. A rule is either

- ``patterns``: regexes over single lines (a known phrasing), with optional ``not_patterns``,
  ``exit_codes``/``signals``, ``engines`` and ``before``/``within`` (an earlier line must match too); or
- a shape, ``near = ["class", ...]``: every token class occurs on one line within ``window``
  characters of the first (e.g. an architecture token near a refusal word, an allocation failure
  near a device-memory word, a build tool near a failure word, a load failure near a model-file
  word, a signal near a death word), ``unless`` a veto class occurs, and with ``context`` (e.g.
  ``error_mark``) on the line or the one before.

Each cause has a ``tier``, an ``explanation``, a ``hint``, ``hard``, ``priority`` and ``confidence``.
Rule files are validated at load (``schema``: one ``RulesError`` naming the file and the field).
A user rules directory (``rules_dir=``, ``[triage] rules`` in the spec, ``bakeoff triage --rules``)
is merged over the shipped rules: a file for a new cause adds it, a rule with a shipped rule's
``id`` replaces it (``schema`` says how ``_common.toml`` merges). A shape rule may name its own
``gate`` words (a substring pre-filter; without them, ``shape_gate`` of ``_common.toml``).

Signals: SIGKILL (exit -9/137) is ``killed``; SIGSEGV/SIGBUS/SIGABRT/SIGILL/SIGFPE (-11/139, -7/135,
-6/134, ...) are ``crash``, whose evidence also quotes the crashing frame (``structure.crash_frame``).
The explanation names what the engine was doing when it failed (``[phases]`` in ``_common.toml``:
"While capturing CUDA graphs."), and an ``unknown`` verdict quotes the final exception line.

API::

    classify(log_text, *, exit_code=None, signal=None, engine=None, timed_out=False, hung=False,
             server_said=None, rules_dir=None) -> Diagnosis
    find_cause(...same arguments but server_said...) -> Diagnosis | None   # None: nothing fatal found
    is_failure_evidence(log_text, *, engine=None) -> bool
    load_rules(rules_dir=None) -> list[Rule];  explain(cause, rules_dir=None) -> (explanation, hint)

Decision order:

1. A line is evidence only if it matches a rule and is not a warning/info line (one whose
   warning/info prefix is followed by an ``error_level``, as when a wrapper logs the engine's output
   at INFO, is an error line; so is a child's stream ``relayed`` after a wrapper's level, whose own
   level decides, and a warning of a retried operation whose retries ran out), not ``benign``
   (e.g. Ray's list of "potential root causes": what follows such a phrase on a line is speculation),
   not a line saying the engine coped (falling back, forcing off, skipping, ignoring, a 4xx answered
   to a client), not followed within a few lines by a retry nor repeating a retried message (unless
   a ``gave_up`` line follows: the retries ran out), and not before a ``went_on`` line (the server
   went on to listen or serve: the error did not stop it). A rule with ``then_failed`` counts only
   when an error line or a traceback follows its line closely. A shape does not take its anchor (the
   word that names the cause) from the code of an assertion's expression (``structure.mask_assertions``). Root-cause lines after the first line of an
   ``ends_process`` rule (an assertion, an abort, a fail-fast exit), or on it before the crash (a
   wrapper quoting it), are the crash's consequences, not evidence. A ``death_report`` line (the shell's bare
   "Killed") within 20 lines after the log's final exception is how that exception ended the process,
   not evidence, and an exit status of the same cause is then the same death. The winning
   cause is the one whose first evidence line ranks highest by (tier, earliest line, priority):
   the first root cause (arch_unsupported, oom_gpu, oom_host, import_error, bad_args, jit_compile,
   model_load, illegal_memory_access, port_in_use) beats symptoms (distributed_init, killed, crash), which
   beat fallbacks (a generic "could not create the context"). A rule may also match on the exit
   status (``exit_code`` < 0 or ``signal``: killed by that signal; 137/139/134 in a container).
2. With no rule's match: **the final exception's frames** (``structure.exception_frames``; a tier
   below every rule's line). Where the log ends in an uncaught Python traceback (not logged as a
   warning, not retried, no ``went_on`` line nor another phase after it) whose exception names no
   cause, the frames of that last traceback say what the engine was doing: ``[frames]`` of
   ``_common.toml`` maps "module:function" (vLLM/SGLang ``load_weights``, ``from_pretrained``,
   safetensors/gguf readers -> model_load; a ``<module>`` frame below the program's own or
   importlib's -> import_error; argparse/HfArgumentParser -> bad_args; Triton's compiler, torch's
   ninja build -> jit_compile; ``init_process_group`` -> distributed_init; KV-cache sizing frames ->
   oom_gpu, only with a memory word on the exception line: ``[frames_message]``). Only when the
   frames name ONE cause; the verdict (rule ``<cause>/frames``, confidence <= 0.5) quotes the
   exception and the deciding (innermost) frame of that cause.
3. With no match: ``hung`` -> "hang", ``timed_out`` -> "startup_timeout" (evidence: last lines).
   When either flag is set, the caller's own kill does not count (``killed`` is ignored), but a
   fatal error in the log still wins over the flag.
4. Otherwise "unknown" with the last traceback / error-looking lines as evidence (``unknown`` beats
   a guess). A clean log (no failure status, nothing error-like) gives "unknown" with confidence
   0.05 and the explanation "No fatal error found in the log."; use ``find_cause``/
   ``is_failure_evidence`` (which return None/False there) to tell "clean" from "failed for an
   unknown reason".

Evidence lines are "L<n>: <text>": the root line (the first evidence line of the winning cause)
with one line of context around it and each later proof; ``server_said`` (what the server itself
answered while never ready, e.g. a 503 "Loading model" from /health) is appended as
"server said: ...". A log over 6 MiB is read at its head and tail only (see ``matcher``).
The rules' measured generalization on held-out real logs is in tests/data/logs/HOLDOUT.md and
tests/data/triage_corpus/README.md (``bench/triage_score.py``).
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
