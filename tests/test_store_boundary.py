"""The store's typed boundary (issue 28): ``Store.spec()`` is the spec model, verdicts are a
``str`` enum, the correct verdicts and the run's own verdict are defined once, decide/ and
report/ read every default from the spec model, and a sweep directory written before all this
still opens.

tests/data/old_store is a real sweep directory: a baseline-only llama.cpp sweep of SmolLM2
(tests/data/old_store/spec.toml: quick probes, two bench requests), run by bakeoff at commit
ca1b2ea, before the typed store; only its sqlite, spec and report are kept.
"""

from __future__ import annotations

import ast
import shutil
import sqlite3
from pathlib import Path

import pytest

from bakeoff import decide
from bakeoff.errors import StoreError
from bakeoff.report.status import from_store
from bakeoff.spec import Bench, Plan, Probes, Server, Spec
from bakeoff.store import CORRECT, Store, TrialRecord, Verdict, spec_table

OLD = Path(__file__).parent / "data" / "old_store"
SRC = Path(decide.__file__).parents[1]


@pytest.fixture
def old(tmp_path) -> Path:
    """A copy of the old sweep directory (opening a store may migrate it: never the committed one)."""
    shutil.copytree(OLD, tmp_path / "old")
    return tmp_path / "old"


def test_an_old_sweep_directory_opens(old):
    with Store(old) as store:
        spec = store.spec()
        trials = store.trials()
        stored = store.meta("decision")
        d = decide.load(store)
        again, _ = decide.decide(store.sweep()["spec"], store.current(), store.meta("stop_reason"),
                                 decide.baseline_runs(store), decide.race_of(store))
    assert isinstance(spec, Spec) and spec.name == "old-store" and spec.engine == "llamacpp"
    assert spec.bench.requests_per_level == 2 and spec.server.startup_timeout_s == 120
    assert spec.probes.lm_eval is None  # a field this store's spec may predate reads as its default
    [base] = trials
    assert base.is_baseline and base.is_finished()
    assert base.verdict is Verdict.OK and base.judged is Verdict.OK and base.verdict == "ok"
    assert base.metrics["output_tok_s"] > 0 and base.metrics["levels"][0]["level"] == "c=1"
    assert d.baseline_ok and d.summary_lines()[0].startswith("Recommended: the baseline")
    assert again.to_json() == stored, "today's decide over the old trials decides as the old one did"


def test_a_newer_store_fails_with_one_clear_line(old):
    db = sqlite3.connect(old / "bakeoff.sqlite")
    db.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    db.commit()
    db.close()
    with pytest.raises(StoreError) as err:
        Store(old)
    assert "newer bakeoff" in str(err.value) and "\n" not in str(err.value)


def test_a_stored_spec_that_no_longer_validates_fails_with_one_clear_line(old):
    with Store(old) as store:
        sweep = store.sweep()
        store.init_sweep(sweep["name"], {**sweep["spec"], "bench": {"concurrency": []}}, sweep["fingerprint"],
                         sweep["identity"])
        with pytest.raises(StoreError) as err:
            store.spec()
    assert "bench.concurrency" in str(err.value) and "\n" not in str(err.value)


def test_verdicts_are_a_str_enum_stored_as_their_value(tmp_path):
    with Store(tmp_path) as store:
        store.save(TrialRecord("k", 0, {}, [], [], {}, state="finished", verdict="slow",
                               metrics={"judged": "ok"}))
        rec = store.get("k")
        raw = store.db.execute("SELECT verdict FROM trials").fetchone()[0]
    assert rec.verdict is Verdict.SLOW and rec.verdict == "slow" and raw == "slow" and type(raw) is str
    assert rec.judged is Verdict.OK, "the run's own verdict, before decide made it slow"
    assert rec.verdict in CORRECT and f"{rec.verdict}" == "slow"
    with pytest.raises(ValueError):
        TrialRecord("k", 0, {}, [], [], {}, state="finished", verdict="fine")


