"""One contract, every host (``bakeoff.registry.HOSTS``): ``local`` (this machine) and ``ssh``
(OpenSSH's sshd on a second host of this machine: conftest ``netns_host``, shared with
test_ssh.py). Each host is made from its ``[host]`` table, refuses an unknown key naming it,
starts a real process with its env, reads its log, sees it exit with its status, stops a whole
tree (idempotently), and answers every method the base declares. Then: no code outside the
hosts' and engines' base modules probes a host or an engine with getattr/hasattr."""

from __future__ import annotations

import ast
import sys
import time
from pathlib import Path

import pytest

from bakeoff.errors import SpecError
from bakeoff.registry import ENGINES, HOSTS
from bakeoff.run.engines.base import Engine
from bakeoff.run.hosts import command_line, get_host
from bakeoff.run.hosts.base import Host
from bakeoff.spec import Model

SRC = Path(__file__).resolve().parent.parent / "src" / "bakeoff"


def _table(kind: str, request) -> dict:
    if kind == "local":
        return {"kind": "local"}
    if kind == "ssh":
        return dict(request.getfixturevalue("netns_host").table)
    raise AssertionError(f"host kind {kind!r} has no table in the contract suite: add one here")


@pytest.fixture(params=HOSTS.names())
def host(request) -> Host:
    table = _table(request.param, request)
    h = get_host(table)
    h.table = table
    yield h
    h.kill_all()


def _exit(host: Host, handle, timeout: float = 20) -> int:
    deadline = time.monotonic() + timeout
    while (code := host.exit_code(handle)) is None:
        assert time.monotonic() < deadline, "the process did not exit"
        time.sleep(0.1)
    return code


def test_a_host_is_its_kinds_class_and_refuses_unknown_keys(host):
    cls = HOSTS.get(host.table["kind"])
    assert type(host) is cls and cls.kind == host.table["kind"] and issubclass(cls, Host)
    assert cls.Options.model_fields["kind"].default == cls.kind
    with pytest.raises(SpecError, match="host.bogus: unknown key"):
        get_host({**host.table, "bogus": 1})


def test_a_host_runs_reads_sees_the_exit_and_stops_the_tree(host, tmp_path):
    log = tmp_path / "sweep" / "logs" / "000.log"
    code = "import os, subprocess, sys, time; print('up', os.environ['K'], flush=True); " \
           "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); time.sleep(300)"
    h = host.start([sys.executable, "-c", code], {"K": "a b;c"}, log)
    deadline = time.monotonic() + 20
    while "up a b;c" not in host.read_log(h):
        assert time.monotonic() < deadline, host.read_log(h)
        time.sleep(0.1)
    assert host.exit_code(h) is None
    host.stop(h, grace_s=2)
    assert host.exit_code(h) is not None
    host.stop(h)  # idempotent
    h = host.start(["sh", "-c", "echo bye; exit 3"], {}, tmp_path / "sweep" / "logs" / "001.log")
    assert _exit(host, h) == 3 and "bye" in host.read_log(h)
    host.stop(h)


def test_a_host_answers_every_declared_method(host, tmp_path):
    port = host.free_port()
    assert host.port_is_free(port) and host.wait_port_free(port, 1)
    assert host.wait_gpu_free(set(), 1) is True
    assert host.kill_all() == 0 and host.find_orphans(tmp_path) == []
    assert isinstance(host.client_host("0.0.0.0"), str) and isinstance(host.describe, str)
    assert host.resolve_model(Model(path=sys.executable)) == sys.executable
    host.max_log_bytes = 5000
    assert host.max_log_bytes == 5000
    line = command_line(host.table, ["srv", "--x", "a b"], {"K": "v"}, "000.log", "sweep")
    assert "'a b'" in line and "K=v" in line
    if host.is_remote:
        assert host.run_argv(["echo", "hi"], 30) == (0, "hi\n") or host.run_argv(["echo", "hi"], 30)[1].strip() == "hi"
        assert host.run_script("echo there\n", 30).strip() == "there"
    else:
        with pytest.raises(NotImplementedError):
            host.run_argv(["echo", "hi"])


# -- the contracts are declared, not probed -----------------------------------------------------
PROBED = ("host", "engine", "handle")  # names that hold a host, an engine or a handle
BASES = {SRC / "run" / "hosts" / "base.py", SRC / "run" / "engines" / "base.py"}


def _probes(path: Path) -> list[str]:
    """getattr/hasattr calls on a host, an engine or a handle in ``path`` (by the first argument's
    name), and in the hosts' and engines' own modules any on ``self`` (a mixin probing its host
    or engine)."""
    own = path.parent.name in ("hosts", "engines")
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and node.args:
            target = ast.unparse(node.args[0]).lower()
            if (own and target.split(".")[0] == "self") or any(word in target for word in PROBED):
                out.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_getattr_or_hasattr_on_hosts_or_engines_outside_their_base_modules():
    found = [hit for path in sorted(SRC.rglob("*.py")) if path not in BASES for hit in _probes(path)]
    assert found == []


def test_the_probe_finder_finds_a_probe(tmp_path):
    """The test above can fail: a probe written the way the old code did is found."""
    bad = tmp_path / "x.py"
    bad.write_text("def f(self, stream):\n    getattr(stream, 'read1', None)\n"
                   "    return getattr(self.host, 'wait_port_free', None)\n")
    assert len(_probes(bad)) == 1


def test_every_engine_declares_its_options_and_is_registered_under_its_kind():
    for kind, cls in ENGINES.items():
        assert issubclass(cls, Engine) and cls.kind == kind
        assert "extra" in cls.Options.model_config and cls.Options.model_config["extra"] == "forbid"
