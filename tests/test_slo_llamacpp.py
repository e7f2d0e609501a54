"""SLO goodput on the real engine: llama-server + SmolLM2, through the CLI, ranked by goodput.

The known threshold is the number of decoding slots. Closed loop at concurrency c against a
server with ``--parallel k``: while c <= k every request starts at once (TTFT = its prefill, about
a fifth of a whole answer here: 48 output tokens after a 16-token prompt); at c > k a request
waits for a slot, i.e. for a whole answer of another request (TTFT >= one answer's time). So with
p90 TTFT <= 0.8 x (one answer's time at c=1, measured first on this machine, under whatever load
it has), ``--parallel 1`` meets the SLO at c=1 only, ``--parallel 2`` up to c=2: the search must
find exactly those (c=3 fails for two slots, c=2 for one). Margins: >= 1.5x on each side of the
threshold in the measurements of bench/README.md.
"""

import re
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request

import psutil
import pytest

from bakeoff import measure
from bakeoff.decide import load as load_decision
from bakeoff.spec import Bench
from bakeoff.store import Store
from clirun import run_cli

TOKENS = dict(input_tokens=16, output_tokens=48)


def _servers_of(sweep_dir) -> list[int]:
    """llama-servers this sweep started (tagged with their log path under it): the machine is
    shared, other people's servers are none of this test's business."""
    from bakeoff.run.hosts.local import TAG_ENV

    out = []
    for p in psutil.process_iter(["name"]):
        try:
            if p.info["name"] == "llama-server" and str(sweep_dir) in p.environ().get(TAG_ENV, ""):
                out.append(p.pid)
        except (psutil.AccessDenied, psutil.NoSuchProcess):
            pass
    return out


def _one_answer_ms(engine) -> float:
    """E2E p50 of one request alone (c=1) on a one-slot server: the calibration."""
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    proc = subprocess.Popen([engine.binary, "--model", engine.model, "--port", str(port), "--ctx-size", "2048",
                             "--parallel", "1", "--threads", "1", "--no-webui"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "llama-server did not start"
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.3)
        cfg = Bench(concurrency=[1], requests_per_level=3, warmup_requests=1, repetitions=1, max_repetitions=1, **TOKENS)
        (s,) = measure.run(url, cfg, model="smollm2", ignore_eos=True)
        assert s.valid, s.why_invalid
        return s.e2e_ms["p50"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.engine
def test_slo_search_finds_the_slot_count_and_ranks_by_goodput(real_llamacpp, tmp_path):
    limit = round(0.8 * _one_answer_ms(real_llamacpp))
    text = open("examples/smollm2-slo.toml").read()
    text = (text.replace("values = [1, 2, 4]", "values = [1, 2]")
            .replace("slo = { ttft_p99_ms = 2000 }", f"slo = {{ ttft_p90_ms = {limit} }}")
            .replace("requests_per_level = 8", "requests_per_level = 4")
            .replace("input_tokens = 32", "input_tokens = 16").replace("output_tokens = 64", "output_tokens = 48")
            .replace("repetitions = 3", "repetitions = 2").replace("max_repetitions = 5", "max_repetitions = 2")
            .replace("[probes]\n", "[probes]\ngate_items = 0\n")  # the SLO search is the subject here, not the gate
            # a fixed launch noise: no relaunches of the baseline, each one a whole SLO search (CI time)
            .replace("[bench]\n", "[bench]\nlaunch_noise = 0.08\n"))
    assert f"ttft_p90_ms = {limit}" in text and "values = [1, 2]" in text and "gate_items = 0" in text
    tomllib.loads(text)
    spec = tmp_path / "spec.toml"
    spec.write_text(text)
    proc = run_cli([sys.executable, "-m", "bakeoff.cli", "run", str(spec), "--out", str(tmp_path / "run")],
                   capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not _servers_of(tmp_path), "a llama-server was left running"
    with Store(tmp_path / "run") as store:
        trials = {t.config["parallel"]: t for t in store.trials()}
        decision = load_decision(store)
    for slots, t in trials.items():
        assert t.verdict in ("ok", "slow"), (t.verdict, t.detail)
        met = {lv["slo"]["load"]: lv["slo"]["met"] for lv in t.metrics["levels"]}
        obj = t.metrics["objective"]
        assert obj["level"] == f"c={slots}", (slots, met, [(lv["level"], lv["ttft_ms"].get("p90")) for lv in t.metrics["levels"]])
        assert met[slots] and not met[slots + 1], met
        assert len(obj["samples"]) == 2 and all(x > 0 for x in obj["samples"])
    assert decision.objective.startswith(f"goodput: req/s meeting p90 TTFT \u2264 {limit} ms")
    assert "goodput" in decision.headline
    report = (tmp_path / "run" / "report.md").read_text()
    assert "goodput under the SLO" in report
    assert re.search(r"req/s at c=1 \|", report) and re.search(r"req/s at c=2 \|", report)
