"""PyTorch SDPA, one backend at a time (torch.nn.attention.sdpa_kernel), against float32 math.

Probes: ``sdpa.<backend>.<dtype>.d<head_dim>`` for backend in flash, efficient, cudnn, math;
dtype in fp16, bf16, fp32; head_dim in 64, 128, 256. Causal, batch 2, 16 heads, 1024 tokens on
a GPU (256 on CPU). A backend that has no kernel for the case raises "No available kernel";
the warnings SDPA emits before that (the real reasons) are kept in the verdict.
"""

from __future__ import annotations

from bakeoff.preflight import Tolerance, probe
from bakeoff.preflight.device import torch_device

BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION", "math": "MATH"}
DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
HEAD_DIMS = (64, 128, 256)
TOL = {"fp16": Tolerance(2e-3, 1e-2), "bf16": Tolerance(1e-2, 3e-2), "fp32": Tolerance(1e-4, 1e-3)}


def _make(backend: str, dtype: str, head_dim: int):
    def fn():
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.functional import scaled_dot_product_attention as sdpa

        dev = torch_device()
        seq = 1024 if dev == "cuda" else 256
        g = torch.Generator(device="cpu").manual_seed(0)
        q, k, v = (torch.randn(2, 16, seq, head_dim, generator=g).to(dev) for _ in range(3))
        with sdpa_kernel([SDPBackend.MATH]):
            ref = sdpa(q.double() if dev == "cpu" else q, k.double() if dev == "cpu" else k,
                       v.double() if dev == "cpu" else v, is_causal=True).float()
        dt = getattr(torch, DTYPES[dtype])
        qd, kd, vd = q.to(dt), k.to(dt), v.to(dt)
        chosen = getattr(SDPBackend, BACKENDS[backend])

        def run():
            with sdpa_kernel([chosen]):
                return sdpa(qd, kd, vd, is_causal=True)

        return run, ref, TOL[dtype]

    return fn


for _b in BACKENDS:
    for _d in DTYPES:
        for _h in HEAD_DIMS:
            probe(f"sdpa.{_b}.{_d}.d{_h}", "torch.sdpa", backend=_b, dtype=_d, head_dim=_h)(_make(_b, _d, _h))
