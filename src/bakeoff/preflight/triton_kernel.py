"""A tiny Triton kernel (y = a*x + b, fused) compiled for the current GPU at run time.

``triton.vector_fma.fp32`` and ``.bf16``: a JIT compile failure is ``compile-failed``; no GPU or
no Triton is ``unsupported``. This is what flex_attention and torch.compile rely on.
"""

from __future__ import annotations

from bakeoff.preflight import CompileFailed, Tolerance, Unsupported, probe
from bakeoff.preflight.device import need_cuda

_KERNEL = None


def _kernel():
    global _KERNEL
    if _KERNEL is None:
        import triton
        import triton.language as tl

        @triton.jit
        def fma_kernel(x_ptr, y_ptr, a, b, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
            tl.store(y_ptr + offs, (x * a + b).to(y_ptr.dtype.element_ty), mask=mask)

        _KERNEL = fma_kernel
    return _KERNEL


def _make(dtype: str):
    def fn():
        try:
            import triton
        except ImportError as err:
            raise Unsupported(f"triton is not installed ({err})") from None
        need_cuda()
        import torch

        dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
        n = 1 << 22
        x = torch.randn(n, generator=torch.Generator().manual_seed(0)).cuda().to(dt)
        y = torch.empty_like(x)
        kernel = _kernel()
        grid = (triton.cdiv(n, 1024),)
        try:
            kernel[grid](x, y, 1.5, -0.25, n, BLOCK=1024)
            torch.cuda.synchronize()
        except Exception as err:  # noqa: BLE001 - the compiler's message is the verdict
            raise CompileFailed(f"{type(err).__name__}: {err}") from None
        ref = x.float() * 1.5 - 0.25

        def run():
            kernel[grid](x, y, 1.5, -0.25, n, BLOCK=1024)
            return y

        return run, ref, Tolerance(0.0, 1e-6 if dtype == "fp32" else 1e-2)

    return fn


probe("triton.vector_fma.fp32", "triton", dtype="fp32")(_make("fp32"))
probe("triton.vector_fma.bf16", "triton", dtype="bf16")(_make("bf16"))
