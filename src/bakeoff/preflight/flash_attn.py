"""Dao-AILab flash-attn 2 (``attn_implementation=flash_attention_2``); registers only when
``flash_attn`` imports. A spec that maps a value to ``flash_attn.*`` where it is not installed
gets that value pruned: no probe of that name ran (see ``plan.bad_values``)."""

from __future__ import annotations

import importlib.util

from bakeoff.preflight import Tolerance, probe
from bakeoff.preflight.device import need_cuda


def _fwd():
    import torch
    from flash_attn import flash_attn_func

    need_cuda((8, 0))
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 1024, 16, 128, generator=g).cuda() for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                           is_causal=True).transpose(1, 2)

    def run():
        return flash_attn_func(q.bfloat16(), k.bfloat16(), v.bfloat16(), causal=True)

    return run, ref, Tolerance(1e-2, 3e-2)


if importlib.util.find_spec("flash_attn") is not None:
    probe("flash_attn.fwd.bf16.d128", "flash_attn", dtype="bf16", head_dim=128)(_fwd)
