"""Which device the probes ran on (recorded next to the verdicts)."""

from __future__ import annotations

import platform


def describe() -> dict:
    out: dict = {"python": platform.python_version()}
    try:
        import torch
    except ImportError:
        return {**out, "torch": None, "device": "cpu"}
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        out.update(device="cuda", gpu=p.name, capability=f"{p.major}.{p.minor}", sms=p.multi_processor_count,
                   memory_gib=round(p.total_memory / 2**30, 1), cudnn=torch.backends.cudnn.version())
    else:
        out["device"] = "cpu"
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = None
    return out


def torch_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def need_cuda(min_capability: tuple[int, int] | None = None) -> None:
    """Raise Unsupported unless a CUDA GPU (of at least this compute capability) is present."""
    import torch

    from bakeoff.preflight import Unsupported

    if not torch.cuda.is_available():
        raise Unsupported("needs a CUDA GPU; torch.cuda.is_available() is False")
    if min_capability:
        cap = torch.cuda.get_device_capability(0)
        if cap < min_capability:
            raise Unsupported(f"needs compute capability >= {min_capability[0]}.{min_capability[1]}, device has {cap[0]}.{cap[1]}")
