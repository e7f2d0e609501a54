"""GPU energy and memory during a benchmark, read through NVML (``nvidia-ml-py``, ``import pynvml``).

``EnergyMeter`` samples every visible GPU (or those in CUDA_VISIBLE_DEVICES of the server)
in a thread while the benchmark runs: energy from the driver's cumulative counter
(``nvmlDeviceGetTotalEnergyConsumption``, mJ, Volta and newer) where it exists, else power
samples integrated over time; peak memory used. Without NVML or a GPU it measures nothing and
says so (``result()`` is None): CPU-only sweeps carry no energy figures rather than made-up ones.
"""

from __future__ import annotations

import threading
import time


class EnergyMeter:
    def __init__(self, period_s: float = 0.1, devices: list[int] | None = None) -> None:
        self.period_s = period_s
        self.devices = devices
        self._nvml = None
        self._handles: list = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._samples_w: list[tuple[float, float]] = []  # (t, watts summed over GPUs)
        self._peak_mem = 0
        self._e0: list[int | None] = []
        self._t0 = self._t1 = 0.0
        self._energy_j: float | None = None

    def __enter__(self) -> "EnergyMeter":
        try:
            import pynvml

            pynvml.nvmlInit()
            n = pynvml.nvmlDeviceGetCount()
            ids = [i for i in (self.devices if self.devices is not None else range(n)) if i < n]
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in ids]
            self._nvml = pynvml if self._handles else None
        except Exception:  # no NVML library, no driver, no GPU: nothing to measure
            self._nvml = None
        if self._nvml is None:
            return self
        self._e0 = [self._energy_mj(h) for h in self._handles]
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="energy-meter", daemon=True)
        self._thread.start()
        return self

    def _energy_mj(self, h) -> int | None:
        try:
            return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h))
        except Exception:
            return None

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.period_s)

    def _sample(self) -> None:
        watts = 0.0
        for h in self._handles:
            try:
                watts += self._nvml.nvmlDeviceGetPowerUsage(h) / 1000.0
                self._peak_mem = max(self._peak_mem, int(self._nvml.nvmlDeviceGetMemoryInfo(h).used))
            except Exception:
                continue
        self._samples_w.append((time.monotonic(), watts))

    def __exit__(self, *exc: object) -> None:
        if self._nvml is None:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
        self._sample()
        self._t1 = time.monotonic()
        e1 = [self._energy_mj(h) for h in self._handles]
        if all(a is not None and b is not None for a, b in zip(self._e0, e1)):
            self._energy_j = sum(b - a for a, b in zip(self._e0, e1)) / 1000.0
        else:  # no energy counter: integrate the power samples (trapezoids)
            s = self._samples_w
            self._energy_j = sum((t2 - t1) * (w1 + w2) / 2 for (t1, w1), (t2, w2) in zip(s, s[1:]))
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass

    def result(self, output_tokens: int | None = None) -> dict | None:
        """Energy (J), mean power (W), peak GPU memory (MiB) and, given the tokens generated
        meanwhile, tokens per joule; None when nothing could be measured."""
        if self._nvml is None or self._energy_j is None:
            return None
        dur = max(self._t1 - self._t0, 1e-9)
        out = {"energy_j": round(self._energy_j, 2), "power_w_mean": round(self._energy_j / dur, 1),
               "power_w_peak": round(max((w for _, w in self._samples_w), default=0.0), 1),
               "gpu_mem_peak_mib": round(self._peak_mem / 2**20), "duration_s": round(dur, 3), "gpus": len(self._handles)}
        if output_tokens is not None and self._energy_j > 0:
            out["output_tokens"] = output_tokens
            out["tok_per_j"] = round(output_tokens / self._energy_j, 4)
        return out
