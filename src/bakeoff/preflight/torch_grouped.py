"""Grouped GEMM through ``torch._grouped_mm`` (what transformers' ``grouped_mm`` experts use).

One (tokens, K) activation matrix split into G groups by ``offs``, times G (K, N) weights,
against a float32 loop over the groups. Probes: ``grouped_mm.<dtype>`` for bf16 (the
supported case on Hopper), fp16 and fp32 (to see what the library says about them).
"""

from __future__ import annotations

from bakeoff.preflight import Tolerance, Unsupported, probe
from bakeoff.preflight.device import torch_device

G, K, N = 8, 1024, 2048
ROWS = (128, 64, 256, 32, 160, 96, 192, 48)  # tokens routed to each expert (multiples of 16)
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
TOL = {"bf16": Tolerance(0.0, 2e-2), "fp16": Tolerance(0.0, 5e-3), "fp32": Tolerance(0.0, 1e-3)}


def _make(dtype: str):
    def fn():
        import torch

        if not hasattr(torch, "_grouped_mm"):
            raise Unsupported(f"torch {torch.__version__} has no _grouped_mm")
        dev = torch_device()
        g = torch.Generator(device="cpu").manual_seed(0)
        dt = getattr(torch, DTYPES[dtype])
        a = torch.randn(sum(ROWS), K, generator=g).to(dev, dt)
        w = (torch.randn(G, N, K, generator=g) / K ** 0.5).to(dev, dt).transpose(-2, -1)  # (G, K, N), column-major
        offs = torch.tensor(ROWS, device=dev).cumsum(0).to(torch.int32)
        parts, start = [], 0
        for i, r in enumerate(ROWS):
            parts.append(a[start:start + r].float() @ w[i].float())
            start += r
        ref = torch.cat(parts)

        def run():
            return torch._grouped_mm(a, w, offs=offs, out_dtype=dt)

        return run, ref, TOL[dtype]

    return fn


for _d in DTYPES:
    probe(f"grouped_mm.{_d}", "torch._grouped_mm", dtype=_d, groups=G, k=K, n=N)(_make(_d))
