"""FP8 (e4m3) matrix product through ``torch._scaled_mm``, against float32 on the same inputs.

The reference multiplies the *dequantized* fp8 values in float32, so the probe measures the
kernel, not fp8's rounding. Probes: ``fp8.e4m3.tensorwise`` (one scale per operand) and
``fp8.e4m3.rowwise`` (a scale per row of A and per column of B). Needs compute capability 8.9+.
"""

from __future__ import annotations

from bakeoff.preflight import Tolerance, Unsupported, probe
from bakeoff.preflight.device import need_cuda

M, K, N = 2048, 4096, 2048


def _make(rowwise: bool):
    def fn():
        import torch

        need_cuda((8, 9))
        if not hasattr(torch, "float8_e4m3fn"):
            raise Unsupported(f"torch {torch.__version__} has no float8_e4m3fn")
        g = torch.Generator(device="cpu").manual_seed(0)
        a = torch.randn(M, K, generator=g).cuda()
        b = torch.randn(N, K, generator=g).cuda()
        fmax = torch.finfo(torch.float8_e4m3fn).max
        if rowwise:
            sa = a.abs().amax(dim=1, keepdim=True) / fmax          # (M, 1)
            sb = b.abs().amax(dim=1, keepdim=True).t() / fmax      # (1, N)
            a8 = (a / sa).to(torch.float8_e4m3fn)
            b8 = (b / sb.t()).to(torch.float8_e4m3fn).t()          # (K, N), column-major
        else:
            sa = (a.abs().max() / fmax).reshape(())
            sb = (b.abs().max() / fmax).reshape(())
            a8 = (a / sa).to(torch.float8_e4m3fn)
            b8 = (b / sb).to(torch.float8_e4m3fn).t()
        ref = (a8.float() * sa) @ (b8.float() * sb)
        sa, sb = sa.float().contiguous(), sb.float().contiguous()

        def run():
            return torch._scaled_mm(a8, b8, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)

        return run, ref, Tolerance(0.0, 1e-2)

    return fn


probe("fp8.e4m3.tensorwise", "torch._scaled_mm", m=M, k=K, n=N, scaling="tensorwise")(_make(False))
probe("fp8.e4m3.rowwise", "torch._scaled_mm", m=M, k=K, n=N, scaling="rowwise")(_make(True))
