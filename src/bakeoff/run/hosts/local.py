"""Run the engine on this machine, in its own session, output to a size-capped log file.

Every server started here is remembered until stopped: ``kill_all`` (second Ctrl-C) and an
``atexit`` hook SIGKILL whatever is left, so a bakeoff that exits on an exception leaves no
server behind. A ``kill -9`` of bakeoff itself is handled on the next start from the store.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import threading
import time
import weakref
from pathlib import Path

import psutil

from bakeoff.errors import LaunchError
from bakeoff.run.hosts.base import Handle, Host, host_env
from bakeoff.run.hosts.logcap import CappedLogWriter

TAG_ENV = "BAKEOFF_TRIAL_LOG"  # set in every server's env: finds orphans the store missed
_LIVE_HOSTS: "weakref.WeakSet[LocalHost]" = weakref.WeakSet()


class LocalHost(Host):
    kind = "local"

    def __init__(self, max_log_bytes: int = 20_000_000) -> None:
        self.max_log_bytes = max_log_bytes
        self._procs: dict[int, subprocess.Popen] = {}
        self._pumps: dict[int, threading.Thread] = {}
        _LIVE_HOSTS.add(self)

    def start(self, argv, env, log_path, cwd=None) -> Handle:
        """Exec ``argv`` directly (no shell: each element reaches the engine as one argument)."""
        argv = list(argv)
        bad = [a for a in argv if not isinstance(a, str)]
        if not argv or bad:
            raise LaunchError(f"argv must be a non-empty list of strings, got {argv!r}")
        log_path = Path(log_path)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        full_env = {**host_env(env, dict(os.environ)), TAG_ENV: str(log_path.resolve())}
        writer = CappedLogWriter(log_path, self.max_log_bytes)
        try:
            proc = subprocess.Popen(
                argv,
                shell=False,
                env=full_env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,  # the sweep lock and the store must not leak into the server
            )
        except OSError as err:
            writer.write_line(f"bakeoff: cannot start {argv[0]}: {err}\n".encode())
            writer.close()
            raise LaunchError(f"cannot start {argv[0]}: {err}") from None
        pump = threading.Thread(target=writer.pump, args=(proc.stdout,), name=f"log:{proc.pid}", daemon=True)
        pump.start()
        self._procs[proc.pid] = proc
        self._pumps[proc.pid] = pump
        return Handle(pid=proc.pid, pgid=proc.pid, log_path=log_path)

    def exit_code(self, handle: Handle) -> int | None:
        proc = self._procs.get(handle.pid)
        if proc is not None:
            code = proc.poll()
            if code is not None:
                self._join_pump(handle.pid)  # the log is complete before anyone reads it
            return code
        return None if psutil.pid_exists(handle.pid) else -1

    def stop(self, handle: Handle, grace_s: float = 10.0) -> None:
        _stop_tree(handle.pid, handle.pgid, grace_s)
        proc = self._procs.pop(handle.pid, None)
        if proc is not None:
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        self._join_pump(handle.pid)
        self._pumps.pop(handle.pid, None)

    def kill_all(self) -> int:
        """SIGKILL every server this host started and has not stopped; never blocks long."""
        n = 0
        for pid, proc in list(self._procs.items()):
            if proc.poll() is None:
                n += 1
            for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: proc.kill()):
                try:
                    kill()
                except (ProcessLookupError, PermissionError, OSError):
                    pass
        for pid, proc in list(self._procs.items()):
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
            self._procs.pop(pid, None)
        return n

    def _join_pump(self, pid: int, timeout_s: float = 5.0) -> None:
        pump = self._pumps.get(pid)
        if pump is not None and pump is not threading.current_thread():
            pump.join(timeout_s)

    def find_orphans(self, sweep_dir: str | os.PathLike) -> list[int]:
        """Pids of live processes started for a trial of ``sweep_dir`` (tagged in their env with
        ``BAKEOFF_TRIAL_LOG``), whether or not the store got to record them."""
        root = os.path.realpath(sweep_dir) + os.sep
        found = []
        for p in psutil.process_iter(["pid"]):
            if p.pid == os.getpid() or p.pid in self._procs:
                continue
            try:
                tag = p.environ().get(TAG_ENV)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
                continue
            if tag and os.path.realpath(tag).startswith(root):
                found.append(p.pid)
        return found

    def wait_gpu_free(self, pids: set[int], timeout_s: float = 30.0) -> bool:
        return wait_gpu_free(pids, timeout_s)

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
                # pid reused by something else: leave it alone, and its group if it leads one
                try:
                    if os.getpgid(pid) == pgid:
                        return False
                except ProcessLookupError:
                    pass
                proc = None
        group_alive = _group_alive(pgid)
        if proc is None and not group_alive:
            return False
        _stop_tree(pid if proc is not None else None, pgid if group_alive else None, 5.0)
        return True


def gpu_pids() -> set[int] | None:
    """Pids holding GPU memory per NVML; None when NVML (nvidia-ml-py) or a GPU is not there."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver / no GPU: nothing to check  # noqa: BLE001
        return None
    try:
        pids: set[int] = set()
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            for fn in (pynvml.nvmlDeviceGetComputeRunningProcesses, pynvml.nvmlDeviceGetGraphicsRunningProcesses):
                try:
                    pids.update(p.pid for p in fn(h))
                except pynvml.NVMLError:
                    pass
        return pids
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def wait_gpu_free(pids: set[int], timeout_s: float = 30.0) -> bool:
    """True once none of ``pids`` holds GPU memory (at once when there is no GPU to ask)."""
    deadline = time.monotonic() + timeout_s
    while True:
        held = gpu_pids()
        if held is None or not (held & set(pids)):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)


@atexit.register
def _kill_leftovers() -> None:
    for host in list(_LIVE_HOSTS):
        host.kill_all()


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
