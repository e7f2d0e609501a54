"""Run the engine on this machine, in its own session, output to a size-capped log file."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import psutil

from bakeoff.hosts.base import Handle, Host
from bakeoff.logcap import CappedLogWriter


class LocalHost(Host):
    kind = "local"

    def __init__(self, max_log_bytes: int = 20_000_000) -> None:
        self.max_log_bytes = max_log_bytes
        self._procs: dict[int, subprocess.Popen] = {}

    def start(self, argv, env, log_path, cwd=None) -> Handle:
        log_path = Path(log_path)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        full_env = {**os.environ, **env}
        proc = subprocess.Popen(
            list(argv),
            env=full_env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        writer = CappedLogWriter(log_path, self.max_log_bytes)
        threading.Thread(target=writer.pump, args=(proc.stdout,), daemon=True).start()
        self._procs[proc.pid] = proc
        return Handle(pid=proc.pid, pgid=proc.pid, log_path=log_path)

    def exit_code(self, handle: Handle) -> int | None:
        proc = self._procs.get(handle.pid)
        if proc is not None:
            return proc.poll()
        return None if psutil.pid_exists(handle.pid) else -1

    def stop(self, handle: Handle, grace_s: float = 10.0) -> None:
        _stop_tree(handle.pid, handle.pgid, grace_s)
        proc = self._procs.pop(handle.pid, None)
        if proc is not None:
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass

    def free_port(self) -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def port_is_free(self, port: int) -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
        return True

    def wait_port_free(self, port: int, timeout_s: float = 15.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.port_is_free(port):
                return True
            time.sleep(0.2)
        return self.port_is_free(port)

    def kill_orphan(self, pid: int, pgid: int, argv0: str | None = None) -> bool:
        try:
            proc = psutil.Process(pid)
        except psutil.NoSuchProcess:
            proc = None
        if proc is not None and argv0 is not None:
            try:
                cmd = proc.cmdline()
            except (psutil.AccessDenied, psutil.ZombieProcess):
                cmd = []
            if cmd and os.path.basename(cmd[0]) != os.path.basename(argv0):
                proc = None  # pid reused by something else: leave it alone
        group_alive = _group_alive(pgid)
        if proc is None and not group_alive:
            return False
        _stop_tree(pid if proc is not None else None, pgid if group_alive else None, 5.0)
        return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _stop_tree(pid: int | None, pgid: int | None, grace_s: float) -> None:
    """SIGTERM the process group and every descendant, then SIGKILL what is left."""
    procs: list[psutil.Process] = []
    if pid is not None:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if pgid is not None:
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for p in procs:
            try:
                if pgid is None or os.getpgid(p.pid) != pgid:
                    p.send_signal(sig)
            except (psutil.NoSuchProcess, ProcessLookupError):
                pass
        _, alive = psutil.wait_procs(procs, timeout=grace_s if sig == signal.SIGTERM else 5)
        if not alive and (pgid is None or not _group_alive(pgid)):
            return
        procs = alive
        if sig == signal.SIGTERM and pgid is not None and not procs:
            deadline = time.monotonic() + grace_s
            while _group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if not _group_alive(pgid):
                return