def _literals(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts and all(isinstance(e, ast.Constant) for e in node.elts):
            yield node.lineno, {e.value for e in node.elts}


def test_the_correct_verdicts_are_listed_once():
    """("ok", "slow") is written out in store.py only; everything else imports ``CORRECT``."""
    found = [f"{p.relative_to(SRC)}:{line}" for p in SRC.rglob("*.py") if p.name != "store.py"
             for line, values in _literals(p) if values == {"ok", "slow"}]
    assert not found, f"the correct verdicts restated: {found}"


# table fields with a default: decide/ and report/ read them through spec_table or Store.spec()
_FIELDS = {name for model in (Bench, Server, Probes, Plan) for name, f in model.model_fields.items()
           if not f.is_required() and f.get_default(call_default_factory=True) is not None}


def _restated(path: Path, root: Path = SRC) -> list[str]:
    """``x.get("field", literal)`` and ``x.get("field") or literal`` for a spec field with a default."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        call, default = None, None
        if isinstance(node, ast.Call) and len(node.args) == 2:
            call, default = node, node.args[1]
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and isinstance(node.values[0], ast.Call):
            call, default = node.values[0], node.values[-1]
        if (call is not None and isinstance(call.func, ast.Attribute) and call.func.attr == "get" and call.args
                and isinstance(call.args[0], ast.Constant) and call.args[0].value in _FIELDS
                and isinstance(default, ast.Constant) and default.value is not None):
            out.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_decide_and_report_restate_no_spec_default():
    found = [line for folder in ("decide", "report") for p in sorted((SRC / folder).rglob("*.py")) for line in _restated(p)]
    assert not found, "a spec default restated (read it from the spec model: store.spec_table): " + "; ".join(found)


def test_the_restated_default_finder_finds_one(tmp_path):
    f = tmp_path / "x.py"
    f.write_text('a = bench.get("remeasure_after", 3)\nb = server.get("startup_timeout_s") or 0\n'
                 'c = g.get("name", "?")\nd = bench["remeasure_after"]\ne = bench.get("resolve") or 0.05\n')
    assert [line.split(": ", 1)[1] for line in _restated(f, tmp_path)] == [
        "bench.get('remeasure_after', 3)", "server.get('startup_timeout_s') or 0"]


def test_the_defaults_decide_and_report_use_are_the_spec_models(tmp_path):
    """An empty stored spec reads as the spec model's defaults, in decide's tables and in the
    status view (its startup timeout was 0 where the model says 300)."""
    assert spec_table({}, "bench") == Bench().model_dump()
    assert spec_table({}, "server") == Server().model_dump()
    assert spec_table({"bench": {"repetitions": 7}}, "bench")["repetitions"] == 7
    with Store(tmp_path) as store:
        store.init_sweep("s", {}, {})
        p = from_store(store)
    assert p.timeout_s == Server.model_fields["startup_timeout_s"].default == 300


def test_every_metrics_key_bakeoff_writes_is_declared_in_trial_metrics(tmp_path):
    """``TrialRecord.metrics`` is typed (``store.TrialMetrics``): every key the source writes into
    a trial's metrics — ``metrics={...}`` literals, ``metrics["k"] = ...`` — and every key of the
    old store's trials is one of its declared keys (a new key is declared, with what writes it)."""
    import ast

    import bakeoff
    from bakeoff.store import TrialMetrics, open_readonly

    declared = set(TrialMetrics.__optional_keys__) | set(TrialMetrics.__required_keys__)
    written: dict[str, str] = {}
    for path in Path(bakeoff.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            dicts = []
            if isinstance(node, ast.keyword) and node.arg == "metrics" and isinstance(node.value, ast.Dict):
                dicts.append(node.value)
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "metrics" \
                    and isinstance(node.value, ast.Dict):
                dicts.append(node.value)
            for d in dicts:
                for k in d.keys:
                    if isinstance(k, ast.Constant) and isinstance(k.value, str):
                        written[k.value] = f"{path.name}:{k.lineno}"
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and isinstance(node.slice, ast.Constant) \
                    and isinstance(node.value, ast.Name) and node.value.id == "metrics":
                written[node.slice.value] = f"{path.name}:{node.lineno}"
    assert written, "the walk found no writer: it no longer reads the source"
    undeclared = {k: where for k, where in written.items() if k not in declared}
    assert not undeclared, f"metrics keys written but not declared in store.TrialMetrics: {undeclared}"
    copy = tmp_path / "old"
    shutil.copytree(OLD, copy)  # opening a store may migrate it: never the fixture itself
    with open_readonly(copy) as store:
        stored = {k for t in store.trials() for k in t.metrics}
    assert stored and stored <= declared, stored - declared
