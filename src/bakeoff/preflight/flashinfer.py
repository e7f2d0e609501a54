"""FlashInfer single-request decode attention; registers only when ``flashinfer`` imports."""

from __future__ import annotations

import importlib.util

from bakeoff.preflight import Tolerance, probe
from bakeoff.preflight.device import need_cuda


def _decode():
    import torch
    import flashinfer

    need_cuda()
    g = torch.Generator().manual_seed(0)
    q = torch.randn(32, 128, generator=g).cuda().half()
    k = torch.randn(2048, 8, 128, generator=g).cuda().half()
    v = torch.randn(2048, 8, 128, generator=g).cuda().half()
    kr = k.float().repeat_interleave(4, dim=1)
    vr = v.float().repeat_interleave(4, dim=1)
    att = torch.einsum("hd,shd->hs", q.float(), kr) / 128 ** 0.5
    ref = torch.einsum("hs,shd->hd", att.softmax(-1), vr)

    def run():
        return flashinfer.single_decode_with_kv_cache(q, k, v)

    return run, ref, Tolerance(2e-3, 1e-2)


if importlib.util.find_spec("flashinfer") is not None:
    probe("flashinfer.decode.fp16", "flashinfer", dtype="fp16")(_decode)
